"""Kernel efficiency by weight format (tierlab.cost.gemv, issue 39): a chip's [execution] gemv table
charges the decode linear ops' memory time at the format's fraction, and nothing else.

Second paths: a weight-streaming op's time equals the roofline time with the memory tiers' and links'
fraction set to the table's value (organise on a chip whose achievable is that fraction); every other
op keeps the chip's own; the op's format is recounted from the tensors table by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tierlab.chip.chipfile import chip_from_dict, load_chip
from tierlab.common.errors import ConfigError
from tierlab.cost.gemv import gemv_fractions, lookup, op_weight_dtypes
from tierlab.cost.organisation import organise, with_execution
from tierlab.cost.trace_cost import cost_of
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model

OFF = dict(fusion="none", overlap="none", kernel_overhead_s=0.0, achievable=False)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    run = RunConfig(prompt=16, context=32, generate=2, weights="int4", quant_group=32)
    from tierlab.traces.format.reader import open_trace

    return open_trace(generate_trace(load_model("qwen2-0.5b"), run, tmp_path_factory.mktemp("gemv") / "q.trace"))


def with_gemv(chip, table):
    return replace(chip, execution=replace(chip.execution, gemv=tuple(sorted(table.items()))))


def test_lookup_prefers_the_group():
    t = {"int4": 0.7, "int4-g32": 0.5, "bf16": 0.9}
    assert lookup(t, "int4", 32) == 0.5 and lookup(t, "int4", 128) == 0.7
    assert lookup(t, "bf16", 32) == 0.9 and lookup(t, "fp8", None) == 0.0


def test_weight_format_of_each_op_by_hand(trace):
    dts = op_weight_dtypes(trace)
    ten = trace.tensors.to_pylist()
    by_id = {t["tensor_id"]: t for t in ten}
    reads: dict[int, list] = {}
    for b in trace.iter_accesses():
        for r in b.to_pylist():
            t = by_id[r["tensor_id"]]
            if t["kind"] == "weight" and not r["is_write"]:
                reads.setdefault(r["op_id"], []).append(t)
    for op in range(trace.ops.num_rows):
        want = max(reads[op], key=lambda t: t["nbytes"])["dtype"] if op in reads else ""
        assert dts[op] == want
    kinds = trace.ops.column("kind").to_pylist()
    phases = trace.ops.column("phase").to_pylist()
    lin = [d for d, k, p in zip(dts, kinds, phases) if k == "linear" and p == "decode"]
    assert "int4" in lin           # the layers' projections are int4 (the LM head may be too: plain int4 is every matrix)


def test_streaming_ops_take_the_table_fraction_and_others_do_not(trace):
    base = with_execution(load_chip("h100"), **OFF)           # every fraction 1: the roofline
    chip = with_gemv(base, {"int4-g32": 0.5})
    tr = replay_trace(trace, chip)
    cst = cost_of(tr)
    g = gemv_fractions(chip, trace)
    kinds = np.asarray(trace.ops.column("kind").to_pylist())
    phases = np.asarray(trace.ops.column("phase").to_pylist())
    tokens = trace.ops.column("tokens").to_numpy()
    dts = op_weight_dtypes(trace)
    want = (kinds == "linear") & (dts == "int4")
    del tokens
    assert want.any() and np.array_equal(g > 0, want) and set(g[want]) == {0.5}
    # second path: the same ops on a chip whose memory tiers and links reach 0.5 of peak
    half = replace(base, tiers=tuple(replace(t, achievable=0.5 if t.managed != "cache" else 1.0) for t in base.tiers),
                   links=tuple(replace(lk, achievable=0.5 if lk.lower in {t.name for t in base.tiers if t.managed != "cache"}
                                       else 1.0) for lk in base.links))
    args = (cst.resources, cst.time_s, trace.ops.column("layer").to_numpy(), phases.astype(object),
            trace.ops.column("step").to_numpy())
    org = organise(chip, *args, gemv=g)
    slow = organise(half, *args)
    plain = organise(base, *args)
    assert np.array_equal(org.group_s[want], slow.group_s[want])      # fusion none: one group per op
    assert np.array_equal(org.group_s[~want], plain.group_s[~want])
    assert (org.group_s[want] >= plain.group_s[want]).all()
    assert np.array_equal(cst.organisation.group_s, org.group_s)      # cost_of applies it


def test_roofline_untouched_and_every_linear_op_charged(trace):
    chip = with_gemv(load_chip("h100"), {"int4-g32": 0.5, "int4": 0.5})
    g = gemv_fractions(chip, trace)
    kinds = np.asarray(trace.ops.column("kind").to_pylist())
    assert (g[kinds != "linear"] == 0).all() and (g[kinds == "linear"] > 0).any()
    a, b = replay_trace(trace, chip), replay_trace(trace, with_gemv(chip, {}))
    assert np.array_equal(cost_of(a).time_s, cost_of(b).time_s)      # the roofline is the same
    assert gemv_fractions(with_execution(chip, achievable=False), trace) is None


def test_a_step_is_no_faster_for_more_tokens():
    """Monotone in tokens: a step of 8 decodes and a 128-token prefill chunk is no faster than the 8
    decodes alone (the fraction once applied to decode ops of at most 16 tokens only, so the mixed
    step's GEMMs ran at the HBM's 0.95 and the step took less time than its decodes alone)."""
    from tierlab.serving.replay import StepReplayer
    from tierlab.traces.lowering.serving_step import MixedStep
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model

    rep = StepReplayer(load_model("qwen2-0.5b"), RunConfig(generate=1), chip=load_chip("h100"))
    try:
        alone = rep.cost(MixedStep(decode=(200,) * 8)).latency_s
        mixed = rep.cost(MixedStep(decode=(200,) * 8, prefill=((0, 128, True),))).latency_s
        more = rep.cost(MixedStep(decode=(200,) * 17)).latency_s
    finally:
        rep.close()
    assert mixed >= alone and more >= alone


def test_chip_file_gemv_parsed_and_bad_values_named():
    import tomllib
    from tierlab.common.paths import configs_dir

    d = tomllib.loads((configs_dir("chips") / "h100.toml").read_text())
    assert dict(load_chip("h100").execution.gemv)["fp8"] == 0.66     # the preset's table as written
    chip = chip_from_dict({**d, "execution": {"gemv": {"int4-g32": 0.6, "fp8": 0.7}}})
    assert dict(chip.execution.gemv) == {"int4-g32": 0.6, "fp8": 0.7}
    for bad, key in [({"int4": 1.5}, "execution.gemv.int4"), ({"int4": -0.1}, "execution.gemv.int4"),
                     ({"int4": "fast"}, "execution.gemv.int4"), ({"fp8-g32": 0.5}, "execution.gemv.fp8-g32"),
                     (0.5, "execution.gemv")]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            chip_from_dict({**d, "execution": {"gemv": bad}})


def test_a100_table_by_group_and_no_int8_faster_than_bf16():
    """a100's table as its chip file cites it ([S114], one A100-80GB kernel benchmark): Marlin's groups of
    128 read their own entry, other groups (gpt-fast's tinygemm at 32) and no group fall back to plain
    int4 (TensorRT-LLM's kernel); bf16/fp16 are cuBLAS's M = 1 GEMV. And on every preset with both, a
    weight-only int8 GEMV is charged no faster than the chip's bf16 one (the same stream at half the
    bytes, plus the dequantisation): the estimate a100's int8 entry is."""
    from tierlab.chip.chipfile import list_presets

    t = dict(load_chip("a100").execution.gemv)
    assert lookup(t, "int4", 128) == 0.75 and lookup(t, "int4", 32) == 0.68 == lookup(t, "int4", None)
    assert t["bf16"] == t["fp16"] == 0.71 and t["int8"] <= t["bf16"]
    for name in list_presets():
        g = dict(load_chip(name).execution.gemv)
        if "int8" in g and "bf16" in g:
            assert g["int8"] <= g["bf16"], name


def test_a100_int8_decode_step_slower_than_with_the_hbm_fraction():
    """The int8 entry takes effect: an int8 decode step on a100 costs more than with the table emptied
    (the linear ops at HBM's 0.84), and exactly as much as with int8 set to the bf16 entry."""
    run = RunConfig(prompt=16, context=32, generate=2, weights="int8")
    from tierlab.traces.format.reader import open_trace
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        tr = open_trace(generate_trace(load_model("qwen2-0.5b"), run, Path(d) / "q.trace"))
        chip = load_chip("a100")
        lat = {}
        for name, c in {"table": chip, "none": with_gemv(chip, {}),
                        "bf16": with_gemv(chip, {"int8": dict(chip.execution.gemv)["bf16"]})}.items():
            lat[name] = cost_of(replay_trace(tr, c)).organisation.group_s.sum()
    assert lat["table"] > lat["none"] and lat["table"] == pytest.approx(lat["bf16"])


def test_blackwell_tables_are_hopper_estimates_and_fp4_keeps_the_hbm_fraction():
    """b200, gb200 and b300 take H100's fractions as estimates (no Blackwell GEMV microbenchmark of an
    HBM-resident weight found; chip files): bf16 and fp8 weights read them, an nvfp4 or mxfp4 weight
    (no source) reads nothing and keeps the HBM tier's achievable."""
    h100 = dict(load_chip("h100").execution.gemv)
    for name in ("b200", "gb200", "b300"):
        t = dict(load_chip(name).execution.gemv)
        assert t == h100, name
        assert lookup(t, "nvfp4", None) == 0.0 and lookup(t, "mxfp4", None) == 0.0
