"""Model specs: a Hugging Face ``config.json`` (or a preset name) read into a frozen :class:`ModelSpec`.

Supported families (``architectures[0]`` or ``model_type``): Llama, Mistral (sliding window), Qwen2
(q/k/v bias), Mixtral, Qwen3-MoE (q/k norms), DeepSeek-V3 (MLA, shared experts, first dense layers)
and GLM (``model_type: chatglm``). The list of weight matrices and vectors of a model lives in one
place, :meth:`ModelSpec.weight_shapes`; the parameter count and the trace's weight tensors both
derive from it. Not modelled: DeepSeek's multi-token-prediction layers (``num_nextn_predict_layers``),
which inference without speculative decoding does not run.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

from traces.dtypes import KV_DTYPES, check_dtype, nbytes_of
from common.errors import ConfigError
from common.suggest import closest
from common.paths import configs_dir

# architectures[0] -> family; model_type is the fallback key.
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "MixtralForCausalLM": "mixtral",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "ChatGLMModel": "chatglm",
    "ChatGLMForConditionalGeneration": "chatglm",
    "GlmForCausalLM": "chatglm",
}
MODEL_TYPES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "mixtral": "mixtral",
               "qwen3_moe": "qwen3_moe", "deepseek_v3": "deepseek_v3", "chatglm": "chatglm"}


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
    qk_norm: bool = False
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
    config: dict = field(default_factory=dict, repr=False, compare=False, hash=False)

    # ---- derived quantities -------------------------------------------------------------------
    def is_moe(self, layer: int) -> bool:
        return bool(self.moe_layers) and self.moe_layers[layer]

    @property
    def kv_row_elements(self) -> int:
        """Elements cached per token per layer (K and V together; MLA: the latent and rope key)."""
        if self.attention == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> int:
        """KV-cache bytes one token of one sequence occupies, summed over all layers."""
        check_dtype(kv_dtype, KV_DTYPES, "kv_dtype")
        return self.num_layers * nbytes_of(self.kv_row_elements, kv_dtype)

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
        """Every weight tensor in execution order (embedding, layers, final norm, LM head)."""
        h = self.hidden_size
        out = [WeightShape("embed_tokens", -1, -1, self.vocab_size, h)]
        for i in range(self.num_layers):
            p = f"layers.{i}."
            out.append(WeightShape(p + "input_layernorm", i, -1, h, 1))
            out.extend(self._attention_shapes(i, p))
            out.append(WeightShape(p + "post_attention_layernorm", i, -1, h, 1))
            out.extend(self._mlp_shapes(i, p))
        out.append(WeightShape("norm", -1, -1, h, 1))
        if not self.tie_word_embeddings:
            out.append(WeightShape("lm_head", -1, -1, self.vocab_size, h))
        return out

    def _attention_shapes(self, i: int, p: str) -> list[WeightShape]:
        h, a = self.hidden_size, p + "self_attn."
        if self.attention == "mla":
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            s = []
            if self.q_lora_rank:
                s += [WeightShape(a + "q_a_proj", i, -1, self.q_lora_rank, h),
                      WeightShape(a + "q_a_layernorm", i, -1, self.q_lora_rank, 1),
                      WeightShape(a + "q_b_proj", i, -1, self.num_heads * qk, self.q_lora_rank)]
            else:
                s += [WeightShape(a + "q_proj", i, -1, self.num_heads * qk, h)]
            s += [WeightShape(a + "kv_a_proj_with_mqa", i, -1, self.kv_lora_rank + self.qk_rope_head_dim, h),
                  WeightShape(a + "kv_a_layernorm", i, -1, self.kv_lora_rank, 1),
                  WeightShape(a + "kv_b_proj", i, -1,
                              self.num_heads * (self.qk_nope_head_dim + self.v_head_dim), self.kv_lora_rank),
                  WeightShape(a + "o_proj", i, -1, h, self.num_heads * self.v_head_dim)]
            return s
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        s = [WeightShape(a + "q_proj", i, -1, q, h), WeightShape(a + "k_proj", i, -1, kv, h),
             WeightShape(a + "v_proj", i, -1, kv, h)]
        if self.qkv_bias:
            s += [WeightShape(a + "q_proj.bias", i, -1, q, 1), WeightShape(a + "k_proj.bias", i, -1, kv, 1),
                  WeightShape(a + "v_proj.bias", i, -1, kv, 1)]
        if self.qk_norm:
            s += [WeightShape(a + "q_norm", i, -1, self.head_dim, 1),
                  WeightShape(a + "k_norm", i, -1, self.head_dim, 1)]
        s.append(WeightShape(a + "o_proj", i, -1, h, q))
        return s

    def _mlp_shapes(self, i: int, p: str) -> list[WeightShape]:
        h, m = self.hidden_size, p + "mlp."
        if not self.is_moe(i):
            f = self.intermediate_size
            return [WeightShape(m + "gate_proj", i, -1, f, h), WeightShape(m + "up_proj", i, -1, f, h),
                    WeightShape(m + "down_proj", i, -1, h, f)]
        f = self.moe_intermediate_size
        s = [WeightShape(m + "gate", i, -1, self.num_experts, h)]
        if self.router_bias:
            s.append(WeightShape(m + "gate.e_score_correction_bias", i, -1, self.num_experts, 1))
        for e in range(self.num_experts):
            x = f"{m}experts.{e}."
            s += [WeightShape(x + "gate_proj", i, e, f, h), WeightShape(x + "up_proj", i, e, f, h),
                  WeightShape(x + "down_proj", i, e, h, f)]
        if self.num_shared_experts:
            fs = f * self.num_shared_experts
            x = m + "shared_experts."
            s += [WeightShape(x + "gate_proj", i, -1, fs, h), WeightShape(x + "up_proj", i, -1, fs, h),
                  WeightShape(x + "down_proj", i, -1, h, fs)]
        return s

    def to_dict(self) -> dict:
        """Plain-JSON dimensions (without the raw config), plus ``params`` and ``kv_bytes_per_token``."""
        d = asdict(self)
        d.pop("config")
        d["moe_layers"] = [i for i, m in enumerate(self.moe_layers) if m]
        d["params"] = self.param_count()
        d["active_params"] = self.active_param_count()
        d["kv_bytes_per_token_bf16"] = self.kv_bytes_per_token("bf16")
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
    try:
        config = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read: {err}", file=str(p)) from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"malformed JSON at line {err.lineno} column {err.colno}: {err.msg}", file=str(p)) from None
    name = p.parent.name if p.name == "config.json" else p.stem
    return spec_from_config(config, name=name, file=str(p))


def spec_from_config(config: dict, *, name: str = "model", file: str | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` from a parsed Hugging Face config dict."""
    if not isinstance(config, dict):
        raise ConfigError("expected a JSON object", file=file)
    r = _Reader(config, file)
    archs = config.get("architectures") or []
    family = None
    model_type = config.get("model_type")
    if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0] in ARCHITECTURES:
        family = ARCHITECTURES[archs[0]]
    elif isinstance(model_type, str) and model_type in MODEL_TYPES:
        family = MODEL_TYPES[model_type]
    if family is None:
        what = archs[0] if isinstance(archs, list) and archs else config.get("model_type")
        raise ConfigError(f"unsupported model family {what!r}; supported: {', '.join(sorted(ARCHITECTURES))}",
                          file=file, field="architectures")
    if family == "chatglm":
        return _check_scale(_glm_spec(r, name, config), file, "num_layers")
    h = r.pos("hidden_size")
    layers = r.pos("num_hidden_layers")
    heads = r.pos("num_attention_heads")
    kw: dict = dict(
        name=name, family=family, hidden_size=h, num_layers=layers, num_heads=heads,
        num_kv_heads=r.pos("num_key_value_heads", heads),
        head_dim=r.pos("head_dim", None) or _div(h, heads, r, "hidden_size"),
        intermediate_size=r.pos("intermediate_size"),
        vocab_size=r.pos("vocab_size"),
        max_position_embeddings=r.pos("max_position_embeddings"),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        config=config,
    )
    if family == "mistral" or (family == "qwen2" and config.get("use_sliding_window")):
        sw = config.get("sliding_window")
        kw["sliding_window"] = r.pos("sliding_window") if sw is not None else None
    if family == "qwen2":
        kw["qkv_bias"] = True
    if family == "llama":
        kw["qkv_bias"] = bool(config.get("attention_bias", False))
    if family == "mixtral":
        kw.update(num_experts=r.pos("num_local_experts"), num_experts_per_tok=r.pos("num_experts_per_tok"),
                  moe_intermediate_size=kw["intermediate_size"], moe_layers=(True,) * layers)
    if family == "qwen3_moe":
        n = r.int("num_experts")
        step = r.pos("decoder_sparse_step", 1)
        only = config.get("mlp_only_layers") or []
        if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in only):
            raise ConfigError(f"expected a list of layer numbers, got {only!r}", file=file, field="mlp_only_layers")
        only = set(only)
        kw.update(qk_norm=True, num_experts=n, num_experts_per_tok=r.int("num_experts_per_tok"),
                  moe_intermediate_size=r.pos("moe_intermediate_size") if n else r.int("moe_intermediate_size", 0),
                  moe_layers=tuple(i not in only and n > 0 and (i + 1) % step == 0 for i in range(layers)))
    if family == "deepseek_v3":
        n = r.int("n_routed_experts")
        k_dense = r.int("first_k_dense_replace", 0)
        freq = r.pos("moe_layer_freq", 1)
        q_lora = config.get("q_lora_rank")
        kw.update(attention="mla", q_lora_rank=r.pos("q_lora_rank") if q_lora is not None else None,
                  kv_lora_rank=r.pos("kv_lora_rank"), qk_nope_head_dim=r.int("qk_nope_head_dim"),
                  qk_rope_head_dim=r.pos("qk_rope_head_dim"), v_head_dim=r.pos("v_head_dim"),
                  num_experts=n, num_experts_per_tok=r.int("num_experts_per_tok"),
                  moe_intermediate_size=r.pos("moe_intermediate_size") if n else r.int("moe_intermediate_size", 0),
                  num_shared_experts=r.int("n_shared_experts", 0),
                  router_bias=config.get("topk_method") == "noaux_tc",
                  moe_layers=tuple(n > 0 and i >= k_dense and i % freq == 0 for i in range(layers)))
        kw["head_dim"] = kw["qk_nope_head_dim"] + kw["qk_rope_head_dim"]
    spec = ModelSpec(**kw)
    if spec.num_experts and spec.num_experts_per_tok < 1:
        raise ConfigError(f"expected at least 1 expert per token, got {spec.num_experts_per_tok}", file=file,
                          field="num_experts_per_tok")
    if spec.num_experts and spec.num_experts_per_tok > spec.num_experts:
        raise ConfigError(f"num_experts_per_tok {spec.num_experts_per_tok} exceeds the {spec.num_experts} experts",
                          file=file, field="num_experts_per_tok")
    if spec.attention == "gqa" and heads % spec.num_kv_heads:
        raise ConfigError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads "
                          f"{spec.num_kv_heads}", file=file, field="num_key_value_heads")
    return _check_scale(spec, file, "num_hidden_layers")


# Bounds that keep a config within what a trace can describe (int32 layer/expert columns, uint64
# addresses) and what tierlab can list in memory; real models are orders of magnitude inside them.
MAX_DIMENSION = 2**31 - 1
MAX_LAYERS = 4096
MAX_EXPERT_INSTANCES = 1 << 20        # layers x experts (DeepSeek-V3: 61 x 256)
MAX_PARAMS = 1 << 56                  # elements; fp32 weights must stay far below 2**64 bytes


def _check_scale(spec: ModelSpec, file: str | None, layers_key: str) -> ModelSpec:
    if spec.num_layers > MAX_LAYERS:
        raise ConfigError(f"{spec.num_layers} layers is beyond what tierlab models (at most {MAX_LAYERS})",
                          file=file, field=layers_key)
    experts = spec.num_layers * spec.num_experts
    if experts > MAX_EXPERT_INSTANCES:
        key = {"mixtral": "num_local_experts", "deepseek_v3": "n_routed_experts"}.get(spec.family, "num_experts")
        raise ConfigError(f"{spec.num_experts} experts in each of {spec.num_layers} layers is beyond what tierlab "
                          f"models (at most {MAX_EXPERT_INSTANCES} layer-experts)", file=file, field=key)
    params = spec.param_count()
    if params > MAX_PARAMS:
        raise ConfigError(f"{params} parameters is beyond what tierlab models (at most 2**56)", file=file,
                          field="hidden_size")
    return spec


def _glm_spec(r: "_Reader", name: str, config: dict) -> ModelSpec:
    """GLM / ChatGLM configs: fused query_key_value and dense_h_to_4h are lowered as separate
    q/k/v and gate/up tensors of the same total size."""
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


def _div(a: int, b: int, r: "_Reader", fieldname: str) -> int:
    if b <= 0 or a % b:
        raise ConfigError(f"{a} is not divisible by num_attention_heads {b}", file=r.file, field=fieldname)
    return a // b


class _Reader:
    """Typed field access that names the file and field on error."""

    _MISSING = object()

    def __init__(self, config: dict, file: str | None):
        self.config, self.file = config, file

    def int(self, key: str, default=_MISSING):
        if key not in self.config or self.config[key] is None:
            if default is self._MISSING:
                raise ConfigError("missing required field", file=self.file, field=key)
            return default
        v = self.config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"expected a non-negative integer, got {v!r}", file=self.file, field=key)
        if v > MAX_DIMENSION:
            raise ConfigError(f"expected at most {MAX_DIMENSION}, got {v}", file=self.file, field=key)
        return v

    def pos(self, key: str, default=_MISSING):
        """A dimension: an integer of at least 1 (a zero-sized model is a broken config)."""
        if key not in self.config or self.config[key] is None:
            return self.int(key, default)
        v = self.config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"expected a positive integer, got {v!r}", file=self.file, field=key)
        return self.int(key)


def human_count(n: float) -> str:
    """``8.03B``-style rendering of a count."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.{max(0, 3 - int(math.log10(abs(n) / scale)) - 1)}f}{unit}"
    return str(int(n))
