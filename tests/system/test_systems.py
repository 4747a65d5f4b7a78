"""System files and presets (tierlab.system.systemfile) and ``tierlab systems``."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.common.errors import ConfigError, UsageError
from tierlab.common.paths import configs_dir
from tierlab.chip.chipfile import list_presets as chip_presets
from tierlab.chip.units import parse_quantity
from tierlab.cli import main
from tierlab.system.systemfile import list_presets, load_system, system_from_dict

PRESETS = ("dgx-h100", "hgx-h200", "sn40l-16", "dgx-h100-x2", "dgx-a100-x16", "dgx-h100-x16",
           "dgx-b200", "gb200-nvl72", "mi300x-8", "mi355x-8", "gaudi3-8", "cs-3")

SYSTEM = """\
name = "toy"
chip = "h100"
chips = 16
chips_per_node = 8
[scale_up]
topology = "switch"
bandwidth = "450 GB/s"
latency = "1.5 us"
energy = "5.5 pJ/bit"
in_network_reduction = true
[scale_out]
bandwidth = "400 Gb/s"
latency = "5 us"
energy = "5.5 pJ/bit"
"""


def system(*edits: tuple[str, str]) -> str:
    """SYSTEM with each ``(old, new)`` applied once (``old`` must occur)."""
    text = SYSTEM
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def write(tmp: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def test_presets_are_found_and_all_load():
    assert configs_dir("systems").is_dir()
    assert set(PRESETS) <= set(list_presets())
    for name in list_presets():
        s = load_system(name)
        assert s.name == name
        assert s.n_chips % s.chips_per_node == 0
        assert s.source_sha256 and s.source_file
        assert (s.scale_out is not None) or s.n_nodes == 1


NUMBER = re.compile(r'"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*[A-Za-zµ/]+"|^[+-]?\d[\d_.]*$')
SYSTEM_TAG = re.compile(r"\[([A-Z]+\d+)\]")


@pytest.mark.parametrize("name", list_presets())
def test_every_number_cites_a_source_or_says_estimate(name):
    """As the chip presets (tests/chip/test_presets.py): every number outside [sources] and [price] (whose
    source is its own key) carries a [tag] of the [sources] table or the word estimate; every tag
    cited is in the table and every entry of the table is cited."""
    text = (configs_dir("systems") / f"{name}.toml").read_text()
    section, seen = "", 0
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("["):
            section = s
            continue
        if not s or s.startswith("#") or "=" not in s or section in ("[sources]", "[price]"):
            continue
        if NUMBER.search(s.split("=", 1)[1].split("#", 1)[0].strip()):
            seen += 1
            comment = line.split("#", 1)[1] if "#" in line else ""
            assert SYSTEM_TAG.search(comment) or "estimate" in comment, f"{name}.toml:{no}: {line}"
    assert seen >= 5
    sources = tomllib.loads(text).get("sources", {})
    body = "\n".join(line for line in text.splitlines() if not re.match(r"^[A-Z]+\d+ = ", line))
    cited = set(SYSTEM_TAG.findall(body))
    assert cited <= set(sources), sorted(cited - set(sources))
    assert set(sources) <= cited, sorted(set(sources) - cited)


def test_preset_numbers_are_the_files():
    """Each preset's numbers equal what its file says, parsed independently."""
    for name in list_presets():
        s = load_system(name)
        d = tomllib.loads((configs_dir("systems") / f"{name}.toml").read_text())
        assert s.chip.name == d["chip"] and s.n_chips == d["chips"]
        for key, f in (("scale_up", s.scale_up), ("scale_out", s.scale_out)):
            if key not in d:
                assert f is None
                continue
            assert f.bandwidth_bytes_per_s == parse_quantity(d[key]["bandwidth"], "bandwidth")
            assert f.latency_s == parse_quantity(d[key]["latency"], "time")
            assert f.energy_j_per_byte == parse_quantity(d[key]["energy"], "energy_per_byte")
            assert f.in_network_reduction == d[key].get("in_network_reduction", False)


def test_dgx_h100():
    s = load_system("dgx-h100")
    assert (s.chip.name, s.n_chips, s.chips_per_node, s.n_nodes) == ("h100", 8, 8, 1)
    up = s.scale_up
    assert (up.name, up.topology, up.ports, up.in_network_reduction) == ("scale_up", "switch", 1, True)
    assert up.bandwidth_bytes_per_s == 450e9 and up.chip_bandwidth_bytes_per_s == 450e9
    assert up.latency_s == pytest.approx(1.5e-6)
    assert up.energy_j_per_byte == pytest.approx(5.5e-12 * 8)
    assert s.scale_out is None
    assert s.node_of(7) == 0


def test_hgx_h200_same_fabric_as_dgx_h100():
    a, b = load_system("dgx-h100"), load_system("hgx-h200")
    assert b.chip.name == "h200" and b.n_chips == 8 and b.n_nodes == 1
    assert (a.scale_up.bandwidth_bytes_per_s, a.scale_up.latency_s, a.scale_up.in_network_reduction) == \
           (b.scale_up.bandwidth_bytes_per_s, b.scale_up.latency_s, b.scale_up.in_network_reduction)


def test_sn40l_16():
    s = load_system("sn40l-16")
    assert (s.chip.name, s.n_chips, s.chips_per_node, s.n_nodes) == ("sn40l", 16, 16, 1)
    up = s.scale_up
    assert up.topology == "direct" and not up.in_network_reduction
    assert up.ports == 15 and up.bandwidth_bytes_per_s == 25e9
    assert up.chip_bandwidth_bytes_per_s == 375e9


def test_dgx_h100_x2():
    s = load_system("dgx-h100-x2")
    assert (s.n_chips, s.chips_per_node, s.n_nodes) == (16, 8, 2)
    assert [s.node_of(d) for d in (0, 7, 8, 15)] == [0, 0, 1, 1]
    out = s.scale_out
    assert out is not None and out.name == "scale_out"
    assert out.bandwidth_bytes_per_s == 50e9 and out.ports == 1 and not out.in_network_reduction
    assert out.latency_s == pytest.approx(5e-6)


def test_defaults(tmp_path):
    s = load_system(write(tmp_path, system(("chips_per_node = 8\n", ""), ("chips = 16", "chips = 8"),
                                           ("topology = \"switch\"\n", ""))))
    assert s.chips_per_node == 8 and s.n_nodes == 1 and s.description == "" and s.sources == ()
    assert s.scale_up.topology == "switch" and s.scale_up.ports == 1
    assert s.scale_out.ports == 1 and s.scale_out.in_network_reduction is False and s.scale_out.topology == "switch"


def test_chip_path_relative_to_system_file(tmp_path):
    chip = (configs_dir("chips") / "h100.toml").read_text().replace('name = "h100"', 'name = "myh100"')
    (tmp_path / "chips").mkdir()
    (tmp_path / "chips" / "mine.toml").write_text(chip)
    (tmp_path / "sys").mkdir()
    s = load_system(write(tmp_path / "sys", system(('chip = "h100"', 'chip = "../chips/mine.toml"'))))
    assert s.chip.name == "myh100"


def test_system_from_dict_without_file():
    d = tomllib.loads(system())
    s = system_from_dict(d)
    assert s.source_file is None and s.n_nodes == 2


def test_direct_ports_multiple(tmp_path):
    base = system(("chips = 16", "chips = 8"), ("topology = \"switch\"", "topology = \"direct\""),
                  ("in_network_reduction = true", "ports = 14"))
    assert load_system(write(tmp_path, base)).scale_up.ports == 14


# (id, edits, field, message): the one line every bad system file gives, after "{file}: "
BAD = [
    ("unknown-key", [('bandwidth = "450 GB/s"', 'bandwith = "450 GB/s"')],
     "scale_up.bandwith: unknown key; did you mean 'bandwidth'?"),
    ("unknown-top-key", [("chips_per_node", "chip_per_node")],
     "chip_per_node: unknown key; did you mean 'chips_per_node'?"),
    ("missing-key", [('chip = "h100"\n', "")], "chip: missing required key"),
    ("fabric-without-bandwidth", [('bandwidth = "450 GB/s"\n', "")], "scale_up.bandwidth: missing required key"),
    ("unknown-chip", [('chip = "h100"', 'chip = "h1000"')], "chip: unknown chip 'h1000'; did you mean 'h100'?"),
    ("chip-file-missing", [('chip = "h100"', 'chip = "nope.toml"')], "chip: chip file not found: {tmp}/nope.toml"),
    ("not-a-multiple", [("chips = 16", "chips = 12")], "chips: must be a multiple of chips_per_node (8), got 12"),
    ("multi-node-without-scale-out", [("[scale_out]\nbandwidth = \"400 Gb/s\"\nlatency = \"5 us\"\n"
                                       "energy = \"5.5 pJ/bit\"\n", "")],
     "scale_out: missing: 16 chips in nodes of 8 make 2 nodes, which need a [scale_out] fabric"),
    ("bad-topology", [('topology = "switch"', 'topology = "swich"')],
     "scale_up.topology: unknown topology 'swich'; did you mean 'switch'?"),
    ("direct-scale-out", [("[scale_out]\n", "[scale_out]\ntopology = \"direct\"\n")],
     "scale_out.topology: a 'direct' fabric is a full mesh of one node's chips; the scale-out fabric must be a 'switch'"),
    ("reduction-on-direct", [('topology = "switch"', 'topology = "direct"')],
     "scale_up.in_network_reduction: a 'direct' fabric has no switch to reduce in; "
     "expected false (or topology = \"switch\")"),
    ("direct-ports", [('topology = "switch"', 'topology = "direct"'), ("in_network_reduction = true", "ports = 4")],
     "scale_up.ports: a 'direct' fabric joins every pair of the node's 8 chips: "
     "expected a multiple of chips_per_node - 1 (7), got 4"),
    ("latency-bad-unit", [('latency = "1.5 us"', 'latency = "1.5 GB/s"')],
     "scale_up.latency: expected a time such as \"20 us\", \"1.5 ms\" or \"800 ns\", got '1.5 GB/s'"),
    ("zero-bandwidth", [('bandwidth = "450 GB/s"', 'bandwidth = "0 GB/s"')],
     "scale_up.bandwidth: must be positive, got '0 GB/s'"),
    ("chips-not-integer", [("chips = 16", "chips = 16.5")], "chips: expected a positive integer, got 16.5"),
    ("reduction-not-bool", [("in_network_reduction = true", "in_network_reduction = \"yes\"")],
     "scale_up.in_network_reduction: expected true or false, got 'yes'"),
]


@pytest.mark.parametrize("edits,message", [(e, m) for _, e, m in BAD], ids=[i for i, _, _ in BAD])
def test_bad_system_file(tmp_path, edits, message):
    p = write(tmp_path, system(*edits))
    with pytest.raises(ConfigError) as err:
        load_system(p)
    assert str(err.value) == f"{p}: " + message.replace("{tmp}", str(tmp_path))
    assert "\n" not in str(err.value)


def test_unknown_chip_far_from_any_preset(tmp_path):
    p = write(tmp_path, system(('chip = "h100"', 'chip = "zzzzzz"')))
    with pytest.raises(ConfigError) as err:
        load_system(p)
    assert str(err.value) == (f"{p}: chip: unknown chip 'zzzzzz'; expected a chip preset "
                              f"({', '.join(chip_presets())}) or a path to a chip .toml")


def test_unknown_system_preset():
    with pytest.raises(UsageError) as err:
        load_system("dgx-h10")
    assert str(err.value).startswith("unknown system preset 'dgx-h10'; did you mean 'dgx-h100'?")


def test_cli_list():
    r = CliRunner().invoke(main, ["systems"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].split()[:4] == ["system", "chip", "chips", "nodes"]
    assert len(lines) == 1 + len(list_presets())
    row = next(line for line in lines if line.startswith("dgx-h100-x2 "))
    assert row.split()[:4] == ["dgx-h100-x2", "h100", "16", "2"] and "450 GB/s" in row and "50 GB/s" in row


def test_cli_json():
    r = CliRunner().invoke(main, ["systems", "dgx-h100", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert {"name", "chip", "chips", "chips_per_node", "nodes", "scale_up", "scale_out", "sources"} <= set(d)
    assert (d["name"], d["chip"], d["chips"], d["chips_per_node"], d["nodes"]) == ("dgx-h100", "h100", 8, 8, 1)
    up = d["scale_up"]
    assert {"topology", "bandwidth_bytes_per_s", "ports", "latency_s", "energy_j_per_byte",
            "in_network_reduction"} <= set(up)
    assert up["bandwidth_bytes_per_s"] == 450e9 and up["in_network_reduction"] is True
    assert d["scale_out"] is None and "S16" in d["sources"]
    r = CliRunner().invoke(main, ["systems", "--json"], catch_exceptions=False)
    assert [s["name"] for s in json.loads(r.stdout)] == list_presets()


def test_cli_detail():
    r = CliRunner().invoke(main, ["systems", "dgx-h100-x2"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    for text in ("chips: 16 in 2 nodes of 8", "450 GB/s", "50 GB/s", "1.5 µs", "5 µs", "5.5 pJ/bit", "sources:"):
        assert text in r.stdout, text


def test_cli_bad_file_is_one_line(tmp_path):
    p = write(tmp_path, system(("chips = 16", "chips = 12")))
    r = CliRunner().invoke(main, ["systems", str(p)], catch_exceptions=False)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == f"tierlab: error: {p}: chips: must be a multiple of chips_per_node (8), got 12\n"
