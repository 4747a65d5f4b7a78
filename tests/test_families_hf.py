"""Hand lowerings against the model Transformers builds: for each family tierlab reads by hand, the
parameter count of ``traces.spec`` equals the count of the causal LM Transformers builds from the same
config on the meta device (parameters, a tied one once, and persistent buffers), for the config class's
defaults written in full (``to_dict``) and as ``save_pretrained`` writes them (``to_diff_dict``: only
what differs from the defaults, so tierlab's table of Transformers defaults fills the rest), and in the
dialects a hub config may be written in (Transformers 4's keys, a wrapper's ``text_config``). Needs the
capture extra (skipped without it, as tests/test_capture.py)."""

from __future__ import annotations

import pytest

from traces.spec import spec_from_config


# model types whose default config tierlab reads by hand (the families of traces/families.py)
HAND_TYPES = ["llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2",
              "deepseek_v3", "gemma2", "gemma3_text", "phi3", "gpt_oss", "llama4_text", "gpt2", "opt", "jamba",
              "mamba2", "qwen3_next",
              # issue 25
              "gemma", "phi", "olmo2", "olmo3", "granite", "granitemoe", "granitemoeshared", "cohere", "cohere2",
              "starcoder2", "gpt_neox", "smollm3", "stablelm", "exaone4", "seed_oss", "ernie4_5", "phimoe", "glm",
              "glm4", "glm4_moe_lite", "minimax_m2", "qwen3_5_text", "qwen3_5_moe_text", "gemma4_text", "gemma4"]


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
    from common.errors import ConfigError

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
