"""State-space (Mamba) mixer kernels: the causal convolution and the selective scan, each over a
fixed recurrent state per sequence instead of a KV cache that grows with the context.

Per sequence a Mamba layer keeps a convolution window (``channels x width`` elements) and an SSM
state (``channels x state`` elements), tensors of kind ``state``. A segment of ``t`` tokens (a
prefill, or one decode step with ``t = 1``) reads each sequence's state once and writes it once —
the scan carries it through the segment's tokens on chip, as the fused selective-scan kernels do —
so per decode step a sequence's state is read and written whole, however long the context.

FLOPs (estimates of the arithmetic, not of a particular kernel): the convolution 2 per channel and
tap per token; the scan 6 per state element per token (discretise ``exp(dt A)``, ``dt B x``, the
update ``h = dA h + dBx``, the read-out ``C h``) plus 5 per channel (``D`` skip, SiLU gate by ``z``).
"""

from __future__ import annotations

from tierlab.kernels.base import Op, Ten


def conv(name: str, xz: Ten, out: Ten, weights: list[Ten | None], state: Ten, *, m: int, channels: int,
         width: int, act_bytes: int, x_offset: int = 0, row_stride: int = 0) -> Op:
    """Causal depthwise convolution over ``channels`` inputs of each row of ``xz`` (at ``x_offset``
    bytes in rows ``row_stride`` bytes apart; default Mamba's ``[x, z]`` rows of ``2 * channels``),
    with the window of the last ``width`` inputs of each sequence kept in ``state`` (every
    sequence's, read and written whole)."""
    op = Op(name, "ssm_conv", m, 2 * m * channels * width)
    row = channels * act_bytes
    stride = row_stride or 2 * row
    op.read(xz, x_offset, row, count=m, stride=stride) if m > 1 else op.read(xz, x_offset, row)
    for w in weights:
        op.read_all(w)
    op.read_all(state)
    op.write(state, 0, state.nbytes)
    op.write(out, 0, m * row)
    return op


def gated_norm(name: str, y: Ten, xz: Ten, gain: Ten | None, *, m: int, width: int, act_bytes: int, z_stride: int,
               z_offset: int = 0) -> Op:
    """Gated RMSNorm (Mamba-2, Gated DeltaNet): ``norm(y) * silu(z)`` with ``z`` the ``width``
    elements at ``z_offset`` bytes of each in_proj row; with no ``gain``, the gate alone, ``y * silu(z)``
    (Falcon-H1 without ``mamba_rms_norm``)."""
    op = Op(name, "norm", m, 9 * m * width) if gain is not None else Op(name, "elementwise", m, 5 * m * width)
    row = width * act_bytes
    op.read(y, 0, m * row)
    op.read(xz, z_offset, row, count=m, stride=z_stride) if m > 1 else op.read(xz, z_offset, row)
    op.read_all(gain)
    op.write(y, 0, m * row)
    return op


def inner_norms(name: str, x: Ten, gains: list[Ten], *, m: int, width: int, act_bytes: int) -> Op:
    """Jamba's RMSNorms of the time step, B and C (one pass over the ``x_proj`` output)."""
    op = Op(name, "norm", m, 4 * m * width)
    op.read(x, 0, m * width * act_bytes)
    for g in gains:
        op.read_all(g)
    op.write(x, 0, m * width * act_bytes)
    return op


def scan(name: str, inputs: list[tuple[Ten, int]], xz: Ten | None, out: Ten, params: list[Ten], h: Ten, *, m: int,
         channels: int, state_size: int, act_bytes: int, pim: bool = False) -> Op:
    """Selective scan of ``m`` tokens: reads ``inputs`` ((buffer, row bytes): x, dt, and the x_proj
    rows holding B and C), the ``z`` half of
    ``xz``, ``params`` (``A_log``, ``D``) and the SSM state ``h`` of every sequence; writes ``h`` and
    ``out``."""
    op = Op(name, "ssm_scan", m, m * channels * (6 * state_size + 5), pim_eligible=pim)
    for t, row_bytes in inputs:
        op.read(t, 0, m * row_bytes)
    row = channels * act_bytes
    if xz is not None:     # Mamba: the SiLU gate z is the second half of in_proj's rows
        op.read(xz, row, row, count=m, stride=2 * row) if m > 1 else op.read(xz, row, row)
    for p in params:
        op.read_all(p)
    op.read_all(h)
    op.write(h, 0, h.nbytes)
    op.write(out, 0, m * row)
    return op
