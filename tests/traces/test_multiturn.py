"""Multi-turn conversations in the trace: KV bytes per turn against closed forms written here, for
KV reuse, re-prefill and KV offload; the manifest's per-turn table; options and errors.

Closed forms (per sequence, per layer; ``row`` = K + V bytes of one position, flash attention with
``attn_tile`` T): a prefill of t tokens starting at position s reads, per tile k = 1..ceil(t/T), the
rows ``[0, s + min(kT, t))``; a decode step at position p reads rows ``[0, p]``; every processed
token writes one row. A turn's history H is the positions cached before it (context included).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tierlab.common.errors import UsageError
from tierlab.traces.lowering.generate import generate_trace, plan_segments
from tierlab.traces.format.reader import open_trace
from tierlab.traces.workload.run import RunConfig, conversation, parse_turn_lengths
from tierlab.traces.model.spec import load_model

DATA = Path(__file__).parents[1] / "data" / "models"
TURNS = ((6, 3), (5, 2), (9, 0), (2, 4))


def tiny(name="llama"):
    return load_model(DATA / f"tiny-{name}.json")


def kv_row_bytes(spec, kv_bytes=2):
    """K + V bytes of one position of one layer (MLA: the latent row), from the config alone."""
    c = spec.config
    if c.get("kv_lora_rank"):
        return (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * kv_bytes
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    return 2 * c.get("num_key_value_heads", heads) * head_dim * kv_bytes


def prefill_rows_read(start, tokens, tile):
    return sum(start + min(k * tile, tokens) for k in range(1, math.ceil(tokens / tile) + 1))


def expected_turns(turns, context, reuse, offload, tile):
    """Rows (per sequence per layer) each turn reads/writes in KV and in the offload copies."""
    out, history = [], context
    for i, (p, a) in enumerate(turns):
        t = {"kv_read": 0, "kv_written": 0, "off_read": 0, "off_written": 0}
        if offload and i > 0:                      # restore: offload copy -> KV
            t["off_read"] += history
            t["kv_written"] += history
        if reuse:
            t["kv_read"] += prefill_rows_read(history, p, tile)
            t["kv_written"] += p
        else:
            t["kv_read"] += prefill_rows_read(context, history - context + p, tile)
            t["kv_written"] += history - context + p
        t["kv_read"] += sum(history + p + j + 1 for j in range(a))
        t["kv_written"] += a
        history += p + a
        if offload and i < len(turns) - 1:          # offload: KV -> copy
            t["kv_read"] += history
            t["off_written"] += history
        t["prefill"] = p if reuse else history - a - context
        out.append(t)
    return out


def bytes_per_turn(trace):
    """Issued bytes per turn and tensor kind, expanded row by row from the trace (independent of
    tierlab.analysis.turns)."""
    conv = trace.manifest["run"]["conversation"]
    kinds = trace.tensors.column("kind").to_pylist()
    turn_of = {}
    for i, t in enumerate(conv):
        for op in range(t["op_start"], t["op_end"]):
            turn_of[op] = i
    out = [dict() for _ in conv]
    for b in trace.iter_accesses():
        c = b.to_pydict()
        for op, tid, nb, cnt, w in zip(c["op_id"], c["tensor_id"], c["nbytes"], c["count"], c["is_write"]):
            key = (kinds[tid], "written" if w else "read")
            d = out[turn_of[op]]
            d[key] = d.get(key, 0) + nb * cnt
    return out


@pytest.mark.parametrize("reuse,offload", [(True, False), (False, False), (True, True)])
@pytest.mark.parametrize("model,batch,context", [("llama", 2, 0), ("qwen2", 1, 3), ("deepseek-v3", 2, 1)])
def test_kv_bytes_per_turn_closed_form(tmp_path, model, batch, context, reuse, offload):
    spec = tiny(model)
    tile = 4
    run = RunConfig(turns=TURNS, batch=batch, context=context, kv_reuse=reuse, kv_offload=offload, attn_tile=tile)
    trace = open_trace(generate_trace(spec, run, tmp_path / "c.trace"))
    row = kv_row_bytes(spec)
    scale = batch * spec.num_layers * row
    got = bytes_per_turn(trace)
    want = expected_turns(TURNS, context, reuse, offload, tile)
    conv = trace.manifest["run"]["conversation"]
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.get(("kv", "read"), 0) == w["kv_read"] * scale, i
        assert g.get(("kv", "written"), 0) == w["kv_written"] * scale, i
        assert g.get(("kv_offload", "read"), 0) == w["off_read"] * scale, i
        assert g.get(("kv_offload", "written"), 0) == w["off_written"] * scale, i
        assert conv[i]["prefill_tokens"] == w["prefill"]
        assert conv[i]["decode_tokens"] == TURNS[i][1]
        assert (conv[i]["prompt_tokens"], conv[i]["answer_tokens"]) == TURNS[i]
    # the KV tensors hold every position of the conversation, whatever the mode
    kv = [n for n, k in zip(trace.tensors.column("nbytes").to_pylist(), trace.tensors.column("kind").to_pylist())
          if k == "kv"]
    assert sum(kv) == scale * (context + sum(p + a for p, a in TURNS))


def test_manifest_turn_table(tmp_path):
    run = RunConfig(turns=TURNS, batch=2, context=2, kv_offload=True)
    trace = open_trace(generate_trace(tiny(), run, tmp_path / "c.trace"))
    conv = trace.manifest["run"]["conversation"]
    ops = trace.op_arrays()
    assert [t["turn"] for t in conv] == list(range(len(TURNS)))
    assert conv[0]["op_start"] == 0 and conv[-1]["op_end"] == trace.n_ops
    assert all(a["op_end"] == b["op_start"] for a, b in zip(conv, conv[1:]))
    hist, step = 2, 0
    for i, t in enumerate(conv):
        assert t["history_positions"] == hist
        hist += sum(TURNS[i])
        kinds = set(ops["kind"][t["op_start"]:t["op_end"]])
        assert ("kv_restore" in kinds) == (i > 0) and ("kv_offload" in kinds) == (i < len(TURNS) - 1)
        for key, kind in (("restore_ops", "kv_restore"), ("offload_ops", "kv_offload")):
            if t[key] is None:
                continue
            lo, hi = t[key]
            assert set(ops["kind"][lo:hi]) == {kind} and hi - lo == tiny().num_layers
            assert set(ops["phase"][lo:hi]) == {"prefill"} and set(ops["step"][lo:hi]) == {-1}
            assert ops["flops"][lo:hi].sum() == 0
        steps = ops["step"][t["op_start"]:t["op_end"]]
        dec = steps[ops["phase"][t["op_start"]:t["op_end"]] == "decode"]
        assert sorted(set(dec.tolist())) == list(range(step, step + TURNS[i][1]))
        if TURNS[i][1]:
            assert (t["step_start"], t["step_end"]) == (step, step + TURNS[i][1])
        step += TURNS[i][1]
    assert run.to_dict()["turns"] == [list(t) for t in TURNS]
    assert json.loads(json.dumps(trace.manifest["run"]))["kv_offload"] is True


def test_offload_copies_equal_live_kv(tmp_path):
    """Each offload copies exactly the KV rows written so far (context + every kv_append), and each
    restore reads back what the previous offload wrote."""
    spec = tiny()
    run = RunConfig(turns=TURNS, batch=3, context=5, kv_offload=True)
    trace = open_trace(generate_trace(spec, run, tmp_path / "c.trace"))
    ops = trace.op_arrays()
    kinds = trace.tensors.column("kind").to_pylist()
    context_bytes = 3 * spec.num_layers * kv_row_bytes(spec) * 5
    appended = 0
    copies = {}
    for b in trace.iter_accesses():
        c = b.to_pydict()
        for op, tid, nb, cnt, w in zip(c["op_id"], c["tensor_id"], c["nbytes"], c["count"], c["is_write"]):
            k = ops["kind"][op]
            if k == "kv_append" and w:
                appended += nb * cnt
            if k in ("kv_offload", "kv_restore") and w:
                assert kinds[tid] == ("kv_offload" if k == "kv_offload" else "kv")
                copies.setdefault((k, op), [0, context_bytes + appended])[0] += nb * cnt
    offloads = [v for (k, _), v in sorted(copies.items(), key=lambda x: x[0][1]) if k == "kv_offload"]
    restores = [v for (k, _), v in sorted(copies.items(), key=lambda x: x[0][1]) if k == "kv_restore"]
    per_layer = lambda vs: [sum(v[0] for v in vs[i:i + spec.num_layers])   # noqa: E731
                            for i in range(0, len(vs), spec.num_layers)]
    live = [vs[0][1] for vs in (offloads[i:i + spec.num_layers] for i in range(0, len(offloads), spec.num_layers))]
    assert len(offloads) == len(restores) == spec.num_layers * (len(TURNS) - 1)
    assert per_layer(offloads) == live == per_layer(restores)
    assert live == [3 * spec.num_layers * kv_row_bytes(spec) * (5 + sum(map(sum, TURNS[:i + 1])))
                    for i in range(len(TURNS) - 1)]


def test_one_turn_is_the_plain_run(tmp_path):
    spec = tiny("mixtral")
    a = open_trace(generate_trace(spec, RunConfig(prompt=7, generate=3, batch=2, context=1), tmp_path / "a.trace"))
    b = open_trace(generate_trace(spec, RunConfig(turns=((7, 3),), batch=2, context=1), tmp_path / "b.trace"))
    assert a.tensors.equals(b.tensors) and a.ops.equals(b.ops)
    assert [x.to_pydict() for x in a.iter_accesses()] == [x.to_pydict() for x in b.iter_accesses()]
    assert "turns" not in a.manifest["run"] and "conversation" not in a.manifest["run"]


def test_reuse_and_recompute_decode_alike(tmp_path):
    """The decode steps of both modes issue the same accesses (same positions, same token ids)."""
    spec = tiny("qwen3-moe")
    t = {}
    for reuse in (True, False):
        tr = open_trace(generate_trace(spec, RunConfig(turns=TURNS, batch=2, kv_reuse=reuse), tmp_path / f"{reuse}.trace"))
        ops = tr.op_arrays()
        rows = []
        for b in tr.iter_accesses():
            c = b.to_pydict()
            rows += [(int(ops["step"][o]),) + r[1:] for r in zip(*c.values()) for o in [r[0]]
                     if ops["phase"][o] == "decode"]
        t[reuse] = rows
    assert t[True] == t[False] and len(t[True]) > 0


def test_deterministic(tmp_path):
    run = RunConfig(turns=TURNS, batch=2, kv_offload=True, router="zipf:1.1", seed=3)
    a = open_trace(generate_trace(tiny("mixtral"), run, tmp_path / "a.trace", record_routing=True))
    b = open_trace(generate_trace(tiny("mixtral"), run, tmp_path / "b.trace", record_routing=True))
    assert a.tensors.equals(b.tensors) and a.ops.equals(b.ops)
    assert [x.to_pydict() for x in a.iter_accesses()] == [x.to_pydict() for x in b.iter_accesses()]
    ma, mb = dict(a.manifest), dict(b.manifest)
    assert ma == mb
    assert (tmp_path / "a.trace" / "routing.arrow").read_bytes() == (tmp_path / "b.trace" / "routing.arrow").read_bytes()


def test_recorded_routing_replays_a_conversation(tmp_path):
    """Every prefill routes a prefix of one stream, so the log holds each token once and replays."""
    spec = tiny("mixtral")
    run = RunConfig(turns=TURNS, batch=2, kv_reuse=False, router="zipf:1.3", seed=5)
    a = open_trace(generate_trace(spec, run, tmp_path / "a.trace", record_routing=True))
    again = RunConfig(turns=TURNS, batch=2, kv_reuse=False, router=f"table:{tmp_path / 'a.trace' / 'routing.arrow'}")
    b = open_trace(generate_trace(spec, again, tmp_path / "b.trace"))
    assert a.ops.equals(b.ops)


def test_segments_plan():
    segs = plan_segments(RunConfig(turns=((3, 1), (2, 2)), context=4, kv_offload=True))
    assert [(s.turn, s.action, s.phase, s.step, s.start, s.tokens) for s in segs] == [
        (0, "compute", "prefill", -1, 4, 3), (0, "compute", "decode", 0, 7, 1), (0, "offload", "prefill", -1, 0, 8),
        (1, "restore", "prefill", -1, 0, 8), (1, "compute", "prefill", -1, 8, 2),
        (1, "compute", "decode", 1, 10, 1), (1, "compute", "decode", 2, 11, 1)]
    segs = plan_segments(RunConfig(turns=((3, 1), (2, 2)), context=4, kv_reuse=False))
    assert [(s.phase, s.start, s.tokens) for s in segs if s.phase == "prefill"] == [("prefill", 4, 3), ("prefill", 4, 6)]


def test_turn_options():
    assert parse_turn_lengths("512:128, 256:0") == ((512, 128), (256, 0))
    assert conversation(3, 10, 2) == ((10, 2),) * 3
    assert conversation(None, None, None, "4:1,2:2") == ((4, 1), (2, 2))
    assert conversation(2, None, None, "4:1,2:2") == ((4, 1), (2, 2))
    assert conversation() == ()
    assert RunConfig(turns=[[4, 1], [2, 2]]).max_positions == 9
    assert RunConfig(turns="4:1,2:2", context=3).max_positions == 12


@pytest.mark.parametrize("kw,field", [
    (dict(turns=((0, 1),)), "turns"),
    (dict(turns=((3, -1),)), "turns"),
    (dict(turns=((3, 1.5),)), "turns"),
    (dict(turns=((3,),)), "turns"),
    (dict(turns=((3, 1),), prompt=4), "turns"),
    (dict(turns=((3, 1),), generate=4), "turns"),
    (dict(turns=((3, 1),), kv_reuse=False, kv_offload=True), "kv_offload"),
    (dict(prompt=3, kv_offload=True), "kv_offload"),
    (dict(prompt=3, kv_reuse=False), "kv_reuse"),
    (dict(turns=((3, 1),), kv_reuse="yes"), "kv_reuse"),
    (dict(turns="3:1,x"), "turn_lengths"),
])
def test_bad_runs(kw, field):
    with pytest.raises(UsageError) as e:
        RunConfig(**kw)
    assert e.value.field == field


@pytest.mark.parametrize("args,field", [
    ((3, None, 2, None), "turn_prompt"),
    ((3, 2, None, None), "turn_answer"),
    ((0, 2, 1, None), "turns"),
    ((None, 2, 1, None), "turns"),
    ((3, None, None, "1:1"), "turns"),
    ((None, 2, None, "1:1"), "turn_lengths"),
])
def test_bad_conversation_options(args, field):
    with pytest.raises(UsageError) as e:
        conversation(*args)
    assert e.value.field == field


def test_too_long_for_the_model(tmp_path):
    spec = tiny()
    n = spec.max_position_embeddings
    with pytest.raises(UsageError, match="max_position_embeddings"):
        generate_trace(spec, RunConfig(turns=((n // 2, 1), (n // 2, 0))), tmp_path / "x.trace")
    assert not (tmp_path / "x.trace").exists()
