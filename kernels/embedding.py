"""Embedding gather: only the table rows of the tokens being processed are read.

Token ids are synthetic (drawn by the lowering from its seeded generator); each token reads one
row of ``hidden * bytes`` — one descriptor per token, as a gather kernel issues them. The LM head
is an ordinary linear (:func:`kernels.linear.linear`) over the last token of each sequence.
"""

from __future__ import annotations

import numpy as np

from tierlab.kernels.base import Op, Ten


def embedding(name: str, table: Ten, out: Ten, token_ids: np.ndarray, *, row_bytes: int, act_row_bytes: int,
              scales: Ten | None = None, scale_row_bytes: int = 0) -> Op:
    """Gather ``len(token_ids)`` rows of ``row_bytes`` from ``table`` (and the rows of its
    quantisation scales, if any) into ``out``."""
    m = len(token_ids)
    op = Op(name, "embedding", m, 0)
    for t in token_ids.tolist():
        op.read(table, t * row_bytes, row_bytes)
        if scales is not None:
            op.read(scales, t * scale_row_bytes, scale_row_bytes)
    op.write(out, 0, m * act_row_bytes)
    return op
