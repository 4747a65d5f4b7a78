"""``--capture`` of models whose caches, routers or attention calls are not Transformers' usual ones, each
against Transformers' meta-device parameter count and the closed form of what its trace must hold:

- a cache class of the model's own (MiniMax's lightning-attention K^T V sums, xLSTM's C, n, m per block),
  read as the layer's recurrent state;
- zero-computation (identity) experts beside the routed ones, and a router whose matrix is a child's
  (LongCat-Flash);
- an attention over activations rather than a cache (Inkling 2's attention over earlier blocks' outputs),
  and cache layers the model appends itself (Inkling 2 Loop's copies of its loop layers per pass).

Skipped only where torch/transformers are absent and CI is not set; with CI=true it fails.
"""

from __future__ import annotations

import numpy as np

from tierlab.traces.format.reader import open_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.format.summary import summarize

RUN = dict(context=0, prompt=5, generate=2, batch=2)


def _capture(model_type: str, tmp, **over):
    from tierlab.traces.capture import capture_trace
    from tierlab.traces.capture.census import default_config, meta_param_count

    config = {**default_config(model_type), **over}
    tr = open_trace(capture_trace(config, RunConfig(**RUN), tmp / "c.trace"))
    return config, tr, summarize(tr), meta_param_count(config)


def _tensors(tr, kind: str) -> dict[str, int]:
    t = tr.tensors.to_pydict()
    return {n: b for n, k, b in zip(t["name"], t["kind"], t["nbytes"]) if k == kind}


def test_minimax_keeps_its_lightning_attention_sums(transformers, tmp_path):
    """MiniMax runs only with its own cache class (MiniMaxCache): a linear-attention layer keeps one
    heads x head_dim x head_dim sum per sequence, read and written once a decode step; KV only on the
    softmax-attention layer."""
    h, H, G, d, B = 64, 4, 2, 16, RUN["batch"]
    c, tr, s, hf = _capture("minimax", tmp_path, hidden_size=h, num_attention_heads=H, num_key_value_heads=G,
                            head_dim=d, intermediate_size=32, num_hidden_layers=2, num_local_experts=4,
                            layer_types=["linear_attention", "full_attention"], vocab_size=256, block_size=4)
    assert s["params"] == hf
    state = B * H * d * d * 2
    assert _tensors(tr, "state") == {"layers.0.state.linear_cache": state}
    positions = RUN["prompt"] + RUN["generate"]
    assert _tensors(tr, "kv") == {f"layers.1.kv.{p}": B * positions * G * d * 2 for p in "kv"}
    assert s["bytes"]["decode"]["state"] == {"read": state * RUN["generate"], "write": state * RUN["generate"]}


def test_xlstm_keeps_its_matrix_memory(transformers, tmp_path):
    """xLSTM's cache (xLSTMCache, no KV at all): each block's matrix memory C (heads x qk x v), normaliser n
    (heads x qk) and stabiliser m (heads) per sequence. (A width whose qk and v parts are multiples of 64:
    Transformers' config rounds them up to that, its layers do not.)"""
    h, H, L, B = 256, 4, 2, RUN["batch"]
    c, tr, s, hf = _capture("xlstm", tmp_path, hidden_size=h, embedding_dim=h, num_heads=H, num_hidden_layers=L,
                            num_blocks=L, vocab_size=256)
    assert s["params"] == hf
    qk, v = int(h * c["qk_dim_factor"]) // H, int(h * c["v_dim_factor"]) // H
    per_block = {"rnn_state": H * qk * v, "rnn_state1": H * qk, "rnn_state2": H}
    assert _tensors(tr, "state") == {f"layers.{i}.state.{p}": B * n * 2 for i in range(L)
                                     for p, n in per_block.items()}
    assert _tensors(tr, "kv") == {}
    state = B * 2 * L * sum(per_block.values())
    assert s["bytes"]["decode"]["state"] == {"read": state * RUN["generate"], "write": state * RUN["generate"]}


def test_longcat_routes_to_identity_experts(transformers, tmp_path):
    """LongCat-Flash's router (its matrix in a ``classifier`` child) scores the routed experts and the
    zero-computation ones; a token sent to an identity expert reads no expert weights. Every weight is read."""
    E, Z, k = 4, 4, 2
    c, tr, s, hf = _capture("longcat_flash", tmp_path, hidden_size=64, num_layers=2, num_attention_heads=4,
                            num_key_value_heads=4, ffn_hidden_size=128, q_lora_rank=48, kv_lora_rank=32,
                            qk_nope_head_dim=16, qk_rope_head_dim=8, qk_head_dim=24, v_head_dim=16, head_dim=8,
                            n_routed_experts=E, zero_expert_num=Z, moe_topk=k, expert_ffn_hidden_size=32,
                            vocab_size=256)
    assert s["params"] == hf
    assert tr.manifest["capture"]["unread_weights"] == []
    assert not any("Router" in o["module"] for o in tr.manifest["capture"]["unmapped_ops"])
    ops = tr.op_arrays()
    experts = ops["expert"] >= 0
    assert experts.any() and ops["expert"].max() < E        # identity experts run no op of their own
    routed = np.array([k == "moe_router" for k in ops["kind"]])
    # every token picks k of E + Z: some picks land on identity experts, so fewer rows reach real experts
    rows_routed = int(ops["tokens"][routed].sum()) * k
    assert 0 < int(ops["tokens"][experts].sum()) < rows_routed


def test_inkling2_attention_over_blocks_reads_no_cache(transformers, tmp_path):
    """Inkling 2 attends, at each position, over the outputs of earlier blocks (its block attention
    residuals: a module with no cache layer): those calls read and write activations only. Each layer's
    own attention reads its KV cache: a ring of the window on sliding layers, every position on full ones."""
    L, w, G, d, B = 4, 4, 2, 16, RUN["batch"]
    c, tr, s, hf = _capture("inkling2_text", tmp_path, hidden_size=64, num_hidden_layers=L, num_attention_heads=4,
                            num_key_value_heads=G, head_dim=d, swa_num_attention_heads=4, swa_num_key_value_heads=G,
                            swa_head_dim=d, sliding_window_size=w, n_layers_per_attn_res_block=2,
                            layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid"],
                            moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, vocab_size=256,
                            unpadded_vocab_size=256)
    assert s["params"] == hf
    kinds = tr.tensor_arrays()["kind"]
    ops, acc = tr.op_arrays(), tr.access_columns()
    attention = {int(i) for i in ops["op_id"][ops["kind"] == "attention"]}
    reads_kv: dict[int, bool] = {}
    for op, t in zip(acc["op_id"], acc["tensor_id"]):
        if int(op) in attention:
            reads_kv[int(op)] = reads_kv.get(int(op), False) or kinds[int(t)] == "kv"
    on_cache = sum(reads_kv.values())
    assert on_cache == L * (1 + RUN["generate"])             # one per layer per segment: prefill, 2 decode steps
    assert len(reads_kv) > on_cache                           # and the attentions over blocks, on no cache
    positions = RUN["prompt"] + RUN["generate"]
    row = 2 * G * d * 2
    assert s["kv_bytes"] == B * row * (2 * min(w, positions) + 2 * positions)


def test_inkling2_loop_copies_its_loop_layers_caches(transformers, tmp_path):
    """Inkling 2 Loop runs its loop layers once more per pass, each pass with its own copies of those layers'
    cache layers (appended by the model after its own): KV and convolution states for each copy, the size
    of the layer it copies (a ring of the window on a sliding one)."""
    L, w, start, end = 4, 4, 2, 4
    c, tr, s, hf = _capture("inkling2_loop_text", tmp_path, hidden_size=64, num_hidden_layers=L,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16, swa_num_attention_heads=4,
                            swa_num_key_value_heads=2, swa_head_dim=16, sliding_window_size=w,
                            n_layers_per_attn_res_block=2,
                            layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid"],
                            moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, vocab_size=256,
                            unpadded_vocab_size=256, loop_layer_index_start=start, loop_layer_index_end=end,
                            loop_num_passes=2)
    assert s["params"] == hf
    kv, state = _tensors(tr, "kv"), _tensors(tr, "state")
    for copy, of in zip(range(L, L + end - start), range(start, end)):
        assert kv[f"layers.{copy}.kv.k"] == kv[f"layers.{of}.kv.k"] > 0
        assert {n.split(".", 2)[2]: b for n, b in state.items() if n.startswith(f"layers.{copy}.")} \
            == {n.split(".", 2)[2]: b for n, b in state.items() if n.startswith(f"layers.{of}.")} != {}
    assert kv["layers.4.kv.k"] < kv["layers.5.kv.k"]          # layer 2 slides (window 4 of 7), layer 3 is full
