"""The family table: how each model family's Hugging Face ``config.json`` reads into a model spec.

A family is one :class:`Family` row of data: the ``architectures`` / ``model_type`` names that select
it, the config keys of its dialect (``keys``: GPT-2's ``n_embd`` is Llama's ``hidden_size``), its
traits (norm kind and layout, which projections carry biases, gated or plain MLP, learned positions,
q/k norms, attention sinks, tied embeddings by default) and, by name, the reader of its attention
pattern (``layers``: full, sliding-window, chunked or state-space per layer; the readers are in
:mod:`tierlab.traces.model.layer_patterns`) and of its MoE layout (``moe``). Adding a family that shares a dialect
and a layout is a few lines here and one test.

A multimodal wrapper (``...ForConditionalGeneration``) nests its language model in ``text_config``:
the text model is read from there (the vision tower is not modelled). An unknown family, or a value
of a known field the family does not understand, is a :class:`~tierlab.common.errors.ConfigError` naming the
field.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from functools import lru_cache

from tierlab.common.errors import ConfigError
from tierlab.common.paths import configs_dir
from tierlab.common.suggest import closest
from tierlab.traces.model.layer_patterns import LAYER_PATTERNS, LAYER_READERS, nemotron_h_blocks  # noqa: F401  (the table's API)
from tierlab.traces.model.config_reader import MAX_DIMENSION, Reader  # noqa: F401  (read through families)


class UnknownFamily(ConfigError):
    """A config of a family with no hand lowering (``family``: its architecture or model type): ``tierlab
    trace`` takes it to the capture path (:mod:`tierlab.traces.capture`) when the capture extra is installed."""

    def __init__(self, message: str, *, family=None, **kw):
        super().__init__(message, **kw)
        self.family = family


@dataclass(frozen=True)
class Family:
    """One family's dialect and traits (see the module docstring)."""

    architectures: tuple[str, ...]
    model_types: tuple[str, ...] = ()
    keys: dict = field(default_factory=dict)       # canonical name -> this dialect's config key
    norm: str = "rms"              # "rms" (gain) | "layer" (gain and bias)
    norm_layout: str = "pre"       # "pre" (2 per layer) | "sandwich" (4) | "parallel" (1, attn || mlp) | "mixer"
    qkv_bias: object = False       # bool, or the config key saying so
    o_bias: object = False
    mlp_bias: object = False
    mlp_gated: bool = True
    qk_norm: object = False        # False | "head" (per head_dim) | "full" (over all heads) | "l2" (no gain) | a config key
    # (true: "head") | (a config key, "full")
    sinks: bool = False            # learned per-head attention-sink logits
    learned_positions: int = -1    # -1: rotary; else the table's extra rows beyond max positions (OPT: 2)
    tied_default: bool = False
    layers: str = "window"         # attention pattern reader (LAYER_READERS)
    moe: str | None = None         # MoE layout reader (MOE_READERS)
    mla: bool = False
    mamba: bool = False            # Jamba-style hybrid: attention on some layers, Mamba mixers on the rest
    defaults: dict = field(default_factory=dict)   # the Transformers config class's defaults a config may omit
    nope_full_layers: bool = False # Llama 4: the global (full-attention) layers use no rotary embedding
    fused: tuple = ()              # projections the checkpoint stores side by side, run as one GEMM:
    # "qkv" (Phi-3's qkv_proj, GPT-2's c_attn, Falcon's query_key_value), "gate_up" (Phi-3's gate_up_proj)
    partial_rotary: float | None = None   # reads partial_rotary_factor (this default): rotary turns that
    # fraction of each head's dimensions (GLM-4.5: 0.5, Qwen3-Next: 0.25, as Transformers' configs default)
    router_bias: bool = False      # the router's score-correction bias, always (MiniMax-M2's e_score_correction_bias)
    lm_head_bias: object = False   # the LM head's bias (Phi-2), or the config key saying so (PhiMoE's lm_head_bias)
    nope: str = ""                 # which layers run without rotary: "no_rope_layers" (SmolLM3: 0 there)
    parallel: tuple = ()           # (config key, its default, layout when true): the key switches norm_layout
    # between that parallel layout and "pre" (GPT-NeoX's and StableLM's use_parallel_residual)
    ssm: str = ""                  # a Mamba-2 mixer's dialect (tierlab.traces.model.ssm_fields.SSM_READERS): "nemotron_h", "falcon_h1"
    ties: bool = True              # False: the LM head is never tied (Nemotron-H: Transformers ties nothing)
    indexer: bool = False          # DeepSeek-V3.2's sparse attention: a lightning indexer picks index_topk KV rows


LLAMA_KEYS = {"hidden_size": "hidden_size", "num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
              "num_kv_heads": "num_key_value_heads", "head_dim": "head_dim",
              "intermediate_size": "intermediate_size", "vocab_size": "vocab_size",
              "max_position_embeddings": "max_position_embeddings"}


def _keys(**over) -> dict:
    return {**LLAMA_KEYS, **over}


# transformers' Gemma3TextConfig defaults (the multimodal Gemma 3 configs give only what differs)
GEMMA3_DEFAULTS = {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                   "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                   "max_position_embeddings": 131072, "sliding_window": 4096, "sliding_window_pattern": 6}

FAMILIES: dict[str, Family] = {
    "llama": Family(("LlamaForCausalLM",), ("llama",), _keys(), layers="full", qkv_bias="attention_bias", o_bias="attention_bias",
                    mlp_bias="mlp_bias"),
    "mistral": Family(("MistralForCausalLM",), ("mistral",), _keys()),
    "qwen2": Family(("Qwen2ForCausalLM",), ("qwen2",), _keys(), qkv_bias=True, layers="qwen_window"),
    "qwen3": Family(("Qwen3ForCausalLM",), ("qwen3",), _keys(), qkv_bias="attention_bias", qk_norm="head",
                    layers="qwen_window"),
    "mixtral": Family(("MixtralForCausalLM",), ("mixtral",), _keys(), moe="mixtral"),
    "qwen2_moe": Family(("Qwen2MoeForCausalLM",), ("qwen2_moe",), _keys(), qkv_bias=True, moe="qwen_moe",
                        layers="qwen_window"),
    "qwen3_moe": Family(("Qwen3MoeForCausalLM",), ("qwen3_moe",), _keys(), qk_norm="head", moe="qwen_moe",
                        layers="qwen_window"),
    "olmoe": Family(("OlmoeForCausalLM",), ("olmoe",), _keys(), layers="full", qk_norm="full", moe="olmoe"),
    "deepseek_v2": Family(("DeepseekV2ForCausalLM",), ("deepseek_v2",), _keys(), layers="full", moe="deepseek", mla=True),
    # Transformers' V3-style routers always hold the score-correction bias (a persistent buffer)
    "deepseek_v3": Family(("DeepseekV3ForCausalLM",), ("deepseek_v3",), _keys(), layers="full", moe="deepseek", mla=True,
                          router_bias=True),
    "deepseek_v32": Family(("DeepseekV32ForCausalLM",), ("deepseek_v32",), _keys(), layers="full", moe="deepseek",
                           mla=True, router_bias=True, indexer=True),
    "glm4_moe": Family(("Glm4MoeForCausalLM",), ("glm4_moe",), _keys(), layers="full", qkv_bias="attention_bias",
                       qk_norm="use_qk_norm", moe="deepseek", partial_rotary=0.5, router_bias=True),
    "kimi_linear": Family(("KimiLinearForCausalLM",), ("kimi_linear",), _keys(), layers="kimi_linear", moe="deepseek",
                          mla=True, router_bias=True, nope_full_layers=True, defaults={"first_k_dense_replace": 1}),
    "gemma2": Family(("Gemma2ForCausalLM",), ("gemma2",), _keys(), norm_layout="sandwich", tied_default=True,
                     layers="gemma2"),
    "gemma3": Family(("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"), ("gemma3_text", "gemma3"), _keys(),
                     norm_layout="sandwich", qk_norm="head", tied_default=True, layers="gemma3",
                     defaults=GEMMA3_DEFAULTS),
    "phi3": Family(("Phi3ForCausalLM",), ("phi3",), _keys(), partial_rotary=1.0, fused=("qkv", "gate_up")),
    "gpt_oss": Family(("GptOssForCausalLM",), ("gpt_oss",), _keys(), qkv_bias=True, o_bias=True, sinks=True,
                      layers="layer_types", moe="gpt_oss"),
    "llama4": Family(("Llama4ForCausalLM", "Llama4ForConditionalGeneration"), ("llama4_text", "llama4"),
                     _keys(intermediate_size="intermediate_size_mlp"), layers="llama4", moe="llama4",
                     nope_full_layers=True, qk_norm=("use_qk_norm", "l2")),
    "gpt2": Family(("GPT2LMHeadModel", "GPT2Model"), ("gpt2",),
                   {"hidden_size": "n_embd", "num_layers": "n_layer", "num_heads": "n_head",
                    "intermediate_size": "n_inner", "vocab_size": "vocab_size", "max_position_embeddings": "n_positions"},
                   norm="layer", qkv_bias=True, o_bias=True, mlp_bias=True, mlp_gated=False, learned_positions=0,
                   tied_default=True, layers="full", fused=("qkv",),
                   defaults={"n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024, "vocab_size": 50257}),
    "opt": Family(("OPTForCausalLM", "OPTModel"), ("opt",),
                  _keys(intermediate_size="ffn_dim", num_kv_heads="", head_dim=""), norm="layer",
                  qkv_bias=("enable_bias", True), o_bias=("enable_bias", True), mlp_bias=("enable_bias", True),
                  mlp_gated=False,
                  learned_positions=2, tied_default=True),
    "falcon": Family(("FalconForCausalLM", "RWForCausalLM"), ("falcon", "RefinedWebModel"),
                     _keys(num_kv_heads="num_kv_heads", intermediate_size="ffn_hidden_size", head_dim=""),
                     norm="layer", norm_layout="parallel", qkv_bias="bias", o_bias="bias", mlp_bias="bias",
                     mlp_gated=False, tied_default=True, layers="full", defaults={"max_position_embeddings": 2048},
                     fused=("qkv",)),
    "qwen3_next": Family(("Qwen3NextForCausalLM",), ("qwen3_next",), _keys(), qk_norm="head", moe="qwen_moe",
                         layers="qwen3_next", partial_rotary=0.25),
    "jamba": Family(("JambaForCausalLM",), ("jamba",), _keys(), moe="jamba", mamba=True, layers="jamba"),
    # ---- issue 25: the families people deploy, each exact against Transformers' meta-device count ----
    "gemma": Family(("GemmaForCausalLM",), ("gemma",), _keys(), tied_default=True, layers="full"),
    "phi": Family(("PhiForCausalLM",), ("phi",), _keys(), norm="layer", norm_layout="parallel", qkv_bias=True,
                  o_bias=True, mlp_bias=True, mlp_gated=False, lm_head_bias=True, partial_rotary=0.5,
                  qk_norm="qk_layernorm", layers="full"),
    "olmo2": Family(("Olmo2ForCausalLM",), ("olmo2",), _keys(), norm_layout="post", qk_norm="full", layers="full",
                    qkv_bias="attention_bias", o_bias="attention_bias"),
    "olmo3": Family(("Olmo3ForCausalLM",), ("olmo3",), _keys(), norm_layout="post", qk_norm="full",
                    layers="layer_types", qkv_bias="attention_bias", o_bias="attention_bias"),
    "granite": Family(("GraniteForCausalLM",), ("granite",), _keys(), layers="full", qkv_bias="attention_bias",
                      o_bias="attention_bias", mlp_bias="mlp_bias"),
    "granitemoe": Family(("GraniteMoeForCausalLM",), ("granitemoe",), _keys(), layers="full",
                         qkv_bias="attention_bias", o_bias="attention_bias", moe="mixtral"),
    "granitemoeshared": Family(("GraniteMoeSharedForCausalLM",), ("granitemoeshared",), _keys(), layers="full",
                               qkv_bias="attention_bias", o_bias="attention_bias", moe="granite_shared"),
    "cohere": Family(("CohereForCausalLM",), ("cohere",), _keys(), norm_layout="parallel", tied_default=True,
                     layers="full", qkv_bias="attention_bias", o_bias="attention_bias",
                     qk_norm=("use_qk_norm", "full")),
    "cohere2": Family(("Cohere2ForCausalLM",), ("cohere2",), _keys(), norm_layout="parallel", tied_default=True,
                      layers="layer_types", qkv_bias="attention_bias", o_bias="attention_bias",
                      nope_full_layers=True),
    "starcoder2": Family(("Starcoder2ForCausalLM",), ("starcoder2",), _keys(), norm="layer", qkv_bias="use_bias",
                         o_bias="use_bias", mlp_bias="use_bias", mlp_gated=False, tied_default=True),
    "gpt_neox": Family(("GPTNeoXForCausalLM",), ("gpt_neox",), _keys(num_kv_heads="", head_dim=""), norm="layer",
                       qkv_bias=("attention_bias", True), o_bias=("attention_bias", True), mlp_bias=True,
                       mlp_gated=False, partial_rotary=0.25, layers="full", fused=("qkv",),
                       parallel=("use_parallel_residual", True, "parallel2")),
    "smollm3": Family(("SmolLM3ForCausalLM",), ("smollm3",), _keys(), tied_default=True, layers="qwen_window",
                      qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias", nope="no_rope_layers"),
    "stablelm": Family(("StableLmForCausalLM",), ("stablelm",), _keys(), norm="layer", qkv_bias="use_qkv_bias",
                       qk_norm=("qk_layernorm", "full"), partial_rotary=0.25, layers="full",
                       parallel=("use_parallel_residual", False, "parallel")),
    "exaone4": Family(("Exaone4ForCausalLM",), ("exaone4",), _keys(), norm_layout="post", qk_norm="head",
                      layers="layer_types", nope_full_layers=True),
    "seed_oss": Family(("SeedOssForCausalLM",), ("seed_oss",), _keys(), layers="full", qkv_bias="attention_bias",
                       o_bias="attention_out_bias", mlp_bias="mlp_bias"),
    "ernie4_5": Family(("Ernie4_5ForCausalLM",), ("ernie4_5",), _keys(), layers="full", qkv_bias="use_bias",
                       o_bias="use_bias", mlp_bias="use_bias", tied_default=True),
    "phimoe": Family(("PhimoeForCausalLM",), ("phimoe",), _keys(), norm="layer", qkv_bias="attention_bias",
                     o_bias="attention_bias", moe="mixtral", lm_head_bias="lm_head_bias"),
    "glm": Family(("GlmForCausalLM",), ("glm",), _keys(), layers="full", qkv_bias="attention_bias",
                  partial_rotary=0.5, fused=("gate_up",)),
    "glm4": Family(("Glm4ForCausalLM",), ("glm4",), _keys(), norm_layout="sandwich", layers="full",
                   qkv_bias="attention_bias", partial_rotary=0.5, fused=("gate_up",)),
    "glm4_moe_lite": Family(("Glm4MoeLiteForCausalLM",), ("glm4_moe_lite",), _keys(), layers="full", moe="deepseek",
                            mla=True, router_bias=True),
    # Qwen3.5: Qwen3-Next's Gated DeltaNet + gated attention (its in_proj_qkv/z/b/a are in_proj_qkvz/ba's elements)
    "qwen3_5": Family(("Qwen3_5ForCausalLM",), ("qwen3_5_text", "qwen3_5"), _keys(), qk_norm="head",
                      layers="qwen3_next", partial_rotary=0.25),
    "qwen3_5_moe": Family(("Qwen3_5MoeForCausalLM",), ("qwen3_5_moe_text", "qwen3_5_moe"), _keys(), qk_norm="head",
                          moe="qwen_moe", layers="qwen3_next", partial_rotary=0.25),
    "minimax_m2": Family(("MiniMaxM2ForCausalLM",), ("minimax_m2",), _keys(), qk_norm="full", moe="mixtral",
                         partial_rotary=1.0, router_bias=True),
    "mamba2": Family(("Mamba2ForCausalLM",), ("mamba2",), {"hidden_size": "hidden_size", "num_layers": "num_hidden_layers"},
                     mamba=True, layers="mamba2"),
    # Nemotron-H: one block a layer (Mamba-2, attention without rotary, a ReLU² MLP, or MoE of ReLU² experts)
    "nemotron_h": Family(("NemotronHForCausalLM",), ("nemotron_h",), _keys(), norm_layout="block", mlp_gated=False,
                         mlp_bias="mlp_bias", layers="nemotron_h", moe="nemotron_h", nope_full_layers=True,
                         router_bias=True, ssm="nemotron_h", ties=False),
    # Falcon-H1: attention and a Mamba-2 mixer of the same normed input on every layer, then a gated MLP
    "falcon_h1": Family(("FalconH1ForCausalLM",), ("falcon_h1",), _keys(), qkv_bias="attention_bias",
                        o_bias="attention_bias", mlp_bias="mlp_bias", layers="falcon_h1", ssm="falcon_h1"),
    "gemma4": Family(("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"), ("gemma4_text", "gemma4"), _keys(),
                     norm_layout="sandwich", qk_norm="head", tied_default=True, layers="gemma4", moe="gemma4",
                     qkv_bias="attention_bias", o_bias="attention_bias"),
}

ARCHITECTURES = {a: name for name, f in FAMILIES.items() for a in f.architectures}
REMOTE_CODE_ARCHITECTURES = ("ChatGLMModel", "ChatGLMForConditionalGeneration")   # read apart (spec._glm_spec)
MODEL_TYPES = {t: name for name, f in FAMILIES.items() for t in f.model_types}
# Fields a family reads whose values tierlab does not model unless they take the value given here.
UNMODELLED = {
    "falcon": {"alibi": False},
    "opt": {"do_layer_norm_before": True},
    "gpt2": {"add_cross_attention": False},
    "deepseek_v32": {"attention_bias": False},
    "kimi_linear": {"attention_bias": False},
}
UNMODELLED_EQUALS = {"opt": [("word_embed_proj_dim", "hidden_size")]}


def family_name(config: dict) -> str | None:
    """The family of a config by its first architecture, else its ``model_type``, else (another
    wrapper, Mistral-Small-3.1) its ``text_config``'s ``model_type``; None if tierlab reads none by hand."""
    archs = config.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    mt = config.get("model_type")
    name = ARCHITECTURES.get(arch) if arch else None
    if name is None and isinstance(mt, str):
        name = MODEL_TYPES.get(mt)
    text = config.get("text_config")
    if name is None and isinstance(text, dict):
        tmt = text.get("model_type")
        name = MODEL_TYPES.get(tmt) if isinstance(tmt, str) else None
    return name


def family_of(config: dict, file: str | None) -> tuple[str, dict, str]:
    """(family name, the text model's config, field prefix) of a config; a wrapper's ``text_config``
    is where its language model lives."""
    archs = config.get("architectures") or []
    mt = config.get("model_type")
    text = config.get("text_config")
    name = family_name(config)
    if name is None:
        what = archs[0] if isinstance(archs, list) and archs else mt
        if not isinstance(what, str):           # not a name at all: nothing to build it from either
            if what is None:
                raise ConfigError("the config names no model family: expected 'architectures' (e.g. "
                                  "[\"LlamaForCausalLM\"]) or 'model_type' (e.g. \"llama\"); `tierlab models "
                                  "--families` lists those tierlab reads", file=file, field="architectures")
            raise ConfigError(f"expected a model family name, got {what!r}; `tierlab models --families` lists "
                              "those tierlab reads", file=file, field="architectures")
        raise UnknownFamily(f"model family {what!r} has no hand lowering (`tierlab models --families` lists those "
                            "that have one); tierlab trace, run and compare take it through Transformers "
                            "(docs/capture.md)", file=file, field="architectures", family=what)
    mt_text = text.get("model_type") if isinstance(text, dict) else mt
    given = {**config, **text} if isinstance(text, dict) else config
    defaults = {**transformers_defaults(mt_text if isinstance(mt_text, str) else "", name, given),
                **FAMILIES[name].defaults}
    _warn_misspelt(text if isinstance(text, dict) else config, mt_text, name, file,
                   "text_config." if isinstance(text, dict) else "")
    if text is not None:
        if not isinstance(text, dict):
            raise ConfigError(f"expected a JSON object, got {type(text).__name__}", file=file, field="text_config")
        merged = {**defaults, **{k: v for k, v in config.items() if k not in ("text_config", "vision_config")}}
        merged.update(text)
        return name, _spelled(merged, mt_text), "text_config."
    return name, _spelled({**defaults, **config}, mt), ""


CORE_DIMENSIONS = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size", "vocab_size")


def defaulted_core_keys(config) -> list[str]:
    """The core dimensions (hidden size, layers, heads, KV heads, MLP width, vocabulary) a config leaves
    out, so that a default (Transformers' config class, or the family's) gives them: named in a
    replay's provenance (``model_defaults``). Empty for a config of no family tierlab reads by hand."""
    name = family_name(config) if isinstance(config, dict) else None
    if name is None:
        return []
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    keys = FAMILIES[name].keys
    return [keys[k] for k in CORE_DIMENSIONS if keys.get(k)
            and config.get(keys[k]) is None and text.get(keys[k]) is None]


def _spelled(config: dict, model_type) -> dict:
    """``config`` with each key of its class's ``attribute_map`` that it lacks (the common spelling: Kimi-Linear's
    num_experts_per_tok) read from the key the class writes instead (num_experts_per_token), as Transformers does."""
    aliases = _defaults_table()["aliases"].get(model_type if isinstance(model_type, str) else "", {})
    return {**{old: config[new] for old, new in aliases.items() if old not in config and new in config}, **config}


class UnknownKeyWarning(UserWarning):
    """A config key its class does not have, spelt like one it has: the key it resembles takes its default."""


def _warn_misspelt(config: dict, model_type, family: str, file: str | None, prefix: str) -> None:
    """One line per key of ``config`` that its Transformers class does not know but that is spelt like
    one it does (``num_hiden_layers``): that field then comes from the class's default, silently but for this."""
    table = _defaults_table()
    mt = model_type if isinstance(model_type, str) and model_type in table["defaults"] else next(
        (t for t in FAMILIES[family].model_types if t in table["defaults"]), "")
    known = set(table["defaults"].get(mt, {})) | set(FAMILIES[family].defaults)
    for old, new in table["aliases"].get(mt, {}).items():
        known |= {old, new}
    if not known:
        return
    for key in config:
        if key in known or not isinstance(key, str) or key.startswith("_"):    # Transformers' own private keys
            continue                                                           # (_name_or_path, _sliding_window_pattern)
        near = closest(key, sorted(known), cutoff=0.85)
        if near is not None and near not in config:
            where = f"{file}: " if file else ""
            warnings.warn(UnknownKeyWarning(f"{where}{prefix}{key}: unknown key; did you mean {near!r}? ({near} is "
                                            "taken from its default)"), stacklevel=3)


@lru_cache(maxsize=None)
def _defaults_table() -> dict:
    return json.loads((configs_dir("models") / "defaults" / "transformers.json").read_text())


def transformers_defaults(model_type: str, family: str, config: dict) -> dict:
    """The field defaults of the Transformers config class of ``model_type`` (else of the family's first
    model type) that ``config`` leaves out: what a config written by ``save_pretrained`` omits
    (``configs/models/defaults/``, written from Transformers by :func:`tierlab.traces.capture.census.write_defaults`).
    A default is not applied where the config gives the key in its older spelling (Transformers 4's
    ``num_experts`` for Transformers 5's ``num_local_experts``)."""
    table = _defaults_table()
    if model_type not in table["defaults"]:
        model_type = next((t for t in FAMILIES[family].model_types if t in table["defaults"]), "")
    given = {new for old, new in table["aliases"].get(model_type, {}).items() if old in config}
    return {k: v for k, v in table["defaults"].get(model_type, {}).items() if k not in given}


# ---- MoE layouts: -> spec fields (num_experts, k, sizes, shared experts, which layers) --------------

def _mixtral(r: Reader, n: int, f: int) -> dict:
    return dict(num_experts=r.pos("num_local_experts"), num_experts_per_tok=r.pos("num_experts_per_tok"),
                moe_intermediate_size=f, moe_layers=(True,) * n)


def _qwen_moe(r: Reader, n: int, f: int) -> dict:
    # Transformers 4 writes num_experts, Transformers 5 num_local_experts (Qwen3-MoE, Qwen3-Next)
    e = r.int("num_experts") if r.config.get("num_experts") is not None else r.int("num_local_experts")
    step = r.pos("decoder_sparse_step", 1)
    only = r.config.get("mlp_only_layers") or []
    if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in only):
        raise r.err(f"expected a list of layer numbers, got {only!r}", "mlp_only_layers")
    shared = r.int("shared_expert_intermediate_size", 0)
    return dict(num_experts=e, num_experts_per_tok=r.int("num_experts_per_tok"),
                moe_intermediate_size=r.pos("moe_intermediate_size") if e else r.int("moe_intermediate_size", 0),
                shared_expert_size=shared, shared_expert_gate=bool(shared),
                moe_layers=tuple(i not in set(only) and e > 0 and (i + 1) % step == 0 for i in range(n)))


def _olmoe(r: Reader, n: int, f: int) -> dict:
    return dict(num_experts=r.pos("num_experts"), num_experts_per_tok=r.pos("num_experts_per_tok"),
                moe_intermediate_size=f, moe_layers=(True,) * n)


def _deepseek(r: Reader, n: int, f: int) -> dict:
    old = r.config.get("n_routed_experts") is None and r.config.get("num_local_experts") is not None   # Kimi-Linear
    e = r.int("num_local_experts") if old else r.int("n_routed_experts")
    dense = r.int("first_k_dense_replace", 0)
    freq = r.pos("moe_layer_freq", 1)
    mf = r.pos("moe_intermediate_size") if e else r.int("moe_intermediate_size", 0)
    shared = r.int("n_shared_experts", 0)
    method = r.config.get("topk_method")
    mt = r.config.get("model_type")
    if r.config.get("mlp_layer_types") is not None:       # GLM-4.7-Flash: "dense" / "sparse" per layer
        moe = [t == "sparse" for t in r.int_list("mlp_layer_types", n, ("dense", "sparse"))]
    else:
        moe = [i >= dense and i % freq == 0 for i in range(n)]
    # DeepSeek-V2's released configs (V2, V2-Lite) route each token to 6 experts; Transformers' class leaves
    # num_experts_per_tok None, so a config written without it means those 6 (DeepSeek-V2 paper, sec. 3.1)
    k = r.int("num_experts_per_tok", 6 if mt == "deepseek_v2" else r._MISSING)
    return dict(num_experts=e, num_experts_per_tok=k, moe_intermediate_size=mf,
                num_shared_experts=shared, shared_expert_size=shared * mf,
                router_bias=method == "noaux_tc",       # else the family's trait (Family.router_bias)
                moe_layers=tuple(e > 0 and moe[i] for i in range(n)))


def _gpt_oss(r: Reader, n: int, f: int) -> dict:
    k = r.pos("num_experts_per_tok", None) or r.pos("experts_per_token")
    return dict(num_experts=r.pos("num_local_experts"), num_experts_per_tok=k, moe_intermediate_size=f,
                gate_bias=True, expert_bias=True, moe_layers=(True,) * n)


def _llama4_moe(r: Reader, n: int, f: int) -> dict:
    step = r.pos("interleave_moe_layer_step", 1)
    listed = r.config.get("moe_layers")
    moe = set(r.int_list("moe_layers")) if listed is not None else {i for i in range(n) if (i + 1) % step == 0}
    ef = r.pos("intermediate_size")
    return dict(num_experts=r.pos("num_local_experts"), num_experts_per_tok=r.pos("num_experts_per_tok"),
                moe_intermediate_size=ef, shared_expert_size=ef, moe_layers=tuple(i in moe for i in range(n)))


def _jamba_moe(r: Reader, n: int, f: int) -> dict:
    e = r.int("num_experts", 1)
    period, offset = r.pos("expert_layer_period", 1), r.int("expert_layer_offset", 0)
    return dict(num_experts=e if e > 1 else 0, num_experts_per_tok=r.pos("num_experts_per_tok") if e > 1 else 0,
                moe_intermediate_size=f if e > 1 else 0,
                moe_layers=tuple(e > 1 and i % period == offset for i in range(n)))


def _granite_shared(r: Reader, n: int, f: int) -> dict:
    """GraniteMoeShared: Mixtral's experts plus one always-on expert of ``shared_intermediate_size`` (no gate)."""
    return dict(_mixtral(r, n, f), shared_expert_size=r.int("shared_intermediate_size", 0))


def _gemma4_moe(r: Reader, n: int, f: int) -> dict:
    """Gemma 4's MoE block (``enable_moe_block``): in every layer, beside the dense MLP, ``num_experts``
    experts of ``moe_intermediate_size``, ``top_k_experts`` per token."""
    on = r.flag("enable_moe_block")
    return dict(num_experts=r.pos("num_experts") if on else 0, num_experts_per_tok=r.pos("top_k_experts") if on else 0,
                moe_intermediate_size=r.pos("moe_intermediate_size") if on else 0, moe_layers=(on,) * n)


def _nemotron_h_moe(r: Reader, n: int, f: int) -> dict:
    """Nemotron-H's "moe" blocks: ``n_routed_experts`` ReLU² experts (top ``num_experts_per_tok``), of
    ``moe_latent_size`` in and out where set (between the fc1 / fc2 latent projections), and one shared
    ReLU² MLP of ``moe_shared_expert_intermediate_size`` (the model reads no ``n_shared_experts``)."""
    moe = tuple(t == "moe" for t in nemotron_h_blocks(r))
    if not any(moe):
        return dict(moe_layers=moe)
    e = r.pos("n_routed_experts") if r.config.get("n_routed_experts") is not None else r.pos("num_local_experts")
    return dict(num_experts=e, num_experts_per_tok=r.pos("num_experts_per_tok"),
                moe_intermediate_size=r.pos("moe_intermediate_size"),
                shared_expert_size=r.int("moe_shared_expert_intermediate_size"), moe_layers=moe,
                moe_latent_size=r.pos("moe_latent_size", 0))


MOE_READERS = {"nemotron_h": _nemotron_h_moe, "gemma4": _gemma4_moe, "granite_shared": _granite_shared, "mixtral": _mixtral, "qwen_moe": _qwen_moe, "olmoe": _olmoe, "deepseek": _deepseek,
               "gpt_oss": _gpt_oss, "llama4": _llama4_moe, "jamba": _jamba_moe}
