"""The driver of the ``set_groups`` kernel (:mod:`tierlab.engine.setgroups`): tier 0 kept as groups
of sets that hold alike, handed to the walk when the stream is too scattered for groups to pay.

A stream too scattered cuts tier 0 into more than a quarter of its sets (once past 64; or more than
``options.max_set_groups`` groups, a cap a test or a tuning may set). The groups then hold fewer than
four sets on average and serving each costs about what the walk pays per set. There is no fixed
cap by default: a cap of 1,024 groups (before issue 42) was passed by every prefill on a cache of
125,000 sets (256 MB of Infinity Cache, 128 B blocks, 16 ways), where a tensor of tens of MB does
not sweep the cache and every chunk's ends stay cut, and the walk that took over was 50-250x
slower than the groups (which stay under 8,000 there). The state is then written out per set
(:func:`tierlab.engine.setgroups.write_slots`) and a :class:`tierlab.engine.walker.WalkReplayer`
(with its range fast path) replays the rest, with the same counts.
"""

from __future__ import annotations

import numpy as np

from tierlab.engine import setgroups
from tierlab.engine.geometry import Geometry
from tierlab.engine.jit import njit
from tierlab.engine.options import ReplayOptions
from tierlab.engine.state import Descriptors, Tensors
from tierlab.engine.tally import fold


@njit(nogil=True)
def replay_calls(desc, ten, hier, sh0, store_recency, fetch_write, grp_lo, grp_row, ent, free, st, max_groups,
                 cnt, call_ops, per_op, by_kind):
    """:func:`tierlab.engine.setgroups.replay_groups` over a whole batch (op ids ``desc.row``,
    non-decreasing), ``call_ops`` ops a call into ``cnt`` (``[op - lo, kind, tier, counter]``, at
    least ``call_ops`` rows, all zero), each call's counts folded into ``per_op`` and ``by_kind``
    (:func:`tierlab.engine.tally.fold`, which clears ``cnt``) before the next: the door's loop over
    calls, without a return to Python between them.

    Returns the tier-0 blocks requested, the entry arrays (new ones when the row pool grew) and the
    number of descriptors replayed: the batch's length, or fewer where the group kernel stopped (its
    counts so far folded; the caller hands the state to the walk and replays the rest)."""
    row, tid, offset, nbytes, count, stride, write, pim = desc
    n = row.shape[0]
    a = 0
    blocks = 0
    while a < n:
        lo = row[a]
        e = a + 1
        while e < n and row[e] < lo + call_ops:
            e += 1
        span = row[e - 1] - lo + 1
        part = cnt[:span]
        seg = Descriptors(row[a:e] - lo, tid[a:e], offset[a:e], nbytes[a:e], count[a:e], stride[a:e],
                          write[a:e], pim[a:e])
        k, ent, free, stop = setgroups.replay_groups(seg, ten, hier, sh0, store_recency, fetch_write, grp_lo,
                                                      grp_row, ent, free, st, max_groups, part)
        blocks += k
        fold(part, lo, per_op, by_kind)
        if stop < e - a:
            return blocks, ent, free, a + stop
        a = e
    return blocks, ent, free, n


class SetGroupReplayer:
    """Same interface and counts as :class:`tierlab.engine.walker.WalkReplayer` where the dispatch
    table lets ``set_groups`` serve (tier 0 the only caching tier, LRU or FIFO)."""

    def __init__(self, geo: Geometry, tensors: Tensors, options: ReplayOptions):
        self.geo = geo
        self.options = options
        self.tensors = tensors
        self.hier = geo.hierarchy()
        self.sh0 = int(geo.block_bytes[0]).bit_length() - 1
        self.grp_lo, self.grp_row, self.ent, self.free, self.st = setgroups.new_state(
            int(geo.n_sets[0]), int(geo.n_ways[0]))
        self.max_groups = min(options.max_set_groups, max(64, int(geo.n_sets[0]) // 4))
        self.walk = None                # a tierlab.engine.walker.WalkReplayer once written out

    def run(self, desc: Descriptors, cnt: np.ndarray) -> int:
        if self.walk is not None:
            return self.walk.run(desc, cnt)
        o = self.options
        n, self.ent, self.free, stop = setgroups.replay_groups(
            desc, self.tensors, self.hier, self.sh0, o.store_hit_recency, o.fetch_on_write_miss,
            self.grp_lo, self.grp_row, self.ent, self.free, self.st, self.max_groups, cnt)
        if stop < len(desc.row):
            self._write_out()
            n += self.walk.run(Descriptors(*(a[stop:] for a in desc)), cnt)
        return int(n)

    def run_folded(self, desc: Descriptors, cnt: np.ndarray, call_ops: int, per_op: np.ndarray,
                   by_kind: np.ndarray) -> tuple[int, int]:
        """A whole batch (:func:`replay_calls`), its counts folded into ``per_op`` and ``by_kind``;
        returns (tier-0 blocks, descriptors replayed). Fewer than the batch's: the state went to the
        walk, which :meth:`run` replays the rest on (nothing replayed once it has)."""
        if self.walk is not None:
            return 0, 0
        o = self.options
        n, self.ent, self.free, done = replay_calls(
            desc, self.tensors, self.hier, self.sh0, o.store_hit_recency, o.fetch_on_write_miss,
            self.grp_lo, self.grp_row, self.ent, self.free, self.st, self.max_groups, cnt, call_ops, per_op, by_kind)
        if done < len(desc.row):
            self._write_out()
        return int(n), int(done)

    def fork(self) -> "SetGroupReplayer | None":
        """A replayer holding a copy of this one's state (None once handed to the walk: the walk's
        state is not forked), to replay a different stream on from here."""
        if self.walk is not None:
            return None
        twin = object.__new__(SetGroupReplayer)
        twin.__dict__.update(self.__dict__)
        twin.grp_lo, twin.grp_row, twin.ent, twin.free, twin.st = (
            a.copy() for a in (self.grp_lo, self.grp_row, self.ent, self.free, self.st))
        return twin

    def _write_out(self) -> None:
        """Hand the state to the walk (see :func:`tierlab.engine.setgroups.write_slots`)."""
        from tierlab.engine.walker import WalkReplayer     # loaded only when a stream needs it

        w = WalkReplayer(self.geo, self.tensors, self.options, fast_path=True)
        s = w.state
        setgroups.write_slots(self.grp_lo, self.grp_row, self.ent, self.st, self.geo.n_ways, self.tensors.home,
                              s.tag, s.dirty, s.meta, s.owner, s.clock, s.tinfo, s.region_cnt)
        self.walk = w

    def flush(self, cnt: np.ndarray) -> None:
        if self.walk is not None:
            self.walk.flush(cnt)
            return
        setgroups.flush_groups(self.tensors.home, self.tensors.kind, self.geo.block_bytes, self.geo.n_ways,
                               self.grp_lo, self.grp_row, self.ent, self.st, cnt)

    def stats(self) -> dict:
        fast = [int(self.st[setgroups.ST_REQUESTS])] + [0] * (len(self.geo.names) - 1)
        if self.walk is not None:
            fast = [a + b for a, b in zip(fast, self.walk.stats()["fast_requests"])]
        return {"fast_requests": fast, "set_groups_max": int(self.st[setgroups.ST_K_MAX]),
                "set_groups_sweeps": int(self.st[setgroups.ST_SWEEPS]),
                "set_groups_written_out": self.walk is not None}
