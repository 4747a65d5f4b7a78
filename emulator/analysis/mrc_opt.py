"""OPT (Belady's MIN) miss counts of a block stream at several capacities, for the MRC.

OPT needs the future, so the whole stream is held in memory: blocks are renumbered densely
(:func:`dense_ids`), each access's next use is found in one backward pass, and one exact simulation
runs per capacity -- a heap keyed by next use when fully associative, a scan of the set otherwise.
No bypass: a miss always fills and evicts the resident block used farthest in the future (lowest way
on ties). LRU curves, which need no future, are in :mod:`tierlab.analysis.mrc`.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tierlab.engine.jit import helper, njit
from tierlab.analysis.mrc import BlockTable, as_blocks, table_slot
from tierlab.common.errors import UsageError


@njit
def _dense_ids(blocks, keys, vals, shift, ids, state):
    """Number blocks 0, 1, ... in order of first appearance; stops early when the table is half full."""
    max_keys = keys.shape[0] // 2
    for pos in range(state[1], blocks.shape[0]):
        if state[0] == max_keys:
            state[1] = pos
            return
        b = blocks[pos]
        s = table_slot(keys, b, shift)
        if keys[s] != b:
            keys[s] = b
            vals[s] = state[0]
            state[0] += 1
        ids[pos] = vals[s]
    state[1] = blocks.shape[0]


@njit
def _next_use(ids, n_ids):
    """Time of each access's next access to the same block; ``n + id`` when there is none."""
    n = ids.shape[0]
    nxt = np.empty(n, np.int64)
    seen = np.full(n_ids, -1, np.int64)
    for t in range(n - 1, -1, -1):
        i = ids[t]
        nxt[t] = seen[i] if seen[i] >= 0 else n + i
        seen[i] = t
    return nxt


@helper
def _heap_push(hk, hv, size, key, val):
    i = size
    hk[i] = key
    hv[i] = val
    while i > 0:
        parent = (i - 1) >> 1
        if hk[parent] >= hk[i]:
            break
        hk[parent], hk[i] = hk[i], hk[parent]
        hv[parent], hv[i] = hv[i], hv[parent]
        i = parent
    return size + 1


@helper
def _heap_pop(hk, hv, size):
    """Remove the root (largest key) of a max-heap of ``size`` entries; returns the new size."""
    size -= 1
    hk[0] = hk[size]
    hv[0] = hv[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        big = left
        if left + 1 < size and hk[left + 1] > hk[left]:
            big = left + 1
        if hk[i] >= hk[big]:
            break
        hk[big], hk[i] = hk[i], hk[big]
        hv[big], hv[i] = hv[i], hv[big]
        i = big
    return size


@helper
def opt_access(i, nxt_t, resident_next, hk, hv, size, resident, capacity, room, n_ids):
    """One access of Belady's MIN, fully associative, no bypass: block ``i``, next used at ``nxt_t``.
    A miss fills, evicting the held block whose next use is farthest (the heap's root, stale entries
    skipped). Returns (heap size, blocks held, 1 if it missed)."""
    missed = 0
    if resident_next[i] < 0:
        missed = 1
        if resident == capacity:
            while True:                              # skip stale entries
                key = hk[0]
                victim = hv[0]
                size = _heap_pop(hk, hv, size)
                if resident_next[victim] == key:
                    break
            resident_next[victim] = -1
        else:
            resident += 1
    resident_next[i] = nxt_t
    if size == room:                                 # drop stale entries: rebuild from residents
        size = 0
        for j in range(n_ids):
            if resident_next[j] >= 0:
                size = _heap_push(hk, hv, size, resident_next[j], j)
    else:
        size = _heap_push(hk, hv, size, nxt_t, i)
    return size, resident, missed


@njit(nogil=True)
def _opt_full(ids, nxt, n_ids, capacity):
    """Belady's MIN, fully associative, ``capacity`` blocks: the number of misses."""
    resident_next = np.full(n_ids, -1, np.int64)      # next use of a resident block, -1 if absent
    room = 4 * capacity + 16
    hk = np.empty(room, np.int64)
    hv = np.empty(room, np.int64)
    size = 0
    resident = 0
    misses = 0
    for t in range(ids.shape[0]):
        size, resident, missed = opt_access(ids[t], nxt[t], resident_next, hk, hv, size, resident, capacity,
                                            room, n_ids)
        misses += missed
    return misses


@njit(nogil=True)
def _opt_sets(blocks, ids, nxt, n_ids, n_sets, ways):
    """Belady's MIN per set (set = block mod n_sets), ``ways`` blocks each: the number of misses."""
    way_of = np.full(n_ids, -1, np.int64)
    held = np.full((n_sets, ways), -1, np.int64)
    held_next = np.zeros((n_sets, ways), np.int64)
    fill = np.zeros(n_sets, np.int64)
    misses = 0
    for t in range(ids.shape[0]):
        i = ids[t]
        row = blocks[t] % n_sets
        w = way_of[i]
        if w < 0:
            misses += 1
            if fill[row] < ways:
                w = fill[row]
                fill[row] += 1
            else:
                w = 0
                for j in range(1, ways):
                    if held_next[row, j] > held_next[row, w]:
                        w = j
                way_of[held[row, w]] = -1
            held[row, w] = i
            way_of[i] = w
        held_next[row, w] = nxt[t]
    return misses


# the compiled pieces other rooms' compiled code reuses (kvstream's OPT block store and hit curve)
next_use_positions = _next_use


# ---------------------------------------------------------------- public layer -----------------

def dense_ids(blocks) -> tuple[np.ndarray, int]:
    """Each block renumbered 0, 1, ... by first appearance; returns (ids, number of distinct blocks)."""
    b = as_blocks(blocks)
    table = BlockTable()
    ids = np.empty(b.shape[0], np.int64)
    state = np.zeros(2, np.int64)                 # distinct so far, position reached
    while state[1] < b.shape[0]:
        _dense_ids(b, table.keys, table.vals, table.shift, ids, state)
        if state[0] == table.keys.shape[0] // 2:
            table.grow()
    return ids, int(state[0])


def opt_misses(blocks, capacities: list[int], *, n_sets: int | None = None,
               workers: int | None = None) -> dict[int, int]:
    """Belady-MIN misses for each capacity (blocks if fully associative, else ways per set).

    The whole stream is held in memory (about 24 bytes per block access); one exact pass per
    capacity, the capacities spread over ``workers`` threads (default: every core; the kernels
    release the GIL).
    """
    b = as_blocks(blocks)
    ids, n_ids = dense_ids(b)
    nxt = _next_use(ids, n_ids)
    caps = sorted({int(c) for c in capacities})
    for c in caps:
        if c < 1:
            raise UsageError(f"capacity must be at least one block/way, got {c}", field="sizes")

    def one(c: int) -> int:
        if n_sets is None:
            # a capacity of at least every distinct block never evicts: only the cold misses
            # (and the heap is sized by what can be resident, not by a capacity of 10^9 blocks)
            return n_ids if c >= n_ids else int(_opt_full(ids, nxt, n_ids, c))
        return int(_opt_sets(b, ids, nxt, n_ids, int(n_sets), c))

    n_workers = max(1, min(len(caps), workers or os.cpu_count() or 1))
    if n_workers == 1:
        return {c: one(c) for c in caps}
    with ThreadPoolExecutor(n_workers) as pool:
        return dict(zip(caps, pool.map(one, caps)))
