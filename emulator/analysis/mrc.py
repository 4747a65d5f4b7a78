"""Miss-ratio curves in one pass: exact LRU miss counts at every capacity, and OPT where affordable.

LRU is a stack algorithm (Mattson et al., 1970): an access hits in an LRU cache of ``c`` blocks iff
its *stack distance* -- the number of distinct other blocks touched since the previous access to the
same block -- is below ``c``. One pass that records every access's stack distance in a histogram
therefore gives the miss count of every capacity at once:

    misses(c) = cold misses + #{accesses with distance >= c}       (cold misses = distinct blocks)

* Fully associative (:class:`LruDistances`): distances are counted over access times that hold one
  mark per block at its last access (Bennett & Kruskal, 1975): a bitset of marks plus a Fenwick tree
  of per-64-time word counts (64x smaller than a tree per time, so it stays in cache): O(log n) per
  access. Times are renumbered when the tree fills, so memory is O(distinct blocks), not O(accesses),
  and the stream can be fed in chunks of any size. :meth:`LruDistances.update` can also hand back
  each access's distance (:data:`COLD_DISTANCE` where the block was not found).
* Set associative at a fixed set count (:class:`SetLruDistances`): set index = block number mod
  n_sets; each set is its own LRU stack, so the per-set distance gives the exact miss count of every
  way count up to ``max_ways`` (capacity = n_sets x ways x block) in the same single pass.
* OPT (Belady's MIN, no bypass: a miss always fills and evicts the resident block used farthest in
  the future) needs the future, so :func:`tierlab.analysis.mrc_opt.opt_misses` takes the whole stream in memory and runs one
  exact simulation per size (a heap when fully associative, a scan of the set otherwise).

Counts are per block access of the stream given (hits + misses = accesses); block numbers are
``address // block_bytes`` and must be non-negative.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tierlab.engine.jit import helper, njit

from tierlab.common.errors import UsageError

_EMPTY = -1
COLD_DISTANCE = np.int64(1) << np.int64(62)   # the recorded distance of an access not found (cold or forgotten)
_NO_DISTANCES = np.empty(0, np.int64)         # ``dist`` of a run that records only the histogram


# ---------------------------------------------------------------- compiled kernels -------------

@helper
def _home(key, shift):
    """Preferred slot of ``key``: eight consecutive blocks share one hashed group of eight slots
    (one cache line of keys), so a sequential run costs one table miss per eight blocks."""
    group = (np.uint64(key >> 3) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(shift + 3)
    return np.int64(group << np.uint64(3)) | (key & 7)


@helper
def table_slot(keys, key, shift):
    """Slot of ``key`` in the open-addressing table, or of the empty slot where it belongs."""
    mask = keys.shape[0] - 1
    i = _home(key, shift)
    while keys[i] != key and keys[i] != -1:
        i = (i + 1) & mask
    return i


@njit
def _rehash(keys, vals, new_keys, new_vals, shift):
    for i in range(keys.shape[0]):
        if keys[i] != -1:
            j = table_slot(new_keys, keys[i], shift)
            new_keys[j] = keys[i]
            new_vals[j] = vals[i]


@helper
def _popcount(x):
    """Set bits of a uint64 (the SWAR idiom; LLVM turns it into one popcnt instruction)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit
def _marks_build(bits, tree, n_marks):
    """Marks at times 0..n_marks-1: bit ``t`` of the bitset, and a Fenwick tree (1-indexed,
    ``tree[0]`` unused) of the number of marks in each 64-time word."""
    n_words = bits.shape[0]
    bits[:] = 0
    tree[:] = 0
    for t in range(n_marks):
        bits[t >> 6] |= np.uint64(1) << np.uint64(t & 63)
    for w in range(n_words):
        tree[w + 1] = _popcount(bits[w])
    for i in range(1, n_words + 1):
        j = i + (i & -i)
        if j <= n_words:
            tree[j] += tree[i]


@njit
def _place_blocks(keys, vals, block_at):
    """``block_at[time] = block`` for every tracked block."""
    for i in range(keys.shape[0]):
        if keys[i] != -1:
            block_at[vals[i]] = keys[i]


@njit
def _renumber(keys, vals, bits):
    """Give the live blocks new times 0..n-1 in the order of their last access, without sorting.

    The marks are exactly the live blocks' last-access times, so a block's new time is the number
    of marks before its old one (per-word prefix counts plus a popcount within the word).
    """
    n_words = bits.shape[0]
    before = np.zeros(n_words, np.int64)
    total = 0
    for w in range(n_words):
        before[w] = total
        total += _popcount(bits[w])
    for i in range(keys.shape[0]):
        if keys[i] != -1:
            p = vals[i]
            w = p >> 6
            below = bits[w] & ((np.uint64(1) << np.uint64(p & 63)) - np.uint64(1))
            vals[i] = before[w] + _popcount(below)


@helper
def _delete(keys, vals, i, shift):
    """Remove slot ``i`` of the linear-probing table, shifting later entries of its run back."""
    mask = keys.shape[0] - 1
    j = i
    while True:
        j = (j + 1) & mask
        k = keys[j]
        if k == -1:
            break
        home = _home(k, shift)
        # the entry at j may fill the hole at i unless its home lies cyclically in (i, j]
        if (i < j and (home <= i or home > j)) or (i > j and home <= i and home > j):
            keys[i] = k
            vals[i] = vals[j]
            i = j
    keys[i] = -1


@helper
def _lowest_mark(bits, start):
    """The earliest marked time at or after ``start`` (a mark must exist there)."""
    w = start >> 6
    word = bits[w] & ~((np.uint64(1) << np.uint64(start & 63)) - np.uint64(1))
    while word == 0:
        w += 1
        word = bits[w]
    low = word & (~word + np.uint64(1))
    return (w << 6) + _popcount(low - np.uint64(1))


@helper
def _tree_add(tree, w, delta):
    """Add ``delta`` marks to 64-time word ``w`` in the Fenwick tree."""
    i = w + 1
    n_words = tree.shape[0] - 1
    while i <= n_words:
        tree[i] += delta
        i += i & -i


@njit(nogil=True)
def _lru_full_run(blocks, pos, keys, vals, shift, bits, tree, block_at, hist, limit, state, dist):
    """Record stack distances of ``blocks[pos:]`` until done or a table needs to grow.

    Each tracked block has one mark, at the time of its last access: bit ``t`` of ``bits``, with
    per-word counts in the Fenwick tree ``tree`` (small enough to stay in cache); ``block_at[t]``
    is the block accessed at time ``t``. The distance of an access whose block was last seen at
    ``p`` is the number of marks after ``p``. With ``limit >= 0`` only the ``limit`` most recent
    distinct blocks are tracked (the top of the LRU stack): the oldest is forgotten when a new one
    arrives, so memory is bounded and distances below ``limit`` stay exact.

    Runs cost less than one tree walk per block. If block ``b`` follows block ``b - 1`` and was
    last seen right after it (``p == p_prev + 1``), its distance equals the previous one: the
    marks after ``p`` lost ``p`` itself and gained ``t - 1``. So no query is needed, and the tree
    updates of a run (marks cleared at consecutive old times, set at consecutive new times) are
    summed per 64-time word and applied before the next query.

    ``state`` = [next time, tracked blocks, oldest-mark search start, not found (cold or deeper),
    forgotten blocks]. ``dist``: empty, or an array as long as ``blocks`` that receives each
    access's distance (``COLD_DISTANCE`` when not found). Returns the position reached.
    """
    record = dist.shape[0] > 0
    size = bits.shape[0] * 64
    max_keys = keys.shape[0] // 2
    t = state[0]
    n_keys = state[1]
    n = blocks.shape[0]
    set_w, set_n = -1, 0           # pending +set_n marks in word set_w
    clr_w, clr_n = -1, 0           # pending -clr_n marks in word clr_w (hits)
    old_w, old_n = -1, 0           # pending -old_n marks in word old_w (forgotten blocks)
    prev_b, prev_p, prev_d = -2, -2, -1
    while pos < n:
        if t == size or n_keys == max_keys:
            break
        b = blocks[pos]
        s = table_slot(keys, b, shift)
        if keys[s] == b:
            p = vals[s]
            w = p >> 6
            bit = np.uint64(1) << np.uint64(p & 63)
            if b == prev_b + 1 and p == prev_p + 1 and prev_d >= 0:
                d = prev_d
            else:
                if set_n:
                    _tree_add(tree, set_w, set_n)
                    set_n = 0
                if clr_n:
                    _tree_add(tree, clr_w, -clr_n)
                    clr_n = 0
                if old_n:
                    _tree_add(tree, old_w, -old_n)
                    old_n = 0
                below = _popcount(bits[w] & ((bit << np.uint64(1)) - np.uint64(1)))  # marks <= p in w
                i = w
                while i > 0:
                    below += tree[i]
                    i -= i & -i
                d = n_keys - below
            hist[d] += 1
            if record:
                dist[pos] = d
            bits[w] &= ~bit
            if w != clr_w:
                if clr_n:
                    _tree_add(tree, clr_w, -clr_n)
                clr_w, clr_n = w, 0
            clr_n += 1
            prev_p, prev_d = p, d
        else:
            keys[s] = b
            n_keys += 1
            state[3] += 1
            prev_d = -1
            if record:
                dist[pos] = COLD_DISTANCE
        w = t >> 6
        bits[w] |= np.uint64(1) << np.uint64(t & 63)
        if w != set_w:
            if set_n:
                _tree_add(tree, set_w, set_n)
            set_w, set_n = w, 0
        set_n += 1
        vals[s] = t
        block_at[t] = b
        if 0 <= limit < n_keys:                    # forget the least recently used block
            q = _lowest_mark(bits, state[2])
            state[2] = q + 1
            _delete(keys, vals, table_slot(keys, block_at[q], shift), shift)
            w = q >> 6
            bits[w] &= ~(np.uint64(1) << np.uint64(q & 63))
            if w != old_w:
                if old_n:
                    _tree_add(tree, old_w, -old_n)
                old_w, old_n = w, 0
            old_n += 1
            n_keys -= 1
            state[4] += 1
        prev_b = b
        t += 1
        pos += 1
    if set_n:
        _tree_add(tree, set_w, set_n)
    if clr_n:
        _tree_add(tree, clr_w, -clr_n)
    if old_n:
        _tree_add(tree, old_w, -old_n)
    state[0] = t
    state[1] = n_keys
    return pos


@njit(nogil=True)
def _set_lru_run(blocks, n_sets, stacks, fill, hist):
    """Per-set LRU stacks of depth ``stacks.shape[1]``; ``hist[depth]`` counts deeper or cold."""
    depth = stacks.shape[1]
    for pos in range(blocks.shape[0]):
        b = blocks[pos]
        row = b % n_sets
        f = fill[row]
        d = 0
        while d < f and stacks[row, d] != b:
            d += 1
        hist[d if d < f else depth] += 1
        if d == f:                         # not within the tracked depth: push on top
            if f < depth:
                fill[row] = f + 1
                d = f
            else:
                d = depth - 1
        for j in range(d, 0, -1):
            stacks[row, j] = stacks[row, j - 1]
        stacks[row, 0] = b


# ---------------------------------------------------------------- public layer -----------------

class BlockTable:
    """A growable open-addressing table of block numbers (keys) with an int64 value each."""

    def __init__(self, log2: int = 16):
        log2 = max(log2, 4)                         # whole groups of eight slots, and room to probe
        self.log2 = log2
        self.keys = np.full(1 << log2, _EMPTY, np.int64)
        self.vals = np.zeros(1 << log2, np.int64)

    @property
    def shift(self) -> int:
        return 64 - self.log2

    def grow(self) -> None:
        self.log2 += 1
        keys = np.full(1 << self.log2, _EMPTY, np.int64)
        vals = np.zeros(1 << self.log2, np.int64)
        _rehash(self.keys, self.vals, keys, vals, self.shift)
        self.keys, self.vals = keys, vals


def as_blocks(blocks) -> np.ndarray:
    """``blocks`` as a contiguous one-dimensional int64 array of non-negative block numbers."""
    b = np.ascontiguousarray(blocks, dtype=np.int64)
    if b.ndim != 1:
        raise UsageError("block stream must be one-dimensional", field="blocks")
    if b.size and b.min() < 0:
        raise UsageError("block numbers must be non-negative", field="blocks")
    return b


@dataclass(frozen=True)
class MissRatioCurve:
    """Exact LRU miss counts of one block stream at every capacity, from a stack-distance histogram.

    Capacities are counted in *units*: blocks when fully associative (``n_sets`` None), ways at
    ``n_sets`` sets otherwise. ``hist[d]`` = accesses that hit at (per-set) stack distance ``d``;
    ``beyond`` = accesses found within no tracked depth (cold, or deeper than ``limit``). So
    ``misses(c) = beyond + sum(hist[c:])`` for every ``c <= limit`` (every ``c`` if ``limit`` is None).
    ``cold_misses`` is the number of distinct blocks when known exactly (else None).
    """

    block_bytes: int
    n_sets: int | None
    accesses: int
    hist: np.ndarray
    beyond: int
    limit: int | None
    cold_misses: int | None

    @property
    def unit_bytes(self) -> int:
        return self.block_bytes * (self.n_sets or 1)

    def units_for(self, capacity_bytes: int) -> int:
        """Capacity in blocks (fully associative) or ways (set associative); must be exact."""
        unit = self.unit_bytes
        if capacity_bytes <= 0 or capacity_bytes % unit:
            what = "block size" if self.n_sets is None else f"{self.n_sets} sets x {self.block_bytes} B"
            raise UsageError(f"capacity {capacity_bytes} B is not a positive multiple of {unit} B ({what})",
                             field="sizes")
        n = capacity_bytes // unit
        if self.limit is not None and n > self.limit:
            raise UsageError(f"capacity {capacity_bytes} B is beyond the {self.limit * unit} B the curve "
                             f"tracks exactly; raise its limit", field="sizes")
        return n

    def misses(self, capacity_bytes: int) -> int:
        """LRU misses (cold included) of a cache of ``capacity_bytes``."""
        return self.beyond + int(self.hist[self.units_for(capacity_bytes):].sum())

    def miss_ratio(self, capacity_bytes: int) -> float:
        return self.misses(capacity_bytes) / self.accesses if self.accesses else 0.0

    def curve(self) -> tuple[np.ndarray, np.ndarray]:
        """(capacity_bytes, misses) at 0, 1, ..., len(hist) units: every point where the count can change."""
        tail = np.concatenate([np.cumsum(self.hist[::-1])[::-1], [0]])   # tail[d] = hits at distance >= d
        units = np.arange(len(tail), dtype=np.int64)
        return units * self.unit_bytes, (self.beyond + tail).astype(np.int64)


class LruDistances:
    """One-pass fully-associative LRU stack distances; feed chunks with :meth:`update`.

    ``limit`` (blocks, optional) bounds memory: only the ``limit`` most recent distinct blocks are
    tracked, so the curve is exact up to ``limit`` blocks of capacity and memory is O(limit), however
    long the stream and large its footprint. Without it the curve covers every capacity and memory
    is O(distinct blocks).
    """

    def __init__(self, *, limit: int | None = None, initial_log2: int = 16):
        if limit is not None and limit < 1:
            raise UsageError(f"limit must be at least one block, got {limit}", field="limit")
        self.limit = limit
        if limit is not None:                       # the table never holds more than limit + 1 keys
            initial_log2 = min(initial_log2, max(1, int(limit + 1).bit_length() + 1))
        # initial_log2 sizes the tables (they grow as needed); tests set it small to exercise growth.
        self._min_words = max(1, (1 << initial_log2) // 64)
        self._table = BlockTable(initial_log2)
        self._bits = np.zeros(self._min_words, np.uint64)
        self._tree = np.zeros(self._min_words + 1, np.int32)
        self._block_at = np.zeros(64 * self._min_words, np.int64)
        self._hist = np.zeros(self._table.keys.shape[0] if limit is None else limit, np.int64)
        self._state = np.zeros(5, np.int64)   # next time, tracked, oldest search, not found, forgotten
        self.accesses = 0

    def update(self, blocks, distances: np.ndarray | None = None) -> None:
        """Add ``blocks`` to the stream. ``distances`` (optional, int64, as long as ``blocks``)
        receives each access's stack distance, :data:`COLD_DISTANCE` where the block was not found
        (first access, or forgotten beyond ``limit``)."""
        b = as_blocks(blocks)
        dist = _NO_DISTANCES
        if distances is not None:
            if distances.dtype != np.int64 or distances.shape != b.shape or not distances.flags.c_contiguous:
                raise UsageError("distances must be a contiguous int64 array as long as the blocks",
                                 field="distances")
            dist = distances
        pos = 0
        lim = -1 if self.limit is None else self.limit
        while pos < b.shape[0]:
            pos = _lru_full_run(b, pos, self._table.keys, self._table.vals, self._table.shift,
                                self._bits, self._tree, self._block_at, self._hist, lim, self._state, dist)
            n_keys = int(self._state[1])
            if n_keys == self._table.keys.shape[0] // 2:
                self._table.grow()
                if self.limit is None:
                    hist = np.zeros(self._table.keys.shape[0], np.int64)
                    hist[:self._hist.shape[0]] = self._hist
                    self._hist = hist
            if self._state[0] == 64 * self._bits.shape[0]:   # times used up: renumber live blocks
                _renumber(self._table.keys, self._table.vals, self._bits)
                words = max(self._min_words, -(-4 * n_keys // 64))
                if words != self._bits.shape[0]:
                    self._bits = np.zeros(words, np.uint64)
                    self._tree = np.zeros(words + 1, np.int32)
                    self._block_at = np.zeros(64 * words, np.int64)
                _marks_build(self._bits, self._tree, n_keys)
                _place_blocks(self._table.keys, self._table.vals, self._block_at)
                self._state[0] = n_keys
                self._state[2] = 0
        self.accesses += b.shape[0]

    def curve(self, block_bytes: int) -> MissRatioCurve:
        not_found, forgotten = int(self._state[3]), int(self._state[4])
        if self.limit is None:
            hist = self._hist[:not_found].copy()    # distances are below the number of distinct blocks
        else:
            hist = self._hist.copy()
        return MissRatioCurve(block_bytes, None, self.accesses, hist, not_found, self.limit,
                              not_found if forgotten == 0 else None)


class SetLruDistances:
    """One-pass per-set LRU stack distances at ``n_sets`` sets, exact for every way count <= ``max_ways``.

    Memory is ``n_sets x max_ways`` block numbers, whatever the stream.
    """

    def __init__(self, n_sets: int, max_ways: int):
        if n_sets < 1 or max_ways < 1:
            raise UsageError("n_sets and max_ways must be at least 1", field="n_sets")
        self.n_sets = int(n_sets)
        self._stacks = np.full((self.n_sets, int(max_ways)), _EMPTY, np.int64)
        self._fill = np.zeros(self.n_sets, np.int64)
        self._hist = np.zeros(int(max_ways) + 1, np.int64)
        self.accesses = 0

    def update(self, blocks) -> None:
        b = as_blocks(blocks)
        _set_lru_run(b, self.n_sets, self._stacks, self._fill, self._hist)
        self.accesses += b.shape[0]

    def curve(self, block_bytes: int) -> MissRatioCurve:
        depth = self._hist.shape[0] - 1
        return MissRatioCurve(block_bytes, self.n_sets, self.accesses, self._hist[:depth].copy(),
                              int(self._hist[depth]), depth, None)


def lru_curve(chunks, block_bytes: int, *, n_sets: int | None = None, max_ways: int = 32,
              limit: int | None = None) -> MissRatioCurve:
    """Exact LRU miss-ratio curve of a stream given as an iterable of block-number arrays.

    Fully associative unless ``n_sets`` is given (then every way count up to ``max_ways``);
    ``limit`` bounds a fully-associative curve (and its memory) to ``limit`` blocks of capacity.
    """
    acc = LruDistances(limit=limit) if n_sets is None else SetLruDistances(n_sets, max_ways)
    for blocks in chunks:
        acc.update(blocks)
    return acc.curve(block_bytes)
