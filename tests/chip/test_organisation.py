"""The calibrated latency (tierlab.cost.organisation): kernel overhead x kernels, fusion's kernel
count in closed form, achievable fractions scaling times exactly, overlap's rule, and with every
option off the roofline exactly, with every figure that existed before equal to the golden values
recorded from the code before the calibrated latency (tests/data/pre-calibration-golden.py)."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tierlab.analysis.result import to_json
from tierlab.chip.chipfile import chip_from_dict, chip_hash, load_chip
from tierlab.cost.organisation import groups_of, kernels_of, organise, with_execution
from tierlab.cost.trace_cost import cost_of
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model

DATA = Path(__file__).parents[1] / "data"
TINY = DATA / "models" / "tiny-llama.json"
GOLDEN = json.loads((DATA / "pre-calibration-golden.json").read_text())
OFF = dict(fusion="none", overlap="none", kernel_overhead_s=0.0, achievable=False)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("org")
    run = RunConfig(prompt=16, context=32, generate=2)
    return {"tiny-llama": generate_trace(load_model(TINY), run, tmp / "tiny.trace"),
            "qwen2-0.5b": generate_trace(load_model("qwen2-0.5b"), run, tmp / "qwen.trace")}


def decode_ops_per_step(tr) -> float:
    """Decode ops per step, counted from the trace's ops table (independently of the cost room)."""
    phase = tr.trace.ops.column("phase").to_pylist()
    step = tr.trace.ops.column("step").to_pylist()
    dec = [s for p, s in zip(phase, step) if p == "decode"]
    return len(dec) / len(set(dec))


@pytest.mark.parametrize("overhead", [1e-6, 1.3e-6, 7.5e-6])
def test_overhead_is_kernels_times_overhead(traces, overhead):
    chip = with_execution(load_chip("h100"), **{**OFF, "kernel_overhead_s": overhead})
    tr = replay_trace(traces["tiny-llama"], chip)
    pt = to_json(tr)["per_token"]
    assert pt["kernels"] == decode_ops_per_step(tr)          # fusion none: one kernel per op
    assert pt["overhead_s"] == pytest.approx(pt["kernels"] * overhead, rel=1e-12)
    assert pt["latency_calibrated_s"] == pytest.approx(pt["latency_s"] + pt["kernels"] * overhead, rel=1e-12)
    assert pt["tokens_per_s_calibrated"] == pytest.approx(pt["batch"] / pt["latency_calibrated_s"], rel=1e-12)


@pytest.mark.parametrize("model", ["tiny-llama", "qwen2-0.5b"])
def test_layer_fusion_gives_layers_plus_two_kernels_per_step(traces, model):
    """Per decode step: the embedding, one kernel per decoder layer, the final norm with the LM head."""
    spec = load_model(TINY if model == "tiny-llama" else model)
    chip = with_execution(load_chip("h100"), **{**OFF, "fusion": "layer", "kernel_overhead_s": 2e-6})
    tr = replay_trace(traces[model], chip)
    pt = to_json(tr)["per_token"]
    assert pt["kernels"] == spec.num_layers + 2
    assert pt["overhead_s"] == pytest.approx((spec.num_layers + 2) * 2e-6, rel=1e-12)
    org = cost_of(tr).organisation
    steps = pt["steps"]
    dec = np.asarray(tr.trace.ops.column("phase").to_pylist()) == "decode"
    assert org.kernels(np.flatnonzero(dec)) == steps * (spec.num_layers + 2)   # layers x steps, plus 2 per step


def test_kernels_of_runs_of_phase_step_layer():
    layer = np.array([-1, 0, 0, 1, 1, -1, -1, -1, 0, 0, 1])
    phase = np.array(["prefill"] * 5 + ["prefill"] + ["decode"] * 5, dtype=object)
    step = np.array([-1] * 6 + [0] * 5)
    k = kernels_of(layer, phase, step, "layer")
    assert k.tolist() == [0, 1, 1, 2, 2, 3, 4, 4, 5, 5, 6]
    assert kernels_of(layer, phase, step, "none").tolist() == list(range(11))


def test_fractions_scale_times_exactly(traces):
    base = with_execution(load_chip("h100"), **OFF)
    half = replace(base, compute=replace(base.compute, achievable=0.5),
                   tiers=tuple(replace(t, achievable=0.5) for t in base.tiers),
                   links=tuple(replace(lk, achievable=0.5) for lk in base.links))
    tr = replay_trace(traces["tiny-llama"], half)
    cst = cost_of(tr)
    pt = to_json(tr, cst)["per_token"]
    assert pt["latency_calibrated_s"] == 2 * pt["latency_s"]      # division by 0.5 is exact
    # one tier's fraction: each op's time is the largest of its resources with that one scaled
    hbm_only = replace(base, tiers=tuple(replace(t, achievable=0.8 if t.name == "hbm" else 1.0) for t in base.tiers))
    scale = np.array([0.8 if r == "tier:hbm" else 1.0 for r in cst.resources])
    org = organise(hbm_only, cst.resources, cst.time_s, tr.trace.ops.column("layer").to_numpy(),
                   np.asarray(tr.trace.ops.column("phase").to_pylist(), dtype=object),
                   tr.trace.ops.column("step").to_numpy())
    assert np.array_equal(org.group_s, (cst.time_s / scale).max(axis=1))
    assert org.achievable == {"tier:hbm": 0.8}


def test_overlap_groups_independent_kernels():
    """q/k/v read one input and write three outputs: one group; the op reading them starts the next."""
    kernel = np.arange(5)
    phase = np.array(["decode"] * 5, dtype=object)
    step = np.zeros(5, int)
    acc = [(0, 10, 1),                          # norm writes x
           (1, 10, 0), (1, 11, 1),              # q reads x writes q
           (2, 10, 0), (2, 12, 1),              # k reads x writes k
           (3, 10, 0), (3, 13, 1),              # v reads x writes v
           (4, 11, 0), (4, 12, 0), (4, 14, 1)]  # attention reads q, k
    a = np.array(acc)

    def tensors():
        yield a[:, 0], a[:, 1], a[:, 2].astype(bool)

    assert groups_of(kernel, phase, step, "independent", tensors).tolist() == [0, 1, 1, 1, 2]
    assert groups_of(kernel, phase, step, "none", tensors).tolist() == [0, 1, 2, 3, 4]
    # a group's time is its busiest resource summed over its ops (max_r sum), no more than the serial sum
    t = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [3.0, 0.0], [0.5, 0.5]])
    chip = with_execution(load_chip("h100"), **{**OFF, "overlap": "independent"})
    res = ("compute", "tier:l2")
    org = organise(chip, res, t, np.zeros(5, int), phase, step, tensors)
    assert org.group_s.tolist() == [1.0, max(1 + 3, 2 + 1), 0.5]
    assert org.latency_s(np.arange(5)) == 1.0 + 4.0 + 0.5


def test_overlap_on_a_real_trace_is_no_slower(traces):
    chip = with_execution(load_chip("h100"), **{**OFF, "overlap": "independent"})
    tr = replay_trace(traces["tiny-llama"], chip)
    cst = cost_of(tr)
    names = tr.trace.ops.column("name").to_pylist()
    g = cst.organisation.group
    q, k, v = (names.index(n) for n in ("q_proj", "k_proj", "v_proj"))
    assert g[q] == g[k] == g[v]
    pt = to_json(tr, cst)["per_token"]
    assert pt["latency_calibrated_s"] <= pt["latency_s"] * (1 + 1e-12)
    assert pt["kernels"] == decode_ops_per_step(tr)


@pytest.mark.parametrize("key", sorted(k for k in GOLDEN if "@" in k))
def test_all_options_off_is_the_roofline_and_today(traces, key):
    """Every figure that existed before the calibrated latency is unchanged (the presets' new keys
    touch only the calibrated figures), and with every option off the calibrated latency is the
    roofline exactly. The golden figures were recorded when a cache tier charged a streamed block
    its fill and its read: the chips are compared with ``forward_misses`` off (issue 39 changed only
    that; tests/chip/test_forward_misses.py checks what it changes)."""
    model, chip_name = key.split("@")
    base = load_chip(chip_name)
    base = replace(base, tiers=tuple(replace(t, forward_misses=False) for t in base.tiers))
    for chip in (base, with_execution(base, **OFF)):
        d = to_json(replay_trace(traces[model], chip))
        want = GOLDEN[key]
        for part in ("tiers", "links", "energy_j", "latency_s", "by_kind", "counts"):
            assert d[part] == want[part], (key, part)
        pt = d["per_token"]
        assert {k: pt[k] for k in want["per_token"]} == want["per_token"]
    assert pt["latency_calibrated_s"] == pt["latency_s"]
    assert pt["tokens_per_s_calibrated"] == pt["tokens_per_s"]
    assert pt["overhead_s"] == 0.0 and pt["calibration"]["achievable"] == {}


def test_code_built_chip_hashes_as_before():
    """The h100 preset's dict without the calibration keys (and their sources) is the file as it
    was; built in code, it hashes as it did before the keys existed."""
    d = tomllib.loads((Path(__file__).parents[2] / "configs" / "chips" / "h100.toml").read_text())
    d.pop("execution")
    d.pop("power", None)                        # board power (issue 39): costs only, not the hierarchy
    d.pop("reserve", None)                      # the runtime's reserve (issue 39): capacity planning only
    for part in [d["compute"], *d["tier"], *d["link"]]:
        part.pop("achievable", None)
        part.pop("forward_misses", None)        # issue 39: a cost setting, off in a code-built chip
    for tag in ("S104", "S107", "S112", "S113", "S300", "S301", "S310", "S311", "S312"):   # issue 39: gemv, power, reserve
        d["sources"].pop(tag, None)
    assert chip_hash(chip_from_dict(d)) == GOLDEN["code_chip_sha256"]


def test_per_op_parquet_names_each_ops_kernel(traces):
    from tierlab.present.report import per_op_table

    spec = load_model(TINY)
    chip = with_execution(load_chip("h100"), **{**OFF, "fusion": "layer"})
    tr = replay_trace(traces["tiny-llama"], chip)
    t = per_op_table(tr, cost_of(tr)).to_pylist()
    step0 = {r["kernel_id"] for r in t if r["phase"] == "decode" and r["step"] == 0}
    assert len(step0) == spec.num_layers + 2
    for a, b in zip(t, t[1:]):          # a kernel is a run of one (phase, step, layer)
        if a["kernel_id"] == b["kernel_id"]:
            assert (a["phase"], a["step"], a["layer"]) == (b["phase"], b["step"], b["layer"])
