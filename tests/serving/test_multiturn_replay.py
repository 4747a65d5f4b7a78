"""Multi-turn conversations replayed: KV reuse never moves more bytes than re-prefilling, on chip
presets; per-turn sums equal the whole run; offload copies cross the link exactly once; the
per-turn table is deterministic and reaches ``tierlab run``'s output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tierlab.chip.chipfile import chip_from_dict
from tierlab.cli import main
from tierlab.engine.counters import link_bytes
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.cost.trace_cost import cost_of
from tierlab.analysis.turns import per_turn
from tierlab.present.report import format_turns
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.format.reader import open_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model

DATA = Path(__file__).parents[1] / "data" / "models"
TURNS = ((24, 4),) * 3

# A Llama whose weights (~90 MB) do not fit an H100's 50 MiB L2, so re-prefilling streams them again.
SMALL_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
               "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
               "intermediate_size": 1536, "vocab_size": 48000, "max_position_embeddings": 4096,
               "tie_word_embeddings": False}

# sram homes everything except the offload copies, which a rule sends to ddr: the only traffic on
# the link is the copies (64 B blocks; every KV row of the tiny Llama is 64 B per K or V). No static
# power: board energy = the dynamic energy (no test here reads energy; tdp must be positive).
TWO_TIER = {
    "name": "two-tier", "compute": {"flops": {"bf16": "100 TFLOP/s"}, "energy": {"bf16": "1 pJ"}},
    "power": {"idle": "0 W", "tdp": "1 W"},
    "tier": [
        {"name": "sram", "capacity": "256 MiB", "block": "64 B", "managed": "scratchpad",
         "bandwidth": "10 TB/s", "read_energy": "0.1 pJ/bit", "write_energy": "0.1 pJ/bit"},
        {"name": "ddr", "capacity": "4 GiB", "block": "64 B", "managed": "memory",
         "bandwidth": "100 GB/s", "read_energy": "1 pJ/bit", "write_energy": "1 pJ/bit"}],
    "link": [{"from": "sram", "to": "ddr", "bandwidth": "50 GB/s", "energy": "10 pJ/bit"}],
    "placement": [{"tier": "ddr", "kind": "kv_offload"}],
}


@pytest.fixture(scope="module")
def small_traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("mt")
    (d / "small").mkdir()
    (d / "small" / "config.json").write_text(json.dumps(SMALL_LLAMA))
    spec = load_model(d / "small")
    return {reuse: open_trace(generate_trace(spec, RunConfig(turns=TURNS, kv_reuse=reuse), d / f"{reuse}.trace"))
            for reuse in (True, False)}


@pytest.mark.parametrize("chip", ["h100", "sn40l"])
def test_reuse_never_moves_more(small_traces, chip):
    res = {reuse: replay_trace(t, chip) for reuse, t in small_traces.items()}
    with_reuse, without = res[True].result.links, res[False].result.links
    assert np.all(with_reuse <= without), (with_reuse.tolist(), without.tolist())
    assert with_reuse.sum() < without.sum()
    # the later turns re-prefill history + prompt: every one moves more without reuse
    a, b = per_turn(res[True]), per_turn(res[False])
    for t in range(1, len(TURNS)):
        assert a[t]["link_bytes"] < b[t]["link_bytes"]
        assert a[t]["energy_j"]["total"] < b[t]["energy_j"]["total"]
        assert a[t]["latency_s"] < b[t]["latency_s"]
        assert a[t]["kv_bytes"]["written"] < b[t]["kv_bytes"]["written"]


def test_turns_sum_to_the_run(small_traces):
    tr = replay_trace(small_traces[False], "h100")
    cst = cost_of(tr)
    rows = per_turn(tr, cst)
    lb = tr.result.links
    names = [f"{lk.upper}-{lk.lower}" for lk in tr.chip.links]
    for j, n in enumerate(names):
        assert sum(r["bytes_by_link"][n]["down"] for r in rows) == lb[j, 0]
        assert sum(r["bytes_by_link"][n]["up"] for r in rows) == lb[j, 1]
    assert sum(r["link_bytes"] for r in rows) == lb.sum()
    assert sum(r["energy_j"]["total"] for r in rows) == pytest.approx(cst.totals()["total"], rel=1e-12)
    assert sum(r["latency_s"] for r in rows) == pytest.approx(cst.latency_s.sum(), rel=1e-12)
    # each turn: its op range, independently summed from the per-op counters
    conv = tr.trace.manifest["run"]["conversation"]
    per_op = link_bytes(tr.result.per_op, tr.result.block_bytes)
    for r, t in zip(rows, conv):
        assert r["link_bytes"] == per_op[t["op_start"]:t["op_end"]].sum()
        ops = tr.trace.op_arrays()
        steps = set(ops["step"][t["op_start"]:t["op_end"]].tolist()) - {-1}
        assert r["decode_latency_s_per_token"] == pytest.approx(
            cst.latency_s[t["op_start"]:t["op_end"]][ops["phase"][t["op_start"]:t["op_end"]] == "decode"].sum()
            / len(steps))
    assert "copies on links" not in format_turns(rows)
    assert "total" in format_turns(rows) and len(format_turns(rows).splitlines()) == 3 + len(TURNS) + 1


@pytest.mark.parametrize("batch,context", [(1, 0), (3, 5)])
def test_offload_copies_cross_the_link_once(tmp_path, batch, context):
    spec = load_model(DATA / "tiny-llama.json")
    run = RunConfig(turns=((6, 3), (5, 2), (9, 1)), batch=batch, context=context, kv_offload=True)
    trace = open_trace(generate_trace(spec, run, tmp_path / "c.trace"))
    tr = replay_trace(trace, chip_from_dict(TWO_TIER))
    rows = per_turn(tr)
    row_bytes = 2 * 2 * 16 * 2      # K + V: 2 kv heads x head_dim 16 x bf16
    live = batch * spec.num_layers * row_bytes * np.cumsum([context + 6 + 3, 5 + 2, 9 + 1])
    kinds = trace.tensors.column("kind").to_pylist()
    home = tr.placement.home
    assert all((home[i] == 1) == (k == "kv_offload") for i, k in enumerate(kinds))
    for t, r in enumerate(rows):
        off = r["kv_offload_bytes"]
        assert off["written"] == (live[t] if t < 2 else 0)          # offload after turns 0, 1
        assert off["read"] == (live[t - 1] if t > 0 else 0)         # restore before turns 1, 2
        down, up = r["bytes_by_link"]["sram-ddr"]["down"], r["bytes_by_link"]["sram-ddr"]["up"]
        assert (down, up) == (off["read"], off["written"])
        assert r["copy_link_bytes"] == r["link_bytes"] == down + up
    assert "copies on links" in format_turns(rows)


def test_per_turn_deterministic_and_absent_for_plain_runs(tmp_path):
    spec = load_model(DATA / "tiny-qwen3-moe.json")
    run = RunConfig(turns=((5, 2), (3, 3)), batch=2, kv_offload=True, router="zipf:1.2")
    a = per_turn(replay_trace(generate_trace(spec, run, tmp_path / "a.trace"), "sn40l"))
    b = per_turn(replay_trace(generate_trace(spec, run, tmp_path / "b.trace"), "sn40l"))
    assert a == b and len(a) == 2
    plain = replay_trace(generate_trace(spec, RunConfig(prompt=4, generate=2), tmp_path / "p.trace"), "sn40l")
    assert per_turn(plain) is None


def test_run_cli_per_turn(tmp_path):
    model = str(DATA / "tiny-llama.json")
    args = ["run", model, "--chip", "h100", "--turn-lengths", "6:2,4:3"]
    r = CliRunner().invoke(main, args + ["--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert [t["turn"] for t in d["per_turn"]] == [0, 1]
    assert [t["prefill_tokens"] for t in d["per_turn"]] == [6, 4]
    assert sum(t["link_bytes"] for t in d["per_turn"]) == sum(lk["bytes_down"] + lk["bytes_up"] for lk in d["links"])
    r = CliRunner().invoke(main, args + ["--no-kv-reuse"])
    assert r.exit_code == 0, r.output
    assert "per turn" in r.output and "\ntotal " in r.output
    r = CliRunner().invoke(main, ["run", model, "--chip", "h100", "--prompt", "4", "--json"])
    assert json.loads(r.stdout)["per_turn"] is None
    r = CliRunner().invoke(main, args + ["--kv-offload", "--no-kv-reuse"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "--kv-offload: " in r.output


@pytest.mark.parametrize("conv", [[], [{"op_start": 0}], [{"op_start": 0, "op_end": 10 ** 9}],
                                  [{"op_start": 5, "op_end": 9}, {"op_start": 0, "op_end": 4}]])
def test_bad_conversation_in_manifest(tmp_path, conv):
    from tierlab.common.errors import TraceError

    path = generate_trace(load_model(DATA / "tiny-llama.json"), RunConfig(turns=((3, 1), (2, 1))), tmp_path / "c.trace")
    tr = replay_trace(path, "h100")
    tr.trace.manifest["run"]["conversation"] = conv
    with pytest.raises(TraceError, match="run.conversation"):
        per_turn(tr)
