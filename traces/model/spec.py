"""Model specs: a Hugging Face ``config.json`` (or a preset name) read into a frozen :class:`ModelSpec`.

The families and their dialects are data in :mod:`tierlab.traces.model.families` (Llama, Mistral, Qwen2/3, Qwen2-
and Qwen3-MoE, Mixtral, OLMoE, DeepSeek-V2/V3, GLM-4.5, Gemma 2/3, Phi-3/4, gpt-oss, Llama 4, GPT-2,
OPT, Falcon, Jamba, Mamba-2, Nemotron-H, Falcon-H1, ...) plus GLM/ChatGLM (``model_type: chatglm``) read here. The list of weight
matrices and vectors of a model lives in one place, :mod:`tierlab.traces.model.shapes`; the parameter count and the
trace's weight tensors both derive from it. Not modelled: DeepSeek's and GLM-4.5's
multi-token-prediction layers (``num_nextn_predict_layers``), which inference without speculative
decoding does not run, and the vision towers of multimodal wrappers.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from tierlab.traces.model.dtypes import KV_DTYPES, check_dtype, nbytes_of
from tierlab.common.errors import ConfigError
from tierlab.common.suggest import closest
from tierlab.common.paths import configs_dir
from tierlab.traces.model.families import (ARCHITECTURES, FAMILIES, LAYER_READERS, MAX_DIMENSION, MODEL_TYPES, MOE_READERS,  # noqa: F401
                             REMOTE_CODE_ARCHITECTURES, UNMODELLED, UNMODELLED_EQUALS, Reader, family_of)
from tierlab.traces.model.gemma4 import read_gemma4
from tierlab.traces.model.layer_patterns import layer_count
from tierlab.traces.model.spec_fields import indexer_fields, qk_norm_layout, rotary_dim
from tierlab.traces.model.shapes import WeightShape, weight_shapes  # noqa: F401  (WeightShape is part of this module's API)
from tierlab.traces.model.ssm_fields import SSM_READERS, delta_net_fields, kda_fields, mamba2_fields, mamba_fields

STATE_KINDS = ("mamba", "linear")


@dataclass(frozen=True)
class ModelSpec:
    """Dimensions of a decoder-only transformer, in elements (not bytes).

    ``attention`` is ``"gqa"`` (MHA/GQA/MQA: ``num_kv_heads`` K and V heads of ``head_dim``) or
    ``"mla"`` (DeepSeek multi-head latent attention: the cache holds ``kv_lora_rank +
    qk_rope_head_dim`` elements per token per layer). ``moe_layers[i]`` says whether layer i's MLP
    is a mixture of ``num_experts`` experts (top ``num_experts_per_tok``) of intermediate size
    ``moe_intermediate_size``, plus ``num_shared_experts`` always-on experts of the same size.
    """

    name: str
    family: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    sliding_window: int | None = None
    qkv_bias: bool = False
    qk_norm: str = ""
    attention: str = "gqa"
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    router_bias: bool = False
    moe_layers: tuple[bool, ...] = ()
    moe_latent_size: int = 0      # Nemotron-H's latent MoE: experts of this width between fc1 / fc2 latent projections
    norm: str = "rms"
    norm_layout: str = "pre"
    o_bias: bool = False
    mlp_bias: bool = False
    mlp_gated: bool = True
    sinks: bool = False
    learned_positions: int = 0
    layer_attention: tuple = ()
    gate_bias: bool = False
    expert_bias: bool = False
    shared_expert_gate: bool = False
    ssm_inner: int = 0
    ssm_state: int = 0
    ssm_conv: int = 0
    ssm_dt_rank: int = 0
    ssm_conv_bias: bool = False
    ssm_proj_bias: bool = False
    ssm_inner_norms: bool = False
    nope_full_layers: bool = False
    ssm_version: int = 0          # 1: Mamba (Jamba), 2: Mamba-2 (heads, groups of B and C), 3: Gated DeltaNet,
    # 4: Kimi Delta Attention (a per-channel forget gate; q, k, v heads alike)
    attn_output_gate: bool = False  # Qwen3-Next: q_proj also gives a sigmoid gate of the attention output
    ssm_groups: int = 0
    ssm_heads: int = 0
    fused: tuple = ()             # "qkv" / "gate_up": projections run as one GEMM (same weights, one input read)
    lm_head_bias: bool = False    # Phi-2, PhiMoE: the LM head adds a bias of vocab_size
    nope_layers: tuple = ()       # layers that turn no rotary (SmolLM3's no_rope_layers), beside nope_full_layers
    rotary_dim: int = 0           # dimensions of each head rotary turns (partial_rotary_factor); 0: all of head_dim
    ssm_parallel: bool = False    # Falcon-H1: every layer runs a Mamba-2 mixer beside its attention, of the same input
    ssm_norm: bool = True         # Mamba-2's gated RMSNorm (a gain); False: silu(z) gates the scan's output alone
    ssm_out_bias: bool | None = None   # out_proj's bias where it is not in_proj's (Falcon-H1's projectors_bias)
    index_topk: int = 0           # DeepSeek-V3.2's sparse attention: each query reads at most this many KV rows,
    index_heads: int = 0          # chosen by a lightning indexer of index_heads query heads over its own
    index_head_dim: int = 0       # cached key per position (index_head_dim elements: tensor kind kv_index)
    gemma4: object = None         # Gemma 4's per-layer heads, KV sharing, per-layer inputs (tierlab.traces.model.gemma4.Gemma4Layout)
    config: dict = field(default_factory=dict, repr=False, compare=False, hash=False)
    source: str | None = field(default=None, repr=False, compare=False, hash=False)   # the config file, for errors

    # ---- derived quantities -------------------------------------------------------------------
    def is_moe(self, layer: int) -> bool:
        return bool(self.moe_layers) and self.moe_layers[layer]

    def layer_span(self, layer: int) -> tuple[str, int]:
        """Layer ``layer``'s mixer: ``("full", 0)``, ``("sliding", W)`` (keys ``[p - W + 1, p]``),
        ``("chunked", C)`` (keys from the start of p's chunk of C), ``("mamba", 0)`` (a Mamba mixer),
        ``("linear", 0)`` (Gated DeltaNet linear attention): the two keep a fixed state; or ``("none", 0)``:
        no mixer (Nemotron-H's MLP and MoE blocks)."""
        if self.layer_attention:
            return self.layer_attention[layer]
        return ("sliding", self.sliding_window) if self.sliding_window else ("full", 0)

    def layer_kind(self, layer: int) -> str:
        return self.layer_span(layer)[0]

    def keeps_state(self, layer: int) -> bool:
        """Whether layer ``layer`` keeps a fixed recurrent state (Mamba, Gated DeltaNet; Falcon-H1's beside its KV)."""
        return self.ssm_parallel or self.layer_kind(layer) in STATE_KINDS

    def attends(self, layer: int) -> bool:
        """Whether layer ``layer`` runs attention (keeps KV)."""
        return self.layer_kind(layer) not in (*STATE_KINDS, "none")

    @property
    def attention_layers(self) -> list[int]:
        return [i for i in range(self.num_layers) if self.attends(i)]

    def attention_summary(self) -> str:
        """The layers' mixers in a few words, e.g. ``sliding 128 x12, full x12``."""
        counts: dict[tuple, int] = {}
        for i in range(self.num_layers):
            counts[self.layer_span(i)] = counts.get(self.layer_span(i), 0) + 1
        if len(counts) == 1:
            (kind, span), = counts
            return kind + (f" {span}" if span else "")
        return ", ".join(f"{k}{f' {w}' if w else ''} x{n}" for (k, w), n in counts.items())

    @property
    def shared_expert_size(self) -> int:
        """Intermediate width of the shared (always-on) experts of a MoE layer, together."""
        return self.moe_intermediate_size * self.num_shared_experts

    @property
    def kv_row_elements(self) -> int:
        """Elements cached per token per attention layer (K and V together; MLA: the latent and rope key)."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    def kv_rows(self, layer: int, positions: int) -> int:
        """KV rows layer ``layer`` keeps per sequence when ``positions`` positions have been seen: all
        of them on a full layer, at most the window (sliding) or the chunk (chunked), none on a Mamba layer."""
        kind, span = self.layer_span(layer)
        if not self.attends(layer):
            return 0
        return positions if kind == "full" else min(positions, span)

    def index_row_bytes(self, kv_dtype: str = "bf16") -> int:
        """Bytes of one position's sparse-attention index key (DeepSeek-V3.2: ``index_head_dim`` elements,
        kept for every position of every attention layer beside its KV row; 0 without an indexer)."""
        return nbytes_of(self.index_head_dim, kv_dtype) if self.index_head_dim else 0

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> int:
        """KV-cache bytes one token of one sequence adds, summed over the attention layers (index keys
        included), while the context is within every window (:meth:`kv_bytes` gives the bytes at any context)."""
        check_dtype(kv_dtype, KV_DTYPES, "kv_dtype")
        return sum(nbytes_of(self.layer_kv_row(i), kv_dtype) + self.index_row_bytes(kv_dtype)
                   for i in self.attention_layers)

    def kv_bytes(self, positions: int, kv_dtype: str = "bf16") -> int:
        """KV-cache bytes of one sequence after ``positions`` positions: sliding and chunked layers keep
        at most their window or chunk (a ring of that many rows); index keys, every position."""
        check_dtype(kv_dtype, KV_DTYPES, "kv_dtype")
        return sum(self.layer_kv_bytes(i, positions, kv_dtype) for i in range(self.num_layers))

    def layer_kv_bytes(self, layer: int, positions: int, kv_dtype: str = "bf16") -> int:
        """KV-cache bytes layer ``layer`` keeps per sequence after ``positions`` positions: its KV rows
        (:meth:`kv_rows`) and, with a sparse-attention indexer, its index key of every position."""
        if not self.attends(layer):
            return 0
        return (self.kv_rows(layer, positions) * nbytes_of(self.layer_kv_row(layer), kv_dtype)
                + positions * self.index_row_bytes(kv_dtype))

    def layer_kv_row(self, layer: int) -> int:   # kv_row_elements, or Gemma 4's per layer (none where KV is shared)
        return self.gemma4.kv_row_elements(layer) if self.gemma4 else self.kv_row_elements

    @property
    def ssm_conv_channels(self) -> int:
        """Channels of the causal convolution: Mamba's x; Mamba-2's x, B and C."""
        return self.ssm_inner + (2 * self.ssm_groups * self.ssm_state if self.ssm_version >= 2 else 0)

    def state_elements(self) -> tuple[int, int]:
        """Elements of one Mamba layer's recurrent state per sequence: (convolution window, SSM state)."""
        return self.ssm_conv_channels * self.ssm_conv, self.ssm_inner * self.ssm_state

    def state_bytes(self, dtype: str = "bf16") -> int:
        """Recurrent-state bytes of one sequence, summed over the Mamba layers; fixed, whatever the context."""
        check_dtype(dtype, KV_DTYPES, "kv_dtype")
        per = sum(nbytes_of(e, dtype) for e in self.state_elements())
        return per * sum(1 for i in range(self.num_layers) if self.keeps_state(i))

    def param_count(self) -> int:
        """Parameters (elements) of every weight tensor; tied embeddings counted once."""
        return sum(w.elements for w in self.weight_shapes())

    def active_param_count(self) -> int:
        """Parameters one token touches: experts counted ``num_experts_per_tok`` times per MoE layer."""
        total = 0
        for w in self.weight_shapes():
            if w.expert < 0:
                total += w.elements
            elif w.expert < self.num_experts_per_tok:
                total += w.elements
        return total

    def weight_shapes(self) -> list[WeightShape]:
        """Every weight tensor in execution order (see :mod:`tierlab.traces.model.shapes`); computed once per spec."""
        return list(self._shapes)

    @cached_property
    def _shapes(self) -> tuple[WeightShape, ...]:
        return tuple(weight_shapes(self))

    def to_dict(self) -> dict:
        """Plain-JSON dimensions (without the raw config), plus ``params`` and ``kv_bytes_per_token``."""
        d = asdict(self)
        d.pop("config")
        d.pop("source")
        d["moe_layers"] = [i for i, m in enumerate(self.moe_layers) if m]
        d["params"] = self.param_count()
        d["active_params"] = self.active_param_count()
        d["kv_bytes_per_token_bf16"] = self.kv_bytes_per_token("bf16")
        d["layer_attention"] = [list(x) for x in (self.layer_attention or [self.layer_span(i) for i in range(self.num_layers)])]
        if self.ssm_inner:
            d["state_bytes_per_sequence_bf16"] = self.state_bytes("bf16")
        return d


# ---- reading configs ----------------------------------------------------------------------------

def list_presets() -> list[str]:
    """Names of the shipped model presets (``configs/models/*.json`` without the suffix)."""
    return sorted(p.stem for p in configs_dir("models").glob("*.json"))


def load_model(name_or_path: str | Path) -> ModelSpec:
    """Load a preset name, a ``config.json`` file, or a directory holding one."""
    p = Path(name_or_path)
    if p.is_dir():
        p = p / "config.json"
        if not p.is_file():
            raise ConfigError("directory holds no config.json", file=str(name_or_path))
    elif not p.is_file():
        preset = configs_dir("models") / f"{name_or_path}.json"
        if not preset.is_file():
            names = list_presets()
            near = closest(name_or_path, names)
            hint = f" (did you mean {near}?)" if near else f"; presets: {', '.join(names)}"
            raise ConfigError(f"no such model preset or config file{hint}", file=str(name_or_path))
        p = preset
    name = p.parent.name if p.name == "config.json" else p.stem
    return spec_from_config(read_config_json(p), name=name, file=str(p))


def read_config_json(p: Path):
    """The parsed JSON of a config file; unreadable or malformed JSON is a ConfigError naming it."""
    try:
        return json.loads(p.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read: {err}", file=str(p)) from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"malformed JSON at line {err.lineno} column {err.colno}: {err.msg}", file=str(p)) from None


def spec_from_config(config: dict, *, name: str = "model", file: str | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` from a parsed Hugging Face config dict (its family from
    :mod:`tierlab.traces.model.families`); ``file`` names the config in errors, then and later."""
    spec = _spec_from_config(config, name, file)
    object.__setattr__(spec, "source", file)     # frozen: set once, here
    return spec


def _spec_from_config(config: dict, name: str, file: str | None) -> ModelSpec:
    if not isinstance(config, dict):
        raise ConfigError("expected a JSON object", file=file)
    archs = config.get("architectures") or []
    # THUDM's remote-code ChatGLM (v1, 2, 3); Transformers' own GLM-4 (GlmForCausalLM, model_type glm) is a family
    if (isinstance(archs, list) and archs and archs[0] in REMOTE_CODE_ARCHITECTURES) \
            or config.get("model_type") == "chatglm":
        return _check_scale(_glm_spec(Reader(config, file), name, config), file, "num_layers")
    family, cfg, prefix = family_of(config, file)
    fam = FAMILIES[family]
    r = Reader(cfg, file, prefix)
    for key, want in UNMODELLED.get(family, {}).items():
        if cfg.get(key, want) != want:
            raise r.err(f"{key} = {cfg[key]!r} is not modelled for {family} (only {want!r})", key)
    for key, other in UNMODELLED_EQUALS.get(family, []):
        if key in cfg and cfg[key] != cfg.get(other):
            raise r.err(f"{key} {cfg[key]!r} differs from {other} {cfg.get(other)!r} (projections not modelled)", key)
    k = fam.keys
    if family == "mamba2":
        return _check_scale(_mamba2_spec(r, name, config, fam), file, prefix + k["num_layers"])
    h = r.pos(k["hidden_size"])
    layers = layer_count(r, k["num_layers"], fam.layers)
    heads = r.pos(k["num_heads"])
    kv_heads = r.pos(k["num_kv_heads"], heads) if k.get("num_kv_heads") else heads
    if family == "falcon" and not cfg.get("new_decoder_architecture"):
        kv_heads = 1 if r.flag("multi_query", True) else heads
    head_dim = (r.pos(k["head_dim"], None) if k.get("head_dim") else None) \
        or (0 if fam.mla else _div(h, heads, r, k["hidden_size"]))      # MLA: from its own head dims below
    ffn = r.pos(k["intermediate_size"], None)
    if ffn is None and fam.moe == "qwen_moe":     # Qwen3.5-MoE: every layer's MLP is experts (their own size)
        ffn = 0
    if ffn is None:
        if fam.mlp_gated:
            ffn = r.pos(k["intermediate_size"])      # required: names the missing field
        ffn = 4 * h                                  # GPT-2's n_inner / Falcon's ffn_hidden_size default
    max_pos = r.pos(k["max_position_embeddings"])
    spans = tuple(LAYER_READERS[fam.layers](r, layers))
    windows = [w for kind, w in spans if kind == "sliding"]
    kw: dict = dict(
        name=name, family=family, hidden_size=h, num_layers=layers, num_heads=heads, num_kv_heads=kv_heads,
        head_dim=head_dim, intermediate_size=ffn, vocab_size=r.pos("vocab_size"), max_position_embeddings=max_pos,
        tie_word_embeddings=fam.ties and r.flag("tie_word_embeddings", fam.tied_default), config=config,
        sliding_window=max(windows) if windows else None, layer_attention=spans,
        qkv_bias=r.flag(fam.qkv_bias), o_bias=r.flag(fam.o_bias), mlp_bias=r.flag(fam.mlp_bias),
        qk_norm=qk_norm_layout(r, fam.qk_norm),
        norm=fam.norm, norm_layout=fam.norm_layout, mlp_gated=fam.mlp_gated, sinks=fam.sinks,
        nope_full_layers=fam.nope_full_layers, fused=fam.fused,
        learned_positions=max_pos + fam.learned_positions if fam.learned_positions >= 0 else 0,
    )
    if fam.lm_head_bias:
        kw["lm_head_bias"] = r.flag(fam.lm_head_bias)
    if fam.parallel:
        key, default, layout = fam.parallel
        kw["norm_layout"] = layout if r.flag(key, default) else "pre"
    if fam.nope and r.config.get(fam.nope) is not None:      # SmolLM3: no_rope_layers[i] is 0 where i has no rotary
        kw["nope_layers"] = tuple(i for i, x in enumerate(r.int_list(fam.nope, layers, (0, 1))) if not x)
    if fam.nope_full_layers and not windows:   # EXAONE 4: without a sliding window every layer turns rotary
        kw["nope_full_layers"] = family != "exaone4"
    if fam.partial_rotary is not None:
        kw["rotary_dim"] = rotary_dim(r, head_dim, fam.partial_rotary)
    if family == "falcon" and cfg.get("new_decoder_architecture") and r.int("num_ln_in_parallel_attn", 2) == 2:
        kw["norm_layout"] = "parallel2"
    if family == "falcon" and not r.flag("parallel_attn", True):
        kw["norm_layout"] = "pre"
    if fam.moe:
        kw.update(MOE_READERS[fam.moe](r, layers, ffn))
        if kw.get("shared_expert_size"):
            size = kw.pop("shared_expert_size")
            if size % kw["moe_intermediate_size"]:
                raise r.err(f"shared expert size {size} is not a multiple of the expert size "
                            f"{kw['moe_intermediate_size']}", ("moe_" if family == "nemotron_h" else "")
                            + "shared_expert_intermediate_size")
            kw["num_shared_experts"] = size // kw["moe_intermediate_size"]
        else:
            kw.pop("shared_expert_size", None)
    if fam.router_bias and kw.get("num_experts"):
        kw["router_bias"] = True
    if fam.mla:
        q_lora = cfg.get("q_lora_rank")
        kw.update(attention="mla", q_lora_rank=r.pos("q_lora_rank") if q_lora is not None else None,
                  kv_lora_rank=r.pos("kv_lora_rank"), qk_nope_head_dim=r.int("qk_nope_head_dim"),
                  qk_rope_head_dim=r.pos("qk_rope_head_dim"), v_head_dim=r.pos("v_head_dim"))
        kw["head_dim"] = kw["qk_nope_head_dim"] + kw["qk_rope_head_dim"]
    if fam.layers == "qwen3_next":   # Gated DeltaNet on the linear layers, gated attention on the others
        kw.update(delta_net_fields(r))
    if family == "kimi_linear":  # Kimi Delta Attention on the linear layers, MLA (no rotary) on the others
        kw.update(kda_fields(r))
    if fam.indexer:
        kw.update(indexer_fields(r, kw["q_lora_rank"]))
    if fam.mamba:
        kw.update(mamba_fields(r, h))
    if fam.ssm:                      # Mamba-2 in a hybrid's own dialect (tierlab.traces.model.ssm_fields)
        kw.update(SSM_READERS[fam.ssm](r, h))
    if family == "gemma4":           # per-layer heads, KV sharing, per-layer inputs (tierlab.traces.model.gemma4)
        kw["gemma4"] = read_gemma4(r, spans, kv_heads, head_dim, ffn)
    spec = ModelSpec(**kw)
    if spec.num_experts and spec.num_experts_per_tok < 1:
        raise r.err(f"expected at least 1 expert per token, got {spec.num_experts_per_tok}", "num_experts_per_tok")
    if spec.num_experts and spec.num_experts_per_tok > spec.num_experts:
        raise r.err(f"num_experts_per_tok {spec.num_experts_per_tok} exceeds the {spec.num_experts} experts",
                    "num_experts_per_tok")
    if spec.attention == "gqa" and heads % spec.num_kv_heads:
        raise r.err(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {spec.num_kv_heads}",
                    k.get("num_kv_heads") or "num_key_value_heads")
    return _check_scale(spec, file, prefix + k["num_layers"])


# Bounds that keep a config within what a trace can describe (int32 layer/expert columns, uint64
# addresses) and what tierlab can list in memory; real models are orders of magnitude inside them.
MAX_LAYERS = 4096
MAX_EXPERT_INSTANCES = 1 << 20        # layers x experts (DeepSeek-V3: 61 x 256)
MAX_PARAMS = 1 << 56                  # elements; fp32 weights must stay far below 2**64 bytes


def _check_scale(spec: ModelSpec, file: str | None, layers_key: str) -> ModelSpec:
    if spec.num_layers > MAX_LAYERS:
        raise ConfigError(f"{spec.num_layers} layers is beyond what tierlab models (at most {MAX_LAYERS})",
                          file=file, field=layers_key)
    experts = spec.num_layers * spec.num_experts
    if experts > MAX_EXPERT_INSTANCES:
        key = {"mixtral": "num_local_experts", "deepseek_v3": "n_routed_experts", "deepseek_v2": "n_routed_experts",
               "glm4_moe": "n_routed_experts", "gpt_oss": "num_local_experts",
               "llama4": "num_local_experts"}.get(spec.family, "num_experts")
        raise ConfigError(f"{spec.num_experts} experts in each of {spec.num_layers} layers is beyond what tierlab "
                          f"models (at most {MAX_EXPERT_INSTANCES} layer-experts)", file=file, field=key)
    params = spec.param_count()
    if params > MAX_PARAMS:
        raise ConfigError(f"{params} parameters is beyond what tierlab models (at most 2**56)", file=file,
                          field="hidden_size")
    return spec


def _glm_spec(r: Reader, name: str, config: dict) -> ModelSpec:
    """ChatGLM2/3 configs (THUDM's remote code): fused query_key_value and dense_h_to_4h are lowered as separate
    q/k/v and gate/up tensors of the same total size. The first ChatGLM-6B (``inner_hidden_size``) is
    :func:`_chatglm_v1_spec`."""
    if "inner_hidden_size" in config or "position_encoding_2d" in config or "max_sequence_length" in config:
        return _chatglm_v1_spec(r, name, config)
    h = r.pos("hidden_size")
    heads = r.pos("num_attention_heads")
    mqa = bool(config.get("multi_query_attention", False))
    kv_heads = r.pos("multi_query_group_num") if mqa else heads
    return ModelSpec(
        name=name, family="chatglm", hidden_size=h, num_layers=r.pos("num_layers"), num_heads=heads,
        num_kv_heads=kv_heads, head_dim=r.pos("kv_channels", None) or _div(h, heads, r, "hidden_size"),
        intermediate_size=r.pos("ffn_hidden_size"), vocab_size=r.pos("padded_vocab_size"),
        max_position_embeddings=r.pos("seq_length", None) or r.pos("max_position_embeddings"),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=bool(config.get("add_qkv_bias", False) or config.get("add_bias_linear", False)),
        config=config,
    )


def _chatglm_v1_spec(r: Reader, name: str, config: dict) -> ModelSpec:
    """The first ChatGLM-6B (THUDM/chatglm-6b's modeling_chatglm.py): multi-head attention (a fused
    query_key_value with bias, dense with bias), LayerNorms with bias before attention and MLP (GLM's
    DeepNorm residual scales the normed input, no weights), a plain GELU MLP of ``inner_hidden_size``
    (default 4 x hidden) with biases, a final LayerNorm and an untied lm_head. ``position_encoding_2d``
    turns two rotaries, each over half of every head (the position and the block position): the whole
    head turns, as one rotary over head_dim does."""
    h = r.pos("hidden_size")
    heads = r.pos("num_attention_heads")
    return ModelSpec(
        name=name, family="chatglm", hidden_size=h, num_layers=r.pos("num_layers"), num_heads=heads,
        num_kv_heads=heads, head_dim=_div(h, heads, r, "hidden_size"),
        intermediate_size=r.pos("inner_hidden_size", None) or 4 * h, vocab_size=r.pos("vocab_size"),
        max_position_embeddings=r.pos("max_sequence_length", 2048),
        tie_word_embeddings=r.flag("tie_word_embeddings", False), norm="layer", qkv_bias=True, o_bias=True,
        mlp_bias=True, mlp_gated=False, fused=("qkv",), config=config)


def _mamba2_spec(r: Reader, name: str, config: dict, fam) -> ModelSpec:
    """Mamba-2 (``Mamba2ForCausalLM``): every layer a norm and a Mamba-2 mixer, no attention, no MLP."""
    h, layers = r.pos("hidden_size"), r.pos("num_hidden_layers")
    ssm = mamba2_fields(r, h)
    return ModelSpec(
        name=name, family="mamba2", hidden_size=h, num_layers=layers, num_heads=ssm["ssm_heads"],
        num_kv_heads=ssm["ssm_heads"], head_dim=ssm["ssm_inner"] // ssm["ssm_heads"], intermediate_size=0,
        vocab_size=r.pos("vocab_size"), max_position_embeddings=r.pos("max_position_embeddings", MAX_DIMENSION),
        tie_word_embeddings=r.flag("tie_word_embeddings", fam.tied_default), config=config,
        layer_attention=(("mamba", 0),) * layers, norm_layout="mixer", **ssm)


def _div(a: int, b: int, r: Reader, fieldname: str) -> int:
    """A head's width where the config gives none: ``hidden_size // num_attention_heads``, floored, as
    Transformers' attention modules take it (GLM-4.5-MoE's default 4096 / 96 heads: 42 each)."""
    if b <= 0 or a < b:
        raise r.err(f"{a} is smaller than num_attention_heads {b}: a head would have no width", fieldname)
    return a // b


def human_count(n: float) -> str:
    """``8.03B``-style rendering of a count."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.{max(0, 3 - int(math.log10(abs(n) / scale)) - 1)}f}{unit}"
    return str(int(n))
