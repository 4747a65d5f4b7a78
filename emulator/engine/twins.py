"""Near-identical streams replayed together: one whole, the others only where they differ.

In a tensor-parallel trace most devices' slices are the same one-chip trace, and the rest differ
from it in a few ops only (the rank holding a token's embedding row reads it; the others do not).
Such a **twin** of a **base** stream has the same ops and tensors; its access rows differ in a
few ops, the **diff ops** (:func:`diff_ops`). The base is replayed whole, in segments cut at the
twins' diff ops. At a diff op a twin **forks**: a copy of the base's state (the group state of
:class:`tierlab.engine.groups_driver.SetGroupReplayer`) replays the twin's own rows beside the
base, segment by segment, and after each of them the two states are compared set by set. Once they
hold alike, the rest of the stream up to the twin's next diff op is the same for both, so its
counts are the base's: the twin **joins** the base again. Probes come after 4, 8, 16, ... ops from
the fork (:data:`FIRST_PROBE`), so a window that never joins costs a logarithmic number of extra
segments, and one that joins is at most twice as long as it had to be.

A twin's counts are then exactly those of its own whole replay: per op, its own counts in the ops
of its windows and the base's elsewhere; per kind (and blocks, and the replayer's statistics), the
base's total less the base's counts in the twin's windows plus the twin's own there; its flush,
the base's when the twin has joined by the end, else its own. Tested against each twin's own
replay in ``tests/engine/test_twins.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tierlab.engine.counters import N_COUNTERS
from tierlab.engine.geometry import KINDS, Geometry
from tierlab.engine.groups_driver import SetGroupReplayer
from tierlab.engine.jit import njit
from tierlab.engine.options import ReplayOptions
from tierlab.engine.setgroups import ST_K, ST_K_MAX
from tierlab.engine.state import Descriptors, Tensors
from tierlab.engine.tally import CallCounters

#: a stream differing from the base in more than this share of its ops is no twin: replayed beside
#: the base it would cost a segment and a state comparison per differing op, more than replaying it
#: on its own (the caller does; its result here is None)
MAX_DIFF_SHARE = 1 / 16

#: ops from a fork to the first probe: a diff op's effect on the tier outlives it by a few ops (until
#: enough other blocks have passed through the sets it touched), and each probe costs a segment
FIRST_PROBE = 4

Stream = tuple  # (op, tid, offset, nbytes, count, stride, write, pim): whole columns, op non-decreasing


def op_starts(op: np.ndarray, n_ops: int) -> np.ndarray:
    """``starts[k]``: the first row of op ``k`` (rows of op ``k`` are ``starts[k]..starts[k + 1]``)."""
    return np.searchsorted(op, np.arange(n_ops + 1), side="left")


@njit(nogil=True)
def _mark_diffs(sb, st, b1, b2, b3, b4, b5, b6, b7, t1, t2, t3, t4, t5, t6, t7, diff):
    """``diff[k]``: whether op ``k`` has another number of rows, or a row with another value in
    any column, in the two streams (rows of op ``k``: ``sb[k]..sb[k + 1]`` and ``st[k]..st[k + 1]``)."""
    for k in range(diff.shape[0]):
        i, j = sb[k], st[k]
        n = sb[k + 1] - i
        if n != st[k + 1] - j:
            diff[k] = True
            continue
        for x in range(n):
            a, b = i + x, j + x
            if (b1[a] != t1[b] or b2[a] != t2[b] or b3[a] != t3[b] or b4[a] != t4[b] or b5[a] != t5[b]
                    or b6[a] != t6[b] or b7[a] != t7[b]):
                diff[k] = True
                break


@njit(nogil=True)
def same_sets(lo_a, row_a, ent_a, k_a, lo_b, row_b, ent_b, k_b, W):
    """Whether two group states hold alike in every set: each set the same entries (offset, tensor,
    dirty flag) in the same replacement order. Groups may be cut differently (alike neighbours are
    merged only where a chunk passed), so the set ranges are walked side by side."""
    i = 0
    j = 0
    while i < k_a and j < k_b:
        ra = row_a[i] * W
        rb = row_b[j] * W
        for f in range(3):
            for e in range(W):
                if ent_a[f, ra + e] != ent_b[f, rb + e]:
                    return False
        end_a = lo_a[i + 1]
        end_b = lo_b[j + 1]
        if end_a <= end_b:
            i += 1
        if end_b <= end_a:
            j += 1
    return i == k_a and j == k_b


def diff_ops(base: Stream, twin: Stream, n_ops: int, starts: tuple[np.ndarray, np.ndarray] | None = None
             ) -> np.ndarray:
    """The ops (sorted) whose rows differ between two streams: another number of rows, or a row
    with another value in any column. ``starts``: both streams' :func:`op_starts`, if known."""
    sb, st = starts if starts is not None else (op_starts(base[0], n_ops), op_starts(twin[0], n_ops))
    diff = np.zeros(n_ops, np.bool_)
    _mark_diffs(sb, st, *base[1:], *twin[1:], diff)
    return np.flatnonzero(diff)


def same_state(a: SetGroupReplayer, b: SetGroupReplayer) -> bool:
    """Whether two group replayers hold alike in every set of tier 0 (so the same stream gives
    both the same counts from here on). False once either was handed to the walk."""
    if a.walk is not None or b.walk is not None:
        return False
    return bool(same_sets(a.grp_lo, a.grp_row, a.ent, int(a.st[ST_K]), b.grp_lo, b.grp_row, b.ent,
                          int(b.st[ST_K]), int(a.geo.n_ways[0])))


def _stat_vector(stats: dict) -> np.ndarray:
    """The additive statistics of a replayer: requests served fast per tier, chunks served as sweeps."""
    return np.array(list(stats["fast_requests"]) + [stats.get("set_groups_sweeps", 0)], np.int64)


@dataclass
class _Twin:
    stream: Stream
    starts: np.ndarray
    diffs: np.ndarray
    nxt: int = 0                                  # index into diffs of the next diff op ahead
    fork: SetGroupReplayer | None = None          # replaying its own rows since op w0
    w0: int = 0
    probe: int = 0
    step: int = 1
    pieces: list = field(default_factory=list)    # (k0, k1, its own per-op counts of ops k0..k1-1)
    by_kind: np.ndarray | None = None             # its own per-kind counts less the base's in its windows
    blocks: int = 0                               # the same for blocks requested
    stats: np.ndarray | None = None               # and for the additive statistics
    stats_at_fork: np.ndarray | None = None
    k_max: int = 0                                # most groups held, outside the windows from the base
    windows: int = 0
    joined: list = field(default_factory=list)    # (w0, op it joined at)


class TwinDriver:
    """Replays ``base`` whole and each twin only where it differs (see the module docstring).

    :meth:`run` returns, per stream (base first), ``per_op`` (``[op, tier, counter]``), ``by_kind``,
    ``flush`` (``[kind, tier, counter]``), blocks, descriptors and the replayer's statistics."""

    def __init__(self, geo: Geometry, tensors: Tensors, options: ReplayOptions, base: Stream,
                 twins: list[Stream], n_ops: int, progress=None, max_diff_share: float = MAX_DIFF_SHARE, *,
                 call_ops: int):
        self.geo, self.tensors, self.options, self.n_ops = geo, tensors, options, n_ops
        self.base = base
        self.base_starts = op_starts(base[0], n_ops)
        self.twins = []
        for t in twins:
            starts = op_starts(t[0], n_ops)
            self.twins.append(_Twin(t, starts, diff_ops(base, t, n_ops, (self.base_starts, starts))))
        self.progress = progress
        self.max_diff_share = max_diff_share
        n_kinds, n_tiers = len(KINDS), len(geo.names)
        self.shape = (n_kinds, n_tiers, N_COUNTERS)
        self.calls = CallCounters(n_tiers)
        self.call_ops = call_ops

    def _segment(self, r: SetGroupReplayer, stream: Stream, starts: np.ndarray, k0: int, k1: int,
                 per_op: np.ndarray, by_kind: np.ndarray, first: int = 0) -> tuple[int, int]:
        """Replay ops ``k0..k1-1`` of ``stream`` on ``r``, counts folded into ``per_op`` (its row 0
        is op ``first``) and ``by_kind``. Returns (blocks requested, most groups held in the
        segment)."""
        r.st[ST_K_MAX] = r.st[ST_K]
        a, b = int(starts[k0]), int(starts[k1])
        if a == b:
            return 0, int(r.st[ST_K])
        n = self.calls.replay(r, Descriptors(stream[0][a:b] - first, *(c[a:b] for c in stream[1:])), per_op,
                              by_kind, self.call_ops)
        return n, int(r.st[ST_K_MAX])

    def run(self) -> list[dict]:
        n_ops, shape = self.n_ops, self.shape
        R = SetGroupReplayer(self.geo, self.tensors, self.options)
        per_op = np.zeros((max(n_ops, 1),) + shape[1:], np.int64)
        by_kind = np.zeros(shape, np.int64)
        blocks = 0
        k_max = int(R.st[ST_K])
        for t in self.twins:
            t.by_kind = np.zeros(shape, np.int64)
            t.stats = np.zeros_like(_stat_vector(R.stats()))
            t.k_max = k_max
        # twins that could not fork (the base was handed to the walk), or that differ in too many ops
        lost: list[int] = [i for i, t in enumerate(self.twins) if len(t.diffs) > self.max_diff_share * max(n_ops, 1)]
        pos = 0
        while pos < n_ops:
            for i, t in enumerate(self.twins):
                if t.fork is None and i not in lost and t.nxt < len(t.diffs) and t.diffs[t.nxt] == pos:
                    t.fork = R.fork()
                    if t.fork is None:
                        lost.append(i)
                        continue
                    t.w0, t.step, t.windows = pos, FIRST_PROBE, t.windows + 1
                    t.probe = min(n_ops, pos + t.step)
                    t.stats_at_fork = _stat_vector(t.fork.stats())
            live = [t for i, t in enumerate(self.twins) if i not in lost]
            nxt = n_ops
            for t in live:
                if t.fork is not None:
                    nxt = min(nxt, t.probe)
                elif t.nxt < len(t.diffs):
                    nxt = min(nxt, int(t.diffs[t.nxt]))
            forked = [t for t in live if t.fork is not None]
            seg_bk = np.zeros(shape, np.int64) if forked else by_kind
            s0 = _stat_vector(R.stats()) if forked else None
            nb, km = self._segment(R, self.base, self.base_starts, pos, nxt, per_op, seg_bk)
            blocks += nb
            k_max = max(k_max, km)
            if forked:
                by_kind += seg_bk
                ds = _stat_vector(R.stats()) - s0
            for t in live:
                if t.fork is None:
                    t.k_max = max(t.k_max, km)
                    continue
                t.by_kind -= seg_bk
                t.blocks -= nb
                t.stats -= ds
                own = np.zeros((nxt - pos,) + shape[1:], np.int64)
                tb, tk = self._segment(t.fork, t.stream, t.starts, pos, nxt, own, t.by_kind, first=pos)
                t.pieces.append((pos, nxt, own))
                t.blocks += tb
                t.k_max = max(t.k_max, tk)
            if self.progress is not None:
                self.progress(int(self.base_starts[nxt] - self.base_starts[pos]))
            pos = nxt
            for t in forked:
                if t.probe != pos:
                    continue
                while t.nxt < len(t.diffs) and t.diffs[t.nxt] < pos:
                    t.nxt += 1
                if pos < n_ops and same_state(t.fork, R):
                    t.stats += _stat_vector(t.fork.stats()) - t.stats_at_fork
                    t.joined.append((t.w0, pos))
                    t.fork = None
                else:
                    t.step *= 2
                    t.probe = min(n_ops, pos + t.step)
        R.st[ST_K_MAX] = k_max
        fl = np.zeros((1,) + shape, np.int64)
        if self.options.flush:
            R.flush(fl)
        base_stats = R.stats()
        out = [{"per_op": per_op[:n_ops], "by_kind": by_kind, "flush": fl[0], "blocks": blocks,
                "descriptors": len(self.base[0]), "stats": base_stats}]
        for i, t in enumerate(self.twins):
            if i in lost:
                out.append(None)
                continue
            t_per_op = per_op[:n_ops].copy()
            for k0, k1, own in t.pieces:
                t_per_op[k0:k1] = own
            stats = dict(base_stats)
            vec = _stat_vector(base_stats) + t.stats
            if t.fork is None:
                t_fl = fl[0]
            else:                       # still forked at the end: its own flush and hand-over flag
                t_fl = np.zeros((1,) + shape, np.int64)
                if self.options.flush:
                    t.fork.flush(t_fl)
                t_fl = t_fl[0]
                own = t.fork.stats()
                vec += _stat_vector(own) - t.stats_at_fork
                stats["set_groups_written_out"] = own["set_groups_written_out"]
            stats["fast_requests"] = vec[:-1].tolist()
            if "set_groups_sweeps" in stats:
                stats["set_groups_sweeps"] = int(vec[-1])
            stats["set_groups_max"] = int(t.k_max)
            stats["twin"] = {"windows": t.windows, "window_ops": sum(k1 - k0 for k0, k1, _ in t.pieces),
                             "diff_ops": len(t.diffs), "joined": t.fork is None}
            out.append({"per_op": t_per_op, "by_kind": by_kind + t.by_kind, "flush": t_fl,
                        "blocks": blocks + t.blocks, "descriptors": len(t.stream[0]), "stats": stats})
        return out
