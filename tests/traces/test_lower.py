"""Lowering a run into a trace: traced byte totals against closed-form model arithmetic written here.

Per decode step: every weight read once (embedding only at the processed tokens' rows, MoE layers
only the selected experts), KV bytes read = context so far, KV bytes written = one row per layer
per sequence; prefill weight re-reads follow the tile sizes; quantisation scales are counted.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tierlab.common.errors import TraceError, UsageError
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.format.reader import open_trace
from tierlab.traces.workload.routing import Router, write_routing_table
from tierlab.traces.workload.run import RouterSpec, RunConfig
from tierlab.traces.model.spec import load_model

DATA = Path(__file__).parents[1] / "data" / "models"


def tiny(name):
    return load_model(DATA / f"tiny-{name}.json")


def trace_of(tmp_path, spec, **run):
    return open_trace(generate_trace(spec, RunConfig(**run), tmp_path / "t.trace", force=True))


class Tally:
    """Bytes issued per (phase, step, tensor name, is_write), expanded from the trace independently."""

    def __init__(self, trace):
        ops = trace.op_arrays()
        tens = trace.tensor_arrays()
        self.names = list(tens["name"])
        self.kind = list(tens["kind"])
        self.nbytes = dict(zip(self.names, (int(n) for n in tens["nbytes"])))
        self.ops = ops
        self.bytes = defaultdict(int)
        for b in trace.iter_accesses():
            c = b.to_pydict()
            for op, t, nb, cnt, w in zip(c["op_id"], c["tensor_id"], c["nbytes"], c["count"], c["is_write"]):
                key = (ops["phase"][op], int(ops["step"][op]), self.names[t], bool(w))
                self.bytes[key] += nb * cnt

    def sum(self, phase, step, write=False, pred=lambda name, kind: True):
        return sum(v for (p, s, n, w), v in self.bytes.items()
                   if p == phase and s == step and w == write and pred(n, self.kind[self.names.index(n)]))

    def kind_bytes(self, phase, step, kind, write=False):
        kinds = dict(zip(self.names, self.kind))
        return sum(v for (p, s, n, w), v in self.bytes.items()
                   if p == phase and s == step and w == write and kinds[n] == kind)


def dense_weight_bytes(cfg_h, cfg_v, total_bytes, batch, tied, wb=2):
    """Weights read by one decode step of a dense model (closed form)."""
    embed = cfg_v * cfg_h * wb
    return total_bytes + batch * cfg_h * wb if tied else total_bytes - embed + batch * cfg_h * wb


@pytest.mark.parametrize("name", ["llama", "mistral", "qwen2", "chatglm", "mixtral", "qwen3-moe", "deepseek-v3"])
def test_weight_tensors_sum_to_param_count(tmp_path, name):
    spec = tiny(name)
    t = trace_of(tmp_path, spec, context=3, generate=1)
    tens = t.tensor_arrays()
    w = [int(n) for n, k in zip(tens["nbytes"], tens["kind"]) if k == "weight"]
    assert sum(w) == 2 * spec.param_count()
    assert t.manifest["spec"]["params"] == spec.param_count()


def test_llama_8b_decode_step_weight_bytes(tmp_path):
    spec = load_model("llama-3.1-8b")
    t = trace_of(tmp_path, spec, context=16, generate=2, batch=1)
    tally = Tally(t)
    expected = 2 * 8_030_261_248 - 2 * 128256 * 4096 + 2 * 4096
    for step in (0, 1):
        assert tally.kind_bytes("decode", step, "weight") == expected
        assert tally.kind_bytes("decode", step, "weight", write=True) == 0


@pytest.mark.parametrize("name,tied", [("llama", False), ("mistral", False), ("qwen2", True), ("chatglm", False)])
def test_dense_decode_step_weight_bytes(tmp_path, name, tied):
    spec = tiny(name)
    batch = 3
    t = trace_of(tmp_path, spec, context=5, generate=3, batch=batch)
    tally = Tally(t)
    total = 2 * spec.param_count()
    for step in range(3):
        assert tally.kind_bytes("decode", step, "weight") == dense_weight_bytes(
            spec.hidden_size, spec.vocab_size, total, batch, tied)


@pytest.mark.parametrize("name,kv,row_per_layer", [
    ("llama", "bf16", 2 * 2 * 16 * 2),          # K and V, 2 kv heads x head_dim 16, 2 bytes
    ("chatglm", "bf16", 2 * 1 * 16 * 2),        # MQA, one group, kv_channels 16
    ("qwen3-moe", "fp8", 2 * 2 * 32 * 1),       # explicit head_dim 32
    ("deepseek-v3", "bf16", (32 + 8) * 2),      # MLA latent 32 + rope 8
])
def test_kv_bytes_per_step_as_context_grows(tmp_path, name, kv, row_per_layer):
    spec = tiny(name)
    batch, context, steps = 2, 7, 4
    t = trace_of(tmp_path, spec, context=context, generate=steps, batch=batch, kv=kv)
    tally = Tally(t)
    layers = spec.num_layers
    for s in range(steps):
        positions = context + s + 1          # the new token's K/V is appended, then attended to
        assert tally.kind_bytes("decode", s, "kv") == batch * layers * positions * row_per_layer
        assert tally.kind_bytes("decode", s, "kv", write=True) == batch * layers * row_per_layer
    assert spec.kv_bytes_per_token(kv) == layers * row_per_layer


def test_sliding_window_reads_only_the_window(tmp_path):
    spec = tiny("mistral")                  # window 16, 1 kv head of 16
    row = 2 * 16 * 2
    batch, context, steps = 2, 10, 12
    t = trace_of(tmp_path, spec, context=context, generate=steps, batch=batch)
    tally = Tally(t)
    for s in range(steps):
        positions = min(context + s + 1, 16)
        assert tally.kind_bytes("decode", s, "kv") == batch * spec.num_layers * positions * row


def test_prefill_kv_written_once_and_window_respected(tmp_path):
    spec = tiny("mistral")
    t = trace_of(tmp_path, spec, prompt=40, batch=2, attn_tile=8)
    tally = Tally(t)
    row = 2 * 16 * 2
    assert tally.kind_bytes("prefill", -1, "kv", write=True) == 2 * spec.num_layers * 40 * row
    # flash tiles of 8 queries: the tile starting at q0 needs keys [max(0, q0-15), q0+8); the cache is
    # a ring of 16 rows (the window), so a tile reads at most those 16
    reads = sum(min(16, min(q0 + 8, 40) - max(0, q0 - 15)) for q0 in range(0, 40, 8))
    assert tally.kind_bytes("prefill", -1, "kv") == 2 * spec.num_layers * reads * row


def _routes_table(tmp_path, spec, steps, batch, seed=3):
    """A routing log chosen here: returns its path and {(step, layer): set of experts}."""
    rng = np.random.default_rng(seed)
    rows, chosen = [], {}
    for s in range(steps):
        for layer in range(spec.num_layers):
            if not spec.is_moe(layer):
                continue
            sel = set()
            for tok in range(batch):
                ex = rng.choice(spec.num_experts, spec.num_experts_per_tok, replace=False)
                sel |= set(int(e) for e in ex)
                rows += [(s, layer, tok, int(e)) for e in ex]
            chosen[(s, layer)] = sel
    cols = list(zip(*rows))
    path = tmp_path / "routes.arrow"
    write_routing_table(str(path), *cols)
    return path, chosen


@pytest.mark.parametrize("name", ["mixtral", "qwen3-moe", "deepseek-v3"])
def test_moe_decode_reads_exactly_the_routed_experts(tmp_path, name):
    spec = tiny(name)
    batch, steps = 3, 3
    path, chosen = _routes_table(tmp_path, spec, steps, batch)
    t = trace_of(tmp_path, spec, context=4, generate=steps, batch=batch, router=f"table:{path}")
    tally = Tally(t)
    h, f = spec.hidden_size, spec.moe_intermediate_size
    expert_bytes = 3 * h * f * 2
    all_weight = 2 * spec.param_count()
    every_expert = sum(expert_bytes * spec.num_experts for i in range(spec.num_layers) if spec.is_moe(i))
    ops = t.op_arrays()
    for s in range(steps):
        selected = sum(len(chosen[(s, i)]) for i in range(spec.num_layers) if spec.is_moe(i))
        is_expert = lambda n, k: ".experts." in n                       # noqa: E731
        assert tally.sum("decode", s, pred=is_expert) == selected * expert_bytes
        expected = all_weight - every_expert - spec.vocab_size * h * 2 + batch * h * 2 + selected * expert_bytes
        assert tally.kind_bytes("decode", s, "weight") == expected
        for i in range(spec.num_layers):
            sel = (ops["phase"] == "decode") & (ops["step"] == s) & (ops["layer"] == i) & (ops["expert"] >= 0)
            got = sorted(int(e) for e in ops["expert"][sel])
            assert got == sorted(chosen.get((s, i), set()))
            assert int(ops["tokens"][sel].sum()) == (batch * spec.num_experts_per_tok if spec.is_moe(i) else 0)


def test_deepseek_dense_first_layers_and_shared_experts(tmp_path):
    spec = tiny("deepseek-v3")
    t = trace_of(tmp_path, spec, context=2, generate=2, batch=2)
    tally = Tally(t)
    for s in range(2):
        assert tally.sum("decode", s, pred=lambda n, k: n.startswith("layers.0.mlp.gate_proj")) == 64 * 144 * 2
        for layer in (1, 2):
            shared = lambda n, k, p=f"layers.{layer}.mlp.shared_experts.": n.startswith(p)   # noqa: E731
            assert tally.sum("decode", s, pred=shared) == 3 * 64 * 32 * 2
    ops = t.op_arrays()
    assert not np.any((ops["layer"] == 0) & (ops["expert"] >= 0))


@pytest.mark.parametrize("wd,bits", [("int4", 4), ("int8", 8)])
def test_quantised_weight_sizes_include_scales(tmp_path, wd, bits):
    spec = tiny("llama")
    g = 32
    t = trace_of(tmp_path, spec, context=2, generate=1, batch=2, weights=wd, quant_group=g)
    h, kv, f, V, L = 64, 32, 128, 256, 2
    mats = [(h, h), (kv, h), (kv, h), (h, h), (f, h), (f, h), (h, f)]      # (out, in) per layer
    quant = lambda r, c: r * c * bits // 8 + r * -(-c // g) * 2           # noqa: E731  values + fp16 scales
    layer = sum(quant(r, c) for r, c in mats) + 2 * h * 2                  # norms stay bf16
    total = L * layer + 2 * quant(V, h) + h * 2
    tens = t.tensor_arrays()
    w = {n: int(b) for n, b, k in zip(tens["name"], tens["nbytes"], tens["kind"]) if k == "weight"}
    assert sum(w.values()) == total
    assert w["layers.0.mlp.down_proj.scales"] == h * (f // g) * 2
    tally = Tally(t)
    embed_rows = 2 * (h * bits // 8 + (h // g) * 2)
    assert tally.kind_bytes("decode", 0, "weight") == total - quant(V, h) + embed_rows


@pytest.mark.parametrize("tile_m", [16, 64, 300, 1000])
def test_prefill_weight_rereads_follow_tile_m(tmp_path, tile_m):
    spec = tiny("llama")
    batch, prompt = 3, 100
    m = batch * prompt
    t = trace_of(tmp_path, spec, prompt=prompt, batch=batch, tile_m=tile_m)
    tally = Tally(t)
    reads = -(-m // tile_m)
    for n in ("layers.0.self_attn.q_proj", "layers.1.mlp.down_proj", "layers.1.self_attn.k_proj"):
        assert tally.sum("prefill", -1, pred=lambda name, k, n=n: name == n) == reads * tally.nbytes[n]
    # the LM head runs on the last token of each sequence only: one tile, one read
    assert tally.sum("prefill", -1, pred=lambda name, k: name == "lm_head") == tally.nbytes["lm_head"]
    assert tally.sum("prefill", -1, pred=lambda name, k: name == "embed_tokens") == m * 64 * 2


def test_decode_flops_closed_form(tmp_path):
    spec = tiny("llama")
    batch, context = 2, 9
    t = trace_of(tmp_path, spec, context=context, generate=2, batch=batch)
    ops = t.op_arrays()
    h, kv, f, V, nh, hd = 64, 32, 128, 256, 4, 16
    linear = 2 * batch * (2 * (h * h + 2 * kv * h + h * h + 3 * h * f) + V * h)
    for s in range(2):
        sel = (ops["step"] == s) & (ops["phase"] == "decode")
        assert int(ops["flops"][sel & (ops["kind"] == "linear")].sum()) == linear
        pairs = batch * (context + s + 1)
        assert int(ops["flops"][sel & (ops["kind"] == "attention")].sum()) == 2 * 2 * pairs * nh * 2 * hd


def test_pim_eligible_marks_decode_gemv_and_attention(tmp_path):
    t = trace_of(tmp_path, tiny("qwen3-moe"), prompt=4, generate=2, batch=2)
    ops = t.op_arrays()
    dec = ops["phase"] == "decode"
    want = dec & np.isin(ops["kind"], ["linear", "attention"])
    assert np.array_equal(ops["pim_eligible"], want)
    assert want.any()


def test_naive_and_flash_read_the_same_kv_in_decode(tmp_path):
    spec = tiny("llama")
    a = Tally(trace_of(tmp_path, spec, context=6, generate=2, batch=2, attention="flash"))
    b = Tally(trace_of(tmp_path, spec, context=6, generate=2, batch=2, attention="naive"))
    for s in range(2):
        assert a.kind_bytes("decode", s, "kv") == b.kind_bytes("decode", s, "kv")
        assert b.sum("decode", s, write=True, pred=lambda n, k: n == "act.scores") == 2 * 2 * 2 * 4 * (6 + s + 1) * 2   # layers x (scores + softmax) x batch x heads x keys x bf16


def test_deterministic_and_seeded(tmp_path):
    spec = tiny("mixtral")

    def experts(seed, d):
        t = open_trace(generate_trace(spec, RunConfig(context=3, generate=4, batch=4, seed=seed), tmp_path / d))
        return t.ops.column("expert").to_pylist()

    a, b, c = experts(1, "a"), experts(1, "b"), experts(2, "c")
    assert a == b
    assert a != c


def test_zipf_router_is_skewed_uniform_is_not():
    n = 20000
    uni = Router(RouterSpec.parse("uniform"), 0, 8, 2).route(0, 0, n)
    zipf = Router(RouterSpec.parse("zipf:1.5"), 0, 8, 2).route(0, 0, n)
    for r in (uni, zipf):
        assert r.shape == (n, 2) and np.all(r[:, 0] != r[:, 1])
    fu = np.bincount(uni.ravel(), minlength=8) / n
    fz = np.bincount(zipf.ravel(), minlength=8) / n
    assert np.all(np.abs(fu - 0.25) < 0.02)
    assert fz.max() > 0.5 and fz.min() < 0.1


def test_routing_table_errors(tmp_path):
    spec = tiny("mixtral")
    p = tmp_path / "r.arrow"
    write_routing_table(str(p), [0, 0], [0, 0], [0, 0], [1, 2])      # layer 1 missing
    with pytest.raises(TraceError, match="no rows for step 0, layer 1"):
        generate_trace(spec, RunConfig(context=1, generate=1, router=f"table:{p}"), tmp_path / "x.trace")
    assert not (tmp_path / "x.trace").exists()
    write_routing_table(str(p), [0, 0, 0], [0, 0, 0], [0, 0, 0], [1, 2, 3])
    with pytest.raises(TraceError, match="3 experts, expected 2"):
        Router(RouterSpec.parse(f"table:{p}"), 0, 4, 2).route(0, 0, 1)


def test_run_validation():
    with pytest.raises(UsageError, match="negative"):
        RunConfig(prompt=-1, generate=1)
    with pytest.raises(UsageError, match="int3"):
        RunConfig(generate=1, weights="int3")
    with pytest.raises(UsageError, match="nothing to trace"):
        RunConfig()
    with pytest.raises(UsageError, match="zipf"):
        RunConfig(generate=1, router="zipf:-1")
    with pytest.raises(UsageError, match="power of two"):
        RunConfig(generate=1, alignment=3000)


def test_context_longer_than_the_model_is_refused(tmp_path):
    with pytest.raises(UsageError, match="max_position_embeddings"):
        generate_trace(tiny("llama"), RunConfig(context=4090, generate=10), tmp_path / "x.trace")


def test_interrupted_generation_leaves_no_trace(tmp_path):
    def boom(done, total):
        if done == 2:
            raise KeyboardInterrupt

    out = tmp_path / "x.trace"
    with pytest.raises(KeyboardInterrupt):
        generate_trace(tiny("llama"), RunConfig(context=1, generate=5), out, progress=boom)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("align", [4096, 1 << 21])
def test_addresses_aligned(tmp_path, align):
    t = trace_of(tmp_path, tiny("llama"), context=1, generate=1, alignment=align)
    addr = t.tensors.column("address").to_numpy()
    assert np.all(addr % align == 0) and t.manifest["run"]["alignment"] == align == t.alignment


def test_recorded_routing_replays_to_the_same_trace(tmp_path):
    spec = tiny("qwen3-moe")
    run = dict(prompt=5, generate=3, batch=2, router="zipf:1.2", seed=4)
    a = open_trace(generate_trace(spec, RunConfig(**run), tmp_path / "a.trace", record_routing=True))
    log = tmp_path / "a.trace" / "routing.arrow"
    assert a.manifest["extra_tables"]["routing"]["file"] == "routing.arrow"
    # the log holds k experts for every token of every MoE layer of every segment
    moe_layers = sum(spec.is_moe(i) for i in range(spec.num_layers))
    assert a.manifest["extra_tables"]["routing"]["rows"] == moe_layers * 2 * (5 + 3) * 2
    b = open_trace(generate_trace(spec, RunConfig(**{**run, "router": f"table:{log}"}), tmp_path / "b.trace"))
    c = open_trace(generate_trace(spec, RunConfig(**{**run, "router": "uniform"}), tmp_path / "c.trace"))
    assert not a.ops.equals(c.ops)          # the seed alone does not fix the experts; the log does
    assert a.ops.equals(b.ops)
    assert pa.Table.from_batches(list(a.iter_accesses())).equals(pa.Table.from_batches(list(b.iter_accesses())))


def test_index_keys_go_with_the_kv(tmp_path):
    """DeepSeek-V3.2's index keys (kind kv_index) are offloaded and restored between turns beside the KV, a
    kv_offload twin per layer, and each pipeline microbatch reads and writes its own sequences' index rows."""
    from test_capacity_families import SPARSE_AND_KDA
    from tierlab.traces.model.spec import spec_from_config

    spec = spec_from_config(SPARSE_AND_KDA["deepseek_v32"])
    tr = open_trace(generate_trace(spec, RunConfig(turns=((3, 2), (2, 2)), kv_offload=True, batch=2),
                                   tmp_path / "t.trace"))
    names, kinds = tr.tensor_arrays()["name"], tr.tensor_arrays()["kind"]
    twins = {n: k for n, k in zip(names, kinds) if ".kv_offload.index" in n}
    assert twins == {"layers.0.kv_offload.index": "kv_offload", "layers.1.kv_offload.index": "kv_offload"}
    ops, acc = tr.op_arrays(), tr.access_columns()
    offload = set(ops["op_id"][ops["name"] == "kv_offload"].tolist())
    touched = {names[t] for o, t in zip(acc["op_id"], acc["tensor_id"]) if int(o) in offload}
    assert {"layers.0.kv.index", "layers.0.kv_offload.index"} <= touched
    tr = open_trace(generate_trace(spec, RunConfig(prompt=3, generate=1, batch=2, pp=2, pp_microbatches=2),
                                   tmp_path / "p.trace"))
    t = tr.tensor_arrays()
    acc = tr.access_columns()
    row = spec.index_row_bytes()
    positions = 4
    for tid in [i for i, n in enumerate(t["name"]) if n.endswith("kv.index")]:
        writes = {int(o) for o, w, x in zip(acc["offset"], acc["is_write"], acc["tensor_id"]) if w and x == tid}
        # each microbatch (one sequence) writes its prompt at 0 / one sequence further, then its decode row
        assert writes == {0, positions * row, 3 * row, positions * row + 3 * row}
