"""A batch's counters folded into a replay's totals in one pass.

The kernels count each batch into ``cnt[op - lo, kind, tier, counter]``; the replay keeps totals per
op (``per_op[op, tier, counter]``, summed over kinds) and per kind (``by_kind[kind, tier, counter]``,
summed over ops). Summing the batch with numpy (two reductions over different axes of a 4-d array)
costs more than the set-group kernel itself on a model trace; one compiled loop reads each counter
once, adds the nonzero ones and clears them, so the replay reuses one buffer for every batch
(:class:`CallCounters`, shared by the door's batches and the twins' segments).
"""

from __future__ import annotations

import numpy as np

from tierlab.engine.counters import N_COUNTERS
from tierlab.engine.geometry import KINDS
from tierlab.engine.jit import njit
from tierlab.engine.state import Descriptors


@njit(nogil=True)
def fold(cnt, lo, per_op, by_kind):
    """``per_op[lo + r] += cnt[r].sum(axis=0)`` and ``by_kind += cnt.sum(axis=0)``, exactly; ``cnt``
    is left all zero (ready for the next batch)."""
    n_rows, n_kinds, n_tiers, n_c = cnt.shape
    m = n_tiers * n_c
    c = cnt.reshape(n_rows, n_kinds, m)
    p = per_op.reshape(per_op.shape[0], m)
    b = by_kind.reshape(n_kinds, m)
    for r in range(n_rows):
        for k in range(n_kinds):
            row = c[r, k]
            for i in range(m):
                v = row[i]
                if v != 0:
                    p[lo + r, i] += v
                    b[k, i] += v
                    row[i] = 0


def fold_batch(cnt: np.ndarray, lo: int, per_op: np.ndarray, by_kind: np.ndarray) -> None:
    """:func:`fold` on int64 arrays (``cnt`` of ``n`` ops from op ``lo``, C-contiguous: it is
    cleared in place)."""
    if not cnt.flags.c_contiguous:
        raise ValueError("the batch counters must be C-contiguous (they are cleared in place)")
    if lo < 0 or lo + cnt.shape[0] > per_op.shape[0] or cnt.shape[1:] != (by_kind.shape[0],) + per_op.shape[1:]:
        raise ValueError(f"a batch of ops {lo}..{lo + cnt.shape[0] - 1} does not fit totals of shape {per_op.shape}")
    fold(cnt, int(lo), per_op, by_kind)


class CallCounters:
    """The counter buffer a replay's kernel calls share: ``cnt[op - lo, kind, tier, counter]`` over
    the ops of one call, reused call after call (its pages stay mapped)."""

    def __init__(self, n_tiers: int):
        self.buf = np.zeros((0, len(KINDS), n_tiers, N_COUNTERS), np.int64)

    def rows(self, n: int) -> np.ndarray:
        """The buffer, grown to at least ``n`` ops (all zero)."""
        if len(self.buf) < n:
            self.buf = np.zeros((n,) + self.buf.shape[1:], np.int64)
        return self.buf

    def replay(self, r, desc: Descriptors, per_op: np.ndarray | None, by_kind: np.ndarray | None,
               call_ops: int) -> int:
        """``r`` (a walk-type driver) replays ``desc`` (:func:`tierlab.engine.state.as_descriptors`;
        op ids ``desc.row`` non-decreasing, rows of ``per_op``), ``call_ops`` ops a kernel call, so the
        call's counters stay in the host's cache. Each call's counts are folded into ``per_op`` and
        ``by_kind`` (:func:`fold_batch`; both None: dropped, as an opt pre-pass does). A driver with
        ``run_folded`` (set groups) loops over the calls in compiled code, up to a hand-over to the
        walk. Returns the tier-0 blocks requested."""
        n = done = 0
        if per_op is not None and hasattr(r, "run_folded"):
            n, done = r.run_folded(desc, self.rows(call_ops), call_ops, per_op, by_kind)
        if done == len(desc.row):
            return n
        rest = desc if done == 0 else Descriptors(*(a[done:] for a in desc))
        row = rest.row
        lo, hi = int(row[0]), int(row[-1])
        cuts = np.searchsorted(row, np.arange(lo + call_ops, hi + 1, call_ops)) if hi - lo >= call_ops else ()
        for a, e in zip((0, *cuts), (*cuts, len(row))):
            if e <= a:
                continue
            c_lo, c_hi = int(row[a]), int(row[e - 1])
            cnt = self.rows(c_hi - c_lo + 1)[:c_hi - c_lo + 1]
            n += int(r.run(Descriptors(row[a:e] - c_lo, *(c[a:e] for c in rest[1:])), cnt))
            if per_op is None:
                cnt.fill(0)
            else:
                fold_batch(cnt, c_lo, per_op, by_kind)
        return n
