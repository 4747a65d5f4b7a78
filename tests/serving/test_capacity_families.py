"""Capacity of the windowed, chunked and state-space families: the longest context equals a
brute-force search over positions with the closed form (KV kept by a ring of window rows, plus
the fixed state), and a real trace of that run holds exactly what capacity says, one position more
does not fit."""

from __future__ import annotations

from collections import Counter

import pytest
from click.testing import CliRunner

from tierlab.analysis.capacity import Budget, activation_bytes, activation_tensor_bytes, capacity, weight_bytes
from test_capacity import tensor_sizes, trace_of
from test_families import GPT_OSS_TINY, SMALL, shrunk
from tierlab.traces.model.spec import load_model, spec_from_config

QWEN3_NEXT_TINY = dict(hidden_size=64, intermediate_size=64, moe_intermediate_size=16,
                       shared_expert_intermediate_size=16, num_experts=8, num_experts_per_tok=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                       linear_key_head_dim=8, linear_value_head_dim=8, num_hidden_layers=4, vocab_size=100)
LLAMA4_TINY = dict(hidden_size=64, intermediate_size=32, intermediate_size_mlp=64, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, num_hidden_layers=4, num_local_experts=4, vocab_size=128,
                   attention_chunk_size=8, no_rope_layers=[1, 1, 1, 0])
GEMMA2_TINY = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   num_hidden_layers=4, vocab_size=100, sliding_window=8)
MISTRAL_TINY = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                    num_hidden_layers=2, vocab_size=100, sliding_window=8)
CONFIGS = {"gpt-oss-20b": GPT_OSS_TINY, "gemma-3-4b": SMALL["gemma-3-4b"], "gemma-2-9b": GEMMA2_TINY,
           "llama-4-scout-17b-16e": LLAMA4_TINY, "jamba-v0.1": SMALL["jamba-v0.1"],
           "qwen3-next-80b-a3b": QWEN3_NEXT_TINY, "mamba-codestral-7b": SMALL["mamba-codestral-7b"],
           "mistral-7b": MISTRAL_TINY, "falcon-7b": SMALL["falcon-7b"], "gpt2": SMALL["gpt2"]}


def tiny(name):
    return spec_from_config(shrunk(name, **CONFIGS[name]), name=f"tiny-{name}")


def kept(spec, positions, kv="bf16"):
    """KV bytes of one sequence, layer by layer, written out here: full layers every position,
    sliding / chunked layers a ring of at most their span, recurrent layers none."""
    row = {"bf16": 2, "fp8": 1}[kv] * spec.kv_row_elements
    total = 0
    for i in range(spec.num_layers):
        kind, span = spec.layer_span(i)
        total += 0 if kind in ("mamba", "linear") else row * (positions if kind == "full" else min(positions, span))
    return total


def brute_context(spec, budget, batch, kv="bf16", limit=20000):
    """Largest P with weights + workspace + batch x (KV(P) + state) <= budget, by scanning P; None
    when the KV stops growing before ``limit`` and every P fits."""
    fixed = weight_bytes(spec) + activation_bytes(spec, batch) + batch * (spec.state_bytes(kv) if spec.ssm_inner else 0)
    best = 0
    for p in range(1, limit):
        if fixed + batch * kept(spec, p, kv) > budget:
            return best
        best = p
    return None


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("batch", [1, 3])
def test_activation_workspace_equals_the_traced_activations(tmp_path, name, batch):
    spec = tiny(name)
    tr = trace_of(tmp_path, spec, batch=batch, context=4, generate=1)
    assert Counter(activation_tensor_bytes(spec, batch)) == Counter(tensor_sizes(tr, "activation"))


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("room", [300, 5000, 70000])
def test_longest_context_equals_brute_force(name, batch, room):
    spec = tiny(name)
    state = spec.state_bytes("bf16") if spec.ssm_inner else 0
    budget = weight_bytes(spec) + activation_bytes(spec, batch) + batch * state + room
    brute = brute_context(spec, budget, batch)
    if brute == 0:
        with pytest.raises(Exception, match="less than one token"):
            capacity(spec, Budget.of_size(budget), batch=batch)
        return
    plan = capacity(spec, Budget.of_size(budget), batch=batch)
    assert plan.memory_context == brute
    d = plan.to_dict()
    br = d["breakdown"]
    assert br["weights_bytes"] + br["kv_bytes"] + br["state_bytes"] + br["activation_bytes"] + br["free_bytes"] == budget
    assert br["free_bytes"] >= 0 and br["kv_bytes"] == batch * kept(spec, plan.context)
    if brute is None:   # every layer windowed or recurrent: memory sets no limit, and the output says so
        assert d["memory_context"] == d["position_limit"] and d["memory_bounds_context"] is False
        assert d["usable_context"] == spec.max_position_embeddings and d["limited_by"] == "positions"


@pytest.mark.parametrize("name,batch,room", [("gpt-oss-20b", 2, 9000), ("gemma-3-4b", 1, 20000),
                                             ("jamba-v0.1", 2, 3000), ("qwen3-next-80b-a3b", 1, 4000),
                                             ("llama-4-scout-17b-16e", 1, 12000), ("gpt2", 1, 30000)])
def test_traced_run_at_the_answer_fits_and_one_more_position_does_not(tmp_path, name, batch, room):
    """A trace of the answer's positions (context P - 1 plus one decode step) declares weights, KV,
    state and activation tensors summing to at most the budget; at P + 1 they exceed it."""
    spec = tiny(name)
    state = spec.state_bytes("bf16") if spec.ssm_inner else 0
    budget = weight_bytes(spec) + activation_bytes(spec, batch) + batch * state + room
    P = capacity(spec, Budget.of_size(budget), batch=batch).memory_context
    assert P is not None and 2 <= P < spec.max_position_embeddings

    def held(positions, sub):
        (tmp_path / sub).mkdir()
        tr = trace_of(tmp_path / sub, spec, batch=batch, context=positions - 1, generate=1)
        sizes = {k: sum(tensor_sizes(tr, k)) for k in ("weight", "kv", "state", "activation")}
        assert sizes["state"] == batch * state and sizes["kv"] == batch * spec.kv_bytes(positions)
        return sum(sizes.values())

    assert held(P, "at") <= budget < held(P + 1, "past")


def test_windowed_models_past_the_window_against_every_position():
    """Mistral-7B's ring of 4096 rows: past 4096 tokens the KV stops growing, so memory sets no
    limit in 24 GB; gpt-oss-20b: past 128 tokens only its 12 full layers grow."""
    m = capacity(load_model("mistral-7b"), Budget.of_size(24 * 10**9))
    assert m.memory_context is None and m.kv_growth_ends_at == 4096
    assert m.kv_bytes == 32 * 4096 * 2 * 8 * 128 * 2          # 32 layers, a ring of 4096 rows, 8 KV heads of 128
    g = load_model("gpt-oss-20b")
    plan = capacity(g, Budget.of_size(48 * 10**9), weights="bf16")
    row = 2 * 8 * 64 * 2
    left = 48 * 10**9 - plan.weight_bytes - plan.activation_bytes - 12 * 128 * row
    assert plan.memory_context == left // (12 * row)            # 12 sliding layers hold 128 rows each
    assert plan.full_attention_layers == 12 and plan.windowed_layers == 12


def test_state_space_model_cli_says_memory_sets_no_limit():
    from tierlab.cli import main

    r = CliRunner().invoke(main, ["capacity", "mamba-codestral-7b", "--memory", "24GB"])
    assert r.exit_code == 0, r.output
    assert "memory limit: none at batch 1" in r.output and "no KV at all" in r.output
    assert "fixed recurrent state per sequence: 133 MiB (139460608 B" in r.output
    r = CliRunner().invoke(main, ["capacity", "mamba-codestral-7b", "--memory", "24GB", "--context", "1000", "--json"])
    import json

    d = json.loads(r.stdout)
    w = d["weight_bytes"]
    b = d["max_batch"]        # fixed state per sequence: the batch is what the state allows
    act = lambda n: activation_bytes(load_model("mamba-codestral-7b"), n)
    assert w + b * 139460608 + act(b) <= 24 * 10**9 < w + (b + 1) * 139460608 + act(b + 1)
    assert d["breakdown"]["state_bytes"] == b * 139460608 and not d["memory_bounds_context"]
    assert d["memory_context"] == d["position_limit"]


@pytest.mark.parametrize("name", ["gpt-oss-20b", "gemma-3-4b", "jamba-v0.1", "mistral-7b"])
@pytest.mark.parametrize("context", [3, 8, 200])
def test_largest_batch_at_a_context_matches_brute_force(name, context):
    spec = tiny(name)
    state = spec.state_bytes("bf16") if spec.ssm_inner else 0
    budget = weight_bytes(spec) + 400000
    plan = capacity(spec, Budget.of_size(budget), context=context)

    def fits(b):
        return weight_bytes(spec) + b * (kept(spec, context) + state) + activation_bytes(spec, b) <= budget

    brute = max(b for b in range(0, 5000) if b == 0 or fits(b))
    assert plan.max_batch == brute >= 1 and plan.kv_bytes == brute * kept(spec, context)
    assert plan.to_dict()["breakdown"]["free_bytes"] >= 0


# DeepSeek-V3.2 (MLA + its indexer's keys, kind kv_index) and Kimi-Linear (KDA state + NoPE MLA), toy sized:
# the rest of each config from tierlab's table of Transformers' defaults
SPARSE_AND_KDA = {
    "deepseek_v32": dict(model_type="deepseek_v32", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                         num_key_value_heads=4, intermediate_size=128, moe_intermediate_size=32, n_routed_experts=4,
                         num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, q_lora_rank=48,
                         kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, index_n_heads=4,
                         index_head_dim=16, index_topk=4, vocab_size=100),
    "kimi_linear": dict(model_type="kimi_linear", num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                        num_key_value_heads=4, intermediate_size=128, moe_intermediate_size=32, num_experts=4,
                        num_experts_per_token=2, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                        v_head_dim=16, linear_num_heads=2, linear_head_dim=16, vocab_size=100,
                        layer_types=["linear_attention", "full_attention"]),
}


@pytest.mark.parametrize("name", sorted(SPARSE_AND_KDA))
def test_sparse_attention_and_kda_capacity_equals_the_trace(tmp_path, name):
    """The workspace, KV (index keys included) and state capacity counts are what a trace declares, and the
    longest context is the brute-force one over ModelSpec.kv_bytes."""
    spec = spec_from_config(SPARSE_AND_KDA[name], name=name)
    tr = trace_of(tmp_path, spec, batch=2, context=4, generate=1)
    assert Counter(activation_tensor_bytes(spec, 2)) == Counter(tensor_sizes(tr, "activation"))
    assert sum(tensor_sizes(tr, "kv")) + sum(tensor_sizes(tr, "kv_index")) == 2 * spec.kv_bytes(5) > 0
    assert sum(tensor_sizes(tr, "state")) == 2 * spec.state_bytes() and (spec.state_bytes() > 0) == (name == "kimi_linear")
    state = spec.state_bytes("bf16") if spec.ssm_inner else 0
    budget = weight_bytes(spec) + activation_bytes(spec, 1) + state + 5000
    brute = max(p for p in range(1, 5000) if weight_bytes(spec) + activation_bytes(spec, 1) + state
                + spec.kv_bytes(p) <= budget)
    assert capacity(spec, Budget.of_size(budget), batch=1).memory_context == brute
    from tierlab.serving.capacity import device_terms
    from tierlab.traces.workload.run import RunConfig

    assert device_terms(spec, RunConfig(prompt=1), 5, 1)[0][2] == spec.kv_bytes(5)       # a serving replica's KV per sequence
    pp = device_terms(spec, RunConfig(prompt=1, pp=2), 5, 1)                               # one layer a stage: the two add up
    assert sum(kv for *_, kv in pp) == spec.kv_bytes(5)
