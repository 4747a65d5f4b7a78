"""Sharding of the families of issue 14 (gpt-oss, Gemma 2/3, Qwen2-MoE, OLMoE, GPT-2, OPT, Falcon):
weight conservation, Megatron's biases (column-parallel split, row-parallel added once), sinks and
ring KV split with the heads, the collectives of a TP decode step, EP's all-to-all bytes, FLOPs
against the one-device trace; the state-space families keep the one-line refusal."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tierlab.common.errors import UsageError
from test_capacity_families import QWEN3_NEXT_TINY
from test_families import GPT_OSS_TINY, SMALL, shrunk
from test_shard import _digest, accesses, trace
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.workload.shard import ShardPlan
from tierlab.traces.model.spec import spec_from_config

FAMILIES = {
    "gpt-oss-20b": GPT_OSS_TINY,
    "gemma-2-9b": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                       num_hidden_layers=4, vocab_size=128, sliding_window=8),
    "gemma-3-4b": dict(SMALL["gemma-3-4b"], vocab_size=128),
    "qwen1.5-moe-a2.7b": dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=16,
                              shared_expert_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                              num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=2, vocab_size=128),
    "olmoe-1b-7b": dict(hidden_size=64, intermediate_size=32, num_attention_heads=4, num_key_value_heads=4,
                        num_hidden_layers=2, num_experts=8, num_experts_per_tok=2, vocab_size=128),
    "gpt2": dict(SMALL["gpt2"], vocab_size=128),
    "opt-125m": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, ffn_dim=96, vocab_size=128,
                     word_embed_proj_dim=64, max_position_embeddings=64),
    "falcon-7b": dict(SMALL["falcon-7b"], vocab_size=128),
    "falcon-40b-style": None,     # new_decoder_architecture: two LayerNorms in parallel, 2 KV heads
    "jamba-v0.1": SMALL["jamba-v0.1"],
    "mamba-codestral-7b": SMALL["mamba-codestral-7b"],
    "qwen3-next-80b-a3b": QWEN3_NEXT_TINY,
}
MOE = ("gpt-oss-20b", "qwen1.5-moe-a2.7b", "olmoe-1b-7b", "jamba-v0.1", "qwen3-next-80b-a3b")
STATE = ("jamba-v0.1", "mamba-codestral-7b", "qwen3-next-80b-a3b")


def tiny(name):
    if name == "falcon-40b-style":
        cfg = shrunk("falcon-7b", **dict(SMALL["falcon-7b"], vocab_size=128, new_decoder_architecture=True,
                                         num_kv_heads=2, num_ln_in_parallel_attn=2))
        return spec_from_config(cfg, name="tiny-falcon-40b-style")
    return spec_from_config(shrunk(name, **FAMILIES[name]), name=f"tiny-{name}")


def plans(name):
    out = [dict(tp=2), dict(tp=2, pp=2, dp=2), dict(tp=4) if name not in STATE else dict(tp=2, pp=2, pp_microbatches=2,
                                                                                         batch=4)]
    return out + ([dict(tp=2, ep=2), dict(ep=4, dp=4)] if name in MOE else [])


CASES = [(n, kw) for n in FAMILIES for kw in plans(n)]


def _id(case):
    return f"{case[0]}-" + "-".join(f"{k}{v}" for k, v in case[1].items())


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_weight_bytes_add_up_to_the_model(tmp_path, case):
    name, kw = case
    spec, run, t = trace(tmp_path, tiny(name), generate=1, context=8, **{"batch": 2, **kw})
    plan = ShardPlan(spec, run)
    tens = t.tensor_arrays()
    unique = sum(int(n) / plan.copies(str(nm), int(e)) for nm, kind, n, e in
                 zip(tens["name"], tens["kind"], tens["nbytes"], tens["expert"]) if kind == "weight")
    assert unique == 2 * spec.param_count()
    assert t.n_devices == run.dp * run.pp * run.tp


def _sizes(t):
    tens = t.tensor_arrays()
    return {(str(n), int(d)): int(b) for n, d, b in zip(tens["name"], t.tensor_device, tens["nbytes"])}


def test_biases_norms_and_positions_by_hand(tmp_path):
    """GPT-2 at tp 2: q/k/v and up biases split with their columns, o_proj and down_proj biases on
    rank 0 only (added once), LayerNorm gains and biases replicated, the position table on rank 0."""
    spec, _, t = trace(tmp_path, tiny("gpt2"), generate=1, context=4, tp=2)
    size, h = _sizes(t), 64
    A, M = "layers.0.self_attn.", "layers.0.mlp."
    for d in (0, 1):
        assert size[(A + "q_proj.bias", d)] == size[(A + "v_proj.bias", d)] == h // 2 * 2
        assert size[(M + "up_proj.bias", d)] == 4 * h // 2 * 2
        assert size[("layers.0.input_layernorm.bias", d)] == size[("layers.0.input_layernorm", d)] == h * 2
    for bias in (A + "o_proj.bias", M + "down_proj.bias", "embed_positions"):
        assert (bias, 0) in size and (bias, 1) not in size
    assert size[("embed_positions", 0)] == (64 + 0) * h * 2          # n_positions rows


def test_sinks_and_expert_biases_by_hand(tmp_path):
    """gpt-oss at tp 2 (experts TP-split): sinks split with the heads, experts' gate/up biases split,
    their down bias on rank 0; at ep 2 the experts are whole with all their biases."""
    spec, _, t = trace(tmp_path, tiny("gpt-oss-20b"), generate=1, context=4, tp=2)
    size = _sizes(t)
    E = "layers.0.mlp.experts.3."
    for d in (0, 1):
        assert size[("layers.0.self_attn.sinks", d)] == 4 // 2 * 2
        assert size[(E + "gate_proj.bias", d)] == 32 // 2 * 2
        assert size[("layers.0.mlp.gate.bias", d)] == 8 * 2                    # router: replicated
    assert (E + "down_proj.bias", 0) in size and (E + "down_proj.bias", 1) not in size
    _, _, t = trace(tmp_path, tiny("gpt-oss-20b"), name="ep", generate=1, context=4, ep=2, dp=2)
    size = _sizes(t)
    assert size[(E + "down_proj.bias", 0)] == 64 * 2 and size[(E + "gate_proj.bias", 0)] == 32 * 2
    assert (E + "down_proj.bias", 1) not in size                               # expert 3 lives on rank 0


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_tp_decode_step_collectives(tmp_path, name):
    """2 all-reduces per layer of batch x hidden x 2 bytes (Mamba-2, a mixer alone: 1), one for the
    embedding, one all-gather of the logits; a Mamba layer (Jamba) also all-reduces its row-parallel
    x_proj's output (batch x (dt_rank + 2 state) x 2); each right after the op producing its buffer."""
    B = 3
    spec, run, t = trace(tmp_path, tiny(name), generate=1, context=6, batch=B, tp=2)
    h, V = spec.hidden_size, spec.vocab_size
    dec = [r for r in t.collectives.to_pylist() if r["step"] == 0]
    kinds = Counter((r["kind"], r["size_bytes"]) for r in dec)
    per_layer = 1 if spec.norm_layout == "mixer" else 2
    want = {("all_reduce", B * h * 2): per_layer * spec.num_layers + 1, ("all_gather", B * V * 2): 1}
    mamba1 = sum(1 for i in range(spec.num_layers) if spec.keeps_state(i) and spec.ssm_version == 1)
    if mamba1:
        want[("all_reduce", B * (spec.ssm_dt_rank + 2 * spec.ssm_state) * 2)] = mamba1
    assert kinds == want
    ops = t.op_arrays()
    before = {"self_attn.all_reduce": ("o_proj",), "mixer.all_reduce": ("out_proj",),
              "mamba.x_proj.all_reduce": ("x_proj",), "mlp.all_reduce": ("mlp.down_proj", "mlp.combine")}
    for d in (0, 1):
        names = [str(n) for n, dv in zip(ops["name"], t.op_device) if dv == d]
        for i, n in enumerate(names):
            if n in before:
                assert names[i - 1] in before[n], (n, names[i - 1])


@pytest.mark.parametrize("name", STATE)
def test_state_split_by_heads_and_microbatches_touch_their_own(tmp_path, name):
    """Each tp rank holds state_bytes / tp per sequence; with 2 microbatches each decode step still
    reads and writes every sequence's state once (each microbatch its own sequences)."""
    spec, run, t = trace(tmp_path, tiny(name), context=5, generate=1, batch=4, tp=2, pp=2, pp_microbatches=2)
    tens, a, ops = t.tensor_arrays(), accesses(t), t.op_arrays()
    state = Counter()
    for d, k, n in zip(t.tensor_device, tens["kind"], tens["nbytes"]):
        if k == "state":
            state[int(d)] += int(n)
    assert sum(state.values()) == 4 * spec.state_bytes() and len(set(state.values())) <= 2
    is_state = tens["kind"][a["tensor_id"]] == "state"
    dec = ops["step"][a["op_id"]] == 0
    moved = (a["nbytes"] * a["count"])[is_state & dec]
    w = a["is_write"][is_state & dec]
    assert moved[w].sum() == moved[~w].sum() == 4 * spec.state_bytes()
    for tid in set(a["tensor_id"][is_state & dec].tolist()):   # microbatch 0 at 0, 1 at two sequences' state
        sel = is_state & dec & (a["tensor_id"] == tid)
        assert set(a["offset"][sel].tolist()) == {0, int(tens["nbytes"][tid]) // 2}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_all_ones_is_the_one_device_trace(tmp_path, name):
    spec = tiny(name)
    a = generate_trace(spec, RunConfig(prompt=5, generate=2, batch=2), tmp_path / "a.trace")
    b = generate_trace(spec, RunConfig(prompt=5, generate=2, batch=2, tp=1, pp=1, ep=1, dp=1, pp_microbatches=1),
                       tmp_path / "b.trace")
    assert _digest(a) == _digest(b)


def _flops(t, tp, spec, devices, kinds, ep=1):
    """FLOPs of ``devices`` by op kind; a KV projection replicated on tp / kv_heads ranks and the
    router and shared-expert gate (replicated on the tp ranks) counted once."""
    ops = t.op_arrays()
    out = Counter()
    moe_rep = tp if ep == 1 else 1    # with ep > 1 each rank routes only its share of the tokens
    rep = {"k_proj": max(1, tp // spec.num_kv_heads), "v_proj": max(1, tp // spec.num_kv_heads), "mlp.gate": moe_rep,
           "mlp.shared_expert_gate": moe_rep}
    kv_rep = rep["k_proj"]
    q = spec.num_heads // tp * spec.head_dim
    kv = max(1, spec.num_kv_heads // tp) * spec.head_dim
    for n, k, f, d in zip(ops["name"].astype(str), ops["kind"].astype(str), ops["flops"], t.op_device):
        if d in devices and k in kinds:
            if n == "qkv_proj" and kv_rep > 1:   # fused q, k, v (Falcon): only its k and v columns replicated
                assert not spec.qkv_bias and int(f) % (q + 2 * kv) == 0 and (2 * kv) % kv_rep == 0
                out[k] += int(f) // (q + 2 * kv) * (q + 2 * kv // kv_rep)
                continue
            assert int(f) % rep.get(n, 1) == 0
            out[k] += int(f) // rep.get(n, 1)
    return out


@pytest.mark.parametrize("case", [c for c in CASES if c[1].get("ep", 1) == 1 or c[1].get("dp", 1) == 1],
                         ids=[_id(c) for c in CASES if c[1].get("ep", 1) == 1 or c[1].get("dp", 1) == 1])
def test_linear_and_attention_flops_equal_the_one_device_trace(tmp_path, case):
    """Column-parallel biases split, row-parallel ones added once: the matmul and attention FLOPs of
    replica 0 are the one-device trace's (with ep > 1 and one replica, the EP group is the tp ranks:
    each routes and runs the shared experts on its share of the tokens, the experts on what it receives)."""
    name, kw = case
    spec = tiny(name)
    kw = {"batch": 2, **kw}
    _, _, one = trace(tmp_path, spec, name="one", prompt=5, generate=2, batch=kw["batch"])
    _, run, many = trace(tmp_path, spec, name="many", prompt=5, generate=2, **kw)
    kinds = ("linear", "attention", "ssm_conv", "ssm_scan")
    one_f = _flops(one, 1, spec, [0], kinds)
    many_f = _flops(many, run.tp, spec, list(range(run.pp * run.tp)), kinds, run.ep)
    assert many_f == one_f


@pytest.mark.parametrize("name", MOE)
def test_ep_all_to_all_bytes_are_the_routed_tokens(tmp_path, name):
    spec, run, t = trace(tmp_path, tiny(name), prompt=6, batch=2, ep=2, tp=2)
    h, k, m = spec.hidden_size, spec.num_experts_per_tok, 2 * 6
    a2a = [r for r in t.collectives.to_pylist() if r["kind"] == "all_to_all"]
    moe_layers = [i for i in range(spec.num_layers) if spec.is_moe(i)]
    assert [r["layer"] for r in a2a[0::2]] == moe_layers
    for disp, comb in zip(a2a[0::2], a2a[1::2]):
        send = np.array(disp["send_bytes"]).reshape(2, 2)
        assert send.sum() == m * k * h * 2                  # every routed (token, expert) row once
        assert (np.array(comb["send_bytes"]).reshape(2, 2) == send.T).all()


@pytest.mark.parametrize("name", ["gpt-oss-20b", "gemma-3-4b"])
def test_ring_kv_split_by_kv_heads(tmp_path, name):
    spec, run, t = trace(tmp_path, tiny(name), context=20, generate=1, batch=2, tp=2)
    tens = t.tensor_arrays()
    kv = Counter()
    for d, k, n in zip(t.tensor_device, tens["kind"], tens["nbytes"]):
        if k == "kv":
            kv[int(d)] += int(n)
    assert spec.kv_bytes(run.max_positions) < spec.kv_bytes_per_token() * run.max_positions   # the rings hold less
    assert dict(kv) == {0: spec.kv_bytes(run.max_positions) * 2 // 2, 1: spec.kv_bytes(run.max_positions) * 2 // 2}


def test_refusals_name_the_mixer_dimension():
    spec = tiny("mamba-codestral-7b")            # 8 heads in 2 groups
    with pytest.raises(UsageError, match="4 ranks do not divide the model's state-space groups") as e:
        ShardPlan(spec, RunConfig(generate=1, tp=4))
    assert e.value.field == "tp"
    from dataclasses import replace

    from tierlab.traces.workload.shard import check_shardable
    with pytest.raises(UsageError, match="lowered on one device only"):
        check_shardable(replace(spec, norm_layout="post"))


# issue 25's hand families, tiny, in their own keys (no preset ships them): weight bytes add up at tp 2,
# tp 2 x pp 2 x dp 2 and (MoE) ep 2 — LM-head biases (Phi-2, PhiMoE), per-head q/k LayerNorms with bias
# (StableLM, Phi-2), q/k norms over all heads (Cohere, MiniMax-M2), a shared expert without gate
# (GraniteMoeShared), MLA with dense / sparse layers (GLM-4.7-Flash)
_T = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
          vocab_size=128, max_position_embeddings=256)
NEW_FAMILIES = {
    "PhiForCausalLM": dict(_T, num_key_value_heads=4, qk_layernorm=True),
    "PhimoeForCausalLM": dict(_T, num_local_experts=4, num_experts_per_tok=2, attention_bias=True, lm_head_bias=True),
    "GPTNeoXForCausalLM": dict(_T),
    "StableLmForCausalLM": dict(_T, qk_layernorm=True, use_qkv_bias=True),
    "CohereForCausalLM": dict(_T, use_qk_norm=True),
    "Cohere2ForCausalLM": dict(_T, sliding_window=8, layer_types=["sliding_attention", "full_attention"]),
    "Starcoder2ForCausalLM": dict(_T, use_bias=True),
    "GraniteMoeSharedForCausalLM": dict(_T, num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=96),
    "MiniMaxM2ForCausalLM": dict(_T, num_local_experts=4, num_experts_per_tok=2, head_dim=16),
    "Glm4ForCausalLM": dict(_T, attention_bias=True, head_dim=16),
    "Glm4MoeLiteForCausalLM": dict(_T, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                                   moe_intermediate_size=32, kv_lora_rank=16, q_lora_rank=24, qk_nope_head_dim=8,
                                   qk_rope_head_dim=8, v_head_dim=8, mlp_layer_types=["dense", "sparse"]),
    "SmolLM3ForCausalLM": dict(_T, no_rope_layers=[1, 0]),
}
NEW_MOE = ("PhimoeForCausalLM", "GraniteMoeSharedForCausalLM", "MiniMaxM2ForCausalLM", "Glm4MoeLiteForCausalLM")
NEW_CASES = [(a, kw) for a in NEW_FAMILIES for kw in [dict(tp=2), dict(tp=2, pp=2, dp=2)]
             + ([dict(tp=2, ep=2)] if a in NEW_MOE else [])]


@pytest.mark.parametrize("case", NEW_CASES, ids=[_id(c) for c in NEW_CASES])
def test_new_families_weight_bytes_add_up(tmp_path, case):
    arch, kw = case
    spec = spec_from_config({"architectures": [arch], **NEW_FAMILIES[arch]}, name=f"tiny-{arch}")
    spec, run, t = trace(tmp_path, spec, generate=1, context=8, **{"batch": 2, **kw})
    plan = ShardPlan(spec, run)
    tens = t.tensor_arrays()
    unique = sum(int(n) / plan.copies(str(nm), int(e)) for nm, kind, n, e in
                 zip(tens["name"], tens["kind"], tens["nbytes"], tens["expert"]) if kind == "weight")
    assert unique == 2 * spec.param_count()
