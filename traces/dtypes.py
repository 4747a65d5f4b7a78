"""Element types of weights, KV cache and activations, and how quantised weights are stored.

Sizes are in bits so int4 is exact. Quantised integer weights (``int8``, ``int4``) are
group-quantised along the input dimension of each matrix: one scale per ``group`` consecutive
input elements of every output row (default group 128), each scale a ``fp16`` (2 bytes),
symmetric (no zero points). The scales are their own tensor, kind ``weight``, named
``<matrix>.scales``, so weight bytes include them. ``fp8`` weights carry a per-tensor scale only,
which is negligible and not traced. KV caches and activations never carry scales.

Formats of released checkpoints (:mod:`traces.weightfmt` says which tensors take them):

- ``mxfp4`` (OCP Microscaling MXFP4, gpt-oss's experts): 4-bit E2M1 elements, one shared 8-bit
  E8M0 scale per 32 consecutive input elements of a row (``<matrix>.scales``, dtype ``e8m0``).
- ``fp8-block`` (DeepSeek-V3's checkpoint): FP8 E4M3 elements, one fp32 scale per 128 x 128 block
  of the matrix (``<matrix>.scales``, ``weight_scale_inv`` in the checkpoint).
- ``int4-g128`` (AWQ / GPTQ, group 128): 4-bit elements, per output row and group of 128 input
  elements one fp16 scale (``<matrix>.scales``) and one 4-bit zero point (``<matrix>.zeros``, packed
  eight to an int32 as AutoAWQ's ``qzeros`` and GPTQ's ``qzeros`` are).
"""

from __future__ import annotations

from common.errors import UsageError

DTYPE_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4,
              "mxfp4": 4, "fp8-block": 8, "int4-g128": 4, "e8m0": 8}
CHECKPOINT_FORMATS = ("mxfp4", "fp8-block", "int4-g128")
WEIGHT_DTYPES = ("bf16", "fp16", "fp32", "fp8", "int8", "int4") + CHECKPOINT_FORMATS + ("native",)
KV_DTYPES = ("bf16", "fp16", "fp32", "fp8", "int8")
ACTIVATION_DTYPES = ("bf16", "fp16", "fp32", "fp8")
GROUP_QUANTISED = ("int8", "int4")
SCALE_DTYPE = "fp16"
DEFAULT_QUANT_GROUP = 128


def check_dtype(name: str, allowed: tuple[str, ...], field: str) -> str:
    """Return ``name`` if it is one of ``allowed``, else raise a UsageError naming ``field``."""
    if name not in allowed:
        raise UsageError(f"unknown dtype {name!r}; expected one of {', '.join(allowed)}", field=field)
    return name


def nbytes_of(elements: int, dtype: str) -> int:
    """Bytes holding ``elements`` values of ``dtype`` (rounded up to a whole byte)."""
    return (int(elements) * DTYPE_BITS[dtype] + 7) // 8


def vector_dtype(weights_dtype: str) -> str:
    """Dtype of 1-D weights (norm gains, biases): the weights dtype if it is a float of >= 16 bits,
    else bf16 (quantisers leave vectors in high precision)."""
    return weights_dtype if weights_dtype in ("bf16", "fp16", "fp32") else "bf16"


def scale_bytes(rows: int, cols: int, dtype: str, group: int) -> int:
    """Bytes of group-quantisation scales for a ``rows x cols`` matrix (0 if not group-quantised)."""
    if dtype not in GROUP_QUANTISED:
        return 0
    return rows * (-(-cols // group)) * DTYPE_BITS[SCALE_DTYPE] // 8


def aux_tensors(rows: int, cols: int, dtype: str, group: int) -> list[tuple[str, str, int]]:
    """(name suffix, dtype, bytes) of the scale and zero-point tensors a ``rows x cols`` matrix of
    ``dtype`` carries (empty for plain floats; ``group`` applies to int8/int4)."""
    if dtype in GROUP_QUANTISED:
        return [(".scales", SCALE_DTYPE, scale_bytes(rows, cols, dtype, group))]
    if dtype == "mxfp4":
        return [(".scales", "e8m0", rows * -(-cols // 32))]
    if dtype == "fp8-block":
        return [(".scales", "fp32", -(-rows // 128) * -(-cols // 128) * 4)]
    if dtype == "int4-g128":
        groups = rows * -(-cols // 128)
        return [(".scales", "fp16", groups * 2), (".zeros", "int4", (groups * 4 + 7) // 8)]
    return []
