"""Trace-level replay: placement, home tiers, PIM, alignment, CLI outputs, model-level arithmetic."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.engine.counters import C
from tierlab.chip.hierarchy import Chip, Compute, Link, PimUnit, PlacementRule, Power, Tier
from tierlab.engine.options import ReplayOptions
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.present.report import cost_of, to_json
from tierlab.common.errors import CapacityError, TraceError
from tierlab.traces.format.writer import TraceWriter

KIB = 1024
W_BYTES, KV_BYTES, ACT_BYTES = 64 * KIB, 16 * KIB, 4 * KIB
STEPS = 3


def _chip(l2_bytes=8 * KIB, block=128, pim=None, rules=(), l2_bw=1e15, link_bw=1e12, sram=False):
    tiers = []
    if sram:
        tiers.append(Tier("sram", 192 * KIB, block, None, "lru", "scratchpad", 1e15, 1e-13, 2e-13))
    tiers.append(Tier("l2", l2_bytes, block, 4, "lru", "cache", l2_bw, 1e-13, 2e-13))
    tiers.append(Tier("hbm", 1 << 20, block, None, "lru", "memory", 1e15, 1e-12, 2e-12, pim=pim))
    links = tuple(Link(a.name, b.name, link_bw, 5e-12) for a, b in zip(tiers[:-1], tiers[1:]))
    # no static power: board energy = the dynamic energy these tests check (tdp must be positive)
    return Chip("test", tuple(tiers), links, Compute({"bf16": 1e18}, {"bf16": 1e-12}), placement=tuple(rules),
                power=Power(idle_w=0.0, tdp_w=1.0))


def _trace(path, align=64 * KIB):
    """Decode of a toy model: each step reads two weights and the KV, writes and reads an activation."""
    with TraceWriter(path, run={"batch": 2, "activations": "bf16", "weights": "bf16"}, alignment=align) as w:
        w0 = w.add_tensor("w0", "weight", W_BYTES, "bf16", layer=0)
        w1 = w.add_tensor("w1", "weight", W_BYTES, "bf16", layer=0)
        kv = w.add_tensor("kv", "kv", KV_BYTES, "bf16", layer=0)
        act = w.add_tensor("act", "activation", ACT_BYTES, "bf16")
        for s in range(STEPS):
            a = w.add_op("proj", "linear", 0, "decode", s, 2, 1000, pim_eligible=True)
            w.add_access(a, w0, 0, W_BYTES)
            w.add_access(a, act, 0, ACT_BYTES, is_write=True)
            b = w.add_op("attn", "attention", 0, "decode", s, 2, 500, pim_eligible=True)
            w.add_access(b, kv, 0, 1024, count=KV_BYTES // 1024, stride=1024)  # strided, covers it all
            w.add_access(b, act, 0, ACT_BYTES)
            c = w.add_op("out", "linear", 0, "decode", s, 2, 1000)
            w.add_access(c, w1, 0, W_BYTES)
    return path


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return _trace(tmp_path_factory.mktemp("t") / "toy.trace")


def test_streaming_weights_and_kv_cross_the_link_every_step(trace):
    tr = replay_trace(trace, _chip())
    r = tr.result
    kinds = list(r.kinds)
    down_by_kind = {k: int((r.by_kind[kinds.index(k), 0, C["misses"]]) * 128) for k in ("weight", "kv")}
    # weights and KV (144 KiB per step) never survive a step in an 8 KiB L2: every block misses
    assert down_by_kind == {"weight": 2 * W_BYTES * STEPS, "kv": KV_BYTES * STEPS}
    # the activation is evicted by the 16 KiB KV between its write and its read, and by the weights
    # before the next write: both accesses miss every step, and its dirty blocks are written back
    act = r.by_kind[kinds.index("activation"), 0]
    assert act[C["misses"]] == 2 * ACT_BYTES // 128 * STEPS
    assert act[C["writebacks"]] == ACT_BYTES // 128 * STEPS
    d = to_json(tr)
    pt = d["per_token"]
    assert pt["steps"] == STEPS and pt["batch"] == 2
    per_step = r.links[0].sum() / STEPS
    assert pt["bytes_by_link"]["l2-hbm"] == pytest.approx(per_step / 2)
    # link-bound by construction: latency per step = bytes on the link / link bandwidth
    assert pt["latency_s"] == pytest.approx(per_step / 1e12)
    assert pt["tokens_per_s"] == pytest.approx(2 / pt["latency_s"])
    assert pt["bound"] == "link:l2-hbm"
    # home hits at hbm = l2 fetches + writebacks arriving there
    assert d["tiers"][1]["hits"] == d["tiers"][0]["misses"] + d["tiers"][0]["writebacks"]


def test_scratchpad_home_and_bypass(trace):
    chip = _chip(sram=True, rules=(PlacementRule("sram", kind="kv"), PlacementRule("hbm", kind="weight")))
    tr = replay_trace(trace, chip)
    r = tr.result
    assert tr.placement.home.tolist() == [2, 2, 0, 0]  # weights pinned to hbm, kv to sram, act fits
    t = {n: r.tier(n) for n in r.tier_names}
    # kv and act live in sram: every access to them is a hit there, nothing below sees them
    kv_act_blocks = STEPS * (KV_BYTES + 2 * ACT_BYTES) // 128
    assert t["sram"]["hits"] == kv_act_blocks
    # weights pass through the sram: one bypass per block, and the link below carries them
    assert t["sram"]["bypasses"] == STEPS * 2 * W_BYTES // 128
    assert r.links[0, 0] == t["sram"]["bypasses"] * 128
    assert t["l2"]["hits"] + t["l2"]["misses"] == t["sram"]["bypasses"]


def test_pim_reads_in_memory_and_off_equals_plain(trace):
    unit = PimUnit(4e15, 1e15, 1e-13, 1e-13, ("linear",))
    plain = replay_trace(trace, _chip()).result
    off = replay_trace(trace, _chip(pim=unit), ReplayOptions(pim=False)).result
    np.testing.assert_array_equal(off.tiers, plain.tiers)
    on = replay_trace(trace, _chip(pim=unit)).result
    # only the eligible linear op's weight (w0) runs in memory; w1's op is not eligible, attention
    # is not an op kind of the unit
    assert on.tier("hbm")["pim_bytes"] == W_BYTES * STEPS
    w = list(on.kinds).index("weight")
    assert (on.by_kind[w, 0, C["misses"]] + on.by_kind[w, 1, C["pim_bytes"]] // 128
            == plain.by_kind[w, 0, C["misses"]])
    d_on, d_plain = to_json(replay_trace(trace, _chip(pim=unit))), to_json(replay_trace(trace, _chip()))
    assert d_on["links"][0]["bytes_down"] == d_plain["links"][0]["bytes_down"] - W_BYTES * STEPS


def test_alignment_below_a_block_is_refused(tmp_path):
    t = _trace(tmp_path / "a.trace")  # 64 KiB alignment: w1 starts at 64 KiB
    with pytest.raises(TraceError, match="--align"):
        replay_trace(t, _chip(l2_bytes=1 << 20, block=128 * KIB))


def test_model_that_fits_nowhere(trace):
    chip = _chip()
    small = Chip("small", (chip.tiers[0], Tier("hbm", 64 * KIB, 128, None, "lru", "memory", 1e12, 0, 0)),
                 chip.links, chip.compute)
    with pytest.raises(CapacityError):
        replay_trace(trace, small)


def test_energy_is_counts_times_figures(trace):
    tr = replay_trace(trace, _chip())
    r, cst = tr.result, cost_of(tr)
    t = r.tiers
    expect_tiers = (t[0, C["bytes_read"]] * 1e-13 + t[0, C["bytes_written"]] * 2e-13
                    + t[1, C["bytes_read"]] * 1e-12 + t[1, C["bytes_written"]] * 2e-12)
    expect_links = r.links.sum() * 5e-12
    expect_compute = STEPS * 2500 * 1e-12
    e = cst.totals()
    assert e["tiers"] == pytest.approx(expect_tiers)
    assert e["links"] == pytest.approx(expect_links)
    assert e["compute"] == pytest.approx(expect_compute)
    assert e["total"] == pytest.approx(expect_tiers + expect_links + expect_compute)


def _write_chip_toml(path):
    path.write_text("""
name = "toy"
[compute]
flops = { bf16 = "1 PFLOP/s" }
energy = { bf16 = "1 pJ" }
[[tier]]
name = "l2"
capacity = "8 KiB"
block = "128 B"
ways = 4
policy = "lru"
managed = "cache"
bandwidth = "10 TB/s"
read_energy = "1 pJ/B"
write_energy = "1 pJ/B"
[[tier]]
name = "hbm"
capacity = "1 MiB"
block = "128 B"
managed = "memory"
bandwidth = "1 TB/s"
read_energy = "2 pJ/B"
write_energy = "2 pJ/B"
[[link]]
from = "l2"
to = "hbm"
bandwidth = "1 TB/s"
energy = "3 pJ/B"
""")
    return path


def test_cli_replay_json_and_parquet(trace, tmp_path):
    chip = _write_chip_toml(tmp_path / "toy.toml")
    out = tmp_path / "ops.parquet"
    res = CliRunner().invoke(main, ["replay", str(trace), "--chip", str(chip), "--json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    for key in ("chip", "tiers", "links", "energy_j", "per_token", "provenance"):
        assert key in d
    assert {"name", "hits", "misses", "fills", "evictions", "writebacks", "bytes_read",
            "bytes_written"} <= set(d["tiers"][0])
    assert set(d["links"][0]) >= {"from", "to", "bytes_down", "bytes_up"}
    assert {"bytes_by_link", "energy_j", "latency_s", "tokens_per_s"} <= set(d["per_token"])
    tbl = pq.read_table(out)
    assert tbl.num_rows == 3 * STEPS
    assert sum(tbl.column("l2-hbm.bytes_down").to_pylist()) == d["links"][0]["bytes_down"]
    assert sum(tbl.column("energy_j").to_pylist()) == pytest.approx(d["energy_j"]["total"])
    # an existing output is refused without --force; the text output is tables
    res = CliRunner().invoke(main, ["replay", str(trace), "--chip", str(chip), "-o", str(out)])
    assert res.exit_code == 2 and "--force" in res.output
    res = CliRunner().invoke(main, ["replay", str(trace), "--chip", str(chip)])
    assert res.exit_code == 0 and "per token" in res.output and "l2->hbm" in res.output


def test_cli_errors_are_one_line_exit_2(trace, tmp_path):
    res = CliRunner().invoke(main, ["replay", str(trace), "--chip", "no-such-chip"])
    assert res.exit_code == 2
    assert len(res.output.strip().splitlines()) == 1
    res = CliRunner().invoke(main, ["replay", str(tmp_path / "missing.trace"), "--chip", "h100"])
    assert res.exit_code == 2


def test_model_decode_on_h100_moves_weights_and_kv_per_token(tmp_path):
    """Dense decode on a GPU whose L2 cannot hold the model: per token ~ weight + KV bytes."""
    from tierlab.traces.lowering.generate import generate_trace
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model

    spec = load_model("qwen2-0.5b")
    ctx = 32
    path = generate_trace(spec, RunConfig(context=ctx, generate=1), tmp_path / "q.trace")
    tr = replay_trace(path, "h100")
    d = to_json(tr)
    weights = spec.param_count() * 2
    kv = spec.kv_bytes_per_token("bf16") * ctx
    per_token = d["per_token"]["bytes_by_link"]["l2-hbm"]
    assert weights + kv <= per_token * 1.0005
    assert per_token <= (weights + kv) * 1.01
    # roofline: link time is a lower bound; the L2 (fills + reads through 5.5 TB/s) binds on h100
    link_s = per_token / 3.35e12
    assert link_s <= d["per_token"]["latency_s"] <= 1.3 * link_s
