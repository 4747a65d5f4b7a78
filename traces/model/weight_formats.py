"""Which dtype each weight tensor of a model takes under a run's ``weights`` option, and the scale and
zero-point tensors that come with it: the one list the lowering declares and the capacity plan sums.

- A plain dtype (``bf16``, ``fp16``, ``fp32``, ``fp8``) or ``int8``/``int4`` applies to every matrix
  (embeddings and LM head included, as tierlab always did); vectors stay in
  :func:`tierlab.traces.model.dtypes.vector_dtype`.
- A checkpoint format (``mxfp4``, ``nvfp4``, ``fp8-block``, ``int4-g128``) applies to every matrix but the
  embeddings, the LM head and the MoE routers, which released checkpoints keep in bf16 (gpt-oss's
  ``modules_to_not_convert``; DeepSeek-V3's FP8 release; AutoAWQ and GPTQ leave ``embed_tokens`` and
  ``lm_head`` unquantised).
- ``native``: as the model's ``config.json`` says it ships. ``quantization_config.quant_method``
  ``mxfp4`` (gpt-oss): the MoE experts in MXFP4, everything else in bf16; ``fp8`` with a
  ``weight_block_size`` of [128, 128]: ``fp8-block``; ``awq`` / ``gptq`` with 4 bits and
  ``group_size`` 128: ``int4-g128``; ``modelopt`` with ``quant_algo`` ``NVFP4`` (NVIDIA's Model
  Optimizer FP4 checkpoints; blocks of 16, its default): ``nvfp4`` (its ``ignore`` list is not read:
  the embeddings, LM head and routers stay bf16, as for every checkpoint format). Without a quantization config, ``torch_dtype``
  (``bfloat16``, ``float16``, ``float32``; bf16 when absent).
"""

from __future__ import annotations

from typing import NamedTuple

from tierlab.common.errors import ConfigError
from tierlab.traces.model.dtypes import CHECKPOINT_FORMATS, aux_tensors, nbytes_of, vector_dtype

TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
UNQUANTISED = ("embed_tokens", "embed_positions", "lm_head")


class WeightTensor(NamedTuple):
    """One weight tensor as traced: its shape, dtype, bytes, and its (suffix, dtype, bytes) aux tensors."""

    shape: object
    dtype: str
    nbytes: int
    aux: list


def is_router(name: str) -> bool:
    return name.endswith((".mlp.gate", ".shared_expert_gate"))


def _quant_config(spec) -> dict | None:
    cfg = spec.config or {}
    q = cfg.get("quantization_config")
    if q is None and isinstance(cfg.get("text_config"), dict):
        q = cfg["text_config"].get("quantization_config")
    return q


def native_rule(spec):
    """(``shape -> dtype`` of the matrices, dtype of the vectors) as the model's checkpoint ships them
    (see the module docstring)."""
    cfg = spec.config or {}
    base = TORCH_DTYPES.get(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16", "bf16")
    q = _quant_config(spec)
    if q is None:
        return lambda s: base, base
    f = getattr(spec, "source", None)
    if not isinstance(q, dict):
        raise ConfigError(f"expected a JSON object, got {q!r}", file=f, field="quantization_config")
    method = q.get("quant_method")
    if method == "mxfp4":
        return (lambda s: "mxfp4" if s.expert >= 0 else "bf16"), "bf16"
    if method == "fp8":
        if list(q.get("weight_block_size") or []) != [128, 128]:
            raise ConfigError(f"FP8 blocks {q.get('weight_block_size')!r} are not modelled (only [128, 128])",
                              file=f, field="quantization_config.weight_block_size")
        fmt = "fp8-block"
    elif method in ("awq", "gptq"):
        bits, group = q.get("bits", q.get("w_bit")), q.get("group_size", q.get("q_group_size"))
        if bits != 4 or group != 128:
            raise ConfigError(f"{method} with {bits} bits in groups of {group} is not modelled (only 4 bits, 128)",
                              file=f, field="quantization_config.group_size")
        fmt = "int4-g128"
    elif method == "modelopt":
        algo, group = q.get("quant_algo"), q.get("group_size", 16)
        if algo != "NVFP4" or group != 16:
            raise ConfigError(f"modelopt {algo!r} in groups of {group} is not modelled (only NVFP4 in groups of 16)",
                              file=f, field="quantization_config.quant_algo")
        fmt = "nvfp4"
    else:
        raise ConfigError(f"quant_method {method!r} is not modelled; expected mxfp4, fp8, awq, gptq or modelopt",
                          file=f, field="quantization_config.quant_method")
    return (lambda s: "bf16" if s.name in UNQUANTISED or is_router(s.name) else fmt), "bf16"


def default_weights(spec) -> str:
    """The ``weights`` a run of ``spec`` takes when none is given: ``native`` for a model released only
    in MXFP4 (gpt-oss: its experts ship in MXFP4), else ``bf16`` (DeepSeek-V3's FP8 release included,
    as before; ``--weights native`` gives its ``fp8-block``)."""
    q = _quant_config(spec)
    return "native" if isinstance(q, dict) and q.get("quant_method") == "mxfp4" else "bf16"


def weight_tensors(spec, weights: str = "bf16", quant_group: int = 128, shapes=None) -> list[WeightTensor]:
    """Every weight tensor of ``spec`` (or of ``shapes``, a subset) under ``weights``."""
    if weights == "native":
        rule, vec = native_rule(spec)
    elif weights in CHECKPOINT_FORMATS:
        rule, vec = (lambda s: "bf16" if s.name in UNQUANTISED or is_router(s.name) else weights), "bf16"
    else:
        rule, vec = (lambda s: weights), vector_dtype(weights)
    out = []
    for s in spec.weight_shapes() if shapes is None else shapes:
        if s.is_vector:
            out.append(WeightTensor(s, vec, nbytes_of(s.rows, vec), []))
            continue
        d = rule(s)
        out.append(WeightTensor(s, d, nbytes_of(s.elements, d), aux_tensors(s.rows, s.cols, d, quant_group)))
    return out


def weight_bytes(spec, weights: str = "bf16", quant_group: int = 128) -> int:
    """Bytes of every weight tensor with its scales and zero points."""
    return sum(t.nbytes + sum(a[2] for a in t.aux) for t in weight_tensors(spec, weights, quant_group))
