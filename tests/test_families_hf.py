"""Hand lowerings against the model Transformers builds: for each family tierlab reads by hand, the
parameter count of ``traces.spec`` equals the count of the causal LM Transformers builds from the same
config on the meta device (parameters, a tied one once, and persistent buffers), for the config class's
defaults written in full (``to_dict``) and as ``save_pretrained`` writes them (``to_diff_dict``: only
what differs from the defaults, so tierlab's table of Transformers defaults fills the rest), and in the
dialects a hub config may be written in (Transformers 4's keys, a wrapper's ``text_config``). Needs the
capture extra (skipped without it, as tests/test_capture.py)."""

from __future__ import annotations

import pytest

from common.errors import ConfigError
from traces.spec import spec_from_config


# model types whose default config tierlab reads by hand (the families of traces/families.py)
HAND_TYPES = ["llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2",
              "deepseek_v3", "gemma2", "gemma3_text", "phi3", "gpt_oss", "llama4_text", "gpt2", "opt", "jamba",
              "mamba2", "qwen3_next",
              # issue 25
              "gemma", "phi", "olmo2", "olmo3", "granite", "granitemoe", "granitemoeshared", "cohere", "cohere2",
              "starcoder2", "gpt_neox", "smollm3", "stablelm", "exaone4", "seed_oss", "ernie4_5", "phimoe", "glm",
              "glm4", "glm4_moe_lite", "minimax_m2", "qwen3_5_text", "qwen3_5_moe_text", "nemotron_h", "falcon_h1"]


@pytest.fixture(scope="module")
def census(transformers):
    transformers.logging.set_verbosity_error()
    from traces.capture import census

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

    from emulator.cli.bench import benchmarks_dir

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
