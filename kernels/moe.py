"""Mixture-of-experts: router, dispatch, per-expert MLPs, combine.

Tokens are permuted into a contiguous dispatch buffer grouped by expert (as grouped-GEMM MoE
kernels do), so each expert's MLP reads one contiguous slice. Each *selected* expert's gate, up
and down weights are read once per op — i.e. once per step per layer in decode even if several
tokens of the batch chose it (weight-streaming), and ``ceil(tokens_e / tile_m)`` times in prefill.
Experts no token chose are not read at all. Expert ops are kind ``linear`` (with ``expert`` set)
so a PIM unit that runs linears can run them; in decode they are ``pim_eligible``.
"""

from __future__ import annotations

import numpy as np

from tierlab.kernels.base import Op, Ten


def route_op(name: str, logits: Ten, *, m: int, n_experts: int, k: int, act_bytes: int) -> Op:
    """Top-k selection over the router logits (read once); ``m * n_experts`` comparisons."""
    op = Op(name, "moe_router", m, m * n_experts)
    op.read(logits, 0, m * n_experts * act_bytes)
    return op


def dispatch(name: str, x: Ten, buf: Ten, *, m: int, k: int, row_bytes: int) -> Op:
    """Copy each token's row to its ``k`` slots in the dispatch buffer."""
    op = Op(name, "moe_dispatch", m, 0)
    op.read(x, 0, m * row_bytes)
    op.write(buf, 0, m * k * row_bytes)
    return op


def combine(name: str, buf: Ten, y: Ten, *, m: int, k: int, row_bytes: int, hidden: int) -> Op:
    """Weighted sum of each token's ``k`` expert outputs back into ``y``."""
    op = Op(name, "moe_combine", m, 2 * m * k * hidden)
    op.read(buf, 0, m * k * row_bytes)
    op.write(y, 0, m * row_bytes)
    return op


def expert_mlp(name: str, expert: int, weights: list[Ten], scales: list[Ten | None], disp: Ten, inter: Ten,
               out: Ten, *, first_row: int, rows: int, hidden: int, ffn: int, act_bytes: int, phase: str,
               tile_m: int, biases: list[Ten] | None = None, gated: bool = True) -> Op:
    """Gated MLP of one expert over its ``rows`` tokens (dispatch rows ``first_row..``).

    ``weights`` = [gate, up, down] (``biases`` the same, gpt-oss). Reads the token tile, the gate
    and up weights (and biases), writes and re-reads the gated intermediate, reads the down weight
    (and bias), writes the output tile. ``gated=False`` (Nemotron-H's ReLU² experts): [up, None, down],
    two matrices, the activation 4 FLOPs per element."""
    mats = 3 if gated else 2
    flops = 2 * rows * mats * hidden * ffn + (5 if gated else 4) * rows * ffn \
        + (rows * ((2 if gated else 1) * ffn + hidden) if biases else 0)
    op = Op(name, "linear", rows, flops, pim_eligible=(phase == "decode"), expert=expert)
    b = biases or [None, None, None]
    h_row, f_row = hidden * act_bytes, ffn * act_bytes
    tile = rows if phase == "decode" else tile_m
    for r0 in range(0, rows, tile):
        r = min(tile, rows - r0)
        row = first_row + r0
        op.read(disp, row * h_row, r * h_row)
        for w, s, bb in zip(weights[:2], scales[:2], b[:2]):
            op.read_all(w).read_all(s).read_all(bb)
        op.write(inter, row * f_row, r * f_row)
        op.read(inter, row * f_row, r * f_row)
        op.read_all(weights[2]).read_all(scales[2]).read_all(b[2])
        op.write(out, row * h_row, r * h_row)
    return op


def expert_counts(routes: np.ndarray, n_experts: int) -> np.ndarray:
    """Tokens routed to each expert (``routes`` is ``(tokens, k)``)."""
    return np.bincount(routes.ravel(), minlength=n_experts)
