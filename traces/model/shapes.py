"""Every weight tensor of a model spec, in execution order: the one list the parameter count, the
trace's weight tensors and the capacity plan derive from.

Names follow Llama's Hugging Face checkpoints for every family (``layers.i.self_attn.q_proj``, ...):
a family's fused tensors (Phi-3's ``qkv_proj`` and ``gate_up_proj``, GPT-2's ``c_attn``, Falcon's
``query_key_value``, gpt-oss's ``gate_up_proj``) are listed as their separate parts, the same
elements and bytes. Vectors (``cols == 1``) are the tensors quantisers leave in high precision:
norm gains and biases, linear biases, attention sinks, and a Mamba mixer's convolution, ``A_log``
and ``D`` (each flattened).
"""

from __future__ import annotations

from typing import NamedTuple


class WeightShape(NamedTuple):
    """One weight tensor: a matrix ``rows x cols`` (out x in, as Hugging Face stores it) or a
    vector (``cols == 1``). ``layer``/``expert`` are -1 when not applicable."""

    name: str
    layer: int
    expert: int
    rows: int
    cols: int

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    @property
    def is_vector(self) -> bool:
        return self.cols == 1


def weight_shapes(s) -> list[WeightShape]:
    """Every weight tensor of spec ``s`` (embedding, positions, layers, final norm, LM head)."""
    if s.gemma4:
        return _gemma4_shapes(s)
    h = s.hidden_size
    out = [WeightShape("embed_tokens", -1, -1, s.vocab_size, h)]
    if s.learned_positions:
        out.append(WeightShape("embed_positions", -1, -1, s.learned_positions, h))
    for i in range(s.num_layers):
        p = f"layers.{i}."
        if s.norm_layout != "post":
            out += _norm(s, p + "input_layernorm", i, h)
        kind = s.layer_kind(i)
        if s.ssm_parallel:                 # Falcon-H1: the Mamba-2 mixer, then the attention beside it
            out += _mamba_shapes(s, i, p + "mamba.")
        if kind == "mamba":
            out += _mamba_shapes(s, i, p + "mamba.")
        elif kind == "linear" and s.ssm_version == 4:
            out += _kda_shapes(s, i, p + "self_attn.")
        elif kind == "linear":
            out += _delta_net_shapes(s, i, p + "linear_attn.")
        elif kind != "none":
            out += _attention_shapes(s, i, p + "self_attn.")
        if s.norm_layout == "block":       # Nemotron-H: a layer is one block, its mixer or its MLP / MoE
            out += _mlp_shapes(s, i, p + "mlp.") if kind == "none" else []
            continue
        if s.norm_layout == "sandwich":
            out += _norm(s, p + "post_attention_layernorm", i, h) + _norm(s, p + "pre_feedforward_layernorm", i, h)
        elif s.norm_layout == "post":     # OLMo 2: each block's output normed before its residual add
            out += _norm(s, p + "post_attention_layernorm", i, h)
        elif s.norm_layout == "pre":
            out += _norm(s, p + "post_attention_layernorm", i, h)
        elif s.norm_layout == "parallel2":
            out += _norm(s, p + "ln_mlp", i, h)
        if s.norm_layout != "mixer":       # Mamba-2: a layer is its mixer alone
            out += _mlp_shapes(s, i, p + "mlp.")
        if s.norm_layout in ("sandwich", "post"):
            out += _norm(s, p + "post_feedforward_layernorm", i, h)
    out += _norm(s, "norm", -1, h)
    if not s.tie_word_embeddings:
        out.append(WeightShape("lm_head", -1, -1, s.vocab_size, h))
    if s.lm_head_bias:
        out.append(WeightShape("lm_head.bias", -1, -1, s.vocab_size, 1))
    return out


def _norm(s, name: str, i: int, width: int) -> list[WeightShape]:
    out = [WeightShape(name, i, -1, width, 1)]
    if s.norm == "layer":
        out.append(WeightShape(name + ".bias", i, -1, width, 1))
    return out


def _linear(name: str, i: int, e: int, rows: int, cols: int, bias: bool) -> list[WeightShape]:
    out = [WeightShape(name, i, e, rows, cols)]
    if bias:
        out.append(WeightShape(name + ".bias", i, e, rows, 1))
    return out


def _attention_shapes(s, i: int, a: str) -> list[WeightShape]:
    h = s.hidden_size
    if s.attention == "mla":
        qk = s.qk_nope_head_dim + s.qk_rope_head_dim
        out = []
        if s.q_lora_rank:
            out += [WeightShape(a + "q_a_proj", i, -1, s.q_lora_rank, h),
                    WeightShape(a + "q_a_layernorm", i, -1, s.q_lora_rank, 1),
                    WeightShape(a + "q_b_proj", i, -1, s.num_heads * qk, s.q_lora_rank)]
        else:
            out += [WeightShape(a + "q_proj", i, -1, s.num_heads * qk, h)]
        out += [WeightShape(a + "kv_a_proj_with_mqa", i, -1, s.kv_lora_rank + s.qk_rope_head_dim, h),
                WeightShape(a + "kv_a_layernorm", i, -1, s.kv_lora_rank, 1)]
        if s.index_head_dim:        # DeepSeek-V3.2's indexer: queries from the query latent, a LayerNorm-ed key
            x, d = a + "indexer.", s.index_head_dim
            out += [WeightShape(x + "wq_b", i, -1, s.index_heads * d, s.q_lora_rank), WeightShape(x + "wk", i, -1, d, h),
                    WeightShape(x + "k_norm", i, -1, d, 1), WeightShape(x + "k_norm.bias", i, -1, d, 1),
                    WeightShape(x + "weights_proj", i, -1, s.index_heads, h)]
        out += [WeightShape(a + "kv_b_proj", i, -1, s.num_heads * (s.qk_nope_head_dim + s.v_head_dim), s.kv_lora_rank),
                WeightShape(a + "o_proj", i, -1, h, s.num_heads * s.v_head_dim)]
        return out
    q, kv = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
    out = [WeightShape(a + "q_proj", i, -1, 2 * q if s.attn_output_gate else q, h),
           WeightShape(a + "k_proj", i, -1, kv, h),
           WeightShape(a + "v_proj", i, -1, kv, h)]
    if s.qkv_bias:
        out += [WeightShape(a + "q_proj.bias", i, -1, q, 1), WeightShape(a + "k_proj.bias", i, -1, kv, 1),
                WeightShape(a + "v_proj.bias", i, -1, kv, 1)]
    if s.qk_norm == "head":
        out += _norm(s, a + "q_norm", i, s.head_dim) + _norm(s, a + "k_norm", i, s.head_dim)
    elif s.qk_norm == "full":   # OLMoE, OLMo 2; StableLM's and Cohere's per-head norms, one gain per element
        out += _norm(s, a + "q_norm", i, q) + _norm(s, a + "k_norm", i, kv)
    if s.sinks:
        out.append(WeightShape(a + "sinks", i, -1, s.num_heads, 1))
    out += _linear(a + "o_proj", i, -1, h, q, s.o_bias)
    return out


def _mlp(s, m: str, i: int, e: int, f: int, bias: bool, width: int = 0) -> list[WeightShape]:
    h = width or s.hidden_size
    out = _linear(m + "gate_proj", i, e, f, h, bias) if s.mlp_gated else []
    return out + _linear(m + "up_proj", i, e, f, h, bias) + _linear(m + "down_proj", i, e, h, f, bias)


def _mlp_shapes(s, i: int, m: str) -> list[WeightShape]:
    h = s.hidden_size
    if not s.is_moe(i):
        return _mlp(s, m, i, -1, s.intermediate_size, s.mlp_bias)
    out = _linear(m + "gate", i, -1, s.num_experts, h, s.gate_bias)
    if s.router_bias:
        out.append(WeightShape(m + "gate.e_score_correction_bias", i, -1, s.num_experts, 1))
    lw = s.moe_latent_size
    if lw:                                 # Nemotron-H's latent MoE: the experts in and out of lw wide
        out += _linear(m + "fc1_latent_proj", i, -1, lw, h, s.mlp_bias)
    for e in range(s.num_experts):
        out += _mlp(s, f"{m}experts.{e}.", i, e, s.moe_intermediate_size, s.expert_bias, lw)
    if lw:
        out += _linear(m + "fc2_latent_proj", i, -1, h, lw, s.mlp_bias)
    if s.num_shared_experts:
        out += _mlp(s, m + "shared_experts.", i, -1, s.shared_expert_size, s.mlp_bias)   # Nemotron-H's mlp_bias
        if s.shared_expert_gate:
            out.append(WeightShape(m + "shared_expert_gate", i, -1, 1, h))
    return out


def _delta_net_shapes(s, i: int, x: str) -> list[WeightShape]:
    """A Gated DeltaNet mixer as Qwen3-Next's checkpoints hold it: in_proj_qkvz, in_proj_ba, a causal
    convolution over q, k, v (no bias), dt_bias and A_log per value head, a gated RMSNorm of one head."""
    h, d, H, c = s.hidden_size, s.ssm_inner, s.ssm_heads, s.ssm_conv_channels
    return [WeightShape(x + "in_proj_qkvz", i, -1, c + d, h), WeightShape(x + "in_proj_ba", i, -1, 2 * H, h),
            WeightShape(x + "conv1d", i, -1, c * s.ssm_conv, 1), WeightShape(x + "dt_bias", i, -1, H, 1),
            WeightShape(x + "A_log", i, -1, H, 1), WeightShape(x + "norm", i, -1, d // H, 1),
            WeightShape(x + "out_proj", i, -1, h, d)]


def _kda_shapes(s, i: int, x: str) -> list[WeightShape]:
    """A Kimi Delta Attention mixer as Kimi-Linear's checkpoints hold it: q, k and v projections, their
    short convolution (no bias), the forget gate (f_a_proj, f_b_proj, dt_bias per channel, A_log per
    head), the beta projection, the output gate (g_a_proj, g_b_proj), the gated RMSNorm of one head."""
    h, d, H, c, k = s.hidden_size, s.ssm_inner, s.ssm_heads, s.ssm_conv_channels, s.ssm_state
    g = "forget_gate."
    return [WeightShape(x + "q_proj", i, -1, d, h), WeightShape(x + "k_proj", i, -1, d, h),
            WeightShape(x + "v_proj", i, -1, d, h), WeightShape(x + "conv1d", i, -1, c * s.ssm_conv, 1),
            WeightShape(x + g + "f_a_proj", i, -1, k, h), WeightShape(x + g + "f_b_proj", i, -1, d, k),
            WeightShape(x + g + "dt_bias", i, -1, d, 1), WeightShape(x + g + "A_log", i, -1, H, 1),
            WeightShape(x + "b_proj", i, -1, H, h), WeightShape(x + "g_a_proj", i, -1, k, h),
            WeightShape(x + "g_b_proj", i, -1, d, k), WeightShape(x + "o_norm", i, -1, k, 1),
            WeightShape(x + "o_proj", i, -1, h, d)]


def _mamba2_shapes(s, i: int, x: str) -> list[WeightShape]:
    """A Mamba-2 mixer as ``Mamba2ForCausalLM`` checkpoints hold it: in_proj to [z, x, B, C, dt]."""
    h, d, H, c = s.hidden_size, s.ssm_inner, s.ssm_heads, s.ssm_conv_channels
    out = _linear(x + "in_proj", i, -1, d + c + H, h, s.ssm_proj_bias)
    out.append(WeightShape(x + "conv1d", i, -1, c * s.ssm_conv, 1))
    if s.ssm_conv_bias:
        out.append(WeightShape(x + "conv1d.bias", i, -1, c, 1))
    out += [WeightShape(x + "dt_bias", i, -1, H, 1), WeightShape(x + "A_log", i, -1, H, 1),
            WeightShape(x + "D", i, -1, H, 1)]
    if s.ssm_norm:
        out.append(WeightShape(x + "norm", i, -1, d, 1))
    return out + _linear(x + "out_proj", i, -1, h, d, s.ssm_proj_bias if s.ssm_out_bias is None else s.ssm_out_bias)


def _mamba_shapes(s, i: int, x: str) -> list[WeightShape]:
    """A Mamba (selective state-space) mixer as Jamba's checkpoints hold it."""
    if s.ssm_version == 2:
        return _mamba2_shapes(s, i, x)
    h, d, n, r = s.hidden_size, s.ssm_inner, s.ssm_state, s.ssm_dt_rank
    out = _linear(x + "in_proj", i, -1, 2 * d, h, s.ssm_proj_bias)
    out.append(WeightShape(x + "conv1d", i, -1, d * s.ssm_conv, 1))
    if s.ssm_conv_bias:
        out.append(WeightShape(x + "conv1d.bias", i, -1, d, 1))
    out.append(WeightShape(x + "x_proj", i, -1, r + 2 * n, d))
    out += _linear(x + "dt_proj", i, -1, d, r, True)
    out += [WeightShape(x + "A_log", i, -1, d * n, 1), WeightShape(x + "D", i, -1, d, 1)]
    if s.ssm_inner_norms:
        out += [WeightShape(x + "dt_layernorm", i, -1, r, 1), WeightShape(x + "b_layernorm", i, -1, n, 1),
                WeightShape(x + "c_layernorm", i, -1, n, 1)]
    out += _linear(x + "out_proj", i, -1, h, d, s.ssm_proj_bias)
    return out


def _gemma4_shapes(s) -> list[WeightShape]:
    """Gemma 4's text model (:mod:`tierlab.traces.model.gemma4`), in Gemma4TextModel's order: the per-layer-input
    tables after the embedding; per layer the attention (a KV-shared layer's q and o only; no v_proj with
    attention_k_eq_v on a global layer; v_norm has no gain), the sandwich norms around the dense MLP
    and, with the MoE block, the router (its norm has no gain: ``scale`` and ``per_expert_scale`` are
    vectors), the experts (each ``gate_up_proj`` listed as its gate and up halves) and their norms; the
    per-layer input's gate, projection and norm; ``layer_scalar``."""
    h, g, n, H = s.hidden_size, s.gemma4, s.num_layers, s.num_heads
    P = g.per_layer_input
    out = [WeightShape("embed_tokens", -1, -1, s.vocab_size, h)]
    if P:
        out += [WeightShape("embed_tokens_per_layer", -1, -1, g.per_layer_vocab, n * P),
                WeightShape("per_layer_model_projection", -1, -1, n * P, h),
                WeightShape("per_layer_projection_norm", -1, -1, P, 1)]
    for i, x in enumerate(g.layers):
        p, a = f"layers.{i}.", f"layers.{i}.self_attn."
        q, kv = H * x.head_dim, x.kv_heads * x.head_dim
        out += _norm(s, p + "input_layernorm", i, h) + _linear(a + "q_proj", i, -1, q, h, s.qkv_bias)
        out += _norm(s, a + "q_norm", i, x.head_dim)
        if not g.shares_kv(i):
            out += _linear(a + "k_proj", i, -1, kv, h, s.qkv_bias)
            out += _linear(a + "v_proj", i, -1, kv, h, s.qkv_bias) if x.v_proj else []
            out += _norm(s, a + "k_norm", i, x.head_dim)
        out += _linear(a + "o_proj", i, -1, h, q, s.o_bias)
        out += _norm(s, p + "post_attention_layernorm", i, h) + _norm(s, p + "pre_feedforward_layernorm", i, h)
        out += _mlp(s, p + "mlp.", i, -1, x.intermediate_size, False)
        if s.is_moe(i):
            out += _norm(s, p + "post_feedforward_layernorm_1", i, h)
            out += [WeightShape(p + "router.scale", i, -1, h, 1), WeightShape(p + "router.proj", i, -1, s.num_experts, h),
                    WeightShape(p + "router.per_expert_scale", i, -1, s.num_experts, 1)]
            out += _norm(s, p + "pre_feedforward_layernorm_2", i, h)
            for e in range(s.num_experts):
                out += _mlp(s, f"{p}experts.{e}.", i, e, s.moe_intermediate_size, False)
            out += _norm(s, p + "post_feedforward_layernorm_2", i, h)
        out += _norm(s, p + "post_feedforward_layernorm", i, h)
        if P:
            out += [WeightShape(p + "per_layer_input_gate", i, -1, P, h),
                    WeightShape(p + "per_layer_projection", i, -1, h, P)]
            out += _norm(s, p + "post_per_layer_input_norm", i, h)
        out.append(WeightShape(p + "layer_scalar", i, -1, 1, 1))
    out += _norm(s, "norm", -1, h)
    return out + ([] if s.tie_word_embeddings else [WeightShape("lm_head", -1, -1, s.vocab_size, h)])
