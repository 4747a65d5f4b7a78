"""Replacement policies, registered by id, as tiny Numba hooks the engine's kernels call.

A policy is three hooks over a per-slot ``meta`` word (int64) of the tier's state:

``hit(meta, slot, stamp, next_use)``
    a lookup found the block;
``fill(meta, slot, stamp, next_use)``
    the block was just installed;
``victim(meta, base, ways, rng, t) -> way``
    which way of the full set starting at slot ``base`` to evict.

``stamp`` is the tier's lookup counter (strictly increasing, so stamps are unique), ``next_use``
the position of the block's next lookup at that tier (only the offline ``opt`` uses it; the replay
layer computes it in a pre-pass). Adding a policy (e.g. SRRIP: meta = RRPV) is three hooks here,
a named id and one entry in :data:`POLICY_IDS`, one line in each hook dispatcher below, and the
policy's name in the kernels' declared support (:mod:`tierlab.engine.dispatch`).

Each policy's hooks are inlined into the three dispatchers (``policy_hit``, ``policy_fill``,
``policy_victim``); the dispatchers are compiled functions of their own (:func:`tierlab.engine.jit.helper`),
called, not inlined, where the kernels use them: inlined at the walk's five call sites they made its
compile 0.75 s longer, for a walk about 5% faster block by block (``tierlab run``'s quick start,
first run: 8.55 s of compile against 9.42 s).
"""

from __future__ import annotations

import numpy as np

from tierlab.engine.jit import helper, njit

OPT_NEVER = np.int64(1) << np.int64(62)  # next use of a block never used again

# policy ids (a tier's ``policy`` entry); compiled code compares against these names, never numbers
LRU, FIFO, RANDOM, OPT = 0, 1, 2, 3
POLICY_IDS = {"lru": LRU, "fifo": FIFO, "random": RANDOM, "opt": OPT}
POLICY_NAMES = {v: k for k, v in POLICY_IDS.items()}


@njit(inline="always")
def _argmin_way(meta, base, ways):
    best = 0
    v = meta[base]
    for w in range(1, ways):
        if meta[base + w] < v:
            v = meta[base + w]
            best = w
    return best


@njit(inline="always")
def _argmax_way(meta, base, ways):
    best = 0
    v = meta[base]
    for w in range(1, ways):
        if meta[base + w] > v:
            v = meta[base + w]
            best = w
    return best


@njit(inline="always")
def xorshift64(rng, t):
    """Advance tier ``t``'s xorshift64 state (13, 7, 17) and return it."""
    x = rng[t]
    x ^= x << np.uint64(13)
    x ^= x >> np.uint64(7)
    x ^= x << np.uint64(17)
    rng[t] = x
    return x


# lru: evict the least recently used (stamp of the last hit or fill)
@njit(inline="always")
def _lru_hit(meta, slot, stamp, next_use):
    meta[slot] = stamp


@njit(inline="always")
def _lru_fill(meta, slot, stamp, next_use):
    meta[slot] = stamp


@njit(inline="always")
def _lru_victim(meta, base, ways, rng, t):
    return _argmin_way(meta, base, ways)


# fifo: evict the oldest fill; hits change nothing
@njit(inline="always")
def _fifo_hit(meta, slot, stamp, next_use):
    pass


@njit(inline="always")
def _fifo_fill(meta, slot, stamp, next_use):
    meta[slot] = stamp


@njit(inline="always")
def _fifo_victim(meta, base, ways, rng, t):
    return _argmin_way(meta, base, ways)


# random: evict way (xorshift64 state % ways), seeded per tier
@njit(inline="always")
def _random_hit(meta, slot, stamp, next_use):
    pass


@njit(inline="always")
def _random_fill(meta, slot, stamp, next_use):
    pass


@njit(inline="always")
def _random_victim(meta, base, ways, rng, t):
    return np.int64(xorshift64(rng, t) % np.uint64(ways))


# opt (Belady's MIN): evict the block used farthest in the future (lowest way on ties)
@njit(inline="always")
def _opt_hit(meta, slot, stamp, next_use):
    meta[slot] = next_use


@njit(inline="always")
def _opt_fill(meta, slot, stamp, next_use):
    meta[slot] = next_use


@njit(inline="always")
def _opt_victim(meta, base, ways, rng, t):
    return _argmax_way(meta, base, ways)


@helper
def policy_hit(pid, meta, slot, stamp, next_use):
    if pid == LRU:
        _lru_hit(meta, slot, stamp, next_use)
    elif pid == FIFO:
        _fifo_hit(meta, slot, stamp, next_use)
    elif pid == RANDOM:
        _random_hit(meta, slot, stamp, next_use)
    else:
        _opt_hit(meta, slot, stamp, next_use)


@helper
def policy_fill(pid, meta, slot, stamp, next_use):
    if pid == LRU:
        _lru_fill(meta, slot, stamp, next_use)
    elif pid == FIFO:
        _fifo_fill(meta, slot, stamp, next_use)
    elif pid == RANDOM:
        _random_fill(meta, slot, stamp, next_use)
    else:
        _opt_fill(meta, slot, stamp, next_use)


@helper
def policy_victim(pid, meta, base, ways, rng, t):
    if pid == LRU:
        return _lru_victim(meta, base, ways, rng, t)
    elif pid == FIFO:
        return _fifo_victim(meta, base, ways, rng, t)
    elif pid == RANDOM:
        return _random_victim(meta, base, ways, rng, t)
    return _opt_victim(meta, base, ways, rng, t)
