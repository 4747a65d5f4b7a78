"""PIM mode: the dominant-operand rule, conservation of bytes, PIM off = plain replay, costs, errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlab.chip.chipfile import load_chip
from tierlab.cli import main
from tierlab.engine.counters import BYPASSES, HITS, MISSES, PIM_BYTES, WRITETHROUGHS
from tierlab.chip.hierarchy import PlacementRule
from tierlab.pipeline.pim_plan import dominant_operands
from tierlab.engine.options import ReplayOptions
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.present.report import cost_of, to_json
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.format.reader import open_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model

DATA = Path(__file__).parents[1] / "data" / "models"
PIM_CHIPS = ("h100-hbm-pim", "aim-gddr6", "attacc")


def tiny(name):
    return load_model(DATA / f"tiny-{name}.json")


@pytest.fixture(scope="module")
def llama_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("pim")
    return open_trace(generate_trace(tiny("llama"), RunConfig(prompt=5, generate=3, batch=2, weights="int8"),
                                     d / "t.trace"))


@pytest.fixture(scope="module")
def moe_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("pim")
    return open_trace(generate_trace(tiny("mixtral"), RunConfig(context=4, generate=2, batch=3), d / "t.trace"))


def without_idle_pim(d):
    """A result dict without PIM resources that did nothing (a PIM chip lists its units' busy time,
    zero with PIM off; the same chip without units does not list them)."""
    d = json.loads(json.dumps(d))
    pt = d.get("per_token") or {}
    res = pt.get("time_by_resource_s", {})
    for k in [k for k, v in res.items() if k.startswith(("pim:", "pim_flops:"))]:
        assert res.pop(k) == 0.0
    return d


def strip_pim(chip):
    return dataclasses.replace(chip, tiers=tuple(dataclasses.replace(t, pim=None) for t in chip.tiers))


def needed_blocks(trace, b0):
    """Tier-0 blocks each op requests, expanded from the descriptors in plain Python/numpy."""
    addr = trace.tensors.column("address").to_numpy().astype(np.int64)
    need = np.zeros(trace.n_ops, np.int64)
    for rb in trace.iter_accesses():
        c = rb.to_pydict()
        for op, tid, off, nb, cnt, stv in zip(c["op_id"], c["tensor_id"], c["offset"], c["nbytes"], c["count"],
                                              c["stride"]):
            s = addr[tid] + off + np.arange(cnt, dtype=np.int64) * stv
            need[op] += int(((s + nb - 1) // b0 - s // b0 + 1).sum())
    return need


def requested(per_op):
    """Requests each op made at tier 0 (every request there is one of these)."""
    t0 = per_op[:, 0]
    return t0[:, HITS] + t0[:, MISSES] + t0[:, BYPASSES] + t0[:, WRITETHROUGHS]


# ---- the dominant-operand rule ------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 6), st.integers(1, 300), st.integers(1, 4),
                          st.booleans()), max_size=60),
       st.integers(1, 7))
def test_dominant_operand_matches_a_plain_reference(rows, split):
    operand = np.array([True, True, False, True, True, False, True])
    candidate = np.array([True, True, True, False, True, True])
    ref = {}
    for op, tid, nb, cnt, w in rows:
        if candidate[op] and operand[tid] and not w:
            ref.setdefault(op, {}).setdefault(tid, 0)
            ref[op][tid] += nb * cnt
    want = np.full(6, -1)
    for op, d in ref.items():
        want[op] = min(d, key=lambda t: (-d[t], t))
    arr = [np.array([r[i] for r in rows], dtype=np.int64 if i < 4 else bool) for i in range(5)]
    batches = [tuple(a[k:k + split] for a in arr) for k in range(0, len(rows), split)]
    assert (dominant_operands(6, operand, candidate, batches) == want).all()


def test_decode_linear_and_attention_run_in_hbm_pim(llama_trace):
    tr = replay_trace(llama_trace, "h100-hbm-pim")
    ops = llama_trace.ops.to_pydict()
    hbm = tr.chip.tier_index("hbm")
    names = llama_trace.tensors.column("name").to_pylist()
    for o, (kind, phase) in enumerate(zip(ops["kind"], ops["phase"])):
        runs = phase == "decode" and kind in ("linear", "attention")
        assert tr.pim.op_tier[o] == (hbm if runs else -1), (o, kind, phase)
        if runs and kind == "linear":
            assert not names[tr.pim.dominant[o]].endswith((".scales", ".bias"))
        if runs and kind == "attention":
            assert names[tr.pim.dominant[o]].endswith("kv.k")


def test_attacc_runs_only_attention_in_memory(llama_trace):
    tr = replay_trace(llama_trace, "attacc")
    ops = llama_trace.ops.to_pydict()
    kinds = np.array(ops["kind"])[tr.pim.op_tier >= 0]
    assert set(kinds) == {"attention"} and len(kinds) == sum(
        k == "attention" and p == "decode" for k, p in zip(ops["kind"], ops["phase"]))
    pim_bytes = tr.result.by_kind[:, :, PIM_BYTES]
    assert pim_bytes[tr.result.kinds.index("weight")].sum() == 0
    assert pim_bytes[tr.result.kinds.index("kv"), tr.chip.tier_index("pim")] > 0


def test_op_whose_dominant_operand_is_not_in_a_pim_tier_runs_on_the_host(llama_trace):
    # weights to DDR (no PIM unit), their scales to the PIM HBM: linears must not run in memory,
    # and no scale bytes are read in memory (a per-tensor rule would read them there)
    rules = (PlacementRule("hbm", kind="weight", name="*.scales"), PlacementRule("ddr", kind="weight"))
    tr = replay_trace(llama_trace, "h100-hbm-pim", extra_rules=rules)
    ops = np.array(llama_trace.ops.column("kind").to_pylist())
    assert (tr.pim.op_tier[ops == "linear"] == -1).all()
    assert (tr.pim.op_tier[ops == "attention"] >= 0).any()
    assert tr.result.by_kind[tr.result.kinds.index("weight"), :, PIM_BYTES].sum() == 0


# ---- conservation ------------------------------------------------------------------------------

@pytest.mark.parametrize("chip_name", PIM_CHIPS)
@pytest.mark.parametrize("which", ["llama", "moe"])
def test_in_memory_plus_requested_bytes_equal_what_each_op_needed(llama_trace, moe_trace, chip_name, which):
    trace = llama_trace if which == "llama" else moe_trace
    chip = load_chip(chip_name)
    b0 = chip.tiers[0].block_bytes
    need = needed_blocks(trace, b0) * b0
    plain = replay_trace(trace, chip, ReplayOptions(pim=False)).result
    pim = replay_trace(trace, chip).result
    assert (requested(plain.per_op) * b0 == need).all()
    in_mem = pim.per_op[:, :, PIM_BYTES].sum(1)
    assert in_mem.sum() > 0
    assert (requested(pim.per_op) * b0 + in_mem == need).all()


def test_link_bytes_saved_equal_in_memory_bytes_per_op(llama_trace):
    # tier 0 passes everything through and every tensor is homed in the PIM HBM, so per op the
    # bytes down the first link without PIM = bytes down it with PIM + bytes read in memory
    chip = load_chip("h100-hbm-pim")
    chip = dataclasses.replace(chip, tiers=(dataclasses.replace(chip.tiers[0], managed="scratchpad"),)
                               + chip.tiers[1:])
    rules = (PlacementRule("hbm"),)
    plain = replay_trace(llama_trace, chip, ReplayOptions(pim=False), extra_rules=rules).result
    pim = replay_trace(llama_trace, chip, extra_rules=rules).result
    in_mem = pim.per_op[:, 1, PIM_BYTES]
    from tierlab.engine.counters import link_bytes

    lp, lq = link_bytes(plain.per_op, plain.block_bytes), link_bytes(pim.per_op, pim.block_bytes)
    assert (lp[:, 0, 0] == lq[:, 0, 0] + in_mem).all()
    assert (lp[:, 0, 1] == lq[:, 0, 1]).all()  # PIM reads nothing back up; writes travel as before
    assert in_mem.sum() > 0 and (in_mem[pim.per_op[:, 1, PIM_BYTES] > 0] > 0).all()
    # what stays in memory is exactly the operand reads of the ops run there (kinds weight and kv)
    k = [pim.kinds.index("weight"), pim.kinds.index("kv")]
    assert pim.by_kind[:, 1, PIM_BYTES].sum() == pim.by_kind[k, 1, PIM_BYTES].sum()


# ---- PIM off = plain ---------------------------------------------------------------------------

@pytest.mark.parametrize("chip_name", PIM_CHIPS)
def test_no_pim_equals_a_plain_replay_exactly(llama_trace, chip_name):
    chip = load_chip(chip_name)
    off = replay_trace(llama_trace, chip, ReplayOptions(pim=False))
    plain = replay_trace(llama_trace, strip_pim(chip))
    assert off.pim is None
    for f in ("tiers", "by_kind", "per_op", "flush"):
        assert np.array_equal(getattr(off.result, f), getattr(plain.result, f)), f
    a, b = cost_of(off), cost_of(plain)
    assert np.array_equal(a.energy_j, b.energy_j) and np.array_equal(a.latency_s, b.latency_s)
    ja, jb = without_idle_pim(to_json(off, a)), to_json(plain, b)
    for key in ("tiers", "links", "energy_j", "per_token", "by_kind"):
        assert ja[key] == jb[key], key


def test_cli_no_pim_equals_the_same_gpu_without_pim(tmp_path, llama_trace):
    # h100-hbm-pim is h100 plus PIM units: with --no-pim the counts must be h100's
    h100, hp = load_chip("h100"), strip_pim(load_chip("h100-hbm-pim"))
    assert (h100.tiers, h100.links, h100.compute) == (hp.tiers, hp.links, hp.compute), \
        "h100-hbm-pim must be h100 plus PIM units"
    out = {}
    for chip, flag in (("h100", "--pim"), ("h100-hbm-pim", "--no-pim")):
        r = CliRunner().invoke(main, ["replay", str(llama_trace.path), "--chip", chip, flag, "--json"])
        assert r.exit_code == 0, r.output
        out[chip] = without_idle_pim(json.loads(r.stdout))
    for key in ("tiers", "links", "per_token", "energy_j", "by_kind"):
        assert out["h100"][key] == out["h100-hbm-pim"][key], key


# ---- costs ---------------------------------------------------------------------------------------

def test_pim_energy_and_time_use_the_unit_figures(llama_trace):
    tr = replay_trace(llama_trace, "h100-hbm-pim")
    cst = cost_of(tr)
    hbm = tr.chip.tier_index("hbm")
    unit = tr.chip.tiers[hbm].pim
    pim_b = tr.result.per_op[:, hbm, PIM_BYTES].astype(float)
    flops = llama_trace.ops.column("flops").to_numpy().astype(float)
    on = tr.pim.op_tier == hbm
    want_j = pim_b * unit.read_energy_j_per_byte + np.where(on, flops * unit.energy_j_per_flop, 0.0)
    assert np.allclose(cst.pim_j[:, hbm], want_j, rtol=1e-12, atol=0)
    assert (cst.compute_j[on] == 0).all() and (cst.time_s[on, cst.resources.index("compute")] == 0).all()
    host = tr.chip.compute
    assert np.allclose(cst.compute_j[~on], flops[~on] * host.energy_j_per_flop[cst.dtype], rtol=1e-12, atol=0)
    t_pim = cst.time_s[:, cst.resources.index("pim:hbm")]
    t_flops = cst.time_s[:, cst.resources.index("pim_flops:hbm")]
    assert np.allclose(t_pim, pim_b / unit.internal_bandwidth_bytes_per_s, rtol=1e-12, atol=0)
    assert np.allclose(t_flops, np.where(on, flops / unit.flop_per_s, 0.0), rtol=1e-12, atol=0)
    assert (cst.latency_s[on] >= np.maximum(t_pim[on], t_flops[on])).all()
    assert np.isclose(cst.totals()["total"], cst.energy_j.sum(), rtol=1e-12)


# ---- bad input -----------------------------------------------------------------------------------

def test_unknown_pim_op_kind_is_one_line_exit_2(tmp_path, llama_trace):
    text = (Path(__file__).parents[2] / "configs" / "chips" / "h100-hbm-pim.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('ops = ["linear", "attention"]', 'ops = ["linear", "gemv"]'))
    r = CliRunner().invoke(main, ["replay", str(llama_trace.path), "--chip", str(bad)])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "unknown op kind 'gemv'" in lines[0] and "ops[1]" in lines[0]


def test_in_memory_bytes_are_shown_apart_in_json_text_and_parquet(tmp_path, llama_trace):
    import pyarrow.parquet as pq

    out = tmp_path / "ops.parquet"
    r = CliRunner().invoke(main, ["replay", str(llama_trace.path), "--chip", "h100-hbm-pim", "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    tr = replay_trace(llama_trace, "h100-hbm-pim")
    hbm = tr.chip.tier_index("hbm")
    total = int(tr.result.tiers[hbm, PIM_BYTES])
    assert d["tiers"][hbm]["pim_bytes"] == total > 0
    # per token: the decode ops' in-memory bytes / steps / batch, apart from the link bytes
    ops = llama_trace.ops.to_pydict()
    dec = np.array([p == "decode" for p in ops["phase"]])
    pt = d["per_token"]
    assert pt["in_memory_bytes_by_tier"] == {"hbm": tr.result.per_op[dec, hbm, PIM_BYTES].sum() / 3 / 2}
    assert set(pt["bytes_by_link"]) == {"l2-hbm", "hbm-ddr"}
    assert d["pim"]["ops_in_memory"]["hbm"] == {"attention": int(((np.array(ops["kind"]) == "attention") & dec).sum()),
                                                "linear": int(((np.array(ops["kind"]) == "linear") & dec).sum())}
    t = pq.read_table(out).to_pydict()
    assert sum(t["hbm.pim_bytes"]) == total
    assert t["ran_in_memory_of"] == [("hbm" if x >= 0 else None) for x in tr.pim.op_tier]
    text = CliRunner().invoke(main, ["replay", str(llama_trace.path), "--chip", "h100-hbm-pim"]).output
    assert "in memory hbm (PIM)" in text


@pytest.mark.parametrize("chip", ["h100-hbm-pim", "attacc", "aim-gddr6"])
def test_a_trace_read_once_for_plan_and_replay_counts_as_one_read_twice(llama_trace, moe_trace, chip, monkeypatch):
    """A small trace's batches are read once and held for the PIM plan and the replay
    (``pipeline.HOLD_ROWS``); streamed twice, the plan and every count are the same."""
    import tierlab.pipeline.chip_replay as pipeline

    for trace in (llama_trace, moe_trace):
        held = replay_trace(trace, chip, ReplayOptions(batch_rows=7))
        monkeypatch.setattr(pipeline, "HOLD_ROWS", 0)
        streamed = replay_trace(trace, chip, ReplayOptions(batch_rows=7))
        monkeypatch.undo()
        assert held.pim is not None and streamed.pim is not None
        assert np.array_equal(held.pim.op_tier, streamed.pim.op_tier)
        assert np.array_equal(held.pim.dominant, streamed.pim.dominant)
        for a, b in ((held.result.per_op, streamed.result.per_op), (held.result.flush, streamed.result.flush),
                     (held.result.by_kind, streamed.result.by_kind)):
            assert np.array_equal(a, b)
        assert held.result.per_op[:, :, PIM_BYTES].sum() > 0
