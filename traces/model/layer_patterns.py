"""Layer patterns: how each family's config says which mixer every layer runs.

A reader takes a :class:`tierlab.traces.model.config_reader.Reader` of the text model's config and the layer count and
returns, per layer, ``("full", 0)`` | ``("sliding", W)`` | ``("chunked", C)`` (attention over all keys,
the last W, or the current chunk of C), ``("mamba", 0)`` (a Mamba / Mamba-2 mixer), ``("linear", 0)``
(Gated DeltaNet, Kimi Delta Attention) or ``("none", 0)`` (no mixer: Nemotron-H's MLP and MoE blocks). ``Family.layers``
names its reader in :data:`LAYER_READERS`; :data:`LAYER_PATTERNS` says in a few words what each reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tierlab.traces.model.config_reader import Reader


def _window(r: Reader, n: int, key: str = "sliding_window") -> list:
    w = r.pos(key, None)
    return [("sliding", w) if w else ("full", 0)] * n


def _qwen_window(r: Reader, n: int) -> list:
    if r.config.get("layer_types") is not None:
        return _layer_types(r, n)
    if not r.flag("use_sliding_window"):
        return [("full", 0)] * n
    w = r.pos("sliding_window")
    top = r.int("max_window_layers", n)
    return [("sliding", w) if i >= top else ("full", 0) for i in range(n)]


def _layer_types(r: Reader, n: int, sliding_every: int = 0) -> list:
    """``layer_types`` when given (Transformers >= 4.53 writes it), else the family's pattern:
    layer i slides unless (i + 1) is a multiple of ``sliding_every`` (Gemma 3) or, with 0,
    unless i is odd (Gemma 2)."""
    if "layer_types" in r.config and r.config["layer_types"] is not None:
        types = r.int_list("layer_types", n, ("sliding_attention", "full_attention"))
        w = r.pos("sliding_window") if "sliding_attention" in types else 0
        return [("sliding", w) if t == "sliding_attention" else ("full", 0) for t in types]
    w = r.pos("sliding_window")
    if sliding_every:
        return [("full", 0) if (i + 1) % sliding_every == 0 else ("sliding", w) for i in range(n)]
    return [("sliding", w) if i % 2 == 0 else ("full", 0) for i in range(n)]


def _gemma3(r: Reader, n: int) -> list:
    return _layer_types(r, n, r.pos("sliding_window_pattern", 6))


def _gemma4(r: Reader, n: int) -> list:
    """Gemma 3's 5 sliding : 1 global, the last layer always global (Gemma4TextConfig forces it so)."""
    return _layer_types(r, n, 6)[:-1] + [("full", 0)]


def _llama4(r: Reader, n: int) -> list:
    """Chunked attention (``attention_chunk_size``) on the rotary layers, global attention on the
    NoPE layers: ``no_rope_layers[i]`` is 1 where layer i uses rotary (default: every 4th layer NoPE)."""
    c = r.pos("attention_chunk_size", None)
    if "no_rope_layers" in r.config and r.config["no_rope_layers"]:
        rope = r.int_list("no_rope_layers", n, (0, 1))
    else:
        step = r.pos("no_rope_layer_interval", 4)
        rope = [int((i + 1) % step != 0) for i in range(n)]
    return [("chunked", c) if c and rope[i] else ("full", 0) for i in range(n)]


def _qwen3_next(r: Reader, n: int) -> list:
    """Gated DeltaNet (``linear_attention``) layers with full attention every ``full_attention_interval``."""
    if r.config.get("layer_types") is not None:
        types = r.int_list("layer_types", n, ("linear_attention", "full_attention"))
    else:
        k = r.pos("full_attention_interval", 4)
        types = ["full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(n)]
    return [("linear", 0) if t == "linear_attention" else ("full", 0) for t in types]


def _jamba(r: Reader, n: int) -> list:
    period, offset = r.pos("attn_layer_period"), r.int("attn_layer_offset")
    w = r.pos("sliding_window", None)
    att = ("sliding", w) if w else ("full", 0)
    return [att if i % period == offset else ("mamba", 0) for i in range(n)]


def _full(r: Reader, n: int) -> list:
    return [("full", 0)] * n


def _mamba_only(r: Reader, n: int) -> list:
    return [("mamba", 0)] * n


# Nemotron-H: each layer is one block, named in layers_block_type (Transformers 5) or by one character of
# hybrid_override_pattern (Transformers 4 and the hub's configs); "mamba" / "attention" are the legacy names
NEMOTRON_H_BLOCKS = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
LEGACY_BLOCKS = {"mamba": "linear_attention", "attention": "full_attention"}
NEMOTRON_H_DEFAULT = ["linear_attention", "moe", "full_attention", "mlp"]    # NemotronHConfig's own


def nemotron_h_blocks(r: Reader) -> list:
    """Nemotron-H's block per layer: ``layers_block_type`` (or its alias ``layer_types``), else
    ``hybrid_override_pattern``, else the config class's default; the layer count is its length
    (Transformers ignores ``num_hidden_layers`` beside it)."""
    allowed = (*NEMOTRON_H_BLOCKS.values(), *LEGACY_BLOCKS)
    for key in ("layers_block_type", "layer_types"):
        if r.config.get(key) is not None:
            types = [LEGACY_BLOCKS.get(t, t) for t in r.int_list(key, allowed=allowed)]
            break
    else:
        pattern = r.config.get("hybrid_override_pattern")
        if pattern is None:
            return list(NEMOTRON_H_DEFAULT)
        if not isinstance(pattern, str) or any(ch not in NEMOTRON_H_BLOCKS for ch in pattern):
            raise r.err(f"expected a string of {', '.join(NEMOTRON_H_BLOCKS)} (one a layer), got {pattern!r}",
                        "hybrid_override_pattern")
        key, types = "hybrid_override_pattern", [NEMOTRON_H_BLOCKS[ch] for ch in pattern]
    if not types:
        raise r.err("expected at least one layer", key)
    return types


def layer_count(r: Reader, key: str, pattern: str) -> int:
    """The number of layers: the length of Nemotron-H's block pattern, else the config's ``key``."""
    return len(nemotron_h_blocks(r)) if pattern == "nemotron_h" else r.pos(key)


def _nemotron_h(r: Reader, n: int) -> list:
    kinds = {"linear_attention": ("mamba", 0), "full_attention": ("full", 0)}
    return [kinds.get(t, ("none", 0)) for t in nemotron_h_blocks(r)]


def _kimi_linear(r: Reader, n: int) -> list:
    """Kimi Delta Attention (``linear_attention``) layers and MLA on layers 4, 8, ... (0-based), or as
    ``layer_types``, or the checkpoint's ``linear_attn_config`` (``full_attn_layers``, 1-based) list them."""
    nest = r.config.get("linear_attn_config")
    if r.config.get("layer_types") is None and isinstance(nest, dict) and "full_attn_layers" in nest:
        full = type(r)(nest, r.file, r.prefix + "linear_attn_config.").int_list("full_attn_layers")
        return [("full", 0) if i + 1 in full else ("linear", 0) for i in range(n)]
    if r.config.get("layer_types") is None:
        return [("full", 0) if i and i % 4 == 0 else ("linear", 0) for i in range(n)]
    return _qwen3_next(r, n)


# what each pattern reader reads, in a few words (``tierlab models --families``)
LAYER_PATTERNS = {"full": "full attention", "window": "sliding window if set",
                  "qwen_window": "sliding window if enabled", "layer_types": "sliding / full per layer_types",
                  "gemma2": "alternating sliding / global", "gemma3": "5 sliding : 1 global",
                  "llama4": "chunked + global (NoPE)", "jamba": "Mamba + attention every attn_layer_period",
                  "qwen3_next": "Gated DeltaNet + gated attention every full_attention_interval",
                  "mamba2": "Mamba-2 mixers only",
                  "nemotron_h": "Mamba-2 / attention / MLP / MoE blocks per hybrid_override_pattern",
                  "falcon_h1": "attention || Mamba-2 on every layer",
                  "kimi_linear": "Kimi Delta Attention + MLA every 4th layer",
                  "gemma4": "5 sliding : 1 global, the last global"}
LAYER_READERS = {"mamba2": _mamba_only, "full": _full, "window": _window, "qwen_window": _qwen_window, "layer_types": _layer_types,
                 "gemma2": _layer_types, "gemma3": _gemma3, "qwen3_next": _qwen3_next, "llama4": _llama4, "jamba": _jamba,
                 "nemotron_h": _nemotron_h, "falcon_h1": _full, "kimi_linear": _kimi_linear,
                 "gemma4": _gemma4}
