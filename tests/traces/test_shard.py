"""Sharding in the lowering (tierlab.traces.workload.shard, tierlab.traces.lowering.sharded): TP, PP, EP and DP against arithmetic."""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlab.common.errors import UsageError
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.format.reader import open_trace
from tierlab.traces.workload.routing import Router
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.workload.shard import ShardPlan
from tierlab.traces.model.spec import load_model, spec_from_config

ROOT = Path(__file__).resolve().parents[2]
TINY = json.loads((ROOT / "tests" / "data" / "models" / "tiny-llama.json").read_text())


def trace(tmp_path, model, name="t", **kw):
    spec = load_model(model) if isinstance(model, str) else model
    run = RunConfig(**kw)
    return spec, run, open_trace(generate_trace(spec, run, tmp_path / f"{name}.trace"))


def accesses(t):
    out = []
    for b in t.iter_accesses():
        out.append({c: b.column(c).to_numpy(zero_copy_only=False) for c in b.schema.names})
    return {c: np.concatenate([x[c] for x in out]) for c in out[0]}


def weight_bytes_by_device(t):
    tens = t.tensor_arrays()
    out = Counter()
    for dev, kind, n in zip(t.tensor_device, tens["kind"], tens["nbytes"]):
        if kind == "weight":
            out[int(dev)] += int(n)
    return out


# ---- one device: --tp 1 ... writes the same bytes as no parallelism (version 3, version 1's tables)

def _digest(path: Path) -> dict:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(path.iterdir())}


def test_all_ones_writes_the_one_device_trace(tmp_path):
    spec = load_model("qwen2-0.5b")
    plain = generate_trace(spec, RunConfig(prompt=8, generate=2, batch=2), tmp_path / "a.trace")
    ones = generate_trace(spec, RunConfig(prompt=8, generate=2, batch=2, tp=1, pp=1, ep=1, dp=1, pp_microbatches=1,
                                          collective_buffers="in_place", pp_layers=None), tmp_path / "b.trace")
    assert _digest(plain) == _digest(ones)
    m = json.loads((plain / "manifest.json").read_text())
    assert m["version"] == 3 and m["devices"] == 1 and not {"tp", "pp", "ep", "dp", "pp_layers", "collective_buffers"} & set(m["run"])


# ---- weights: every device's bytes, replicated tensors counted once, add up to the model --------

@pytest.mark.parametrize("model, kw", [
    ("llama-3.1-8b", dict(tp=4, pp=2)),
    ("qwen2-0.5b", dict(tp=2, pp=3, dp=2)),                       # tied embeddings on the first and last stage
    (str(ROOT / "configs/variants/llama-3.1-8b-mqa.json"), dict(tp=4)),   # one KV head replicated on 4 ranks
    ("mixtral-8x7b", dict(tp=2, ep=4, dp=2, pp=2)),
    ("qwen3-30b-a3b", dict(tp=2, pp=2)),
])
def test_weight_bytes_add_up_to_the_model(tmp_path, model, kw):
    spec, run, t = trace(tmp_path, model, generate=1, context=8, batch=2, **kw)
    plan = ShardPlan(spec, run)
    tens = t.tensor_arrays()
    unique = sum(int(n) / plan.copies(name, int(e)) for name, kind, n, e in
                 zip(tens["name"], tens["kind"], tens["nbytes"], tens["expert"]) if kind == "weight")
    assert unique == 2 * spec.param_count()        # bf16, every tensor (vectors too) 2 bytes an element
    assert t.n_devices == run.dp * run.pp * run.tp


def test_tp_shards_by_hand(tmp_path):
    spec, run, t = trace(tmp_path, "llama-3.1-8b", generate=1, context=8, tp=4)
    tens = t.tensor_arrays()
    size = {(str(n), int(d)): int(b) for n, d, b in zip(tens["name"], t.tensor_device, tens["nbytes"])}
    for d in range(4):
        assert size[("layers.0.self_attn.q_proj", d)] == 32 // 4 * 128 * 4096 * 2
        assert size[("layers.0.self_attn.k_proj", d)] == 8 // 4 * 128 * 4096 * 2
        assert size[("layers.0.self_attn.o_proj", d)] == 4096 * 32 // 4 * 128 * 2
        assert size[("layers.0.mlp.down_proj", d)] == 4096 * 14336 // 4 * 2
        assert size[("layers.0.input_layernorm", d)] == 4096 * 2      # replicated
        assert size[("embed_tokens", d)] == 128256 // 4 * 4096 * 2


# ---- TP: the collectives of a decode step --------------------------------------------------------

def test_tp8_llama70b_decode_collectives(tmp_path):
    spec, run, t = trace(tmp_path, "llama-3.1-70b", generate=1, context=64, tp=8, batch=2)
    B, h, V = 2, spec.hidden_size, spec.vocab_size
    c = t.collectives.to_pylist()
    kinds = Counter((r["kind"], r["size_bytes"]) for r in c)
    assert kinds == {("all_reduce", B * h * 2): 2 * 80 + 1, ("all_gather", B * V * 2): 1}
    assert all(r["ranks"] == list(range(8)) for r in c)
    ops = t.op_arrays()
    coll = t.op_collective
    # one op per rank per collective, on that rank, touching only its own tensors
    per = Counter(int(x) for x in coll if x >= 0)
    assert set(per.values()) == {8} and len(per) == len(c)
    for cid in (0, len(c) - 1):
        assert sorted(int(d) for d, x in zip(t.op_device, coll) if x == cid) == list(range(8))
    a = accesses(t)
    assert np.all(t.tensor_device[a["tensor_id"]] == t.op_device[a["op_id"]])
    # the all-reduce after o_proj reads and writes B x h of act.attn_out
    first_ar = [i for i, (n, x) in enumerate(zip(ops["name"], coll)) if n == "self_attn.all_reduce"][0]
    sel = a["op_id"] == first_ar
    assert a["nbytes"][sel].tolist() == [B * h * 2, B * h * 2] and a["is_write"][sel].tolist() == [False, True]
    assert set(t.tensor_arrays()["name"][a["tensor_id"][sel]]) == {"act.attn_out"}
    # the all-reduce of a layer comes right after the op producing its buffer on each rank
    for d in range(8):
        names = [n for n, dv in zip(ops["name"], t.op_device) if dv == d]
        i = names.index("self_attn.all_reduce")
        assert names[i - 1] == "o_proj" and names[names.index("mlp.all_reduce") - 1] == "mlp.down_proj"
        assert names[:2] == ["embed_tokens", "embed_tokens.all_reduce"] and names[-1] == "lm_head.all_gather"


@pytest.mark.parametrize("model, tp", [("llama-3.1-8b", 1), ("llama-3.1-8b", 2), ("llama-3.1-8b", 8),
                                       (str(ROOT / "configs/variants/llama-3.1-8b-mqa.json"), 4)])
def test_kv_bytes_per_rank(tmp_path, model, tp):
    spec, run, t = trace(tmp_path, model, generate=1, context=32, batch=2, tp=tp)
    tens = t.tensor_arrays()
    kv = Counter()
    for d, k, n in zip(t.tensor_device, tens["kind"], tens["nbytes"]):
        if k == "kv":
            kv[int(d)] += int(n)
    model_kv = spec.kv_bytes_per_token("bf16") * run.max_positions * run.batch
    expect = model_kv // tp if spec.num_kv_heads >= tp else model_kv // spec.num_kv_heads
    assert dict(kv) == {d: expect for d in range(tp)}


# ---- PP -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pp, layers, mbs", [(4, (3, 7, 7, 7), 2), (5, None, 1), (2, None, 4)])
def test_pp_stages_and_send_recv(tmp_path, pp, layers, mbs):
    spec, run, t = trace(tmp_path, "qwen2-0.5b", prompt=6, generate=2, batch=4, pp=pp, pp_layers=layers,
                         pp_microbatches=mbs)
    expect = layers or {5: (4, 5, 5, 5, 5), 2: (12, 12)}[pp]
    tens = t.tensor_arrays()
    held = defaultdict(set)
    for d, layer, name in zip(t.tensor_device, tens["layer"], tens["name"]):
        held[int(d)].add(int(layer) if layer >= 0 else str(name))
    start = 0
    for s, n in enumerate(expect):
        layer_set = {x for x in held[s] if isinstance(x, int)}
        assert layer_set == set(range(start, start + n))
        start += n
        assert ("embed_tokens" in held[s]) == (s in (0, pp - 1))          # tied: the last stage holds it too
        assert ("norm" in held[s]) == (s == pp - 1)
    h, mb = spec.hidden_size, 4 // mbs
    c = t.collectives.to_pylist()
    sr = [r for r in c if r["kind"] == "send_recv"]
    per_step = Counter(r["step"] for r in sr)
    assert per_step == {-1: (pp - 1) * mbs, 0: (pp - 1) * mbs, 1: (pp - 1) * mbs}
    for r in sr:
        assert r["size_bytes"] == mb * (6 if r["step"] < 0 else 1) * h * 2
        assert r["ranks"][1] == r["ranks"][0] + 1
    # the send is the last op of its stage's microbatch, the recv the first of the next
    ops = t.op_arrays()
    for d in range(pp):
        names = [n for n, dv in zip(ops["name"], t.op_device) if dv == d]
        if d < pp - 1:
            assert names.count("pp.send") == 3 * mbs
            assert all(names[i + 1] in ("pp.recv", "embed_tokens") for i, n in enumerate(names[:-1]) if n == "pp.send")
        if d > 0:
            assert names[0] == "pp.recv" and names.count("pp.recv") == 3 * mbs
    # every microbatch's attention reads the KV rows of its own sequences
    assert sum(1 for n in ops["name"] if n == "attention") == 24 * 3 * mbs


# ---- EP -------------------------------------------------------------------------------------------

def _dispatch_matrices(t):
    return [r for r in t.collectives.to_pylist() if r["kind"] == "all_to_all"][0::2]


@pytest.mark.parametrize("router", ["uniform", "zipf:1.5"])
def test_ep_all_to_all_follows_the_router(tmp_path, router):
    spec, run, t = trace(tmp_path, "qwen3-30b-a3b", prompt=8, batch=4, ep=4, dp=2, tp=2, router=router)
    h, k, E, m = spec.hidden_size, spec.num_experts_per_tok, spec.num_experts, 4 * 8
    disp = _dispatch_matrices(t)
    assert len(disp) == spec.num_layers           # one dispatch per layer (one EP group of all 4 devices)
    for r in disp:
        i = r["layer"]
        send = np.array(r["send_bytes"]).reshape(4, 4)
        assert send.sum() == 2 * m * k * h * 2                     # both replicas' tokens, k experts each
        expect = np.zeros((4, 4), np.int64)
        for j, dev in enumerate(r["ranks"]):
            rep, tpr = divmod(dev, 2)
            routes = Router(run.router, run.seed + rep * (1 << 32), E, k).route(i, -1, m)
            mine = np.array_split(routes, 2)[tpr]
            expect[j] = np.bincount(mine.ravel() // (E // 4), minlength=4) * h * 2
        assert (send == expect).all()
    combine = [r for r in t.collectives.to_pylist() if r["kind"] == "all_to_all"][1::2]
    for a, b in zip(disp, combine):
        assert (np.array(b["send_bytes"]).reshape(4, 4) == np.array(a["send_bytes"]).reshape(4, 4).T).all()


def test_zipf_router_skews_the_all_to_all(tmp_path):
    def skew(router):
        _, _, t = trace(tmp_path, "mixtral-8x7b", name=router.replace(":", ""), prompt=16, batch=8, ep=4, dp=4,
                        router=router)
        recv = [np.array(r["send_bytes"]).reshape(4, 4).sum(axis=0) for r in _dispatch_matrices(t)]
        return np.mean([x.max() / x.mean() for x in recv])      # the busiest rank over the mean, per layer
    uniform, zipf = skew("uniform"), skew("zipf:1.5")
    assert uniform < 1.15 and zipf > 1.25          # seeded: 1.06 and 1.37


def test_ep_refusals():
    with pytest.raises(UsageError, match="dense") as e:
        ShardPlan(load_model("llama-3.1-8b"), RunConfig(generate=1, ep=2, dp=2))
    assert e.value.field == "ep"
    with pytest.raises(UsageError, match="divide tp x dp"):
        ShardPlan(load_model("mixtral-8x7b"), RunConfig(generate=1, ep=4, tp=2))
    with pytest.raises(UsageError, match="8 experts"):
        ShardPlan(load_model("mixtral-8x7b"), RunConfig(generate=1, ep=16, dp=16))


# ---- DP -------------------------------------------------------------------------------------------

def _device_ops(t, d):
    ops, tens, a = t.op_arrays(), t.tensor_arrays(), accesses(t)
    ids = np.flatnonzero(t.op_device == d)
    out = []
    for i in ids:
        sel = a["op_id"] == i
        acc = [(str(tens["name"][x]), int(o), int(n), int(c), int(s), bool(w)) for x, o, n, c, s, w in
               zip(a["tensor_id"][sel], a["offset"][sel], a["nbytes"][sel], a["count"][sel], a["stride"][sel],
                   a["is_write"][sel])]
        out.append((str(ops["name"][i]), int(ops["flops"][i]), int(ops["step"][i]), acc))
    return out


def test_dp_replica_zero_is_the_dp1_trace(tmp_path):
    _, _, one = trace(tmp_path, "qwen2-0.5b", name="one", prompt=4, generate=1, batch=2, tp=2)
    _, _, two = trace(tmp_path, "qwen2-0.5b", name="two", prompt=4, generate=1, batch=2, tp=2, dp=3)
    assert two.n_devices == 6
    for d in (0, 1):
        assert _device_ops(one, d) == _device_ops(two, d)
    r0, r1 = _device_ops(two, 0), _device_ops(two, 2)
    assert [x[:3] for x in r0] == [x[:3] for x in r1]            # same ops and FLOPs ...
    assert r0[0][3] != r1[0][3]                                   # ... other tokens (embedding rows)
    assert weight_bytes_by_device(two)[0] == weight_bytes_by_device(two)[4]


# ---- staged collective buffers -------------------------------------------------------------------

def test_staged_buffers_copy_through_one_staging_buffer(tmp_path):
    _, _, t = trace(tmp_path, "qwen2-0.5b", generate=1, batch=2, tp=2, collective_buffers="staged")
    ops, tens, a = t.op_arrays(), t.tensor_arrays(), accesses(t)
    coll = np.flatnonzero(t.op_collective >= 0)
    assert set(tens["name"][a["tensor_id"][np.isin(a["op_id"], coll)]]) == {"act.collective_stage"}
    names = list(ops["name"])
    for i in coll:
        assert names[i - 1].endswith(".stage_in") and names[i + 1].endswith(".stage_out")


# ---- conservation over random small models (hypothesis) -----------------------------------------

@st.composite
def _configs(draw):
    kv = draw(st.sampled_from([1, 2, 4]))
    heads = kv * draw(st.sampled_from([1, 2, 3]))
    tps = [t for t in (1, 2, 3, 4, 6) if heads % t == 0 and (kv % t == 0 if kv >= t else t % kv == 0)]
    tp = draw(st.sampled_from(tps))
    layers = draw(st.integers(1, 4))
    pp = draw(st.integers(1, layers))
    cfg = dict(TINY, num_attention_heads=heads, num_key_value_heads=kv, hidden_size=16 * heads,
               num_hidden_layers=layers, intermediate_size=96, vocab_size=384,
               tie_word_embeddings=draw(st.booleans()))
    run = dict(prompt=draw(st.integers(1, 5)), generate=draw(st.integers(0, 2)), context=draw(st.integers(0, 4)),
               batch=2, tp=tp, pp=pp, dp=draw(st.integers(1, 2)), pp_microbatches=draw(st.sampled_from([1, 2])))
    return cfg, run


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_configs())
def test_flops_conserved_and_accesses_on_the_op_device(tmp_path_factory, case):
    cfg, kw = case
    spec = spec_from_config(cfg, name="rand")
    tmp = tmp_path_factory.mktemp("h")
    _, _, one = trace(tmp, spec, name="one", **dict(kw, tp=1, pp=1, dp=1, pp_microbatches=1))
    _, run, many = trace(tmp, spec, name="many", **kw)

    def matmul_flops(t, devices):
        """Linear and attention FLOPs; a KV projection replicated on tp / kv_heads ranks counted once."""
        ops = t.op_arrays()
        keep = np.isin(ops["kind"].astype(str), ["linear", "attention"]) & np.isin(t.op_device, devices)
        copies = np.where(np.isin(ops["name"].astype(str), ["k_proj", "v_proj"]),
                          max(1, run.tp // spec.num_kv_heads) if t is many else 1, 1)
        return sum(int(f) // int(c) for f, c in zip(ops["flops"][keep], copies[keep]))
    replica0 = list(range(run.pp * run.tp))
    assert matmul_flops(many, replica0) == matmul_flops(one, [0])
    a = accesses(many)
    assert np.all(many.tensor_device[a["tensor_id"]] == many.op_device[a["op_id"]])
    assert many.n_devices == run.dp * run.pp * run.tp


# ---- tierlab info of a v2 trace ------------------------------------------------------------------

def test_info_json_devices_and_collectives(tmp_path):
    from click.testing import CliRunner

    from tierlab.cli import main

    out = tmp_path / "t.trace"
    r = CliRunner().invoke(main, ["trace", "qwen2-0.5b", "-o", str(out), "--generate", "1", "--tp", "2", "--pp", "2"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["info", str(out), "--json"])
    s = json.loads(r.stdout)
    assert {"tables", "params", "flops", "bytes", "steps", "devices", "collectives"} <= set(s)
    assert [d["device"] for d in s["devices"]] == [0, 1, 2, 3]
    assert s["collectives"]["send_recv"] == {"count": 2, "bytes": 2 * 896 * 2}
    assert s["collectives"]["all_reduce"]["count"] == 2 * 24 + 1      # 2 per layer, the embedding once
    assert s["collectives"]["all_gather"] == {"count": 1, "bytes": 151936 * 2}
    assert sum(d["flops"] for d in s["devices"]) == s["flops"]["total"]
    assert sum(sum(d["tensor_bytes"].values()) for d in s["devices"]) == \
        sum(int(n) for n in open_trace(out).tensor_arrays()["nbytes"])
    text = CliRunner().invoke(main, ["info", str(out)]).stdout
    rows = [ln.split() for ln in text.splitlines()]
    assert [r[0] for r in rows if r and r[0].isdigit() and len(r) == 7] == ["0", "1", "2", "3"]   # a row per device
    assert {r[0] for r in rows if r and r[0] in ("all_gather", "all_reduce", "send_recv")} == \
        {"all_gather", "all_reduce", "send_recv"}


def test_microbatches_read_their_own_kv_rows(tmp_path):
    spec, run, t = trace(tmp_path, "qwen2-0.5b", context=5, generate=1, batch=4, pp=2, pp_microbatches=2)
    ops, tens, a = t.op_arrays(), t.tensor_arrays(), accesses(t)
    k0 = int(np.flatnonzero((tens["name"] == "layers.0.kv.k") & (t.tensor_device == 0))[0])
    row = spec.num_kv_heads * spec.head_dim * 2
    stride = run.max_positions * row
    att = [i for i in np.flatnonzero((ops["name"] == "attention") & (ops["layer"] == 0))]
    assert len(att) == 2
    for k, i in enumerate(att):
        sel = (a["op_id"] == i) & (a["tensor_id"] == k0)
        assert a["offset"][sel].tolist() == [k * 2 * stride] and a["count"][sel].tolist() == [2]
        assert a["nbytes"][sel].tolist() == [6 * row]            # positions 0..5 of each of its 2 sequences
