"""Element types of weights, KV cache and activations, and how quantised weights are stored.

Sizes are in bits so int4 is exact. Quantised integer weights (``int8``, ``int4``) are
group-quantised along the input dimension of each matrix: one scale per ``group`` consecutive
input elements of every output row (default group 128), each scale a ``fp16`` (2 bytes),
symmetric (no zero points). The scales are their own tensor, kind ``weight``, named
``<matrix>.scales``, so weight bytes include them. ``fp8`` weights carry a per-tensor scale only,
which is negligible and not traced. KV caches and activations never carry scales
(``fp8`` KV: FP8 E4M3 with a per-tensor scale, not traced).

Activations in ``nvfp4`` / ``mxfp4`` (W4A4): the GEMMs read their activation input in that format,
so the run's arithmetic is costed at the chip's FP4 rate (:func:`tierlab.chip.compute.resolve_compute_dtype`);
the activation tensors the trace keeps between ops (residual stream, attention, norms) stay in
``bf16`` (:data:`ACTIVATION_STORAGE`), as serving engines keep them: the FP4 copy of a GEMM's input
is made inside its producer's kernel (:func:`block_scaled_bytes` gives its size) and is not traced.

Formats of released checkpoints (:mod:`tierlab.traces.model.weight_formats` says which tensors take them):

- ``mxfp4`` (OCP Microscaling MXFP4, gpt-oss's experts): 4-bit E2M1 elements, one shared 8-bit
  E8M0 scale per 32 consecutive input elements of a row (``<matrix>.scales``, dtype ``e8m0``):
  4 + 8/32 = 4.25 bits a weight.
- ``nvfp4`` (NVIDIA NVFP4, Blackwell's FP4): 4-bit E2M1 elements, one FP8 E4M3 scale per 16
  consecutive input elements of a row (``<matrix>.scales``, dtype ``e4m3``): 4 + 8/16 = 4.5 bits a
  weight. Its second-level per-tensor FP32 scale (4 bytes a matrix) is negligible and not traced.
- ``fp8-block`` (DeepSeek-V3's checkpoint): FP8 E4M3 elements, one fp32 scale per 128 x 128 block
  of the matrix (``<matrix>.scales``, ``weight_scale_inv`` in the checkpoint).
- ``int4-g128`` (AWQ / GPTQ, group 128): 4-bit elements, per output row and group of 128 input
  elements one fp16 scale (``<matrix>.scales``) and one 4-bit zero point (``<matrix>.zeros``, packed
  eight to an int32 as AutoAWQ's ``qzeros`` and GPTQ's ``qzeros`` are).
"""

from __future__ import annotations

from tierlab.common.errors import UsageError

DTYPE_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4,
              "mxfp4": 4, "nvfp4": 4, "fp8-block": 8, "int4-g128": 4, "e8m0": 8, "e4m3": 8}
CHECKPOINT_FORMATS = ("mxfp4", "nvfp4", "fp8-block", "int4-g128")
WEIGHT_DTYPES = ("bf16", "fp16", "fp32", "fp8", "int8", "int4") + CHECKPOINT_FORMATS + ("native",)
KV_DTYPES = ("bf16", "fp16", "fp32", "fp8", "int8")
ACTIVATION_DTYPES = ("bf16", "fp16", "fp32", "fp8", "nvfp4", "mxfp4")
# FP4 block formats: (elements sharing one scale, the scale's dtype) along a row's input dimension
BLOCK_FORMATS = {"nvfp4": (16, "e4m3"), "mxfp4": (32, "e8m0")}
# the dtype an activation tensor is stored in between ops (FP4 activations: see the module docstring)
ACTIVATION_STORAGE = {"nvfp4": "bf16", "mxfp4": "bf16"}
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


def activation_storage(dtype: str) -> str:
    """The dtype the trace stores activations of run dtype ``dtype`` in (itself, but bf16 for FP4)."""
    return ACTIVATION_STORAGE.get(dtype, dtype)


def block_scaled_bytes(rows: int, cols: int, fmt: str) -> tuple[int, int]:
    """(element bytes, scale bytes) of a ``rows x cols`` tensor in FP4 block format ``fmt``, blocks
    of :data:`BLOCK_FORMATS` running along ``cols`` (a partial block at a row's end takes a whole
    scale): ``ceil(rows * cols / 2)`` and ``rows * ceil(cols / block)`` scales of one byte."""
    block, scale = BLOCK_FORMATS[fmt]
    return nbytes_of(rows * cols, fmt), rows * -(-cols // block) * DTYPE_BITS[scale] // 8


def bits_per_element(fmt: str) -> float:
    """Bits a value of FP4 block format ``fmt`` takes with its share of the scale (4.5 or 4.25)."""
    block, scale = BLOCK_FORMATS[fmt]
    return DTYPE_BITS[fmt] + DTYPE_BITS[scale] / block


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
    if dtype in BLOCK_FORMATS:
        return [(".scales", BLOCK_FORMATS[dtype][1], block_scaled_bytes(rows, cols, dtype)[1])]
    if dtype == "fp8-block":
        return [(".scales", "fp32", -(-rows // 128) * -(-cols // 128) * 4)]
    if dtype == "int4-g128":
        groups = rows * -(-cols // 128)
        return [(".scales", "fp16", groups * 2), (".zeros", "int4", (groups * 4 + 7) // 8)]
    return []
