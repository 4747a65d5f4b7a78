"""Gemma 4's text model (``Gemma4ForCausalLM``, model_type ``gemma4_text``; the language model of the
multimodal ``gemma4`` in its ``text_config``): what its config says beyond the family row of
:mod:`tierlab.traces.model.families`, read into the :class:`Gemma4Layout` a spec carries (``ModelSpec.gemma4``), as
Transformers' ``modeling_gemma4`` builds the model:

- Per-layer heads. The global (full-attention) layers' heads are ``global_head_dim`` wide (default 512)
  and, with ``attention_k_eq_v``, number ``num_global_key_value_heads`` K/V heads; Transformers 5 writes
  both as ``per_layer_config`` (``{layer: {head_dim, num_key_value_heads}}``), read first when given.
- ``attention_k_eq_v``: the global layers have no ``v_proj``; V is K's projection, normed apart
  (``v_norm``, an RMSNorm with no gain, on every layer computing K and V).
- KV sharing: the last ``num_kv_shared_layers`` layers compute no K or V (no ``k_proj``, ``v_proj``,
  ``k_norm``: Transformers does not build them) and attend over the cache of the last earlier layer of
  their kind (sliding or full); they cache nothing. ``use_double_wide_mlp`` doubles their MLPs.
- Per-layer inputs (``hidden_size_per_layer_input`` P > 0): a second table ``embed_tokens_per_layer``
  (``vocab_size_per_layer_input`` rows of ``layers * P``) gathered per token, ``per_layer_model_projection``
  of the embeddings (hidden -> layers * P) normed over P and added to it; each layer gates its residual
  (``per_layer_input_gate``, hidden -> P), multiplies in its slice, projects back
  (``per_layer_projection``), norms and adds.
- Every layer ends scaling its output by ``layer_scalar``, a one-element persistent buffer (counted and
  read). The MoE block (``enable_moe_block``, read by :mod:`tierlab.traces.model.families`) runs beside the dense MLP.

Logit soft-capping (``final_logit_softcapping``) is a scalar: no bytes. Not modelled: bidirectional
attention over all tokens (``use_bidirectional_attention: "all"``, not a causal LM).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

GLOBAL_HEAD_DIM = 512          # Gemma4TextConfig's global_head_dim default (a keyword it pops, not a field)
PER_LAYER_KEYS = ("head_dim", "num_key_value_heads")   # what per_layer_config may override


class Gemma4Layer(NamedTuple):
    """One decoder layer's attention and MLP widths."""

    head_dim: int
    kv_heads: int
    kv_layer: int             # the layer whose KV cache it attends over: itself, or the earlier one it shares
    intermediate_size: int
    v_proj: bool              # False: attention_k_eq_v on a global layer (V is K's projection)


@dataclass(frozen=True)
class Gemma4Layout:
    """Gemma 4's per-layer dimensions, KV sharing and per-layer inputs (see the module docstring)."""

    layers: tuple[Gemma4Layer, ...]
    per_layer_input: int = 0      # hidden_size_per_layer_input (0: no per-layer inputs)
    per_layer_vocab: int = 0      # vocab_size_per_layer_input

    def kv_row_elements(self, layer: int) -> int:
        """K and V elements layer ``layer`` caches per token: none where it reads an earlier layer's."""
        x = self.layers[layer]
        return 2 * x.kv_heads * x.head_dim if x.kv_layer == layer else 0

    def shares_kv(self, layer: int) -> bool:
        return self.layers[layer].kv_layer != layer


def read_gemma4(r, spans: tuple, kv_heads: int, head_dim: int, ffn: int) -> Gemma4Layout:
    """The layout of a Gemma 4 text config (``r``: its :class:`~tierlab.traces.model.config_reader.Reader`; ``spans``: the
    layers' attention, as the family's layer reader read it)."""
    n = len(spans)
    if r.config.get("use_bidirectional_attention") == "all":
        raise r.err("bidirectional attention over all tokens is not modelled (not a causal LM)",
                    "use_bidirectional_attention")
    k_eq_v = r.flag("attention_k_eq_v")
    over = _per_layer_config(r, spans, k_eq_v)
    shared = r.int("num_kv_shared_layers", 0)
    if shared >= n:
        raise r.err(f"all {n} layers read KV shared from another model (num_kv_shared_layers {shared}): "
                    "an assistant (draft) model, not modelled", "num_kv_shared_layers")
    first = n - shared
    last_of = {kind: i for i, (kind, _) in enumerate(spans[:first])}     # the last own-KV layer of each kind
    wide = r.flag("use_double_wide_mlp")
    layers = []
    for i, (kind, _) in enumerate(spans):
        o = over.get(i, {})
        hd, kvh = o.get("head_dim", head_dim), o.get("num_key_value_heads", kv_heads)
        src = i if i < first else last_of.get(kind)
        if src is None:
            raise r.err(f"layer {i} ({kind} attention) would read the KV of an earlier {kind} layer, but none "
                        f"of the first {first} is one", "num_kv_shared_layers")
        if src != i and (layers[src].head_dim, layers[src].kv_heads) != (hd, kvh):
            raise r.err(f"layer {i}'s heads ({kvh} x {hd}) differ from those of layer {src}, whose KV it reads",
                        "per_layer_config")
        layers.append(Gemma4Layer(hd, kvh, src, ffn * 2 if wide and i >= first else ffn,
                                  not (k_eq_v and kind == "full")))
    p = r.int("hidden_size_per_layer_input", 0)
    return Gemma4Layout(tuple(layers), p, r.pos("vocab_size_per_layer_input") if p else 0)


def _per_layer_config(r, spans: tuple, k_eq_v: bool) -> dict:
    """Layer -> its overrides of head_dim / num_key_value_heads: ``per_layer_config`` when given (its keys
    layer numbers, zero-padded as Transformers writes them), else the global layers' ``global_head_dim``
    and (with ``attention_k_eq_v``) ``num_global_key_value_heads``, as Gemma4TextConfig derives it."""
    given = r.config.get("per_layer_config")
    if given is None:
        o = {"head_dim": r.pos("global_head_dim", GLOBAL_HEAD_DIM)}
        if k_eq_v and r.config.get("num_global_key_value_heads") is not None:
            o["num_key_value_heads"] = r.pos("num_global_key_value_heads")
        return {i: o for i, (kind, _) in enumerate(spans) if kind == "full"}
    if not isinstance(given, dict):
        raise r.err(f"expected an object of layer overrides, got {given!r}", "per_layer_config")
    out = {}
    for key, o in given.items():
        where = f"per_layer_config.{key}"
        try:
            i = int(key)
        except (TypeError, ValueError):
            raise r.err("expected a layer number", where) from None
        if not 0 <= i < len(spans) or not isinstance(o, dict):
            raise r.err(f"expected the overrides of one of the {len(spans)} layers, got {o!r}", where)
        for k, v in o.items():
            if k not in PER_LAYER_KEYS:
                raise r.err(f"a per-layer {k} is not modelled (only {', '.join(PER_LAYER_KEYS)})", f"{where}.{k}")
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise r.err(f"expected a positive integer, got {v!r}", f"{where}.{k}")
        out[i] = dict(o)
    return out
