"""The door to the engine: validate, build the arrays once, stream access batches, name the results.

Accounting semantics (the lead lifts this into the README; DESIGN.md has the outline)
--------------------------------------------------------------------------------------
* **Requests.** Every access descriptor (tensor, offset, nbytes, count, stride, write) is expanded
  inside the compiled loop to the tier-0 blocks its chunks touch; each is one request of
  ``block_bytes[0]`` bytes at tier 0. A request arriving at tier ``i > 0`` carries
  ``block_bytes[i-1]`` bytes: a tier's block is the transfer unit on the link below it.
* **Home tier.** Placement gives every tensor a home tier ``h``; a request reaching ``h`` is a hit
  there (the home always holds the tensor); tiers below ``h`` never see the tensor.
* **Caching tiers** (``managed = "cache"``, or a ``memory`` tier with ``lend = true`` and capacity
  left after placement, which caches tensors homed farther away in that lent capacity with the tier's
  own ways and policy). Set = block number mod sets. Hit: policy update (a store hit updates recency
  only if ``store_hit_recency``), a write marks the block dirty. Miss: count a miss, fetch the block
  from the next tier (one request there), fill it (count a fill), evicting the policy's victim if the
  set is full (count an eviction; a dirty victim is a writeback: one write request of this tier's
  block to the next tier). Write-back, write-allocate; the fetch of a write miss covering the whole
  block may be skipped (``fetch_on_write_miss`` for stores from compute at tier 0,
  ``fetch_on_writeback_miss`` for writes arriving from a nearer tier; counted as ``unfetched``).
  The fetch is served before the victim's writeback.
* **Pass-through tiers** (a scratchpad, or a memory tier not lending, that is not the tensor's home):
  a read passes through as a **bypass** (a miss that fills nothing), a write as a **writethrough**;
  either forwards this tier's block to the next tier.
* **Non-inclusive** by default: tiers evict independently.
* **Inclusive** (``inclusive``): among the caching tiers a tensor passes through (a ``cache`` tier,
  or a lending ``memory`` tier for tensors homed farther away), every block a nearer caching tier
  holds is also held by the next caching tier. Kept by **back-invalidation**: when caching tier
  ``k`` evicts a block (after choosing the victim, before deciding whether it is dirty), every
  caching tier ``j < k``, nearest first, invalidates each of its own blocks inside the victim
  (counted as ``back_invalidations`` at tier ``j``, attributed to the op that caused the eviction
  and the kind of the block's tensor). A dirty one is written back first: a writeback at tier ``j``
  (``block_j`` bytes read there and sent up link j), which crosses any pass-through tiers as
  writethroughs and arrives at the next caching tier as a write hit (``block`` of the tier above
  counted as bytes written; the block there is marked dirty; no replacement update, since that
  block is itself being dropped, or is the victim). So the victim at tier ``k`` absorbs its nearer
  copies' dirty data and writes back as dirty; nothing is lost. Inclusive replay refuses ``opt``
  (a tier's future would depend on farther tiers' evictions) and skipped fetches
  (``fetch_on_write_miss``/``fetch_on_writeback_miss`` off would fill a block the next tier lacks),
  and, with two or more caching tiers, runs without the range fast path and the cache-stream
  kernel (plain per-block replay); with fewer, nothing can be back-invalidated and it is the
  non-inclusive replay, fast paths included.
  Laws it adds: writebacks <= evictions + back_invalidations; back_invalidations at tier j <=
  sum over farther caching tiers k of evictions_k x block_k / block_j; resident blocks = fills -
  evictions - back_invalidations.
* **Conservation** (exact, tested): bytes down link(i, i+1) = (misses - unfetched + bypasses) x
  block_i; bytes up = (writebacks + writethroughs) x block_i. The optional end-of-run flush of dirty
  blocks (``flush``) is counted separately.
* **Policies** ``lru``, ``fifo``, ``random`` (xorshift64 per tier seeded from ``seed``), ``opt``
  (Belady's MIN, lowest way on ties; needs each OPT tier's future lookups, obtained by a pre-pass that
  replays the tiers above it, affordable up to ``opt_max_lookups`` lookups).
* **PIM** (``pim``): an op with ``pim_eligible`` whose dominant operand (the ``weight`` or ``kv``
  tensor it reads most) is homed in a tier whose PIM unit runs that op kind runs in memory
  (:mod:`emulator.pim`): its reads of operand tensors homed there are counted as ``pim_bytes`` at
  the home tier (their tier-0 blocks); they cross no link and fill no cache. With ``pim`` off, or
  on a chip without PIM units, the replay is the plain one.
* **Attribution.** Counters are kept per op and per tensor kind; work caused by evicting a block
  (writebacks and what they cause farther down) is attributed to the op that caused the eviction and
  to the kind of the evicted block's tensor.

Exact speed-ups (``fast_path``, on by default; off gives plain per-block replay, same counts)
--------------------------------------------------------------------------------------------
* **Range fast path** (:func:`emulator.engine._fast_tier`): a read chunk of at least
  ``fast_min_blocks`` tier-0 blocks is cut at residency-region boundaries (each caching tier counts
  its resident blocks per region of 2**k blocks, at most 2**18 regions). A piece with no resident
  block at an LRU/FIFO tier whose dirty blocks are all homed in the next tier is served set by set:
  every block misses once, and each set reuses its ways in a fixed order (empty ways, resident blocks
  oldest first, then the run's own blocks), which is what per-block replacement does. The next tier
  then sees the run's fetches as a run; a home tier counts them in one step. Property-tested
  bit-identical to per-block replay (``tests/test_engine_fastpath.py``).
* **Lazy tier state** (:mod:`emulator.lazy`): within one engine call, a fast-path run of at least
  sets x ways blocks leaves the tier described by that run alone, and later runs of at least
  sets / ways blocks are stacked on it, each counted per segment of sets that behave alike instead
  of set by set; a set anything else touches is written out first (way order, stamps and all), and
  every set is written out before the call returns. Property-tested bit-identical to per-block
  replay (``tests/test_engine_lazy.py``).
* **Set groups** (:mod:`emulator.setgroups`, ``set_groups``): when tier 0 is the only caching tier
  (LRU or FIFO) and every farther tier is a home or a pass-through, tier 0 is kept as groups of
  consecutive sets that hold alike (set ``s`` holds blocks ``A + s`` for the group's offsets ``A``,
  in replacement order). A chunk is served group by group, each outcome counted once for all the
  group's sets; groups are split where a chunk starts or ends and merged when they hold alike again.
  A stream cut into more than ``max_set_groups`` groups (or a quarter of the sets, past 64) is too
  scattered for groups to pay: the state is written out per set and the walk replays the rest.
  Property-tested equal to the plain-Python reference and to the walk (``tests/test_setgroups.py``);
  this is what makes a decode token of an 8 B model replay faster than the chip runs it.
* **Cache-stream kernels** (:mod:`emulator.stream`): ``replay_blocks`` on LRU, FIFO and random
  caches without flush. Each set is kept as words in replacement order (random: physical order):
  a lookup is one vector compare and an update one blend (:mod:`emulator.simd`), with no branch on
  hit or miss. A stream without writes on at most three LRU/FIFO tiers follows each block down the
  tiers in one loop (:func:`emulator.stream.chain_pass`, int32 words while the blocks allow);
  otherwise chunk by chunk, each chunk one tier at a time (:func:`emulator.stream.tier_pass`: a tier
  sees exactly what the tier above issued, in order). A tier's evictions are its misses less its
  valid ways at the end (no way is ever emptied). Tested equal to the walk and to pycachesim.
* **Set partition** (``threads=2``, ``replay_blocks``): a bit of the block number that is a set-index
  bit at every tier splits the stream into two independent halves replayed on two threads (the
  chain: both threads split each chunk, then each replays its half; the tier passes: each thread
  compacts its half of each chunk; the walk: two copies). A one-tier chain stays on one thread.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from emulator import engine, setgroups
from emulator.counters import N_COUNTERS, ReplayResult
from emulator.hierarchy import Chip, Tier
from traces.errors import CapacityError, TraceError, UsageError
from traces.format import TENSOR_KINDS

KINDS = TENSOR_KINDS  # breakdown order; unknown kinds count as "other"
PIM_OPERAND_KINDS = ("weight", "kv")  # see emulator.pim.OPERAND_KINDS


@dataclass(frozen=True)
class ReplayOptions:
    """Every choice that changes counts, with its default (see the module docstring)."""

    store_hit_recency: bool = True        # a store hit counts as a use for LRU
    fetch_on_write_miss: bool = True      # a store miss covering a whole tier-0 block still fetches it
    fetch_on_writeback_miss: bool = True  # a whole-block write arriving from above still fetches it
    flush: bool = False                   # write dirty blocks back at the end (reported separately)
    inclusive: bool = False               # a caching tier's eviction back-invalidates nearer caching tiers
    seed: int = 0                         # the random policy's seed
    pim: bool = True                      # run PIM-eligible ops in memory where the chip allows
    fast_path: bool = True                # serve long read runs set by set where exact (same counts)
    fast_min_blocks: int = 64             # shortest read chunk (tier-0 blocks) the fast path takes
    lazy_max_runs: int = 16               # runs a lazy tier keeps stacked before it is written out
    set_groups: bool = True               # a lone LRU/FIFO caching tier kept as groups of alike sets
    max_set_groups: int = 1024            # more groups (or sets / 4, past 64): tier 0 written out, walked per set
    threads: int = 1                      # replay_blocks: split the stream by set over 2 threads where exact
    batch_rows: int = 1 << 16             # access descriptors per engine call
    opt_max_lookups: int = 1 << 26        # largest per-tier future the opt pre-pass may hold
    max_slots: int = 1 << 27              # largest emulated state (blocks over all tiers)
    debug: bool = False                   # check conservation/count invariants after the replay
                                          # (emulator.invariants; also on with TIERLAB_DEBUG=1)

    def __post_init__(self):
        if self.lazy_max_runs < 1:
            raise UsageError(f"expected at least 1 run, got {self.lazy_max_runs}", field="lazy_max_runs")
        if self.max_set_groups < 1:
            raise UsageError(f"expected at least 1 group, got {self.max_set_groups}", field="max_set_groups")

    def to_dict(self) -> dict:
        return asdict(self)


def random_seed_state(seed: int, tier: int) -> int:
    """Initial xorshift64 state of tier ``tier`` for ``seed`` (never zero)."""
    x = (int(seed) * 0x9E3779B97F4A7C15 + (tier + 1) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    x ^= x >> 31
    return x or 1


@dataclass
class Geometry:
    """The arrays describing the hierarchy to the engine (one entry per tier)."""

    names: tuple[str, ...]
    block_bytes: np.ndarray
    n_sets: np.ndarray
    n_ways: np.ndarray
    mode: np.ndarray
    policy: np.ndarray
    slot_off: np.ndarray
    space_bytes: int = 1 << 20   # addresses replayed lie below this (sizes the residency regions)

    @property
    def n_slots(self) -> int:
        return int(self.slot_off[-1] + self.n_sets[-1] * self.n_ways[-1])


def _check_blocks(tiers: Sequence[Tier]) -> None:
    for i, t in enumerate(tiers):
        if t.block_bytes <= 0 or t.block_bytes & (t.block_bytes - 1):
            raise UsageError(f"block of {t.block_bytes} B is not a power of two", field=f"tier[{i}].block")
        if i and t.block_bytes % tiers[i - 1].block_bytes:
            raise UsageError(f"block {t.block_bytes} B is not a multiple of the nearer tier's "
                             f"{tiers[i - 1].block_bytes} B", field=f"tier[{i}].block")
        if t.policy not in engine.POLICY_IDS:
            raise UsageError(f"unknown policy {t.policy!r}; expected one of {sorted(engine.POLICY_IDS)}",
                             field=f"tier[{i}].policy")


def build_geometry(tiers: Sequence[Tier], lent_bytes: Sequence[int], below_blocks: Sequence[int],
                   options: ReplayOptions) -> Geometry:
    """Caching geometry of each tier.

    ``lent_bytes[i]``: capacity a lending memory tier offers as a cache; ``below_blocks[i]``: tier-i
    blocks of the tensors homed farther than tier ``i`` (the most a fully associative tier there can
    ever hold; its state is clamped to that, which changes no count since it then never evicts).
    """
    _check_blocks(tiers)
    n = len(tiers)
    blk = np.array([t.block_bytes for t in tiers], np.int64)
    sets = np.ones(n, np.int64)
    ways = np.ones(n, np.int64)
    mode = np.full(n, engine.MODE_PASS, np.int8)
    pol = np.zeros(n, np.int8)
    for i, t in enumerate(tiers):
        pol[i] = engine.POLICY_IDS[t.policy]
        if t.managed == "cache":
            cap = t.capacity_bytes
        elif t.managed == "memory" and t.lend and lent_bytes[i] > 0:
            cap = int(lent_bytes[i])
        else:
            continue
        n_blocks = cap // t.block_bytes
        w = n_blocks if t.ways is None else min(t.ways, n_blocks)
        if w <= 0:
            continue
        s = n_blocks // w
        if t.ways is None:
            w = max(1, min(w, int(below_blocks[i])))
        sets[i], ways[i], mode[i] = s, w, engine.MODE_CACHE
    off = np.zeros(n, np.int64)
    off[1:] = np.cumsum(sets * ways)[:-1]
    geo = Geometry(tuple(t.name for t in tiers), blk, sets, ways, mode, pol, off)
    if geo.n_slots > options.max_slots:
        raise CapacityError(f"emulating this hierarchy needs {geo.n_slots} block slots, more than "
                            f"max_slots={options.max_slots}; use larger blocks or fewer ways",
                            field="tier")
    return geo


class Replayer:
    """Engine state for one hierarchy and one tensor table; feed it descriptor batches in order."""

    def __init__(self, geo: Geometry, t_addr: np.ndarray, t_home: np.ndarray, t_kind: np.ndarray,
                 options: ReplayOptions, opt_next: dict[int, np.ndarray] | None = None,
                 record_tier: int = -1, record_capacity: int = 0, policy_override: np.ndarray | None = None):
        self.geo = geo
        self.options = options
        n = len(geo.names)
        self.t_addr = np.ascontiguousarray(t_addr, np.int64)
        self.t_home = np.ascontiguousarray(t_home, np.int64)
        self.t_kind = np.ascontiguousarray(t_kind, np.int64)
        self.policy = geo.policy.copy() if policy_override is None else policy_override
        ns = geo.n_slots
        self.tag = np.full(ns, -1, np.int64)
        self.dirty = np.zeros(ns, np.uint8)
        self.meta = np.zeros(ns, np.int64)
        self.owner = np.zeros(ns, np.int32)
        self.clock = np.zeros(n, np.int64)
        self.rng = np.array([random_seed_state(options.seed, i) for i in range(n)], np.uint64)
        opt_next = opt_next or {}
        parts, offs, o = [], np.zeros(n, np.int64), 0
        for i in range(n):
            offs[i] = o
            if i in opt_next:
                parts.append(np.asarray(opt_next[i], np.int64))
                o += len(opt_next[i])
        self.opt_next = np.concatenate(parts) if parts else np.zeros(1, np.int64)
        self.opt_off = offs
        self.opt_pos = np.zeros(n, np.int64)
        self.rec_tier = record_tier
        self.rec_buf = np.zeros(max(1, record_capacity), np.int64)
        self.rec_pos = np.zeros(1, np.int64)
        # per tier: log2 block, set mask, residency regions (2**k blocks each, at most 2**18 of
        # them, so the counts stay in the host's caches), dirty blocks homed beyond the next tier (see engine.TI_*)
        self.tinfo = np.zeros((n, engine.N_TINFO), np.int64)
        r_off = 0
        for i in range(n):
            b = int(geo.block_bytes[i])
            self.tinfo[i, engine.TI_SHIFT] = b.bit_length() - 1
            s = int(geo.n_sets[i])
            self.tinfo[i, engine.TI_SET_MASK] = s - 1 if s & (s - 1) == 0 else -1
            n_blk = max(1, -(-int(geo.space_bytes) // b))
            rs = max(0, (n_blk - 1).bit_length() - 18) if geo.mode[i] == engine.MODE_CACHE else 62
            self.tinfo[i, engine.TI_REGION_SHIFT] = rs
            self.tinfo[i, engine.TI_REGION_OFF] = r_off
            r_off += ((n_blk - 1) >> rs) + 1 if geo.mode[i] == engine.MODE_CACHE else 1
        self.region_cnt = np.zeros(r_off, np.int32)

    def _state(self):
        g, o = self.geo, self.options
        # with fewer than two caching tiers nothing can be back-invalidated: inclusive = non-inclusive
        incl = o.inclusive and int(np.count_nonzero(g.mode == engine.MODE_CACHE)) >= 2
        return (g.block_bytes, g.n_sets, g.n_ways, g.mode, self.policy, g.slot_off,
                self.tag, self.dirty, self.meta, self.owner, self.clock, self.rng,
                self.opt_next, self.opt_off, self.opt_pos,
                o.store_hit_recency, o.fetch_on_write_miss, o.fetch_on_writeback_miss,
                self.rec_tier, self.rec_buf, self.rec_pos, self.tinfo, self.region_cnt,
                o.fast_path and not incl, o.fast_min_blocks, o.lazy_max_runs, incl)

    def run(self, row, tid, offset, nbytes, count, stride, write, pim, cnt) -> int:
        """Replay one batch; counters are added to ``cnt[row, kind, tier, counter]``."""
        return int(engine.replay_batch(row, tid, offset, nbytes, count, stride, write, pim,
                                       self.t_addr, self.t_home, self.t_kind, *self._state(), cnt))

    def flush(self, cnt) -> None:
        engine.flush_dirty(self.t_home, self.t_kind, *self._state(), cnt)

    def fast_request_counts(self) -> list[int]:
        return self.tinfo[:, engine.TI_FAST_REQUESTS].tolist()


def set_groups_apply(geo: Geometry, options: ReplayOptions) -> bool:
    """Whether :class:`SetGroupReplayer` replays ``geo``: tier 0 is its only caching tier, LRU or
    FIFO, with a tier below it (see :mod:`emulator.setgroups`), and the fast paths are on."""
    return (options.fast_path and options.set_groups and len(geo.names) >= 2
            and geo.mode[0] == engine.MODE_CACHE
            and not (geo.mode[1:] == engine.MODE_CACHE).any()
            and int(geo.policy[0]) in (engine.POLICY_IDS["lru"], engine.POLICY_IDS["fifo"]))


class SetGroupReplayer:
    """Tier 0 as groups of sets that hold alike (:mod:`emulator.setgroups`); the same interface
    and counts as :class:`Replayer` where :func:`set_groups_apply` holds.

    A stream too scattered for groups to pay cuts tier 0 into more than ``options.max_set_groups``
    groups, or into more than a quarter of its sets (once past 64). The state is then written out
    per set, and a :class:`Replayer` (the walk, with its range fast path) replays the rest."""

    def __init__(self, geo: Geometry, t_addr: np.ndarray, t_home: np.ndarray, t_kind: np.ndarray,
                 options: ReplayOptions):
        self.geo = geo
        self.options = options
        self.t_addr = np.ascontiguousarray(t_addr, np.int64)
        self.t_home = np.ascontiguousarray(t_home, np.int64)
        self.t_kind = np.ascontiguousarray(t_kind, np.int64)
        self.sh0 = int(geo.block_bytes[0]).bit_length() - 1
        self.grp_lo, self.grp_row, self.ent, self.free, self.st = setgroups.new_state(
            int(geo.n_sets[0]), int(geo.n_ways[0]))
        self.max_groups = min(options.max_set_groups, max(64, int(geo.n_sets[0]) // 4))
        self.walk: Replayer | None = None

    def run(self, row, tid, offset, nbytes, count, stride, write, pim, cnt) -> int:
        if self.walk is not None:
            return self.walk.run(row, tid, offset, nbytes, count, stride, write, pim, cnt)
        g, o = self.geo, self.options
        n, self.ent, self.free, stop = setgroups.replay_groups(
            row, tid, offset, nbytes, count, stride, write, pim, self.t_addr, self.t_home, self.t_kind,
            g.block_bytes, self.sh0, g.n_sets, g.n_ways, g.policy, o.store_hit_recency,
            o.fetch_on_write_miss, self.grp_lo, self.grp_row, self.ent, self.free, self.st,
            self.max_groups, cnt)
        if stop < len(row):
            self._write_out()
            n += self.walk.run(row[stop:], tid[stop:], offset[stop:], nbytes[stop:], count[stop:],
                               stride[stop:], write[stop:], pim[stop:], cnt)
        return int(n)

    def _write_out(self) -> None:
        """Hand the state to a :class:`Replayer` (see :func:`emulator.setgroups.write_slots`)."""
        w = Replayer(self.geo, self.t_addr, self.t_home, self.t_kind, self.options)
        setgroups.write_slots(self.grp_lo, self.grp_row, self.ent, self.st, self.geo.n_ways, self.t_home,
                              w.tag, w.dirty, w.meta, w.owner, w.clock, w.tinfo, w.region_cnt)
        self.walk = w

    def flush(self, cnt) -> None:
        if self.walk is not None:
            self.walk.flush(cnt)
            return
        setgroups.flush_groups(self.t_home, self.t_kind, self.geo.block_bytes, self.geo.n_ways,
                               self.grp_lo, self.grp_row, self.ent, self.st, cnt)

    def fast_request_counts(self) -> list[int]:
        out = [int(self.st[setgroups.ST_REQUESTS])] + [0] * (len(self.geo.names) - 1)
        if self.walk is not None:
            out = [a + b for a, b in zip(out, self.walk.fast_request_counts())]
        return out


Batch = tuple  # (row, tid, offset, nbytes, count, stride, write, pim) int64/bool arrays


def next_use(stream: np.ndarray) -> np.ndarray:
    """Position of the next occurrence of each element of ``stream`` (engine.OPT_NEVER if none)."""
    n = len(stream)
    out = np.full(n, engine.OPT_NEVER, np.int64)
    if n < 2:
        return out
    order = np.argsort(stream, kind="stable")
    s = stream[order]
    same = s[1:] == s[:-1]
    out[order[:-1][same]] = order[1:][same]
    return out


def check_inclusive(geo: Geometry, options: ReplayOptions) -> None:
    """Refuse what the inclusive mode cannot do exactly (see the module docstring)."""
    if not (options.fetch_on_write_miss and options.fetch_on_writeback_miss):
        raise UsageError("inclusive replay needs fetch_on_write_miss and fetch_on_writeback_miss on "
                         "(an unfetched fill would hold a block the next tier does not)", field="inclusive")
    for i in range(len(geo.names)):
        if geo.mode[i] == engine.MODE_CACHE and geo.policy[i] == engine.POLICY_IDS["opt"]:
            raise UsageError(f"policy 'opt' on tier {geo.names[i]!r} cannot be replayed inclusive (its "
                             f"future depends on farther tiers' evictions); use lru, fifo or random",
                             field=f"tier[{i}].policy")


def run_replay(geo: Geometry, t_addr, t_home, t_kind, batches: Callable[[], Iterable[Batch]],
               n_rows: int, options: ReplayOptions, on_batch: Callable[[int, np.ndarray, int], None],
               progress: Callable[[int], None] | None = None, stats: dict | None = None
               ) -> tuple[np.ndarray, int, int]:
    """Replay every batch from ``batches()`` (called again for each opt pre-pass).

    ``stats`` (if given) receives ``fast_requests``: requests the fast path served, per tier; with
    set groups also ``set_groups_max`` (the most groups tier 0 was cut into at once) and
    ``set_groups_written_out`` (whether the walk replayed the rest).

    ``on_batch(row_lo, cnt, n_rows_in_batch)`` receives each batch's counter array
    ``cnt[row - row_lo, kind, tier, counter]``. Returns (flush counters ``[kind, tier, counter]``,
    tier-0 blocks requested).
    """
    n_tiers = len(geo.names)
    if options.inclusive:
        check_inclusive(geo, options)
    opt_tiers = [i for i in range(n_tiers) if geo.policy[i] == engine.POLICY_IDS["opt"]
                 and geo.mode[i] == engine.MODE_CACHE]
    opt_next: dict[int, np.ndarray] = {}
    for t in opt_tiers:
        # tier t's lookups depend only on the tiers above it: replay them (opt ones with their
        # futures, later opt tiers as lru, which does not change what tier t sees) and record them
        override = geo.policy.copy()
        for u in opt_tiers:
            if u >= t:
                override[u] = engine.POLICY_IDS["lru"]
        cap = 1 << 20
        while True:
            r = Replayer(geo, t_addr, t_home, t_kind, options, opt_next, t, cap, override)
            _drive(r, batches(), n_rows, options, None, None)
            n = int(r.rec_pos[0])
            if n > options.opt_max_lookups:
                raise UsageError(f"policy 'opt' on tier {geo.names[t]!r} needs its whole future "
                                 f"({n} lookups > opt_max_lookups={options.opt_max_lookups}); "
                                 f"use lru or a shorter trace", field=f"tier[{t}].policy")
            if n <= cap:
                opt_next[t] = next_use(r.rec_buf[:n])
                break
            cap = n
    if set_groups_apply(geo, options):
        r = SetGroupReplayer(geo, t_addr, t_home, t_kind, options)
    else:
        r = Replayer(geo, t_addr, t_home, t_kind, options, opt_next)
    out = _drive(r, batches(), n_rows, options, on_batch, progress)
    if stats is not None:
        stats["fast_requests"] = r.fast_requests
        if isinstance(r, SetGroupReplayer):
            stats["set_groups_max"] = int(r.st[setgroups.ST_K_MAX])
            stats["set_groups_written_out"] = r.walk is not None
    return out


def _drive(r: Replayer, batches: Iterable[Batch], n_rows: int, options: ReplayOptions,
           on_batch, progress) -> tuple[np.ndarray, int, int]:
    n_kinds, n_tiers = len(KINDS), len(r.geo.names)
    n_blocks = n_acc = 0
    for b in batches:
        row = b[0]
        if len(row) == 0:
            continue
        lo, hi = int(row[0]), int(row[-1])
        cnt = np.zeros((hi - lo + 1, n_kinds, n_tiers, N_COUNTERS), np.int64)
        n_blocks += r.run(row - lo, *b[1:], cnt)
        n_acc += len(row)
        if on_batch is not None:
            on_batch(lo, cnt, hi - lo + 1)
        if progress is not None:
            progress(len(row))
    fl = np.zeros((1, n_kinds, n_tiers, N_COUNTERS), np.int64)
    if options.flush:
        r.flush(fl)
    r.fast_requests = r.fast_request_counts()
    return fl[0], n_blocks, n_acc


def kind_index(kinds: Iterable[str]) -> np.ndarray:
    """Index into :data:`KINDS` of each tensor kind (unknown kinds -> "other")."""
    other = KINDS.index("other")
    return np.array([KINDS.index(k) if k in KINDS else other for k in kinds], np.int64)


def replay_arrays(tiers: Sequence[Tier], *, tensor_address, tensor_nbytes, tensor_home, tensor_kind,
                  batches: Callable[[], Iterable[Batch]], n_ops: int, lent_bytes=None,
                  options: ReplayOptions = ReplayOptions(), progress=None) -> ReplayResult:
    """Replay descriptor batches on ``tiers`` given each tensor's address, size, home and kind index.

    ``batches()`` yields tuples ``(op_id, tensor_id, offset, nbytes, count, stride, is_write, pim)``
    of equal-length arrays, op ids non-decreasing across the whole stream; ``pim`` is nonzero for a
    descriptor the home tier's PIM unit reads in memory.
    """
    n_tiers = len(tiers)
    addr = np.asarray(tensor_address, np.int64)
    nbytes = np.asarray(tensor_nbytes, np.int64)
    home = np.asarray(tensor_home, np.int64)
    kind = np.asarray(tensor_kind, np.int64)
    lent = np.zeros(n_tiers, np.int64) if lent_bytes is None else np.asarray(lent_bytes, np.int64)
    if len(home) and (home.min() < 0 or home.max() >= n_tiers):
        raise UsageError("a tensor's home tier is outside the hierarchy", field="home")
    for i, t in enumerate(tiers):
        bad = np.nonzero(addr % t.block_bytes)[0]
        if len(bad):
            raise TraceError(f"tensor {int(bad[0])} at address {int(addr[bad[0]])} is not aligned to the "
                             f"{t.block_bytes} B block of tier {t.name!r}; regenerate the trace with "
                             f"--align {t.block_bytes} or more", field="address")
    below = np.array([int((-(-nbytes[home > i] // t.block_bytes)).sum()) for i, t in enumerate(tiers)],
                     np.int64)
    geo = build_geometry(tiers, lent, below, options)
    geo.space_bytes = int((addr + nbytes).max()) if len(addr) else 1
    per_op = np.zeros((max(n_ops, 1), n_tiers, N_COUNTERS), np.int64)
    by_kind = np.zeros((len(KINDS), n_tiers, N_COUNTERS), np.int64)

    def on_batch(lo, cnt, n):
        per_op[lo:lo + n] += cnt.sum(axis=1)
        by_kind[...] += cnt.sum(axis=0)

    stats: dict = {}
    flush, n_blocks, n_acc = run_replay(geo, addr, home, kind, batches, n_ops, options, on_batch,
                                        progress, stats)
    result = ReplayResult(tier_names=geo.names, block_bytes=geo.block_bytes.copy(), kinds=KINDS,
                          tiers=per_op.sum(axis=0), by_kind=by_kind, per_op=per_op[:n_ops],
                          flush=flush.sum(axis=0), n_accesses=n_acc, n_blocks=n_blocks,
                          meta={"geometry": {"n_sets": geo.n_sets.tolist(), "n_ways": geo.n_ways.tolist(),
                                             "caching": (geo.mode == engine.MODE_CACHE).tolist()},
                                "fast_requests": stats["fast_requests"],
                                **{k: stats[k] for k in ("set_groups_max", "set_groups_written_out") if k in stats}})
    from emulator.invariants import check_result, debug_from_env

    if options.debug or debug_from_env():
        check_result(result)
    return result


def partition_bit(tiers: Sequence[Tier]) -> int | None:
    """A bit of the tier-0 block number that is also a set-index bit at every caching tier, or None.

    Blocks differing in that bit never share a set at any tier, so the two halves of a block stream
    are independent: each set still sees its own requests in order, writebacks stay in their half.
    Needs lru/fifo/opt (random draws one sequence per tier across all sets).
    """
    if not tiers or any(t.managed != "cache" or t.policy == "random" for t in tiers):
        return None
    sh0 = tiers[0].block_bytes.bit_length() - 1
    lo, hi = 0, 1 << 62
    for t in tiers:
        d = t.block_bytes.bit_length() - 1 - sh0
        low_bits = (t.n_sets & -t.n_sets).bit_length() - 1  # set index bits equal to block bits
        lo, hi = max(lo, d), min(hi, d + low_bits)
    return lo if lo < hi else None


def _merge(results: list[ReplayResult]) -> ReplayResult:
    r0 = results[0]
    fast = np.sum([r.meta["fast_requests"] for r in results], axis=0).tolist()
    return ReplayResult(tier_names=r0.tier_names, block_bytes=r0.block_bytes, kinds=r0.kinds,
                        tiers=sum(r.tiers for r in results), by_kind=sum(r.by_kind for r in results),
                        per_op=sum(r.per_op for r in results), flush=sum(r.flush for r in results),
                        n_accesses=sum(r.n_accesses for r in results),
                        n_blocks=sum(r.n_blocks for r in results),
                        meta={**r0.meta, "fast_requests": fast, "partitions": len(results)})


def replay_blocks(addresses, is_write=None, *, tiers: Sequence[Tier],
                  options: ReplayOptions = ReplayOptions(), memory_name: str = "memory") -> ReplayResult:
    """Replay a raw stream of byte addresses (+ write flags) on cache ``tiers`` without a trace.

    Each address is one request for the tier-0 block containing it. Below the last tier an
    unbounded memory tier (named ``memory_name``) homes everything; it is the last tier of the
    result. For throughput comparisons (``benchmarks/bench_replay.py``) and the pycachesim tests.
    With ``options.threads`` > 1 and a :func:`partition_bit`, the stream is split in two by that
    bit and the halves replay on two threads (the engine releases the GIL); counts are identical.
    """
    a = np.ascontiguousarray(addresses, np.int64)
    if (options.fast_path and not options.flush and (not options.inclusive or len(tiers) < 2) and len(a)
            and all(t.managed == "cache" and t.policy in ("lru", "fifo", "random") for t in tiers)):
        from emulator.stream_replay import replay_cache_stream

        return replay_cache_stream(a, is_write, tiers, options, memory_name)
    if options.threads > 1 and len(a) > 1:
        bit = partition_bit(tiers)
        if bit is not None:
            from concurrent.futures import ThreadPoolExecutor

            one = dataclasses.replace(options, threads=1)
            w = None if is_write is None else np.ascontiguousarray(is_write, np.bool_)
            sel = ((a // tiers[0].block_bytes) >> bit) & 1 == 1
            halves = [(a[~sel], None if w is None else w[~sel]), (a[sel], None if w is None else w[sel])]
            halves = [h for h in halves if len(h[0])]
            with ThreadPoolExecutor(len(halves)) as pool:
                results = list(pool.map(lambda h: replay_blocks(h[0], h[1], tiers=tiers, options=one,
                                                                memory_name=memory_name), halves))
            return results[0] if len(results) == 1 else _merge(results)
    n = len(a)
    w = np.zeros(n, np.bool_) if is_write is None else np.ascontiguousarray(is_write, np.bool_)
    if w.shape != a.shape:
        raise UsageError("is_write must have one flag per address", field="is_write")
    if n and a.min() < 0:
        raise UsageError("addresses must be non-negative", field="addresses")
    last = tiers[-1]
    mem = Tier(memory_name, capacity_bytes=1 << 62, block_bytes=last.block_bytes, ways=None,
               policy="lru", managed="memory", bandwidth_bytes_per_s=1.0,
               read_energy_j_per_byte=0.0, write_energy_j_per_byte=0.0)
    all_tiers = tuple(tiers) + (mem,)
    top = int(a.max()) + 1 if n else 1
    b0 = tiers[0].block_bytes
    if options.fast_path and n:
        # coalesce consecutive blocks (same write flag) into one chunk each: a chunk requests each
        # of its blocks once, in order, exactly as the separate addresses did
        blk = a // b0
        brk = np.ones(n, bool)
        brk[1:] = (blk[1:] != blk[:-1] + 1) | (w[1:] != w[:-1])
        starts = np.flatnonzero(brk)
        lens = np.diff(np.append(starts, n))
        offs = blk[starts] * b0
        nbs = lens * b0
        ws = w[starts]
    else:
        offs, nbs, ws = a, np.ones(n, np.int64), w
    m = len(offs)
    zeros = np.zeros(m, np.int64)
    ones = np.ones(m, np.int64)
    top = max(top, int((offs + nbs).max()) if m else 1)

    def batches():
        step = options.batch_rows * 16
        for lo in range(0, m, step):
            hi = min(m, lo + step)
            yield (zeros[lo:hi], zeros[lo:hi], offs[lo:hi], nbs[lo:hi], ones[lo:hi], zeros[lo:hi],
                   ws[lo:hi], zeros[lo:hi])

    return replay_arrays(all_tiers, tensor_address=[0], tensor_nbytes=[top],
                         tensor_home=[len(tiers)], tensor_kind=[KINDS.index("other")],
                         batches=batches, n_ops=1, options=options)


@dataclass
class TraceReplay:
    """A trace replayed on a chip: the counts plus what is needed to cost and report them."""

    chip: Chip
    trace: object          # traces.reader.Trace
    placement: object      # emulator.placement.Placement
    options: ReplayOptions
    result: ReplayResult
    pim: object = None     # emulator.pim.PimPlan: where each op ran (None: no op ran in memory)


def replay_trace(trace, chip: Chip | str, options: ReplayOptions = ReplayOptions(), *,
                 extra_rules=(), progress: bool = False) -> TraceReplay:
    """Replay a trace (a path or an opened :class:`traces.reader.Trace`) on a chip (object or name).

    Placement is computed here (:func:`emulator.placement.place`); a model that does not fit raises
    CapacityError, a trace aligned below a tier's block raises TraceError.
    """
    from emulator.chipfile import load_chip
    from emulator.pim import plan_for_trace
    from emulator.placement import place
    from traces.reader import Trace, open_trace

    if not isinstance(trace, Trace):
        trace = open_trace(trace)
    if not isinstance(chip, Chip):
        chip = load_chip(chip)
    placement = place(chip, trace.tensors, extra_rules, align_bytes=trace.alignment or 1)
    t = trace.tensors
    addr = t.column("address").to_numpy().astype(np.int64)
    nbytes = t.column("nbytes").to_numpy().astype(np.int64)
    kinds = kind_index(t.column("kind").to_pylist())
    home = np.asarray(placement.home, np.int64)
    pim = plan_for_trace(chip, trace, home, enabled=options.pim, batch_rows=options.batch_rows)

    def batches():
        for rb in trace.iter_accesses(options.batch_rows):
            op = rb.column(0).to_numpy().astype(np.int64)
            tid = rb.column(1).to_numpy().astype(np.int64)
            write = rb.column(6).to_numpy(zero_copy_only=False)
            flag = np.zeros(len(op), np.int64) if pim is None else pim.flags(op, tid, write)
            yield (op, tid,
                   rb.column(2).to_numpy().astype(np.int64), rb.column(3).to_numpy().astype(np.int64),
                   rb.column(4).to_numpy().astype(np.int64), rb.column(5).to_numpy().astype(np.int64),
                   write, flag)

    bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=trace.n_accesses, unit="desc", desc="replay", file=sys.stderr, leave=False)
    try:
        result = replay_arrays(chip.tiers, tensor_address=addr, tensor_nbytes=nbytes, tensor_home=home,
                               tensor_kind=kinds, batches=batches, n_ops=trace.n_ops,
                               lent_bytes=placement.lent_bytes, options=options,
                               progress=None if bar is None else bar.update)
    except TraceError as err:
        if err.file is None:      # the tensor table's addresses do not suit this chip
            err.file = str(trace.path / "tensors.arrow")
        raise
    finally:
        if bar is not None:
            bar.close()
    return TraceReplay(chip=chip, trace=trace, placement=placement, options=options, result=result, pim=pim)
