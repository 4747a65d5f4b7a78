"""Norms and element-wise ops: one pass over their operands.

RMSNorm/LayerNorm read ``m`` rows and the gain vector (LayerNorm: and its bias) and write ``m`` rows
(4 FLOPs per element; LayerNorm 5).
Element-wise ops (residual add, SiLU-gated product) read each input once and write the output once
(1 FLOP per output element per input beyond the first; SiLU-and-multiply counted as 5).
"""

from __future__ import annotations

from tierlab.kernels.base import Op, Ten


def rmsnorm(name: str, x: Ten, y: Ten, gain: Ten | None, *, m: int, width: int, act_bytes: int,
            x_offset: int = 0, y_offset: int = 0, row_stride: int = 0, bias: Ten | None = None) -> Op:
    """Normalise ``m`` rows of ``width`` elements (rows ``row_stride`` bytes apart if given). With a
    ``bias`` it is a LayerNorm (mean subtracted, bias added: 1 FLOP per element more), reading the
    bias after the gain. ``gain`` None: a norm without one (Llama 4's q/k norm)."""
    op = Op(name, "norm", m, (5 if bias is not None else 4) * m * width)
    row = width * act_bytes
    if row_stride and m > 1 and row_stride != row:
        op.read(x, x_offset, row, count=m, stride=row_stride)
        op.read_all(gain).read_all(bias)
        op.write(y, y_offset, row, count=m, stride=row_stride)
    else:
        op.read(x, x_offset, m * row)
        op.read_all(gain).read_all(bias)
        op.write(y, y_offset, m * row)
    return op


def elementwise(name: str, inputs: list[Ten], out: Ten, *, m: int, width: int, act_bytes: int,
                flops_per_element: int = 1, kind: str = "elementwise") -> Op:
    """``out[:m] = f(inputs[:m])`` over rows of ``width`` elements."""
    n = m * width * act_bytes
    op = Op(name, kind, m, flops_per_element * m * width)
    for t in inputs:
        op.read(t, 0, n)
    op.write(out, 0, n)
    return op


def rotary(name: str, tensors: list[Ten], widths: list[int], *, m: int, act_bytes: int) -> Op:
    """Rotary position embedding applied in place to ``m`` rows of each tensor (3 FLOPs/element)."""
    op = Op(name, "rotary", m, sum(3 * m * w for w in widths))
    for t, w in zip(tensors, widths):
        op.read(t, 0, m * w * act_bytes)
        op.write(t, 0, m * w * act_bytes)
    return op
