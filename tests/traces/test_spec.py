"""Model specs: parameter counts against published totals and closed-form arithmetic, KV bytes per
token, and clear errors for bad configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tierlab.common.errors import ConfigError
from tierlab.traces.model.spec import list_presets, load_model, spec_from_config

DATA = Path(__file__).parents[1] / "data" / "models"


def gqa_layer(h, nh, kvh, hd, bias=False, qk_norm=False):
    n = h * nh * hd + 2 * h * kvh * hd + nh * hd * h
    if bias:
        n += nh * hd + 2 * kvh * hd
    if qk_norm:
        n += 2 * hd
    return n


def closed_form(name: str) -> int:
    """Parameter counts written out from the published configs, independently of tierlab.traces.model.spec."""
    if name == "llama-3.1-8b":
        return 32 * (gqa_layer(4096, 32, 8, 128) + 3 * 4096 * 14336 + 2 * 4096) + 2 * 128256 * 4096 + 4096
    if name == "llama-3.1-70b":
        return 80 * (gqa_layer(8192, 64, 8, 128) + 3 * 8192 * 28672 + 2 * 8192) + 2 * 128256 * 8192 + 8192
    if name == "llama-3.1-405b":   # 126 layers, 128 query / 8 KV heads of 128, MLP 53,248
        return 126 * (gqa_layer(16384, 128, 8, 128) + 3 * 16384 * 53248 + 2 * 16384) + 2 * 128256 * 16384 + 16384
    if name == "llama-2-7b":   # full multi-head attention (32 KV heads), vocabulary 32,000
        return 32 * (gqa_layer(4096, 32, 32, 128) + 3 * 4096 * 11008 + 2 * 4096) + 2 * 32000 * 4096 + 4096
    if name == "llama-2-70b":  # grouped-query attention (8 KV heads), vocabulary 32,000
        return 80 * (gqa_layer(8192, 64, 8, 128) + 3 * 8192 * 28672 + 2 * 8192) + 2 * 32000 * 8192 + 8192
    if name == "mistral-7b":
        return 32 * (gqa_layer(4096, 32, 8, 128) + 3 * 4096 * 14336 + 2 * 4096) + 2 * 32000 * 4096 + 4096
    if name == "qwen2-0.5b":   # tied embeddings counted once
        return 24 * (gqa_layer(896, 14, 2, 64, bias=True) + 3 * 896 * 4864 + 2 * 896) + 151936 * 896 + 896
    if name == "chatglm3-6b":  # fused query_key_value with bias, dense_h_to_4h = 2 x ffn
        return 28 * (4096 * (4096 + 2 * 2 * 128) + (4096 + 2 * 2 * 128) + 4096 * 4096 + 4096 * 2 * 13696
                     + 13696 * 4096 + 2 * 4096) + 2 * 65024 * 4096 + 4096
    if name == "mixtral-8x7b":
        return 32 * (gqa_layer(4096, 32, 8, 128) + 8 * 4096 + 8 * 3 * 4096 * 14336 + 2 * 4096) \
            + 2 * 32000 * 4096 + 4096
    if name == "qwen3-30b-a3b":
        return 48 * (gqa_layer(2048, 32, 4, 128, qk_norm=True) + 128 * 2048 + 128 * 3 * 2048 * 768 + 2 * 2048) \
            + 2 * 151936 * 2048 + 2048
    if name in ("deepseek-v3", "deepseek-r1"):     # R1: V3's architecture and config
        h, nh = 7168, 128
        mla = (h * 1536 + 1536 + 1536 * nh * (128 + 64) + h * (512 + 64) + 512 + 512 * nh * (128 + 128)
               + nh * 128 * h)
        dense = 3 * h * 18432
        moe = 256 * h + 256 + 256 * 3 * h * 2048 + 3 * h * 2048
        return 3 * (mla + dense + 2 * h) + 58 * (mla + moe + 2 * h) + 2 * 129280 * h + h
    if name == "gpt-4-class-moe":   # the documented estimate (docs/findings/sweeps.md): MQA, 16 experts top-2
        return 120 * (gqa_layer(12288, 96, 1, 128) + 16 * 12288 + 16 * 3 * 12288 * 24576 + 2 * 12288) \
            + 2 * 100256 * 12288 + 12288
    raise KeyError(name)


# Estimates, not released models: their reported total (a rounded figure) within a tolerance.
REPORTED = {"gpt-4-class-moe": (1.8e12, 0.02)}   # ~1.8 T parameters (SemiAnalysis, 2023-07-11, via [S64])

PUBLISHED = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    # meta-llama/Llama-3.1-405B: "405B" on the model card; the exact figure is the closed form's (405.85B)
    "llama-3.1-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096,
    "qwen2-0.5b": 494_032_768,
    "chatglm3-6b": 6_243_584_000,
    "mixtral-8x7b": 46_702_792_704,
    "qwen3-30b-a3b": 30_532_122_624,
    "deepseek-v3": 671_026_419_200,   # without the multi-token-prediction layer
    "llama-2-7b": 6_738_415_616,      # meta-llama/Llama-2-7b-hf model card: 6.74 B (safetensors total)
    "llama-2-70b": 68_976_648_192,    # meta-llama/Llama-2-70b-hf model card: 69 B (safetensors total 68,976,648,192)
    "deepseek-r1": 671_026_419_200,   # DeepSeek-R1 card: 671B total, the V3 architecture
}


def test_every_preset_has_a_closed_form():
    assert set(PUBLISHED) <= set(list_presets())   # the other presets: tests/traces/test_families.py


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_estimated_model_matches_closed_form_and_reported_total(name):
    spec = load_model(name)
    total, tolerance = REPORTED[name]
    assert spec.param_count() == closed_form(name)
    assert abs(spec.param_count() / total - 1) <= tolerance


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_param_count_matches_published_and_closed_form(name):
    spec = load_model(name)
    assert spec.param_count() == PUBLISHED[name]
    assert spec.param_count() == closed_form(name)


def test_active_params_moe():
    # Mixtral: 2 of 8 experts per token.
    s = load_model("mixtral-8x7b")
    expert = 3 * 4096 * 14336
    assert s.active_param_count() == s.param_count() - 32 * 6 * expert
    d = load_model("deepseek-v3")
    assert abs(d.active_param_count() - 37.5e9) / 37.5e9 < 0.01   # published "37B activated" (+ embeddings)


@pytest.mark.parametrize("name,kv_dtype,expected", [
    ("llama-3.1-8b", "bf16", 32 * 2 * 8 * 128 * 2),
    ("llama-3.1-70b", "fp8", 80 * 2 * 8 * 128 * 1),
    ("llama-3.1-405b", "fp8", 126 * 2 * 8 * 128 * 1),
    ("chatglm3-6b", "bf16", 28 * 2 * 2 * 128 * 2),       # MQA with 2 groups
    ("chatglm-6b", "bf16", 28 * 2 * 32 * 128 * 2),       # ChatGLM-6B v1: multi-head, 32 K and V heads per layer
    ("qwen3-30b-a3b", "bf16", 48 * 2 * 4 * 128 * 2),     # head_dim 128 though hidden/heads = 64
    ("deepseek-v3", "bf16", 61 * (512 + 64) * 2),         # MLA: latent + rope key
    ("deepseek-v3", "fp32", 61 * (512 + 64) * 4),
])
def test_kv_bytes_per_token(name, kv_dtype, expected):
    assert load_model(name).kv_bytes_per_token(kv_dtype) == expected


def test_family_details():
    assert load_model("mistral-7b").sliding_window == 4096
    assert load_model("llama-3.1-8b").sliding_window is None
    q = load_model("qwen2-0.5b")
    assert q.qkv_bias and q.tie_word_embeddings and q.sliding_window is None
    d = load_model("deepseek-v3")
    assert d.attention == "mla" and d.moe_layers[:3] == (False,) * 3 and all(d.moe_layers[3:])
    t = load_model(DATA / "tiny-qwen3-moe.json")
    assert t.moe_layers == (False, True, True) and t.head_dim == 32


def test_load_from_directory_and_file(tmp_path):
    cfg = json.loads((DATA / "tiny-llama.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    a = load_model(tmp_path)
    b = load_model(tmp_path / "config.json")
    assert a.param_count() == b.param_count() == load_model(DATA / "tiny-llama.json").param_count()
    assert a.to_dict()["params"] == a.param_count()


def test_unknown_preset_suggests(tmp_path):
    with pytest.raises(ConfigError, match="did you mean llama-3.1-8b"):
        load_model("llama-3.1-8")


def test_missing_field_takes_the_config_class_default():
    """A config written by save_pretrained leaves out what equals its Transformers class's default
    (LlamaConfig's intermediate_size 11008): the default applies, as Transformers applies it."""
    cfg = json.loads((DATA / "tiny-llama.json").read_text())
    del cfg["intermediate_size"]
    assert spec_from_config(cfg).intermediate_size == 11008


def test_missing_field_without_default_is_named():
    """A field the config sets to null where the family needs a value is named (no default replaces it)."""
    cfg = json.loads((DATA / "tiny-llama.json").read_text())
    cfg.update(architectures=["MixtralForCausalLM"], model_type="mixtral")
    cfg["num_local_experts"] = None          # explicitly null: no default replaces it
    with pytest.raises(ConfigError) as e:
        spec_from_config(cfg, file="x.json")
    assert e.value.field == "num_local_experts" and "x.json" in str(e.value)


def test_glm_missing_field_is_named():
    cfg = json.loads((DATA / "tiny-chatglm.json").read_text())
    del cfg["padded_vocab_size"]
    with pytest.raises(ConfigError, match="padded_vocab_size"):
        spec_from_config(cfg)


def test_unsupported_family():
    with pytest.raises(ConfigError, match="model family 'BertModel' has no hand lowering") as e:
        spec_from_config({"architectures": ["BertModel"], "model_type": "bert"})
    assert e.value.field == "architectures"


def test_malformed_json(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"hidden_size": 4,')
    with pytest.raises(ConfigError, match="malformed JSON"):
        load_model(p)


def test_bad_value_type():
    cfg = json.loads((DATA / "tiny-llama.json").read_text())
    cfg["hidden_size"] = "64"
    with pytest.raises(ConfigError, match="hidden_size"):
        spec_from_config(cfg)


def test_a_checkout_never_shadows_hugging_faces_kernels():
    """From a checkout's root (on sys.path first, as for ``python -m`` there), the name ``kernels``
    is not tierlab's: Transformers imports Hugging Face's ``kernels`` by that name, and a regular
    package of ours there would shadow it (``cannot import name ... from 'kernels'``)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    probe = ("import importlib.util as u; s = u.find_spec('kernels'); "
             "print(s.origin if s is not None and s.origin else '')")
    r = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    origin = r.stdout.strip()
    # (Hugging Face's own, where installed, may lie under the checkout too: CI's venv is .ci-venv/)
    assert not origin or not Path(origin).resolve().is_relative_to(root / "kernels"), \
        f"'kernels' resolves to {origin}, the checkout's kernels/ (it must have no __init__.py)"


def test_the_kernels_are_the_checkouts_kernels_folder():
    """``tierlab.kernels`` (emulator/kernels.py, whose ``__path__`` names the folder) finds its
    modules in the repository's ``kernels/``, which stays a folder without ``__init__.py``."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    probe = "import tierlab.kernels as k, tierlab.kernels.attention as a; print(k.__path__[0]); print(a.__file__)"
    r = subprocess.run([sys.executable, "-c", probe], cwd=root.parent, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    folder, module = r.stdout.split()
    assert Path(folder).resolve() == root / "kernels"
    assert Path(module).resolve() == root / "kernels" / "attention.py"
    assert not (root / "kernels" / "__init__.py").exists()


def test_imports_resolve_to_this_project():
    import tierlab
    import tierlab.kernels.base
    import tierlab.traces as traces

    root = Path(__file__).resolve().parents[2]
    for mod in (traces, tierlab):
        assert Path(mod.__file__).resolve().parent.parent == root
    # kernels/ is imported as tierlab.kernels (never the top-level `kernels`, so it never shadows
    # Hugging Face's `kernels`, which Transformers imports)
    assert Path(tierlab.kernels.base.__file__).resolve().parent == root / "kernels"


def test_a_misspelt_config_key_warns_with_the_key_it_resembles(tmp_path):
    """``num_hiden_layers`` is not a LlamaConfig field: the layers come from the class's default, said in
    one line naming the key it resembles; a config spelt right says nothing."""
    import json as _json
    import warnings

    from tierlab.common.paths import configs_dir
    from tierlab.traces.model.families import UnknownKeyWarning

    cfg = _json.loads((configs_dir("models") / "llama-3.1-8b.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownKeyWarning)
        spec_from_config(dict(cfg))                         # as shipped: no warning
    del cfg["num_hidden_layers"]
    cfg["num_hiden_layers"] = 40
    with pytest.warns(UnknownKeyWarning, match=r"num_hiden_layers: unknown key; did you mean 'num_hidden_layers'"):
        spec = spec_from_config(cfg)
    assert spec.num_layers == 32                            # LlamaConfig's default, not the misspelt 40


def test_transformers_private_keys_are_not_misspellings():
    """A key with a leading underscore is Transformers' own (Gemma 3's config writes
    ``_sliding_window_pattern`` beside ``sliding_window_pattern``): no did-you-mean for it."""
    import json as _json
    import warnings

    from tierlab.common.paths import configs_dir
    from tierlab.traces.model.families import UnknownKeyWarning

    cfg = _json.loads((configs_dir("models") / "llama-3.1-8b.json").read_text())
    del cfg["num_hidden_layers"]
    cfg["_num_hidden_layers"] = 40
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownKeyWarning)
        spec_from_config(cfg)
