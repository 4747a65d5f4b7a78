"""KV tiers as hardware (tierlab.kvstream.tiers): the table's energies per byte against their pJ/bit
sources, the host tier read two ways, and ``tierlab systems`` showing them."""
import json

import pytest
from click.testing import CliRunner

from tierlab.chip.chipfile import load_chip
from tierlab.cli import main
from tierlab.kvstream.tiers import TABLE, default_tier
from tierlab.system.systemfile import load_system

PJ_BIT = 8e-12          # J per byte of one pJ per bit


def test_table_energies_are_per_byte():
    """The table writes its sources in pJ/bit; a byte is 8 bits."""
    assert TABLE["dram"]["energy"] == pytest.approx((11.8 + 11.4) * PJ_BIT)        # DDR5 + a PCIe Gen5 hop
    assert TABLE["remote"]["energy"] == pytest.approx((2 * 5.5 + 11.8) * PJ_BIT)   # SerDes at both ends + DDR5
    assert TABLE["ssd"]["energy"] == pytest.approx(25.0 / 7e9 + 11.4 * PJ_BIT)     # a drive's W over its B/s + PCIe


def test_host_tier_from_the_chip_file_equals_the_table():
    """H100's chip file says DDR5 and a PCIe Gen5 link (its ddr tier and link): the same host tier as
    the table's, for a chip whose file has none -- two paths to one figure."""
    h100 = load_chip("h100")
    from_file = default_tier("dram", h100, None, 1)
    assert "chip file" in from_file.source
    assert from_file.energy_j_per_byte == pytest.approx(TABLE["dram"]["energy"], rel=1e-9)
    assert from_file.bandwidth_bytes_per_s == TABLE["dram"]["bandwidth"]


def test_systems_shows_the_kv_tiers():
    r = CliRunner().invoke(main, ["systems", "dgx-h100"])
    assert r.exit_code == 0, r.output
    assert "KV-cache tiers below HBM" in r.output
    for name in ("dram", "ssd", "remote"):
        assert f"\n{name} " in r.output
    d = json.loads(CliRunner().invoke(main, ["systems", "dgx-h100", "--json"]).output)
    tiers = {t["name"]: t for t in d["kv_tiers"]}
    s = load_system("dgx-h100")
    assert tiers["ssd"]["capacity_bytes"] == pytest.approx(TABLE["ssd"]["capacity_per_node"] / s.chips_per_node)
    assert tiers["remote"]["capacity_bytes"] == 0 and tiers["remote"]["shared"] is True
