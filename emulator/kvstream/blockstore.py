"""One tier of a prefix cache of KV blocks: LRU or FIFO in O(1) per block, and Belady's OPT.

API (stable; the serving simulator holds one :class:`BlockStore` per KV tier)
--------------------------------------------------------------------------------
Block ids are dense, ``0 .. n_ids - 1`` (:class:`tierlab.kvstream.trace.RequestTrace` numbers them so);
``ids`` arguments are int64 arrays, one request's blocks in prompt order.

``BlockStore(n_ids, capacity_blocks, policy="lru")``   policy ``"lru"`` or ``"fifo"``; capacity >= 1
``store.lookup_prefix(ids) -> int``     length of the leading run of ``ids`` held (nothing changes)
``store.touch(ids) -> ndarray``         in order: a held id is used (LRU: moved to most recent;
                                         FIFO: left where it is), a missing one is inserted as the
                                         newest, first evicting the oldest (LRU: least recently used;
                                         FIFO: first inserted) when full. Returns the evicted ids in
                                         eviction order (a request longer than the capacity evicts
                                         its own first blocks).
``store.remove(ids) -> int``            drop the held ones; returns how many were held
``store.contains(ids) -> ndarray[bool]``
``store.size``, ``store.capacity``, ``store.policy``, ``store.resident()`` (ids, next victim first)

The same operations on the raw arrays, for compiled callers (Numba functions taking
``(prev, nxt, held, meta, ...)`` as the class holds them): :func:`store_lookup_prefix`,
:func:`store_touch`, :func:`store_remove`. ``meta`` = [oldest, newest, size, capacity, policy id];
policy ids are the engine's (:data:`tierlab.engine.policies.POLICY_IDS`).

OPT (Belady's MIN, no bypass: a miss always fills, evicting the held block whose next use is
farthest) needs each access's next use, so it exists only as a whole-stream replay,
:func:`opt_prefix_replay`, for the hit curve. Since every next-use position is distinct (never-used
-again blocks get ``n + id``), no ties arise.

No Python loop runs per block: each operation is one compiled call over the whole ``ids``.
"""

from __future__ import annotations

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.analysis.mrc_opt import opt_access
from tierlab.engine.jit import njit
from tierlab.engine.policies import FIFO, LRU, OPT, POLICY_IDS

__all__ = ["BlockStore", "store_lookup_prefix", "store_touch", "store_remove", "opt_prefix_replay",
           "lru_prefix_replay"]

_NONE = -1
OLDEST, NEWEST, SIZE, CAPACITY, POLICY = 0, 1, 2, 3, 4


# ---------------------------------------------------------------- compiled kernels -------------

@njit(inline="always")
def _unlink(prev, nxt, meta, b):
    p, q = prev[b], nxt[b]
    if p >= 0:
        nxt[p] = q
    else:
        meta[OLDEST] = q
    if q >= 0:
        prev[q] = p
    else:
        meta[NEWEST] = p


@njit(inline="always")
def _append(prev, nxt, meta, b):
    last = meta[NEWEST]
    prev[b] = last
    nxt[b] = _NONE
    if last >= 0:
        nxt[last] = b
    else:
        meta[OLDEST] = b
    meta[NEWEST] = b


@njit(nogil=True)
def store_lookup_prefix(held, ids):
    """Length of the leading run of ``ids`` with ``held[id]`` set."""
    k = 0
    while k < ids.shape[0] and held[ids[k]]:
        k += 1
    return k


@njit(nogil=True)
def store_touch(prev, nxt, held, meta, ids, evicted):
    """Touch or insert ``ids`` in order (see the module docstring); the evicted ids go to
    ``evicted`` (room for ``len(ids)``); returns how many."""
    n_ev = 0
    lru = meta[POLICY] == LRU
    for j in range(ids.shape[0]):
        b = ids[j]
        if held[b]:
            if lru and meta[NEWEST] != b:
                _unlink(prev, nxt, meta, b)
                _append(prev, nxt, meta, b)
            continue
        if meta[SIZE] == meta[CAPACITY]:
            v = meta[OLDEST]
            _unlink(prev, nxt, meta, v)
            held[v] = False
            evicted[n_ev] = v
            n_ev += 1
        else:
            meta[SIZE] += 1
        held[b] = True
        _append(prev, nxt, meta, b)
    return n_ev


@njit(nogil=True)
def store_remove(prev, nxt, held, meta, ids):
    """Drop the held ones of ``ids``; returns how many were held."""
    n = 0
    for j in range(ids.shape[0]):
        b = ids[j]
        if held[b]:
            _unlink(prev, nxt, meta, b)
            held[b] = False
            meta[SIZE] -= 1
            n += 1
    return n


@njit(nogil=True)
def _resident(nxt, meta):
    out = np.empty(meta[SIZE], np.int64)
    b = meta[OLDEST]
    for i in range(meta[SIZE]):
        out[i] = b
        b = nxt[b]
    return out


@njit(nogil=True)
def lru_prefix_replay(offsets, blocks, weights, n_ids, capacity, policy):
    """Replay requests (CSR ``offsets``/``blocks``) through an LRU or FIFO store of ``capacity``
    blocks: per request the held leading run counts as hits, then every block is touched.
    Returns (hit blocks, hit weight) where ``weights`` are the blocks' token counts."""
    prev = np.full(n_ids, _NONE, np.int64)
    nxt = np.full(n_ids, _NONE, np.int64)
    held = np.zeros(n_ids, np.bool_)
    meta = np.array([_NONE, _NONE, 0, capacity, policy], np.int64)
    evicted = np.empty(max(1, blocks.shape[0]), np.int64)
    hit_blocks = 0
    hit_weight = 0
    for r in range(offsets.shape[0] - 1):
        ids = blocks[offsets[r]:offsets[r + 1]]
        k = store_lookup_prefix(held, ids)
        hit_blocks += k
        for j in range(offsets[r], offsets[r] + k):
            hit_weight += weights[j]
        store_touch(prev, nxt, held, meta, ids, evicted)
    return hit_blocks, hit_weight


@njit(nogil=True)
def opt_prefix_replay(offsets, blocks, next_use, weights, n_ids, capacity):
    """Belady's MIN (no bypass) over the requests: per request the held leading run counts as hits,
    then every block is accessed in order (a miss fills, evicting the held block whose next use,
    ``next_use[access]``, is farthest). Returns (hit blocks, hit weight)."""
    resident_next = np.full(n_ids, -1, np.int64)       # next use of a held block, -1 if absent
    room = 4 * capacity + 16
    hk = np.empty(room, np.int64)
    hv = np.empty(room, np.int64)
    size = 0
    resident = 0
    hit_blocks = 0
    hit_weight = 0
    for r in range(offsets.shape[0] - 1):
        lo, hi = offsets[r], offsets[r + 1]
        j = lo
        while j < hi and resident_next[blocks[j]] >= 0:   # the held leading run
            hit_weight += weights[j]
            j += 1
        hit_blocks += j - lo
        for t in range(lo, hi):
            size, resident, _ = opt_access(blocks[t], next_use[t], resident_next, hk, hv, size, resident, capacity,
                                           room, n_ids)
    return hit_blocks, hit_weight


# ---------------------------------------------------------------- public layer -----------------

def _ids(ids, n_ids: int) -> np.ndarray:
    a = np.ascontiguousarray(ids, dtype=np.int64)
    if a.ndim != 1:
        raise UsageError("block ids must be one-dimensional", field="ids")
    if a.size and (a.min() < 0 or a.max() >= n_ids):
        raise UsageError(f"block ids must lie in 0..{n_ids - 1}", field="ids")
    return a


class BlockStore:
    """One tier of a prefix cache: ``capacity`` blocks of ids ``0 .. n_ids - 1``, LRU or FIFO.

    Parameters
    ----------
    n_ids : int
        Number of distinct block ids (the trace's ``n_unique_blocks``); memory is 17 bytes per id.
    capacity : int
        Blocks held at most (>= 1).
    policy : {"lru", "fifo"}
        Which held block a full store evicts: the least recently touched, or the first inserted.
    """

    def __init__(self, n_ids: int, capacity: int, policy: str = "lru"):
        if policy not in ("lru", "fifo"):
            raise UsageError(f"unknown block-store policy {policy!r}; expected lru or fifo", field="policy")
        if isinstance(capacity, bool) or int(capacity) != capacity or capacity < 1:
            raise UsageError(f"capacity must be a whole number of blocks >= 1, got {capacity}", field="capacity")
        if n_ids < 0:
            raise UsageError(f"n_ids must be >= 0, got {n_ids}", field="n_ids")
        self.n_ids = int(n_ids)
        self.policy = policy
        self.prev = np.full(self.n_ids, _NONE, np.int64)
        self.nxt = np.full(self.n_ids, _NONE, np.int64)
        self.held = np.zeros(self.n_ids, np.bool_)
        self.meta = np.array([_NONE, _NONE, 0, int(capacity), POLICY_IDS[policy]], np.int64)

    @property
    def capacity(self) -> int:
        return int(self.meta[CAPACITY])

    @property
    def size(self) -> int:
        """Blocks held now."""
        return int(self.meta[SIZE])

    def lookup_prefix(self, ids) -> int:
        """Length of the leading run of ``ids`` held (the store is not changed)."""
        return int(store_lookup_prefix(self.held, _ids(ids, self.n_ids)))

    def touch(self, ids) -> np.ndarray:
        """Use the held ids and insert the others, in order; returns the evicted ids in order."""
        a = _ids(ids, self.n_ids)
        evicted = np.empty(a.shape[0], np.int64)
        n = store_touch(self.prev, self.nxt, self.held, self.meta, a, evicted)
        return evicted[:n]

    def remove(self, ids) -> int:
        """Drop the held ones of ``ids``; returns how many were held."""
        return int(store_remove(self.prev, self.nxt, self.held, self.meta, _ids(ids, self.n_ids)))

    def contains(self, ids) -> np.ndarray:
        """Whether each id is held (bool array)."""
        return self.held[_ids(ids, self.n_ids)]

    def resident(self) -> np.ndarray:
        """The held ids, the next victim first."""
        return _resident(self.nxt, self.meta)


POLICIES = {"lru": LRU, "fifo": FIFO, "opt": OPT}
