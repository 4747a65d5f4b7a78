"""``--place`` rules on the command line and the presets' rule for offloaded KV."""

from __future__ import annotations

import json
import tomllib

import pytest
from click.testing import CliRunner

from tierlab.chip.chipfile import list_presets
from tierlab.cli import main
from tierlab.common.paths import configs_dir
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.model.spec import load_model


@pytest.fixture(scope="module")
def tiny_trace(tmp_path_factory):
    spec = load_model("qwen2-0.5b")
    run = RunConfig(context=16, generate=1)
    return generate_trace(spec, run, tmp_path_factory.mktemp("t") / "q.trace")


def _kind_bytes(d, tier):
    t = next(t for t in d["placement"]["tiers"] if t["name"] == tier)
    return t["bytes_by_kind"]


def test_place_moves_a_kind_to_the_named_tier(tiny_trace):
    base = CliRunner().invoke(main, ["replay", str(tiny_trace), "--chip", "h100", "--json"])
    moved = CliRunner().invoke(main, ["replay", str(tiny_trace), "--chip", "h100", "--json",
                                      "--place", "ddr:kind=kv"])
    assert base.exit_code == 0 and moved.exit_code == 0, moved.output
    b, m = json.loads(base.output), json.loads(moved.output)
    kv = _kind_bytes(b, "hbm")["kv"]
    assert kv > 0 and "kv" not in _kind_bytes(b, "ddr")
    assert _kind_bytes(m, "ddr")["kv"] == kv and "kv" not in _kind_bytes(m, "hbm")
    # KV read from the host now crosses the PCIe link; before, nothing did
    link = {f"{l['from']}-{l['to']}": l for l in m["links"]}
    assert link["hbm-ddr"]["bytes_down"] > 0
    assert {f"{l['from']}-{l['to']}": l for l in b["links"]}["hbm-ddr"]["bytes_down"] == 0


def test_bad_place_rule_is_one_line(tiny_trace):
    res = CliRunner().invoke(main, ["replay", str(tiny_trace), "--chip", "h100", "--place", "ddr:colour=red"])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        "tierlab: error: --place: unknown or repeated condition 'colour=red'; expected kind=K, "
        "name=GLOB, layers=A-B or spill"]


@pytest.mark.parametrize("name", [n for n in list_presets()])
def test_offloaded_kv_goes_to_the_farthest_tier(name):
    d = tomllib.loads((configs_dir("chips") / f"{name}.toml").read_text())
    rules = [r for r in d.get("placement", []) if r.get("kind") == "kv_offload"]
    homes = [t["name"] for t in d["tier"] if t["managed"] != "cache"]
    if len(homes) < 2 or name == "attacc":  # nowhere farther to offload to (attacc: KV lives in PIM)
        assert not rules
        return
    assert [r["tier"] for r in rules] == [d["tier"][-1]["name"]]
