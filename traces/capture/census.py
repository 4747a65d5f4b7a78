"""Transformers' own decoder-only causal LMs, and the parameters each holds when built on the meta device:
the independent side of the family tests and of ``benchmarks/bench_coverage.py``.

:func:`decoder_only_types` lists the model types of the installed Transformers that have a causal-LM
class and are neither encoders with an LM head (``bert``, ``roberta``: in the masked-LM mapping) nor
decoders of encoder-decoder models (``bart``, ``whisper``: in the seq2seq mappings).
:func:`default_config` is a type's default config as a ``config.json`` dict (``architectures`` set to
its causal-LM class), written in full (``to_dict``) or as ``save_pretrained`` writes it (``to_diff_dict``:
only what differs from the class's defaults). :func:`meta_param_count` builds the model of a config
dict on the meta device and counts its parameters (a tied one once) and persistent buffers (a
checkpoint holds them: DeepSeek's router correction bias). Needs the ``capture`` extra.
"""

from __future__ import annotations

from tierlab.traces.capture.record import require_extra


def decoder_only_types() -> dict[str, str]:
    """model type -> its causal-LM class name, for the decoder-only models of the installed Transformers."""
    require_extra()
    from transformers.models.auto import modeling_auto as ma

    other = set(ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES) | set(ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES) \
        | set(getattr(ma, "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", {}))
    return {t: c for t, c in sorted(ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()) if t not in other}


def default_config(model_type: str, *, diff: bool = False) -> dict:
    """The default config of ``model_type`` as a config.json dict, ``architectures`` its causal-LM class;
    ``diff``: as ``save_pretrained`` writes it (keys equal to the class's defaults left out)."""
    require_extra()
    import transformers

    cfg = transformers.AutoConfig.for_model(model_type)
    d = cfg.to_diff_dict() if diff else cfg.to_dict()
    d["model_type"] = model_type
    d["architectures"] = [decoder_only_types().get(model_type) or cfg.__class__.__name__]
    d.pop("transformers_version", None)
    return d


def meta_param_count(config: dict) -> int:
    """Elements of every parameter (a tied one once) and persistent buffer of the causal LM Transformers
    builds from ``config`` on the meta device (the text model of a multimodal wrapper, as the capture
    builds it): parameters, a tied one once, and persistent buffers (DeepSeek's router correction bias,
    DeepSeek-V4's hash-routing table), which its checkpoint holds."""
    from tierlab.traces.capture.record import build_model

    model, _ = build_model(config, record_attention=False)
    seen, n = set(), 0
    for _, p in model.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    persistent = set(model.state_dict().keys())
    for name, b in model.named_buffers():
        if name in persistent:         # what a checkpoint holds beside the parameters, as the capture traces it
            n += b.numel()
    return n


# fields every config class has that say nothing about the architecture
GENERIC_KEYS = ("output_hidden_states", "return_dict", "chunk_size_feed_forward", "is_encoder_decoder",
                "initializer_range", "use_cache", "output_router_logits", "router_aux_loss_coef", "torchscript",
                "output_attentions", "tie_encoder_decoder", "is_decoder", "add_cross_attention", "tf_legacy_loss",
                "use_bfloat16", "problem_type")


def class_defaults(model_type: str) -> dict:
    """The defaults of ``model_type``'s config class as its fields declare them (before the class derives
    anything: ``head_dim`` None stays out, it follows hidden / heads), scalars only (a per-layer list's
    length follows the layers, so it is never a default): what ``save_pretrained`` leaves out."""
    require_extra()
    import dataclasses

    import transformers

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    if not dataclasses.is_dataclass(cls):
        return {}
    alias = getattr(cls, "attribute_map", {}) or {}    # Transformers 5 writes e.g. num_experts as num_local_experts
    out = {}
    for f in dataclasses.fields(cls):
        v = f.default
        if f.name.startswith("_") or v is dataclasses.MISSING or v is None or f.name in GENERIC_KEYS \
                or f.name.endswith(("_token_id", "dropout", "_pdrop")):
            continue
        if isinstance(v, (bool, int, float, str)):
            out[alias.get(f.name, f.name)] = v
    return out


def class_aliases(model_type: str) -> dict:
    """The config class's ``attribute_map``: an older spelling -> the key its ``config.json`` is written with."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return dict(getattr(CONFIG_MAPPING[model_type], "attribute_map", {}) or {})


def write_defaults(path) -> None:
    """Write :func:`class_defaults` of every decoder-only type (and the text models of wrappers) to ``path``."""
    import json

    import transformers

    from tierlab.common.atomic import atomic_path

    table, aliases = {}, {}
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    for t in decoder_only_types():
        table[t] = class_defaults(t)
        aliases[t] = class_aliases(t)
        sub = getattr(CONFIG_MAPPING[t], "sub_configs", None) or {}
        text = sub.get("text_config")
        if isinstance(text, type) and getattr(text, "model_type", None) in CONFIG_MAPPING:
            table.setdefault(text.model_type, class_defaults(text.model_type))
            aliases.setdefault(text.model_type, class_aliases(text.model_type))
    doc = {"source": f"transformers {transformers.__version__}: each config class's field defaults "
                     "(tierlab.traces.capture.census.write_defaults)", "defaults": dict(sorted(table.items())),
           "aliases": {t: a for t, a in sorted(aliases.items()) if a}}
    with atomic_path(path, force=True) as tmp:
        tmp.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    import sys

    write_defaults(sys.argv[1])
