"""Hand lowerings against the model Transformers builds: for each family tierlab reads by hand, the
parameter count of ``tierlab.traces.model.spec`` equals the count of the causal LM Transformers builds from the same
config on the meta device (parameters, a tied one once, and persistent buffers), for the config class's
defaults written in full (``to_dict``) and as ``save_pretrained`` writes them (``to_diff_dict``: only
what differs from the defaults, so tierlab's table of Transformers defaults fills the rest), and in the
dialects a hub config may be written in (Transformers 4's keys, a wrapper's ``text_config``). Needs the
capture extra (skipped without it, as tests/traces/test_capture.py)."""

from __future__ import annotations

import pytest

from tierlab.common.errors import ConfigError
from tierlab.traces.model.spec import spec_from_config


# model types whose default config tierlab reads by hand (the families of traces/model/families.py)
HAND_TYPES = ["llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2",
              "deepseek_v3", "gemma2", "gemma3_text", "phi3", "gpt_oss", "llama4_text", "gpt2", "opt", "jamba",
              "mamba2", "qwen3_next",
              # issue 25
              "gemma", "phi", "olmo2", "olmo3", "granite", "granitemoe", "granitemoeshared", "cohere", "cohere2",
              "starcoder2", "gpt_neox", "smollm3", "stablelm", "exaone4", "seed_oss", "ernie4_5", "phimoe", "glm",
              "glm4", "glm4_moe_lite", "minimax_m2", "qwen3_5_text", "qwen3_5_moe_text", "nemotron_h", "falcon_h1",
              "deepseek_v32", "kimi_linear", "gemma4_text", "gemma4"]


@pytest.fixture(scope="module")
def census(transformers):
    transformers.logging.set_verbosity_error()
    from tierlab.traces.capture import census

    return census


@pytest.mark.parametrize("model_type", HAND_TYPES)
def test_default_config_params_equal_transformers(census, model_type):
    config = census.default_config(model_type)
    assert spec_from_config(config).param_count() == census.meta_param_count(config)


@pytest.mark.parametrize("model_type", HAND_TYPES)
def test_save_pretrained_config_reads_with_the_class_defaults(census, model_type):
    """A config holding only what differs from its class's defaults reads as the full one."""
    full, diff = census.default_config(model_type), census.default_config(model_type, diff=True)
    assert len(diff) < len(full)
    assert spec_from_config(diff).param_count() == spec_from_config(full).param_count()


def _reduced(config: dict, **over) -> dict:
    c = dict(config)
    c.update(num_hidden_layers=2, **over)
    for k in ("layer_types", "mlp_layer_types", "no_rope_layers"):
        if isinstance(c.get(k), list):
            c[k] = c[k][:2]
    return c


def test_qwen3_moe_in_transformers_4_and_5_keys(census):
    """Transformers 5 writes Qwen3-MoE's expert count as num_local_experts, Transformers 4 as num_experts;
    both read, each overriding the class default (128) it would otherwise take."""
    t5 = _reduced(census.default_config("qwen3_moe"), num_local_experts=16)
    t4 = {k: v for k, v in t5.items() if k != "num_local_experts"}
    t4["num_experts"] = 16
    a, b = spec_from_config(t5), spec_from_config(t4)
    assert a.num_experts == b.num_experts == 16
    assert a.param_count() == b.param_count() == census.meta_param_count(t5)


def test_glm_is_transformers_glm_not_chatglm(census):
    """GlmForCausalLM (model_type glm, num_hidden_layers) is Transformers' GLM-4, not THUDM's ChatGLM."""
    c = _reduced(census.default_config("glm"))
    spec = spec_from_config(c)
    assert spec.family == "glm" and spec.num_layers == 2 and spec.rotary_dim == spec.head_dim // 2
    assert spec.param_count() == census.meta_param_count(c)


def test_deepseek_v2_top_k_defaults_to_six(census):
    """DeepSeek-V2's class leaves num_experts_per_tok None; a config without it routes 6 (V2, V2-Lite)."""
    c = _reduced(census.default_config("deepseek_v2"))
    c.pop("num_experts_per_tok", None)
    assert spec_from_config(c).num_experts_per_tok == 6
    c["num_experts_per_tok"] = 2
    assert spec_from_config(c).num_experts_per_tok == 2


def test_gpt_neox_rotary_pct_of_transformers_4(census):
    """GPT-NeoX's partial rotary: Transformers 4 writes rotary_pct, 5 rope_parameters.partial_rotary_factor."""
    t5 = _reduced(census.default_config("gpt_neox"))
    t4 = {k: v for k, v in t5.items() if k != "rope_parameters"}
    t4.update(rotary_pct=0.25, rotary_emb_base=10000)
    assert spec_from_config(t4).rotary_dim == spec_from_config(t5).rotary_dim == t5["hidden_size"] // 64 // 4


def test_nested_text_config_of_a_wrapper(census):
    """A wrapper's language model in text_config reads as the text model itself."""
    text = _reduced(census.default_config("gemma3_text"))
    wrapper = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
               "text_config": {k: v for k, v in text.items() if k != "architectures"}}
    assert spec_from_config(wrapper).param_count() == spec_from_config(text).param_count() \
        == census.meta_param_count(text)


# Nemotron-H at toy size, as the hub's configs write it (Transformers 4: hybrid_override_pattern beside
# num_hidden_layers): M Mamba-2, - ReLU² MLP, * attention, E MoE
NEMOTRON_H_TINY = dict(architectures=["NemotronHForCausalLM"], model_type="nemotron_h", hybrid_override_pattern="M-*E",
                       num_hidden_layers=4, hidden_size=64, vocab_size=256, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, intermediate_size=128, mamba_num_heads=8, mamba_head_dim=16,
                       n_groups=2, ssm_state_size=16, conv_kernel=4, n_routed_experts=4, num_experts_per_tok=2,
                       moe_intermediate_size=32, moe_shared_expert_intermediate_size=64)


def test_nemotron_h_closed_form(census):
    """Parameters, KV and state of a Nemotron-H from its config: one block a layer after its RMSNorm."""
    s = spec_from_config(NEMOTRON_H_TINY)
    h, V, d, c, H = 64, 256, 8 * 16, 8 * 16 + 2 * 2 * 16, 8         # c: the convolution over x, B and C
    mamba = (d + c + H) * h + c * 4 + c + 3 * H + d + h * d          # in_proj, conv1d (+ bias), dt_bias A_log D,
    # the gated norm, out_proj
    mlp = 2 * 128 * h
    attention = (4 * 16 + 2 * 2 * 16) * h + h * 4 * 16             # no biases, no rotary
    moe = 4 * h + 4 + 4 * 2 * 32 * h + 2 * 64 * h                   # router, its correction bias, 4 experts, shared
    assert s.param_count() == 2 * V * h + h + 4 * h + mamba + mlp + attention + moe \
        == census.meta_param_count(NEMOTRON_H_TINY)
    assert [s.layer_kind(i) for i in range(4)] == ["mamba", "none", "full", "none"] and s.moe_layers[3]
    assert s.kv_bytes_per_token("bf16") == 1 * 2 * 2 * 16 * 2                  # the one attention layer
    assert s.state_bytes("bf16") == 1 * (c * 4 + d * 16) * 2                   # the one Mamba-2 layer
    assert s.active_param_count() == s.param_count() - 2 * 2 * 32 * h         # 2 of the 4 experts idle
    assert s.rotary_dim == 0 and s.nope_full_layers


def test_nemotron_h_in_transformers_4_and_5_keys(census):
    """Transformers 5 writes layers_block_type (and ignores num_hidden_layers beside it), 4 and the hub
    hybrid_override_pattern, the legacy block names, and mamba_n_groups / mamba_d_conv for n_groups /
    conv_kernel; a save_pretrained config (the class's defaults left out) reads the same. Never tied."""
    t4 = dict(NEMOTRON_H_TINY)
    t5 = {k: v for k, v in t4.items() if k not in ("hybrid_override_pattern", "num_hidden_layers")}
    t5["layers_block_type"] = ["linear_attention", "mlp", "full_attention", "moe"]
    legacy = dict(t5, layers_block_type=["mamba", "mlp", "attention", "moe"])
    old = {k: v for k, v in t4.items() if k not in ("n_groups", "conv_kernel")}
    old.update(mamba_n_groups=2, mamba_d_conv=4)
    defaults = census.class_defaults("nemotron_h")
    diff = {k: v for k, v in t4.items() if k not in defaults or defaults[k] != v}
    assert "conv_kernel" not in diff and "num_experts_per_tok" not in diff
    n = census.meta_param_count(t4)
    assert {spec_from_config(c).param_count() for c in (t4, t5, legacy, old, diff)} == {n}
    assert census.meta_param_count(dict(t4, tie_word_embeddings=True)) == n \
        == spec_from_config(dict(t4, tie_word_embeddings=True)).param_count()
    assert spec_from_config(dict(t5, num_hidden_layers=9)).num_layers == 4


def test_nemotron_h_latent_moe(census):
    """moe_latent_size: the experts take and give latent-wide rows, between fc1_latent_proj and
    fc2_latent_proj (with biases if mlp_bias); the router and the shared MLP stay hidden-wide."""
    h, lw, E, f = 64, 16, 4, 32
    base = spec_from_config(NEMOTRON_H_TINY).param_count()
    for bias in (False, True):
        c = dict(NEMOTRON_H_TINY, moe_latent_size=lw, mlp_bias=bias)
        s = spec_from_config(c)
        mlp_biases = (128 + h) + (64 + h) if bias else 0                    # the MLP block's and the shared MLP's
        assert s.param_count() - base == 2 * lw * h + E * 2 * f * (lw - h) + ((lw + h) if bias else 0) + mlp_biases
        assert s.param_count() == census.meta_param_count(c)


def test_nemotron_h_refuses_an_unknown_block():
    with pytest.raises(ConfigError, match="hybrid_override_pattern"):
        spec_from_config(dict(NEMOTRON_H_TINY, hybrid_override_pattern="M-X"))
    with pytest.raises(ConfigError, match="layers_block_type"):
        spec_from_config(dict(NEMOTRON_H_TINY, layers_block_type=["mlp", "sliding_attention"]))
    # one shared MLP of a width that is not a whole number of experts: not modelled (spec.num_shared_experts)
    with pytest.raises(ConfigError, match="moe_shared_expert_intermediate_size"):
        spec_from_config(dict(NEMOTRON_H_TINY, moe_shared_expert_intermediate_size=48))


FALCON_H1_TINY = dict(architectures=["FalconH1ForCausalLM"], model_type="falcon_h1", num_hidden_layers=2,
                      hidden_size=64, vocab_size=256, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=128, mamba_d_ssm=128, mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=1,
                      mamba_d_state=16, mamba_d_conv=4, rope_parameters={"rope_theta": 1e11, "rope_type": "default"})


def test_falcon_h1_closed_form(census):
    """Falcon-H1: every layer a Mamba-2 mixer beside its attention (both KV and state on each), a gated MLP."""
    s = spec_from_config(FALCON_H1_TINY)
    h, V, d, c, H = 64, 256, 128, 128 + 2 * 16, 8
    mamba = (d + c + H) * h + c * 4 + c + 3 * H + h * d              # no gated norm (mamba_rms_norm false)
    attention = (64 + 2 * 32) * h + h * 64                           # head_dim 64 / 4
    per_layer = 2 * h + mamba + attention + 3 * 128 * h
    assert s.param_count() == 2 * V * h + h + 2 * per_layer == census.meta_param_count(FALCON_H1_TINY)
    assert s.kv_bytes_per_token("bf16") == 2 * 2 * 2 * 16 * 2 and s.attention_layers == [0, 1]
    assert s.state_bytes("bf16") == 2 * (c * 4 + d * 16) * 2 and all(s.keeps_state(i) for i in range(2))
    for over in (dict(mamba_rms_norm=True), dict(projectors_bias=True), dict(mamba_proj_bias=True),
                 dict(attention_bias=True, mlp_bias=True), dict(tie_word_embeddings=True),
                 dict(mamba_d_ssm=None, mamba_n_heads=16, mamba_d_head="auto", mamba_n_groups=2), dict(head_dim=32)):
        c2 = dict(FALCON_H1_TINY, **over)
        assert spec_from_config(c2).param_count() == census.meta_param_count(c2), over


def test_falcon_h1_in_transformers_4_and_5_keys(census):
    """Transformers 4 writes rope_theta (5: rope_parameters) and mamba_d_head "auto"; a save_pretrained
    config (defaults left out) reads the same."""
    t4 = {k: v for k, v in FALCON_H1_TINY.items() if k != "rope_parameters"}
    t4.update(rope_theta=1e11, mamba_d_head="auto")
    defaults = census.class_defaults("falcon_h1")
    diff = {k: v for k, v in FALCON_H1_TINY.items() if k not in defaults or defaults[k] != v}
    assert "mamba_d_conv" not in diff and "mamba_n_groups" not in diff
    n = census.meta_param_count(FALCON_H1_TINY)
    assert {spec_from_config(c).param_count() for c in (FALCON_H1_TINY, t4, diff)} == {n}


def test_coverage_benchmark_rows(census, tmp_path):
    """benchmarks/bench_coverage.py's row of a type: the path `tierlab trace CONFIG.json` takes (hand,
    capture, refused with its reason), Transformers' count against tierlab's; never a traceback row."""
    import sys

    from tierlab.cli.bench import benchmarks_dir

    sys.path.insert(0, str(benchmarks_dir()))
    from bench_coverage import one, summary

    rows = [one(t, tmp_path) for t in ("llama", "olmo", "git", "nemotron")]
    by = {r["type"]: r for r in rows}
    assert by["llama"]["path"] == "hand" and by["llama"]["exact"]
    assert by["olmo"]["path"] == "capture" and by["olmo"]["tierlab_params"] == by["olmo"]["hf_params"]
    assert by["git"]["path"] == "refused" and "attention" in by["git"]["reason"]
    assert by["nemotron"]["path"] == "not buildable"       # Transformers' own default config does not build
    s = summary(rows)
    assert s["buildable"] == 3 and s["read_exact"] == 2 and s["tracebacks"] == []


# a toy DeepSeek-V3.2 (its class's defaults otherwise): 2 layers, 1 dense + 1 MoE of 4 experts, small ranks
V32_TOY = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=4, intermediate_size=128,
               moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
               first_k_dense_replace=1, q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
               v_head_dim=16, index_n_heads=4, index_head_dim=16, index_topk=4, vocab_size=256)


def _v32(census, **over) -> dict:
    c = {k: v for k, v in census.default_config("deepseek_v32").items() if k not in ("layer_types", "mlp_layer_types")}
    return {**c, **V32_TOY, **over}


def test_deepseek_v32_closed_forms(census):
    """DeepSeek-V3.2 is DeepSeek-V3 plus, per layer, the indexer's wq_b (index heads x dim from the query
    latent), wk (dim from hidden), k_norm (a LayerNorm: gain and bias) and weights_proj (a weight per index
    head); per token and layer the cache keeps the MLA latent and rope key plus one index key of
    index_head_dim (bf16: 2 bytes each)."""
    c = _v32(census)
    spec = spec_from_config(c)
    v3 = spec_from_config({**c, "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"]})
    L, h, q, IH, D = 2, c["hidden_size"], c["q_lora_rank"], c["index_n_heads"], c["index_head_dim"]
    assert spec.param_count() - v3.param_count() == L * (IH * D * q + D * h + 2 * D + IH * h)
    assert spec.param_count() == census.meta_param_count(c)
    latent = c["kv_lora_rank"] + c["qk_rope_head_dim"]
    assert spec.kv_bytes_per_token() == L * (latent + D) * 2
    assert spec.kv_bytes(9) == 9 * L * (latent + D) * 2        # index keys: every position, as the latent
    assert spec.index_row_bytes("fp8") == D and spec.index_row_bytes() == 2 * D


def test_deepseek_v32_decode_reads_top_k_rows(census, tmp_path):
    """Each decode query of a DeepSeek-V3.2 layer reads min(positions, index_topk) latent rows (the KV
    the indexer picked) and every cached index key (its scoring), one sequence at a time per row."""
    from tierlab.traces.lowering.generate import generate_trace
    from tierlab.traces.format.reader import open_trace
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.format.summary import summarize

    spec = spec_from_config(_v32(census))
    B, L, D, topk = 2, 2, 16, 4
    latent = (spec.kv_lora_rank + spec.qk_rope_head_dim) * 2
    s = summarize(open_trace(generate_trace(spec, RunConfig(context=1, prompt=2, generate=4, batch=B),
                                            tmp_path / "d.trace")))
    for st, step in enumerate(s["steps"]):
        positions = 1 + 2 + st + 1                     # 4 .. 7: within, then past, index_topk
        assert step["bytes"]["kv"] == {"read": min(positions, topk) * B * L * latent, "write": B * L * latent}
        assert step["bytes"]["kv_index"] == {"read": positions * B * L * D * 2, "write": B * L * D * 2}
    assert s["kv_bytes"] == B * (1 + 2 + 4) * L * (latent + D * 2)


def test_deepseek_v32_as_its_hub_config_and_save_pretrained_write_it(census):
    """DeepSeek-V3.2-Exp's own config.json (Transformers 4's keys: rope_scaling, topk_method, moe_layer_freq,
    num_nextn_predict_layers; no layer_types, mlp_layer_types nor head_dim) and a save_pretrained one
    (defaults left out) read as the full config, exactly Transformers' count."""
    full = _v32(census)
    hub = {k: v for k, v in full.items() if k not in ("rope_parameters", "head_dim")}
    hub.update(rope_scaling={"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
               topk_method="noaux_tc", moe_layer_freq=1, num_nextn_predict_layers=1, scoring_func="sigmoid")
    diff = {**census.default_config("deepseek_v32", diff=True), **V32_TOY}
    diff = {k: v for k, v in diff.items() if k not in ("layer_types", "mlp_layer_types", "index_head_dim")}
    diff["index_head_dim"] = 128                        # the class's default, written anyway: the same model
    want = census.meta_param_count(full)
    assert spec_from_config(hub).param_count() == want
    assert spec_from_config({k: v for k, v in diff.items() if k != "index_head_dim"}).param_count() \
        == spec_from_config(diff).param_count() == census.meta_param_count({**full, "index_head_dim": 128})
    assert spec_from_config(hub).index_topk == 4 and spec_from_config(diff).index_heads == 4


def test_kimi_linear_closed_forms(census):
    """Kimi-Linear's KDA layer: q, k, v and o projections of heads x head_dim, the short convolution over q, k
    and v, the forget gate (f_a, f_b, dt_bias per channel, A_log per head), b_proj, the output gate (g_a,
    g_b) and o_norm of one head; its state per sequence the convolution window (3 x heads x dim x kernel)
    and heads x dim x dim; the MLA layers (layers 4, 8, ...: NoPE) cache latent + rope key per token."""
    c = census.default_config("kimi_linear")
    spec = spec_from_config(c)
    h, H, d, k = c["hidden_size"], c["linear_num_heads"], c["linear_head_dim"], c["linear_conv_kernel_dim"]
    q = H * d
    kda = 4 * q * h + 3 * q * k + (d * h + q * d + q + H) + H * h + (d * h + q * d) + d
    lin = [i for i in range(spec.num_layers) if spec.keeps_state(i)]
    assert lin == [i for i in range(27) if not (i and i % 4 == 0)] and spec.layer_kind(4) == "full"
    kda_params = sum(w.elements for w in spec.weight_shapes() if w.layer == 0 and ".self_attn." in w.name)
    assert kda_params == kda
    assert spec.state_bytes() == len(lin) * (3 * q * k + H * d * d) * 2
    assert spec.kv_bytes_per_token() == (27 - len(lin)) * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * 2
    assert spec.param_count() == census.meta_param_count(c)


def test_kimi_linear_as_its_hub_config_writes_it(census):
    """Kimi-Linear's checkpoint config (its linear_attn_config: 1-based full_attn_layers and kda_layers,
    num_heads, head_dim, short_conv_kernel_size; first_k_dense_replace; no layer_types) and the same written
    in the common spellings (num_experts_per_tok, n_shared_experts, max_position_embeddings, num_local_experts)
    read as Transformers builds them."""
    base = {k: v for k, v in census.default_config("kimi_linear").items()
            if k not in ("layer_types", "mlp_layer_types", "linear_num_heads", "linear_head_dim",
                         "linear_conv_kernel_dim")}
    base.update(num_hidden_layers=4, hidden_size=64, num_experts=4, num_experts_per_token=2, moe_intermediate_size=32,
                intermediate_size=128, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                num_attention_heads=4, num_key_value_heads=4, vocab_size=256, first_k_dense_replace=1, pad_token_id=0,
                bos_token_id=0, eos_token_id=0,
                linear_attn_config={"full_attn_layers": [2, 4], "kda_layers": [1, 3], "num_heads": 2, "head_dim": 16,
                                    "short_conv_kernel_size": 3})
    spec = spec_from_config(base)
    assert [spec.layer_kind(i) for i in range(4)] == ["linear", "full", "linear", "full"]
    assert (spec.ssm_heads, spec.ssm_state, spec.ssm_conv) == (2, 16, 3) and spec.moe_layers == (False, True, True, True)
    assert spec.param_count() == census.meta_param_count(base)
    common = {k: v for k, v in base.items() if k not in ("num_experts", "num_experts_per_token", "num_shared_experts",
                                                         "model_max_length")}
    common.update(num_local_experts=4, num_experts_per_tok=2, n_shared_experts=1, max_position_embeddings=4096)
    assert spec_from_config(common).param_count() == spec.param_count() == census.meta_param_count(common)


def _gemma4(census, **over) -> dict:
    """A Gemma 4 text config of 12 layers (layers 5 and 11 global) at a small width, as Transformers writes it."""
    import transformers

    kw = dict(num_hidden_layers=12, hidden_size=256, intermediate_size=512, vocab_size=1000, head_dim=64,
              num_attention_heads=4, num_key_value_heads=2, vocab_size_per_layer_input=1000,
              hidden_size_per_layer_input=32, sliding_window=16, global_head_dim=128)
    kw.update(over)
    c = transformers.AutoConfig.for_model("gemma4_text", **kw).to_dict()
    c.update(architectures=["Gemma4ForCausalLM"], model_type="gemma4_text")
    return c


@pytest.mark.parametrize("shared,k_eq_v,wide", [(0, False, False), (5, False, False), (5, True, True), (1, True, False)])
def test_gemma4_closed_forms(census, shared, k_eq_v, wide):
    """Gemma 4's parameters and KV bytes from its config in closed form: per layer the attention of that
    layer's own heads (the global layers' global_head_dim, and with attention_k_eq_v their
    num_global_key_value_heads and no v_proj), the KV-shared last layers holding q_proj, q_norm and o_proj
    only and caching nothing (with use_double_wide_mlp their MLPs twice as wide), the per-layer inputs'
    table, projection and norm and each layer's gate, projection and norm, four sandwich norms and a
    layer_scalar per layer; the sliding layers keep at most their window."""
    from tierlab.common.errors import ConfigError

    c = _gemma4(census, num_kv_shared_layers=shared, attention_k_eq_v=k_eq_v, use_double_wide_mlp=wide,
                num_global_key_value_heads=1)
    spec = spec_from_config(c)
    n, h, V, P, H, f, W = 12, 256, 1000, 32, 4, 512, 16
    full = {5, 11}
    own = range(n - shared)
    params = V * h + V * n * P + n * P * h + P + h
    kv_token = 0
    for i in range(n):
        hd, kv = (128, 1 if k_eq_v else 2) if i in full else (64, 2)
        params += 4 * h + 2 * H * hd * h + hd + 3 * h * f * (2 if wide and i not in own else 1) + 2 * P * h + h + 1
        if i in own:
            params += kv * hd * h * (1 if k_eq_v and i in full else 2) + hd
            kv_token += 2 * kv * hd * 2
    assert spec.param_count() == params == census.meta_param_count(c)
    assert spec.kv_bytes_per_token() == kv_token
    positions = 100
    assert spec.kv_bytes(positions) == sum(2 * (2 if i in full and not k_eq_v else 1 if i in full else 2)
                                           * (128 if i in full else 64) * 2 * (positions if i in full else W)
                                           for i in own)
    with pytest.raises(ConfigError, match="num_kv_shared_layers"):
        spec_from_config({**c, "num_kv_shared_layers": n})


def test_gemma4_config_dialects_read_alike(census):
    """A Gemma 4 config as save_pretrained writes it with the class defaults left out (no layer_types: 5
    sliding to 1 global, the last global; no per_layer_config: the global layers' head_dim 512), one
    written by Transformers 5 (per_layer_config) and one as released (global_head_dim and
    num_global_key_value_heads, no per_layer_config) read alike, as Transformers builds them; the
    multimodal wrapper's text_config reads as the text model."""
    bare = {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "num_hidden_layers": 8,
            "num_kv_shared_layers": 2}
    full = _gemma4(census, num_hidden_layers=8, num_kv_shared_layers=2, hidden_size=2304, intermediate_size=9216,
                   vocab_size=262144, vocab_size_per_layer_input=262144, hidden_size_per_layer_input=256,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, sliding_window=512, global_head_dim=512)
    a, b = spec_from_config(bare), spec_from_config(full)
    assert a.layer_attention == b.layer_attention and a.layer_attention[-1] == ("full", 0)
    assert a.param_count() == b.param_count() == census.meta_param_count(bare)
    assert a.kv_bytes(1000) == b.kv_bytes(1000)
    t5 = _gemma4(census, attention_k_eq_v=True, num_global_key_value_heads=1)
    released = {k: v for k, v in t5.items() if k != "per_layer_config"}
    released.update(global_head_dim=128, num_global_key_value_heads=1)
    assert spec_from_config(released).gemma4 == spec_from_config(t5).gemma4
    assert spec_from_config(released).param_count() == census.meta_param_count(released)
    wrapper = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
               "text_config": {k: v for k, v in t5.items() if k != "architectures"}}
    assert spec_from_config(wrapper).param_count() == spec_from_config(t5).param_count()


def test_gemma4_moe_biases_and_untied_head_count_as_transformers(census):
    """Gemma 4 with the MoE block beside every MLP (the router's proj, scale and per_expert_scale; each
    expert's gate_up_proj and down_proj; three more norms), q/k/v/o biases (no v bias with
    attention_k_eq_v on the global layers) and an untied LM head: the count Transformers builds."""
    c = _gemma4(census, enable_moe_block=True, num_experts=8, top_k_experts=2, moe_intermediate_size=64,
                attention_bias=True, attention_k_eq_v=True, tie_word_embeddings=False, num_kv_shared_layers=2)
    spec = spec_from_config(c)
    assert (spec.num_experts, spec.num_experts_per_tok, spec.moe_intermediate_size) == (8, 2, 64)
    assert spec.param_count() == census.meta_param_count(c)
    assert spec.active_param_count() == spec.param_count() - 12 * 6 * 3 * 256 * 64   # 2 of 8 experts a layer
