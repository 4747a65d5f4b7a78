"""The drivers of the walk (kernels ``walk`` and ``walk_fast``): its state, batches, flush, and the
``opt`` pre-pass that gives each OPT tier its future.

A driver is fed descriptor batches in order (:meth:`WalkReplayer.run`), then flushed if asked
(:meth:`WalkReplayer.flush`); :meth:`WalkReplayer.stats` names what it did.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.engine import walk
from tierlab.engine.geometry import Geometry
from tierlab.engine.options import ReplayOptions, random_seed_state
from tierlab.engine.policies import LRU, OPT, OPT_NEVER
from tierlab.engine.state import (
    MODE_CACHE,
    N_TINFO,
    TI_FAST_REQUESTS,
    TI_REGION_OFF,
    TI_REGION_SHIFT,
    TI_SET_MASK,
    TI_SHIFT,
    Descriptors,
    OptFuture,
    Rules,
    Tensors,
    TierState,
    no_descriptors,
)


def walk_rules(geo: Geometry, options: ReplayOptions, fast_path: bool) -> Rules:
    """The walk's rules; with fewer than two caching tiers nothing can be back-invalidated, so
    inclusive is non-inclusive there."""
    incl = options.inclusive and int(np.count_nonzero(geo.mode == MODE_CACHE)) >= 2
    return Rules(options.store_hit_recency, options.fetch_on_write_miss, options.fetch_on_writeback_miss,
                 incl, fast_path and not incl, options.fast_min_blocks, options.lazy_max_runs)


def new_tier_state(geo: Geometry, seed: int) -> TierState:
    """An empty hierarchy: no block held, clocks at zero, residency regions sized to the address space.

    Regions: 2**k blocks each, at most 2**18 of them per caching tier, so the counts stay in the
    host's caches."""
    n = len(geo.names)
    ns = geo.n_slots
    tinfo = np.zeros((n, N_TINFO), np.int64)
    r_off = 0
    for i in range(n):
        b = int(geo.block_bytes[i])
        tinfo[i, TI_SHIFT] = b.bit_length() - 1
        s = int(geo.n_sets[i])
        tinfo[i, TI_SET_MASK] = s - 1 if s & (s - 1) == 0 else -1
        n_blk = max(1, -(-int(geo.space_bytes) // b))
        rs = max(0, (n_blk - 1).bit_length() - 18) if geo.mode[i] == MODE_CACHE else 62
        tinfo[i, TI_REGION_SHIFT] = rs
        tinfo[i, TI_REGION_OFF] = r_off
        r_off += ((n_blk - 1) >> rs) + 1 if geo.mode[i] == MODE_CACHE else 1
    return TierState(tag=np.full(ns, -1, np.int64), dirty=np.zeros(ns, np.uint8), meta=np.zeros(ns, np.int64),
                     owner=np.zeros(ns, np.int32), clock=np.zeros(n, np.int64),
                     rng=np.array([random_seed_state(seed, i) for i in range(n)], np.uint64),
                     tinfo=tinfo, region_cnt=np.zeros(r_off, np.int32))


def opt_future(n_tiers: int, opt_next: dict[int, np.ndarray] | None, record_tier: int = -1,
               record_capacity: int = 0) -> OptFuture:
    """The OPT tiers' next uses laid end to end, and the recorder of the pre-pass."""
    opt_next = opt_next or {}
    parts, offs, o = [], np.zeros(n_tiers, np.int64), 0
    for i in range(n_tiers):
        offs[i] = o
        if i in opt_next:
            parts.append(np.asarray(opt_next[i], np.int64))
            o += len(opt_next[i])
    return OptFuture(np.concatenate(parts) if parts else np.zeros(1, np.int64), offs, np.zeros(n_tiers, np.int64),
                     record_tier, np.zeros(max(1, record_capacity), np.int64), np.zeros(1, np.int64))


class WalkReplayer:
    """Engine state for one hierarchy and one tensor table; feed it descriptor batches in order.

    ``fast_path``: the walk with its range fast path and lazy run stacks (kernel ``walk_fast``), or
    plain per-block replay (kernel ``walk``)."""

    def __init__(self, geo: Geometry, tensors: Tensors, options: ReplayOptions, *, fast_path: bool = True,
                 opt_next: dict[int, np.ndarray] | None = None, record_tier: int = -1, record_capacity: int = 0,
                 policy_override: np.ndarray | None = None):
        self.geo = geo
        self.tensors = tensors
        self.hier = geo.hierarchy(policy_override)
        self.state = new_tier_state(geo, options.seed)
        self.opt = opt_future(len(geo.names), opt_next, record_tier, record_capacity)
        self.rules = walk_rules(geo, options, fast_path)

    def run(self, desc: Descriptors, cnt: np.ndarray) -> int:
        """Replay one batch; counters are added to ``cnt[row, kind, tier, counter]``."""
        return int(walk.replay_batch(desc, self.tensors, self.hier, self.state, self.opt, self.rules,
                                     walk.back_arg(self.rules), cnt))

    def flush(self, cnt: np.ndarray) -> None:
        walk.flush_dirty(no_descriptors(), self.tensors, self.hier, self.state, self.opt,
                         self.rules._replace(fast_path=False), walk.back_arg(self.rules), cnt)

    @property
    def recorded(self) -> np.ndarray:
        """The blocks the recorded tier looked up (the opt pre-pass); its length may exceed the buffer."""
        return self.opt.rec_buf[:int(self.opt.rec_pos[0])]

    def stats(self) -> dict:
        return {"fast_requests": self.state.tinfo[:, TI_FAST_REQUESTS].tolist()}


def next_use(stream: np.ndarray) -> np.ndarray:
    """Position of the next occurrence of each element of ``stream`` (OPT_NEVER if none)."""
    n = len(stream)
    out = np.full(n, OPT_NEVER, np.int64)
    if n < 2:
        return out
    order = np.argsort(stream, kind="stable")
    s = stream[order]
    same = s[1:] == s[:-1]
    out[order[:-1][same]] = order[1:][same]
    return out


def check_inclusive(geo: Geometry, options: ReplayOptions) -> None:
    """Refuse what the inclusive mode cannot do exactly (``docs/design.md``, accounting: inclusive)."""
    if not (options.fetch_on_write_miss and options.fetch_on_writeback_miss):
        raise UsageError("inclusive replay needs fetch_on_write_miss and fetch_on_writeback_miss on "
                         "(an unfetched fill would hold a block the next tier does not)", field="inclusive")
    for i in range(len(geo.names)):
        if geo.mode[i] == MODE_CACHE and geo.policy[i] == OPT:
            raise UsageError(f"policy 'opt' on tier {geo.names[i]!r} cannot be replayed inclusive (its "
                             f"future depends on farther tiers' evictions); use lru, fifo or random",
                             field=f"tier[{i}].policy")


def opt_tiers(geo: Geometry) -> list[int]:
    return [i for i in range(len(geo.names)) if geo.policy[i] == OPT and geo.mode[i] == MODE_CACHE]


def opt_prepass(geo: Geometry, tensors: Tensors, options: ReplayOptions, fast_path: bool,
                batches: Callable[[], Iterable[Descriptors]],
                feed: Callable[[WalkReplayer, Iterable[Descriptors]], None]) -> dict[int, np.ndarray]:
    """Each OPT tier's future: the next use of every lookup it will see.

    Tier ``t``'s lookups depend only on the tiers above it: replay them (opt ones with their
    futures, later opt tiers as lru, which does not change what tier ``t`` sees) and record them.
    ``feed(replayer, batches)`` replays every batch on a replayer (counts discarded)."""
    tiers = opt_tiers(geo)
    futures: dict[int, np.ndarray] = {}
    for t in tiers:
        override = geo.policy.copy()
        for u in tiers:
            if u >= t:
                override[u] = LRU
        cap = 1 << 20
        while True:
            r = WalkReplayer(geo, tensors, options, fast_path=fast_path, opt_next=futures, record_tier=t,
                             record_capacity=cap, policy_override=override)
            feed(r, batches())
            n = int(r.opt.rec_pos[0])
            if n > options.opt_max_lookups:
                raise UsageError(f"policy 'opt' on tier {geo.names[t]!r} needs its whole future "
                                 f"({n} lookups > opt_max_lookups={options.opt_max_lookups}); "
                                 f"use lru or a shorter trace", field=f"tier[{t}].policy")
            if n <= cap:
                futures[t] = next_use(r.opt.rec_buf[:n])
                break
            cap = n
    return futures
