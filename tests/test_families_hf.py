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
              "glm4", "glm4_moe_lite", "minimax_m2", "qwen3_5_text", "qwen3_5_moe_text"]


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
