"""tierlab throughput (issue 23): the scheduler, the mixed-step lowering, the KV limit, the curve.

Each figure is checked against something computed another way: the scheduler's counts against the
request arithmetic, a step of decodes alone against ``tierlab run``'s decode step (identical counts),
the KV limit against its closed form from the capacity module's byte functions, concurrency 1
against ``tierlab run`` at the same contexts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tierlab.analysis.capacity import activation_bytes, weight_bytes
from tierlab.analysis.result import to_json
from tierlab.chip.chipfile import load_chip
from tierlab.cli import main
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.serving.capacity import kv_limit
from tierlab.serving.curve import window_figures
from tierlab.serving.schedule import schedule
from tierlab.serving.throughput import throughput
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.lowering.serving_step import MixedStep, lower_step
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model

TINY = str(Path(__file__).resolve().parents[1] / "data" / "models" / "tiny-llama.json")


@pytest.fixture(scope="module")
def spec():
    return load_model(TINY)


# ---- the scheduler ----------------------------------------------------------------------------

@pytest.mark.parametrize("isl,osl,c,b", [(100, 20, 1, 512), (100, 20, 4, 512), (100, 20, 8, 40), (30, 1, 5, 64),
                                         (64, 50, 16, 16)])
def test_schedule_counts(isl, osl, c, b):
    s = schedule(isl, osl, c, b)
    assert np.all(s.decodes + s.prefill_tokens <= b)
    assert np.all(s.decodes <= c)
    # every request finished in the window prefilled isl tokens and sampled osl: the window's totals
    # equal the arithmetic over whole requests plus the partial ones at its edges, so check per step
    assert s.sampled.sum() == s.decodes.sum() + sum(1 for ch in s.chunk_list for x in ch if x[2])
    done = (s.first >= 0) & (s.finish >= 0)
    assert done.any()
    if osl > 1:
        assert np.all(s.finish[done] - s.first[done] >= osl - 1)   # one decode a step at most
    for k in range(s.n_steps):
        st = s.step(k)
        assert st.tokens == s.decodes[k] + s.prefill_tokens[k]
        assert all(isl <= x < isl + osl for x in st.decode)


def test_schedule_one_request_alone():
    """Concurrency 1 with the prompt within the budget: one prefill step, then osl - 1 decodes."""
    s = schedule(100, 20, 1, 512)
    f = window_figures(s, np.ones(s.n_steps), np.ones(s.n_steps))
    assert f["ttft_s"] == 1.0 and f["tpot_s"] == 1.0
    assert f["output_tokens_per_s"] == pytest.approx(20 / 20)       # 20 tokens per 1 + 19 steps


def test_chunked_prefill_splits_the_prompt():
    """A 40-token budget shared with the decodes: a 100-token prompt goes in several chunks, each
    chunk starting where the last stopped, and every step fills the budget while a prompt waits."""
    s = schedule(100, 20, 9, 40)
    assert any(not last for ch in s.chunk_list for *_, last in ch)
    for k, ch in enumerate(s.chunk_list):
        assert all(start + t <= 100 and (start + t == 100) == last for start, t, last in ch)
        if any(not last for *_, last in ch):
            assert s.decodes[k] + s.prefill_tokens[k] == 40


# ---- the mixed step ---------------------------------------------------------------------------

def _counts(path):
    d = to_json(replay_trace(path, "h100"))
    return d["per_token"]["latency_calibrated_s"], [(t["hits"], t["misses"], t["bytes_read"]) for t in d["tiers"]]


def test_decodes_alone_lower_as_run_does(spec, tmp_path):
    a = generate_trace(spec, RunConfig(context=300, generate=1, batch=4), tmp_path / "run.trace")
    b = lower_step(spec, RunConfig(generate=1), MixedStep(decode=[300] * 4), tmp_path / "mix.trace")
    assert _counts(a) == _counts(b)


def test_mixed_attention_flops_closed_form(spec, tmp_path):
    from tierlab.traces.format.reader import open_trace

    st = MixedStep(decode=[10, 50], prefill=[(0, 40, False), (16, 8, True)])
    t = open_trace(lower_step(spec, RunConfig(generate=1), st, tmp_path / "m.trace"))
    ops = t.ops.to_pydict()
    att = [f for f, k in zip(ops["flops"], ops["kind"]) if k == "attention"]
    pairs = (10 + 1) + (50 + 1) + 40 * 41 // 2 + (8 * 16 + 8 * 9 // 2)
    assert att == [2 * spec.num_heads * pairs * 2 * spec.head_dim] * spec.num_layers
    assert set(ops["phase"]) == {"decode"} and set(ops["step"]) == {0}


# ---- the KV limit -----------------------------------------------------------------------------

def test_max_concurrency_closed_form(spec):
    chip = load_chip("h100")
    lim = kv_limit(spec, RunConfig(generate=1), chip, 1000, 1000, 8192)
    hbm = next(t for t in chip.tiers if t.name == "hbm").capacity_bytes
    free = int(0.9 * (hbm - chip.reserve.bytes_of(hbm))) - weight_bytes(spec) - activation_bytes(spec, 1, 8192)
    assert lim.max_concurrency == free // spec.kv_bytes(2000)
    odd = kv_limit(spec, RunConfig(generate=1), chip, 1000, 1001, 8192)     # rounded up to 16-token blocks
    assert odd.kv_bytes_per_sequence == spec.kv_bytes(2016)


def test_max_concurrency_tp_splits_the_kv():
    spec = load_model("llama-3.1-70b")
    chip = load_chip("h100")
    one = kv_limit(spec, RunConfig(generate=1, tp=8), chip, 1000, 1000, 8192)
    assert one.kv_bytes_per_sequence * 8 == spec.kv_bytes(2000)
    assert one.weight_bytes < weight_bytes(spec) / 8 * 1.02


# ---- the curve --------------------------------------------------------------------------------

def test_concurrency_one_equals_run(spec, tmp_path):
    """TPOT at concurrency 1 against ``tierlab run --context ISL --generate OSL-1``'s calibrated
    latency per decode step (the same contexts), within the representative steps' bound (2%)."""
    isl, osl = 300, 40
    d = throughput(spec, chip=load_chip("h100"), isl=isl, osl=osl, concurrency="1")
    r = CliRunner().invoke(main, ["run", TINY, "--chip", "h100", "--context", str(isl), "--generate", str(osl - 1),
                                  "--json"])
    assert r.exit_code == 0, r.output
    run = json.loads(r.stdout)["per_token"]["latency_calibrated_s"]
    assert d["curve"][0]["tpot_s"] == pytest.approx(run, rel=0.02)


def test_per_user_speed_never_rises(spec):
    d = throughput(spec, chip=load_chip("h100"), isl=200, osl=40, concurrency="1,2,4,8,16,64,256",
                   max_batch_tokens=512)
    speed = [p["tokens_per_s_per_user"] for p in d["curve"]]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(speed, speed[1:])), speed
    out = [p["output_tokens_per_s"] for p in d["curve"]]
    assert out[-1] > out[0]
    for p in d["curve"]:
        assert p["total_tokens_per_s_per_chip"] == pytest.approx(p["output_tokens_per_s_per_chip"] * 240 / 40)


def test_json_contract(spec, tmp_path):
    r = CliRunner().invoke(main, ["throughput", TINY, "--chip", "h100", "--input", "64", "--output", "16",
                                  "--concurrency", "1,4", "--slo-tpot", "1", "--json",
                                  "-o", str(tmp_path / "c.parquet"), "--html", str(tmp_path / "c.html")])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    for k in ("max_output_tokens_per_s", "max_concurrency", "curve", "model", "chip", "parallelism", "provenance",
              "token_counting"):
        assert k in d
    assert set(d["curve"][0]) == {"concurrency", "output_tokens_per_s", "output_tokens_per_s_per_chip",
                                  "total_tokens_per_s_per_chip", "tokens_per_s_per_user", "ttft_s", "tpot_s",
                                  "usd_per_mtok", "energy_j_per_token", "j_per_token", "j_per_token_dynamic"}
    for p in d["curve"]:      # board energy (issue 39) adds static power x time to the (kept) dynamic figure
        assert p["j_per_token_dynamic"] == p["energy_j_per_token"] and p["j_per_token"] > p["energy_j_per_token"]
    assert d["max_output_tokens_per_s"] == max(p["output_tokens_per_s"] for p in d["curve"])
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "c.parquet").num_rows == 2
    assert "data:image/svg+xml;base64," in (tmp_path / "c.html").read_text()


def test_system_tp1_equals_chip(spec):
    """A system replay of a one-device step is the chip's (the calibrated latency of a TP=1 system)."""
    from tierlab.system.systemfile import load_system

    a = throughput(spec, chip=load_chip("h100"), isl=64, osl=8, concurrency="2")
    b = throughput(spec, system=load_system("dgx-h100"), isl=64, osl=8, concurrency="2")
    assert b["curve"][0]["tpot_s"] == pytest.approx(a["curve"][0]["tpot_s"], rel=1e-9)
    assert b["parallelism"]["chips"] == 1


def test_system_tp2_steps_lower_and_replay(spec, tmp_path):
    """The serving curve on a system with TP=2 (what benchmarks/validate.py's serving rows run): each mixed
    step lowers into two devices' slices whose KV together is the one-device step's, and the curve replays
    them on the system."""
    from tierlab.system.systemfile import load_system
    from tierlab.traces.format.reader import open_trace
    from tierlab.traces.format.summary import summarize

    st = MixedStep(decode=[10, 50], prefill=[(0, 40, False)])
    one = summarize(open_trace(lower_step(spec, RunConfig(generate=1), st, tmp_path / "one.trace")))
    two = open_trace(lower_step(spec, RunConfig(generate=1, tp=2), st, tmp_path / "two.trace"))
    assert two.manifest["devices"] == 2 and summarize(two)["kv_bytes"] == one["kv_bytes"] > 0
    d = throughput(spec, system=load_system("dgx-h100"), tp=2, isl=64, osl=8, concurrency="2")
    assert d["parallelism"]["chips"] == 2 and d["curve"][0]["tpot_s"] > 0


# ---- the sweep's serving axes -----------------------------------------------------------------

def test_sweep_row_equals_single_command(spec):
    from tierlab.design_space.grid import grid_from_dict
    from tierlab.design_space.point import run_group

    grid = grid_from_dict({"model": [TINY], "chip": ["h100"], "input": [64], "output": [16], "concurrency": [1, 4]})
    assert grid.columns[-3:] == ["input", "output", "concurrency"]
    pts = grid.points()
    assert len({p.trace_key() for p in pts}) == 1          # one curve: one group, its replays shared
    rows = run_group(pts, grid.override_keys)
    d = throughput(spec, chip=load_chip("h100"), isl=64, osl=16, concurrency="1,4")
    for row, p in zip(rows, d["curve"]):
        assert row["error"] is None
        assert row["concurrency"] == p["concurrency"]
        for k in ("output_tokens_per_s", "tpot_s", "ttft_s", "tokens_per_s_per_user", "energy_j_per_token"):
            assert row[k] == p[k], k
        assert row["usd_per_mtok"] == pytest.approx(p["usd_per_mtok"])


def test_serving_grid_needs_both_lengths():
    from tierlab.common.errors import UsageError
    from tierlab.design_space.grid import grid_from_dict

    with pytest.raises(UsageError, match="needs both input and output"):
        grid_from_dict({"model": [TINY], "chip": ["h100"], "input": [64]})
    g = grid_from_dict({"model": [TINY], "chip": ["h100"], "batch": [1]})
    assert "concurrency" not in g.columns and not g.points()[0].serving     # other grids unchanged


def test_workers_change_no_figure(spec):
    """Representative steps replayed on two forked processes give the figures of one process."""
    kw = dict(chip=load_chip("h100"), isl=64, osl=16, concurrency="1,4")
    a, b = throughput(spec, **kw, workers=1), throughput(spec, **kw, workers=2)
    assert a["curve"] == b["curve"]


def test_ttft_at_concurrency_one_is_runs_prefill(spec):
    """A prompt alone in its step: TTFT at concurrency 1 is ``tierlab run --prompt ISL --generate 0``'s
    calibrated prefill (the mixed lowering of a chunk against the run's prefill segment)."""
    # h100's [execution] gemv charges every linear op alike (issue 39), so both sides take it
    d = throughput(spec, chip=load_chip("h100"), isl=300, osl=8, concurrency="1")
    r = CliRunner().invoke(main, ["run", TINY, "--chip", "h100", "--prompt", "300", "--generate", "0", "--json"])
    assert r.exit_code == 0, r.output
    assert d["curve"][0]["ttft_s"] == pytest.approx(json.loads(r.stdout)["prefill"]["latency_calibrated_s"], rel=1e-4)


@pytest.mark.parametrize("chip,tiers", [("h100", ["hbm"]), ("sn40l", ["sram", "hbm"]), ("tpu-v7", ["vmem", "hbm"]),
                                        ("wse-3", ["sram", "memoryx"]), ("groq-lpu", ["sram"])])
def test_kv_home_tiers_stop_at_the_first_memory(chip, tiers):
    """A serving engine keeps weights and KV in the scratchpads and memories nearest first, up to the
    first memory tier (host DDR is not a KV home): the capacity of the closed form is their sum."""
    from tierlab.chip.chipfile import load_chip
    from tierlab.serving.capacity import memory_tier, memory_tiers

    c = load_chip(chip)
    assert [t.name for t in memory_tiers(c)] == tiers
    raw = sum(t.capacity_bytes for t in c.tiers if t.name in tiers)
    assert memory_tier(c).raw_capacity_bytes == raw
    assert memory_tier(c).capacity_bytes == raw - (c.reserve.bytes_of(raw) if c.reserve else 0)   # less [reserve]
