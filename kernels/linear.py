"""Linear layers (``y = x @ W.T + b``; W stored out x in, row-major, as Hugging Face stores it).

- Decode (``phase == "decode"``): weight-streaming GEMV / skinny GEMM. The whole weight (its
  quantisation scales and bias too) is read exactly once per op however many tokens the batch
  holds; the input rows are read once and the output rows written once. Marked ``pim_eligible``.
- Prefill: a tiled GEMM with ``tile_m`` tokens by ``tile_n`` output features per tile. For each
  tile of tokens the whole weight is streamed once, so a weight is read ``ceil(m / tile_m)``
  times; the token tile is read once per tile of outputs (``ceil(out / tile_n)`` chunks at
  stride 0); the output tile is written once.

FLOPs are ``2 * m * in * out`` (+ ``m * out`` for a bias).
"""

from __future__ import annotations

from tierlab.kernels.base import Op, Ten


def linear(name: str, weight: Ten, x: Ten, y: Ten, *, m: int, in_features: int, out_features: int,
           act_bytes: int, phase: str, tile_m: int, tile_n: int, scales: Ten | None = None,
           bias: Ten | None = None, x_offset: int = 0, y_offset: int = 0, x_stride: int = 0,
           kind: str = "linear", expert: int = -1) -> Op:
    """One linear op over ``m`` token rows of ``x`` (at ``x_offset``; if ``x_stride`` is given the
    rows are ``m`` separate rows that far apart, e.g. the last token of each sequence)."""
    flops = 2 * m * in_features * out_features + (m * out_features if bias is not None else 0)
    in_row, out_row = in_features * act_bytes, out_features * act_bytes
    op = Op(name, kind, m, flops, pim_eligible=(phase == "decode"), expert=expert)
    if phase == "decode":
        _read_rows(op, x, x_offset, m, in_row, x_stride, 1)
        op.read_all(weight).read_all(scales).read_all(bias)
        op.write(y, y_offset, m * out_row)
        return op
    n_tiles = -(-out_features // tile_n)
    for m0 in range(0, m, tile_m):
        rows = min(tile_m, m - m0)
        _read_rows(op, x, x_offset + (m0 * (x_stride or in_row)), rows, in_row, x_stride, n_tiles)
        op.read_all(weight).read_all(scales).read_all(bias)
        op.write(y, y_offset + m0 * out_row, rows * out_row)
    return op


def _read_rows(op: Op, x: Ten, offset: int, rows: int, row_bytes: int, stride: int, repeat: int) -> None:
    if stride and rows > 1 and stride != row_bytes:
        for _ in range(repeat):
            op.read(x, offset, row_bytes, count=rows, stride=stride)
    else:
        op.read(x, offset, rows * row_bytes, count=repeat, stride=0)


def fused_linear(name: str, parts: list[tuple], x: Ten, *, m: int, in_features: int, act_bytes: int, phase: str,
                 tile_m: int, tile_n: int, kind: str = "linear") -> Op:
    """One GEMM over weights stored side by side in the checkpoint (Phi-3's ``qkv_proj`` and
    ``gate_up_proj``, GPT-2's ``c_attn``, Falcon's ``query_key_value``): ``parts`` are ``(weight,
    scales, bias, y, out_features)``. As :func:`linear` over the concatenated output, except that
    each part's weight (scales, bias) is its own tensor and its output block lands in its own buffer:
    the input is read once (in prefill once per tile of the whole output), not once per part."""
    total = sum(p[4] for p in parts)
    flops = sum(2 * m * in_features * o + (m * o if b is not None else 0) for _w, _s, b, _y, o in parts)
    in_row = in_features * act_bytes
    op = Op(name, kind, m, flops, pim_eligible=(phase == "decode"))
    tiles = [(0, m)] if phase == "decode" else [(m0, min(tile_m, m - m0)) for m0 in range(0, m, tile_m)]
    n_tiles = 1 if phase == "decode" else -(-total // tile_n)
    for m0, rows in tiles:
        _read_rows(op, x, m0 * in_row, rows, in_row, 0, n_tiles)
        for w, s, b, _y, _o in parts:
            op.read_all(w).read_all(s).read_all(b)
        for _w, _s, _b, y, o in parts:
            op.write(y, m0 * o * act_bytes, rows * o * act_bytes)
    return op
