"""What the capture needs of Transformers before it records: the optional extra, the text model's
config, the cache's layers and recurrent states, and the configs it refuses (remote code, encoders,
configs Transformers rejects). torch and transformers are imported only inside functions."""

from __future__ import annotations

from tierlab.common.errors import ConfigError, UsageError

ATTENTION_NAME = "tierlab_capture"
EXTRA_HINT = "needs the optional extra 'capture' (PyTorch and Transformers): pip install -e '.[capture]'"
# config.json keys that describe files or checkpoints, not the architecture (dropped before building)
NON_ARCHITECTURE_KEYS = ("auto_map", "quantization_config", "architectures", "transformers_version", "_name_or_path")
# Transformers' cache layer types that hold a recurrent state rather than per-position KV
STATE_LAYER_TYPES = ("linear_attention", "conv", "hybrid", "hybrid_sliding")


def require_extra():
    """Import torch and transformers, or raise the one-line error naming the extra."""
    try:
        import torch
        import transformers
    except ImportError:
        raise UsageError(EXTRA_HINT, field="capture") from None
    return torch, transformers


def text_model_config(config: dict) -> dict:
    """A multimodal wrapper's language model (its ``text_config``, over the wrapper's other keys, as
    the hand lowering reads it): a text run never enters the vision tower, so it is neither built
    nor traced. Any other config as it is."""
    text = config.get("text_config")
    if not isinstance(text, dict) or not isinstance(text.get("model_type"), str):
        return dict(config)
    outer = {k: v for k, v in config.items() if k not in ("text_config", "vision_config", "model_type")
             and k not in NON_ARCHITECTURE_KEYS and not k.endswith("_token_index")}
    return {**outer, **text}


def layer_caches(hf, file: str | None = None) -> tuple[list[tuple[str, int]], list[int]]:
    """Each decoder layer's cache as Transformers lays it out: ``("full", 0)``, ``("sliding", W)`` or
    ``("chunked", C)`` (a window or chunk of W / C positions, whatever the attention call is told:
    Llama 4's chunk lives in its mask), ``("none", 0)`` for a layer with no cache; and the layers that
    keep a recurrent state (Transformers' linear-attention, conv and hybrid cache layers: Mamba, Gated
    DeltaNet, short convolutions; a hybrid layer keeps KV as well)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    types, kwargs = get_layer_types_and_kwargs(hf)
    out, state = [], []
    for i, (t, kw) in enumerate(zip(types, kwargs)):
        if t in STATE_LAYER_TYPES:
            state.append(i)
        if t in ("linear_attention", "conv", "dummy"):
            out.append(("none", 0))
            continue
        kind = {"sliding_attention": "sliding", "chunked_attention": "chunked", "hybrid_sliding": "sliding"}.get(t,
                                                                                                               "full")
        out.append((kind, int(kw["sliding_window"]) if kind != "full" else 0))
    return out, state


def copied_layers(cache, known: int) -> tuple[list[tuple[str, int]], list[int]]:
    """The layout (as :func:`layer_caches` gives it) of the cache layers past the config's ``known`` ones,
    read from the layer objects a forward left: Inkling 2 Loop's copies of its loop layers, one set for
    each pass after the first, which the model appends to the cache itself."""
    from transformers.cache_utils import DynamicLayer, LinearAttentionCacheLayerMixin, StaticLayer

    out, state = [], []
    for i, layer in enumerate(getattr(cache, "layers", [])[known:], start=known):
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            state.append(i)
        if not isinstance(layer, (DynamicLayer, StaticLayer)):     # a recurrent state alone, or nothing
            out.append(("none", 0))
        elif getattr(layer, "is_sliding", False):
            out.append(("sliding", int(layer.sliding_window)))
        else:
            out.append(("full", 0))
    return out, state


def state_shapes(cache, batch: int) -> dict[int, list[tuple[str, int]]]:
    """Per state layer, each recurrent-state tensor the cache object holds after a forward: (part name,
    elements per sequence) — the convolution windows and the recurrent (SSM / delta-rule) states."""
    out: dict[int, list[tuple[str, int]]] = {}
    for i, layer in enumerate(getattr(cache, "layers", [])):
        parts = []
        for attr, short in (("conv_states", "conv"), ("recurrent_states", "ssm")):
            held = getattr(layer, attr, None)
            items = held.items() if isinstance(held, dict) else enumerate(held or [])
            for j, t in items:
                if hasattr(t, "shape") and len(t.shape) >= 1:
                    n = 1
                    for d in t.shape:
                        n *= int(d)
                    parts.append((f"{short}{j}" if j else short, n // max(1, batch)))
        if parts:
            out[i] = parts
    for attr, held in own_states(cache).items():
        for i, tensors in held.items():
            out.setdefault(i, []).extend((f"{attr}{j}" if j else attr, _elements(t) // max(1, batch))
                                         for j, t in enumerate(tensors))
    return out


def _elements(t) -> int:
    n = 1
    for d in t.shape:
        n *= int(d)
    return n


def own_states(cache) -> dict[str, dict[int, list]]:
    """The recurrent states a model's own cache class keeps beside (or instead of) its KV layers, per
    attribute and layer: a list or a dict by layer of tensors, or of tuples of tensors (MiniMax's
    ``linear_cache``, the K^T V sum of its lightning attention; xLSTM's ``rnn_state``, each block's C, n, m).
    Transformers' own cache classes keep theirs in their layers (:func:`state_shapes` reads those)."""
    from transformers.cache_utils import Cache

    if type(cache).__module__ == Cache.__module__:
        return {}
    out: dict[str, dict[int, list]] = {}
    for attr, held in vars(cache).items():
        if attr == "layers" or not isinstance(held, (list, dict)):
            continue
        items = held.items() if isinstance(held, dict) else enumerate(held)
        per_layer = {}
        for i, v in items:
            tensors = [t for t in (v if isinstance(v, (tuple, list)) else (v,)) if hasattr(t, "shape") and t.dim()]
            if isinstance(i, int) and tensors:
                per_layer[i] = tensors
        if per_layer:
            out[attr] = per_layer
    return out


def own_cache(cls, hf, batch: int, torch):
    """A fresh cache of the class a model makes itself (MiniMax's ``MiniMaxCache()``, xLSTM's
    ``xLSTMCache(config, max_batch_size, ...)``), built from what its constructor asks for, on the meta device."""
    import inspect

    given = {"config": hf, "max_batch_size": batch, "batch_size": batch, "dtype": torch.bfloat16, "device": "meta"}
    params = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in given.items() if k in params})


def refuse_unbuildable(config: dict, model_type: str, transformers, file: str | None) -> None:
    """One line for what Transformers cannot build as a decoder-only causal LM from its config alone:
    a remote-code model (``auto_map`` naming code in its repository, a model type Transformers does not
    know: tierlab runs no downloaded code), an encoder or the decoder of an encoder-decoder model."""
    from transformers.models.auto import modeling_auto as ma
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        auto = config.get("auto_map")
        if isinstance(auto, dict) and auto:
            code = auto.get("AutoModelForCausalLM") or next(iter(auto.values()))
            raise ConfigError(f"remote-code model: model_type {model_type!r} is defined by code in its repository "
                              f"(auto_map: {code}), which Transformers {transformers.__version__} does not ship and "
                              "tierlab does not run; write its config in a family `tierlab models --families` lists, "
                              "or one Transformers knows", file=file, field="auto_map")
        return                        # AutoConfig names the unknown type
    not_decoder = set(ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES) | set(ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES) \
        | set(getattr(ma, "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", {}))
    if model_type in not_decoder:
        raise ConfigError(f"model_type {model_type!r} is an encoder or an encoder-decoder model, not a decoder-only "
                          "causal LM: tierlab traces decoder-only models", file=file, field="model_type")


def refuse_without_own_kv(config: dict, file: str | None) -> None:
    """One line for a model Transformers builds but that cannot run alone: every layer attends to KV shared
    from another model (Gemma 4's assistant, whose forward takes its target's ``shared_kv_states``)."""
    text = text_model_config(config)
    shared, layers = text.get("num_kv_shared_layers"), text.get("num_hidden_layers")
    if isinstance(shared, int) and isinstance(layers, int) and 0 < layers <= shared:
        where = "text_config." if isinstance(config.get("text_config"), dict) else ""
        raise ConfigError(f"model_type {config.get('model_type')!r} computes no KV of its own: all {layers} "
                          f"layers read KV shared from another model (num_kv_shared_layers {shared}), an assistant "
                          "(draft) model attending to its target model's cache, which a capture of it alone does not "
                          "have; trace the target model", file=file, field=where + "num_kv_shared_layers")
