"""Build a Transformers model from its config alone on PyTorch's meta device and record a run.

No weights and no download: ``AutoConfig.for_model`` + ``AutoModelForCausalLM.from_config`` under
``torch.device("meta")``. Each compute segment of the run (the prefill, each decode step) is one
forward with a :class:`transformers.DynamicCache` (or the cache class of the model's own, for a model
that refuses one: MiniMax, xLSTM), under a ``TorchDispatchMode`` that records every
ATen operator with its input and output shapes and dtypes, and module hooks that say which module
each operator ran in. Three things are recorded where Transformers exposes them rather than from
ATen operators, because on meta tensors they are either data-dependent or not one operator:

- attention: a registered attention function (``AttentionInterface``) records q, k, v shapes, the
  sliding window and attention sinks, and returns an empty output of the right shape;
- the KV append: the cache object's ``update`` is wrapped (layer, key and value shapes);
- MoE experts (``[expert, out, in]`` parameter tensors, whose forward picks experts with
  ``nonzero``, data-dependent): the experts module's forward returns zeros; the lowering routes
  tokens with tierlab's own router, as the hand-written lowering does.

torch and transformers are the optional ``capture`` extra, imported here only inside functions.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from tierlab.common.errors import ConfigError, UsageError
from tierlab.traces.capture.model import (ATTENTION_NAME, NON_ARCHITECTURE_KEYS, copied_layers, layer_caches, own_cache,
                                  own_states, refuse_unbuildable, refuse_without_own_kv, require_extra, state_shapes,
                                  text_model_config)
from tierlab.traces.capture.opmap import aten_name, layer_of, leaf_kind


@dataclass
class Event:
    """One recorded thing, in execution order: a leaf module entered, an ATen operator outside any
    leaf, an attention call, or a KV append. ``scope`` is the innermost module's name."""

    kind: str                 # linear, norm, embedding, act, router, experts | aten | attention | kv_append
    scope: str
    shapes: tuple = ()        # input shapes (a leaf: its first input; aten: every tensor argument)
    out: tuple = ()           # aten: output shape
    dtype: str = ""
    name: str = ""            # aten: the operator (``aten.add``); a leaf: its module class
    info: dict = field(default_factory=dict)


@dataclass
class Capture:
    """What a recorded run holds: the model's weights, its cache layout and the events per segment."""

    model_type: str
    weights: list             # (name, shape tuple, dtype str, module kind or None, layer)
    segments: list            # (Segment, [Event])
    modules: dict             # leaf module name -> {"kind", "params": {short: weight name}, "buffers": {...}, "top_k"}
    ops_recorded: int = 0
    info: dict = field(default_factory=dict)   # "classes": module name -> class; "top_k"; "versions"


def build_model(config: dict, file: str | None = None, *, record_attention: bool = True, masked: bool = False):
    """The causal-LM of ``config`` (a config.json dict) on the meta device, and its config object;
    ``record_attention``: its attention through the capture's recording function (else Transformers' default)."""
    torch, transformers = require_extra()
    cfg = text_model_config(config)
    model_type = cfg.pop("model_type", None)
    if not isinstance(model_type, str):
        raise ConfigError("missing model_type, which --capture needs to find the Transformers class",
                          file=file, field="model_type")
    refuse_unbuildable(config, model_type, transformers, file)
    for k in NON_ARCHITECTURE_KEYS:
        cfg.pop(k, None)
    try:
        hf = transformers.AutoConfig.for_model(model_type, **cfg)
    except Exception as err:      # ValueError, KeyError, huggingface_hub's StrictDataclassClassValidationError
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        why = " ".join(x.strip() for x in str(err).splitlines() if x.strip())[:200]
        if model_type not in CONFIG_MAPPING:
            raise ConfigError(f"Transformers {transformers.__version__} does not know model_type {model_type!r} "
                              f"({why})", file=file, field="model_type") from None
        raise ConfigError(f"Transformers {transformers.__version__} cannot build this {model_type} config: {why}",
                          file=file, field="model_type") from None
    if record_attention:
        _register_attention(transformers)
        hf._attn_implementation = ATTENTION_NAME + ("_masked" if masked else "")
    dtype = torch.bfloat16
    try:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(hf, dtype=dtype)
    except ValueError as err:
        raise ConfigError(f"Transformers has no causal-LM class for model_type {model_type!r} "
                          f"({str(err).splitlines()[0][:120]})", file=file, field="model_type") from None
    except KeyError as err:
        if ATTENTION_NAME not in str(err):
            raise
        # its own table of attention classes (Falcon): its sdpa class, whose call to
        # torch.nn.functional.scaled_dot_product_attention the recorder takes as the attention call
        # or its eager class, when that computes attention in one method of its own (GPT-Neo's _attn)
        model = None
        for impl in ("sdpa", "eager"):
            hf._attn_implementation = impl
            try:
                with torch.device("meta"):
                    model = transformers.AutoModelForCausalLM.from_config(hf, dtype=dtype)
            except (KeyError, ValueError):
                continue
            if impl == "sdpa" or any(callable(getattr(m, "_attn", None)) for m in model.modules()):
                model._tierlab_attention = impl
                break
            model = None
        if model is None:
            raise ConfigError(f"the {model_type} model picks its attention from a table of its own, with neither "
                              "an sdpa class nor an attention method of its own, not Transformers' attention "
                              "interface, so --capture cannot record its attention", file=file,
                              field="model_type") from None
    model.eval()
    return model, hf


class _EagerAttn:
    """While a forward runs, each attention module's own ``_attn(query, key, value, ...)`` (GPT-Neo's eager
    class) recorded as the attention call and answered with an empty output of its shape."""

    def __init__(self, rec, model):
        self.rec, self.model = rec, model

    def __enter__(self):
        rec = self.rec
        self.patched = []
        # a "local" layer attends to the last window_size positions (GPT-Neo: the window is in its mask buffer)
        local = getattr(self.model.config, "window_size", None)
        for m in self.model.modules():
            if callable(getattr(m, "_attn", None)):
                window = local if getattr(m, "attention_type", "") == "local" else None

                def attn(query, key, value, *a, _m=m, _w=window, **k):
                    rec.attention(_m, query, key, value, _w, None)
                    return query.new_empty(tuple(query.shape[:-1]) + (value.shape[-1],)), None
                m._attn = attn
                self.patched.append(m)
        return self

    def __exit__(self, *exc):
        for m in self.patched:
            del m._attn
        return False


class _SdpaCall:
    """While a forward runs, ``torch.nn.functional.scaled_dot_product_attention`` recorded as the attention
    call (of the innermost module that made it) and answered with an empty output of its shape."""

    def __init__(self, torch, rec, modules: dict):
        self.torch, self.rec, self.modules = torch, rec, modules

    def __enter__(self):
        F = self.torch.nn.functional
        self.orig = F.scaled_dot_product_attention
        rec, modules = self.rec, self.modules

        def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
            scope = rec.stack[-1][0] if rec.stack else ""
            module = modules.get(scope)
            if module is not None:
                rec.attention(module, query, key, value, None, None)
            return query.new_empty(tuple(query.shape[:-1]) + (value.shape[-1],))

        F.scaled_dot_product_attention = sdpa
        return self

    def __exit__(self, *exc):
        self.torch.nn.functional.scaled_dot_product_attention = self.orig
        return False


_RECORDER: list = []          # the active recorder while a forward runs (the attention function reads it)


def _register_attention(transformers) -> None:
    from transformers import AttentionInterface

    if ATTENTION_NAME in AttentionInterface._global_mapping:
        return

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                  **kwargs):
        rec = _RECORDER[-1] if _RECORDER else None
        if rec is not None:
            rec.attention(module, query, key, value, sliding_window, kwargs.get("s_aux"))
        b, h, t, _ = query.shape
        return query.new_empty((b, t, h, value.shape[-1])), None

    AttentionInterface.register(ATTENTION_NAME, attention)
    # the same with the masks sdpa builds (boolean, on meta: no bytes tierlab models), for a model that reads
    # its mask outside the attention call (DeepSeek-V3.2's sparse-attention indexer)
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def mask(*a, **k):       # always built: a model reading the mask itself cannot take sdpa's causal shortcut
        return sdpa_mask(*a, **{**k, "allow_is_causal_skip": False})

    AttentionInterface.register(ATTENTION_NAME + "_masked", attention)
    AttentionMaskInterface.register(ATTENTION_NAME + "_masked", mask)


class _Recorder:
    def __init__(self, torch, model):
        self.torch = torch
        self.events: list[Event] = []
        self.stack: list[tuple] = []
        self.leaf_depth = 0
        self.in_cache = 0          # inside the cache object's update (the KV append)
        self.ops = 0
        self.kinds: dict[str, str] = {}
        self.names: dict[int, str] = {}        # id(parameter) -> its first name (a tied parameter has one)
        for name, p in model.named_parameters():
            self.names.setdefault(id(p), name)
        for name, mod in model.named_modules():
            k = leaf_kind(mod, name, torch.nn)
            if k:
                self.kinds[name] = k
        self.handles = []
        for name, mod in model.named_modules():
            self.handles.append(mod.register_forward_pre_hook(self._enter(name), with_kwargs=True))
            self.handles.append(mod.register_forward_hook(self._leave(name)))

    def _enter(self, name):
        def hook(mod, args, kwargs):
            kind = self.kinds.get(name)
            if kind and not self.leaf_depth:
                x = args[0] if args else next(iter(kwargs.values()), None)
                shape = tuple(x.shape) if isinstance(x, self.torch.Tensor) else ()
                self.events.append(Event(kind, name, (shape,), dtype=str(getattr(x, "dtype", "")),
                                         name=type(mod).__name__))
                self.stack.append((name, kind, self.events[-1]))
            else:
                self.stack.append((name, kind, None))
            if kind:
                self.leaf_depth += 1
        return hook

    def _leave(self, name):
        def hook(mod, args, out):
            _, kind, event = self.stack.pop()
            o = out[0] if isinstance(out, (tuple, list)) and out else out
            if event is not None and isinstance(o, self.torch.Tensor):
                event.out = tuple(o.shape)
            if kind:
                self.leaf_depth -= 1
        return hook

    def aten(self, func, args, kwargs, out):
        self.ops += 1
        if self.leaf_depth or self.in_cache:
            return
        T = self.torch.Tensor
        shapes = tuple(tuple(a.shape) for a in args if isinstance(a, T))
        o = out[0] if isinstance(out, (tuple, list)) and out else out
        self.events.append(Event("aten", self.stack[-1][0] if self.stack else "", shapes,
                                 tuple(o.shape) if isinstance(o, T) else (), str(getattr(o, "dtype", "")),
                                 aten_name(func)))

    def attention(self, module, q, k, v, window, sinks):
        scope = self.stack[-1][0] if self.stack else ""
        self.events.append(Event("attention", scope, (tuple(q.shape), tuple(k.shape), tuple(v.shape)),
                                 dtype=str(q.dtype), info={"window": window, "sinks": sinks is not None,
                                                          "layer": getattr(module, "layer_idx", layer_of(scope)),
                                                          # a module with no cache layer of its own
                                                          "uncached": getattr(module, "layer_idx", None) is None,
                                                          # the attention module's own parameters (gpt-oss's sinks)
                                                          "params": [self.names[id(p)] for p in
                                                                     module.parameters(recurse=False)]}))

    def index_append(self, layer, k):
        scope = self.stack[-1][0] if self.stack else ""
        self.events.append(Event("index_append", scope, (tuple(k.shape),), dtype=str(k.dtype), info={"layer": layer}))

    def kv_append(self, layer, k, v):
        scope = self.stack[-1][0] if self.stack else ""
        self.events.append(Event("kv_append", scope, (tuple(k.shape), tuple(v.shape)), dtype=str(k.dtype),
                                 info={"layer": layer}))

    def close(self):
        for h in self.handles:
            h.remove()


def _dispatch_mode(torch, rec):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            rec.aten(func, args, kwargs or {}, out)
            return out

    return Record()


def _silence_experts(torch, model, kinds) -> None:
    for name, mod in model.named_modules():
        if kinds.get(name) == "experts":
            mod.forward = lambda hidden_states, *a, **k: torch.zeros_like(hidden_states)


def _weights(model, kinds) -> tuple[list, dict]:
    """Parameters (``named_parameters``, a tied one once) and persistent buffers (a checkpoint
    holds them: e.g. DeepSeek's router score-correction bias), with their module's leaf kind."""
    canonical = {}             # id(parameter) -> its first name (a tied parameter has one)
    for name, p in model.named_parameters():
        canonical.setdefault(id(p), name)
    modules: dict[str, dict] = {}
    owner = {}
    for mname, mod in model.named_modules():
        kind = kinds.get(mname)
        if kind:
            # a router's parameters include its children's (its matrix in a classifier, a bias per expert)
            below = mod.named_parameters(recurse=kind == "router")
            modules[mname] = {"kind": kind, "buffers": {}, "top_k": getattr(mod, "top_k", None),
                              "cls": type(mod).__name__, "params": {s: canonical[id(p)] for s, p in below}}
        for pname, p in mod.named_parameters(recurse=False):
            owner.setdefault(id(p), mname)
    persistent = set(model.state_dict().keys())
    out, seen = [], set()
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        out.append((name, tuple(p.shape), str(p.dtype), kinds.get(owner[id(p)]), layer_of(name)))
    for name, b in model.named_buffers():
        if name in persistent:
            mname, _, short = name.rpartition(".")
            out.append((name, tuple(b.shape), str(b.dtype), kinds.get(mname), layer_of(name)))
            if mname in modules:
                modules[mname]["buffers"][short] = name
    return out, modules


def record(config: dict, segments, batch: int, context: int, file: str | None = None) -> Capture:
    """Run ``context`` positions (not recorded), then each compute segment, recording each."""
    torch, transformers = require_extra()
    refuse_without_own_kv(config, file)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()     # config advice and kernel fall-backs are not tierlab's output
    try:
        return _record(torch, transformers, config, segments, batch, context, file)
    finally:
        transformers.logging.set_verbosity(verbosity)


def _record(torch, transformers, config, segments, batch, context, file) -> Capture:
    try:
        return _record_once(torch, transformers, config, segments, batch, context, file, masked=False)
    except _Retry as first:
        # a model that makes a cache of its own (MiniMax, xLSTM) runs with one of that class; then, or else,
        # once more with sdpa's masks (boolean, on meta) built, for a model that reads its attention mask
        # outside the attention call (DeepSeek-V3.2's indexer); not the first time, since some models build
        # their masks from values (BioGPT). If all fail, the first error is named (with its own cache, the
        # error of that cache's run).
        named = first.error
        for masked in (False, True) if first.own_cache else (True,):
            try:
                return _record_once(torch, transformers, config, segments, batch, context, file, masked=masked,
                                    cache_class=first.own_cache)
            except _Retry as again:
                named = again.error if first.own_cache and not masked else named
            except UsageError as err:
                named = err if first.own_cache and not masked else named
        raise named from None


class _Retry(Exception):
    def __init__(self, error: UsageError, own_cache=None):
        super().__init__(str(error))
        self.error, self.own_cache = error, own_cache


def _own_cache_class(torch, transformers, model, hf):
    """The cache class the model makes itself when handed none, if not Transformers' DynamicCache and one
    :func:`~tierlab.traces.capture.model.own_cache` can build: from an unrecorded forward of one token (MiniMax's
    ``MiniMaxCache``, xLSTM's ``xLSTMCache``); else None."""
    try:
        with torch.no_grad():
            out = model(input_ids=torch.zeros((1, 1), dtype=torch.long, device="meta"), use_cache=True,
                        logits_to_keep=1)
    except Exception:             # it cannot run without a cache either: the first error stands
        return None
    made = next((c for c in (getattr(out, "past_key_values", None), getattr(out, "cache", None))
                 if c is not None), None)
    if made is None or type(made) is transformers.DynamicCache:
        return None
    try:
        own_cache(type(made), hf, 1, torch)
    except (TypeError, ValueError, AttributeError):     # its constructor asks for what the capture cannot give
        return None
    return type(made)


def _record_once(torch, transformers, config, segments, batch, context, file, masked: bool,
                 cache_class=None) -> Capture:
    model, hf = build_model(config, file, masked=masked)
    try:
        caches, state_layers = layer_caches(hf, file)
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"Transformers gives no cache layout for the {hf.model_type} model ({type(err).__name__}: "
                          f"{str(err).splitlines()[0][:120]}), which --capture needs", file=file,
                          field="model_type") from None
    rec = _Recorder(torch, model)
    _silence_experts(torch, model, rec.kinds)
    weights, modules = _weights(model, rec.kinds)
    cache = own_cache(cache_class, hf, batch, torch) if cache_class else transformers.DynamicCache(config=hf)
    seen = [0]                    # positions every sequence has run, for a cache that cannot say (below)
    if hasattr(cache, "update"):  # a KV cache (xLSTM's holds recurrent states only)
        _watch_cache(rec, cache, seen)
    import inspect

    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out_segments = []
    try:
        with torch.no_grad():
            if context:
                model(input_ids=torch.zeros((batch, context), dtype=torch.long, device="meta"),
                      **{key: cache}, use_cache=True, logits_to_keep=1)
                seen[0] += context
            for seg in segments:
                ids = torch.zeros((batch, seg.tokens), dtype=torch.long, device="meta")
                rec.events = []
                _RECORDER.append(rec)
                try:
                    own = getattr(model, "_tierlab_attention", "")
                    with _dispatch_mode(torch, rec), (_SdpaCall(torch, rec, dict(model.named_modules()))
                                                      if own == "sdpa" else _EagerAttn(rec, model) if own == "eager"
                                                      else contextlib.nullcontext()):
                        model(input_ids=ids, **{key: cache}, use_cache=True, logits_to_keep=1)
                finally:
                    _RECORDER.pop()
                seen[0] += seg.tokens
                out_segments.append((seg, rec.events))
    except (RuntimeError, NotImplementedError, TypeError, ValueError, KeyError, AttributeError, IndexError) as err:
        # a forward that reads its tensors' values (data-dependent control flow) needs real weights, which a
        # capture on the meta device does not have; or Transformers' own code fails for this model
        error = UsageError(f"the {hf.model_type} model could not run on the meta device (a capture has no weights: "
                           f"its forward needs values, or Transformers' code fails for it): "
                           f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}",
                           field="capture")
        if not masked:
            own_class = None if cache_class else _own_cache_class(torch, transformers, model, hf)
            raise _Retry(error, own_class) from None
        raise error from None
    finally:
        rec.close()
    more, more_state = copied_layers(cache, len(caches))
    caches, state_layers = caches + more, [*state_layers, *more_state]
    info = {"classes": {n: type(m).__name__ for n, m in model.named_modules()},
            "top_k": getattr(hf, "num_experts_per_tok", None) or getattr(hf, "top_k_experts", None),   # Gemma 4's
            "layers": caches,
            # a sparse-attention indexer's top-k: the most KV rows a query's attention reads (DeepSeek-V3.2)
            "index_topk": getattr(hf, "index_topk", None),
            # Transformers' state layers, and any layer whose state the model's own cache class keeps
            "states": {i: p for i, p in state_shapes(cache, batch).items()
                       if i in state_layers or any(i in held for held in own_states(cache).values())},
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
    return Capture(hf.model_type, weights, out_segments, modules, rec.ops, info)


def _watch_cache(rec, cache, seen) -> None:
    """Record the cache object's KV appends (and a sparse-attention indexer's), whose own operators are the
    append's; and give its length where it cannot say (``seen``: the positions run so far)."""
    update, seq_length = cache.update, cache.get_seq_length

    def wrapped(key_states, value_states, layer_idx, *a, **k):
        if _RECORDER:
            rec.kv_append(layer_idx, key_states, value_states)
        rec.in_cache += 1          # the cache's own operators (its concatenation) are the KV append's
        try:
            return update(key_states, value_states, layer_idx, *a, **k)
        finally:
            rec.in_cache -= 1

    def length(layer_idx: int = 0, *a, **k):
        # a cache whose first layers keep only a recurrent state (Bamba, Granite-4.0-H) has no length of
        # its own there; the positions run so far are the answer
        try:
            return seq_length(layer_idx, *a, **k)
        except ValueError:
            return seen[0]

    cache.update, cache.get_seq_length = wrapped, length
    if hasattr(cache, "update_indexer"):      # DeepSeek-V3.2's sparse-attention indexer keeps keys of its own
        update_indexer = cache.update_indexer

        def indexed(key_states, layer_idx, *a, **k):
            if _RECORDER:
                rec.index_append(layer_idx, key_states)
            rec.in_cache += 1
            try:
                return update_indexer(key_states, layer_idx, *a, **k)
            finally:
                rec.in_cache -= 1

        cache.update_indexer = indexed
