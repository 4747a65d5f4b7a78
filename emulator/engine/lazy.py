"""Lazy state of a caching tier under streamed runs: a short stack of runs instead of per-set writes.

A clean read run of consecutive blocks ``F..L`` over a tier of ``S`` sets and ``W`` ways gives set
``s`` the blocks ``b = s (mod S)`` in ``F..L``: ``q`` or ``q + 1`` of them (``q = (L - F + 1) // S``),
the ``q + 1`` sets forming the cyclic interval of set numbers ``[F mod S, (L + 1) mod S)``. A run of
at least ``S * W`` blocks (a *full* run) leaves every set holding its last ``W`` blocks of the run,
whatever was there before. From then on (see :func:`tierlab.engine.walk.fast_tier`) a tier may be
*lazy*: its state is the stack of runs served since (oldest first), meaning "every set holds the
newest ``W`` blocks across these runs, in order, all clean", except the sets listed as *real*, whose
slots (``tag``, ``dirty``, ``meta``, ``owner``) hold their state as usual. A set becomes real
(:func:`materialise_set`) before anything else touches it; at the end of an engine call every set
is made real (:func:`materialise_all`).

The set numbers split into at most ``2k + 1`` segments (cut at every run's ``F mod S`` and
``(L + 1) mod S``) within which every run gives every set the same count and its last block in the
set rises by one per set, so a run's effect on the lazy sets is counted per segment
(:func:`lazy_evict`), then corrected for the real sets one by one.

Per tier ``lzi[i, :]``: :data:`LZ_N` runs on the stack (0: not lazy), :data:`LZ_EPOCH` (a set ``s``
is real when ``real_ep[set_off + s]`` equals it), :data:`LZ_N_REAL` real sets listed in
``real_list[set_off:]``, :data:`LZ_SET_OFF` (the tier's first entry in the per-set arrays),
:data:`LZ_SLOT_OFF` (its first entry in ``perm``). Way positions are kept exact (the flush writes
blocks back in slot order): in a lazy set no block is ever hit, so its ways are filled cyclically in
the age order they had when the set last became lazy, ``perm[slot_off + s * W:][:W]``;
:func:`rot_value` counts the fills since then, so its ``k``-th oldest block is in way
``perm[(rot + k) mod W]`` (``rot`` holds each set's count when it became lazy, then per tier a
Fenwick tree of the runs' extra fills; :data:`LZ_ROT_BASE` counts the fills every set got). Per run
``lz[i, r, :]``: first and last block, tensor id, and the stamp parameters of the run (the tier's
clock when it began, its first and last request unit, log2 of units per block).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tierlab.engine.counters import EVICTIONS
from tierlab.engine.jit import helper, njit
from tierlab.engine.policies import LRU


class LazyState(NamedTuple):
    """A walk call's lazy tiers (local to the call): per tier its run stack ``runs[tier, r, R_*]``
    and fields ``info[tier, LZ_*]``; per set the epoch it was made real in ``real_ep`` and the list
    of real sets ``real_list``; the way permutation of each set when it became lazy ``perm``; fill
    counts and their Fenwick trees ``rot``; scratch rows ``h``, ``bnd``, ``alive``."""

    runs: np.ndarray
    info: np.ndarray
    real_ep: np.ndarray
    real_list: np.ndarray
    perm: np.ndarray
    rot: np.ndarray
    h: np.ndarray
    bnd: np.ndarray
    alive: np.ndarray

LZ_N, LZ_EPOCH, LZ_N_REAL, LZ_SET_OFF, LZ_SLOT_OFF, LZ_ROT_BASE, LZ_FEN_OFF = range(7)
N_LZ_FIELDS = 7
R_F, R_L, R_TID, R_CLOCK0, R_LO, R_HI, R_D, R_FM, R_LM, R_Q, R_REM = range(11)
N_RUN_FIELDS = 11   # the last four: F mod S, L mod S, and the run's length as q * S + rem


@njit(inline="always")
def cyc(a, b, S):
    """``(a - b) mod S`` for ``0 <= a, b < S``, without a division (an int64 division is tens of
    cycles; these run per real set and stack run)."""
    d = a - b
    return d + S if d < 0 else d


@njit(inline="always")
def count_in(q, rem, fm, s, S):
    """Blocks in set ``s`` of a run of ``q * S + rem`` blocks whose first block is in set ``fm``:
    ``q``, one more on the ``rem`` sets from ``fm`` on (cyclically). Equals :func:`run_count`."""
    return q + (1 if cyc(s, fm, S) < rem else 0)


@njit(inline="always")
def last_in(L, lm, s, S):
    """The run's last block in set ``s`` (``L`` its last block, in set ``lm``), when it has one."""
    return L - cyc(lm, s, S)


@njit(nogil=True)
def run_count(F, L, s, S):
    """Blocks of the run ``F..L`` that map to set ``s`` of ``S`` sets."""
    b_first = F + (s - F) % S
    if b_first > L:
        return 0
    return (L - b_first) // S + 1


@helper
def run_stamp(pid, b, clock0, lo, hi, d):
    """The replacement word a run leaves on its block ``b``: LRU its last request, FIFO its fill."""
    if pid == LRU:
        u = ((b + 1) << d) - 1
        if u > hi:
            u = hi
    else:
        u = b << d
        if u < lo:
            u = lo
    return clock0 + (u - lo)


@helper
def held(lz, i, n, s, S, W, h):
    """``h[r]``: blocks of stack run ``r`` that lazy set ``s`` holds (newest ``W`` across the stack)."""
    room = W
    for r in range(n - 1, -1, -1):
        c = count_in(lz[i, r, R_Q], lz[i, r, R_REM], lz[i, r, R_FM], s, S)
        if c > room:
            c = room
        h[r] = c
        room -= c


@helper
def region_add(region_cnt, ro, rs, b_lo, b_hi, delta):
    """Add ``delta`` per block of ``b_lo..b_hi`` to the residency regions (of ``2**rs`` blocks)."""
    for r in range(b_lo >> rs, (b_hi >> rs) + 1):
        r_lo = r << rs
        r_hi = r_lo + (1 << rs) - 1
        if r_lo < b_lo:
            r_lo = b_lo
        if r_hi > b_hi:
            r_hi = b_hi
        region_cnt[ro + r] += delta * (r_hi - r_lo + 1)


@helper
def materialise_set(i, s, lazy, hier, st):
    """Write lazy set ``s`` of tier ``i`` into its slots (oldest block in way 0) and list it as real."""
    lz, lzi, real_ep, real_list, perm, rot, h = lazy.runs, lazy.info, lazy.real_ep, lazy.real_list, lazy.perm, \
        lazy.rot, lazy.h
    n_sets, n_ways, policy, slot_off = hier.n_sets, hier.n_ways, hier.policy, hier.slot_off
    tag, dirty, meta, owner = st.tag, st.dirty, st.meta, st.owner
    S = n_sets[i]
    W = n_ways[i]
    n = lzi[i, LZ_N]
    pid = policy[i]
    held(lz, i, n, s, S, W, h)
    base = slot_off[i] + s * W
    pb = lzi[i, LZ_SLOT_OFF] + s * W
    k = rot_value(lzi, i, rot, s) % W
    for r in range(n):
        ls = last_in(lz[i, r, R_L], lz[i, r, R_LM], s, S)
        for j in range(h[r] - 1, -1, -1):
            b = ls - j * S
            slot = base + perm[pb + k]
            k += 1
            if k == W:
                k = 0
            tag[slot] = b
            owner[slot] = lz[i, r, R_TID]
            dirty[slot] = 0
            meta[slot] = run_stamp(pid, b, lz[i, r, R_CLOCK0], lz[i, r, R_LO], lz[i, r, R_HI], lz[i, r, R_D])
    so = lzi[i, LZ_SET_OFF]
    real_ep[so + s] = lzi[i, LZ_EPOCH]
    real_list[so + lzi[i, LZ_N_REAL]] = s
    lzi[i, LZ_N_REAL] += 1


@helper
def materialise_all(i, lazy, hier, st):
    """Make every set of tier ``i`` real; the tier is no longer lazy."""
    lzi, real_ep = lazy.info, lazy.real_ep
    if lzi[i, LZ_N] == 0:
        return
    so = lzi[i, LZ_SET_OFF]
    ep = lzi[i, LZ_EPOCH]
    for s in range(hier.n_sets[i]):
        if real_ep[so + s] != ep:
            materialise_set(i, s, lazy, hier, st)
    lzi[i, LZ_N] = 0
    lzi[i, LZ_EPOCH] += 1
    lzi[i, LZ_N_REAL] = 0


@njit(nogil=True)
def sort_in_place(a, n):
    """``a[:n]`` sorted in place, ascending: an insertion sort, for the few values a set's runs
    give (compiling numba's ``np.sort`` takes about a second)."""
    for x in range(1, n):
        v = a[x]
        p = x
        while p > 0 and a[p - 1] > v:
            a[p] = a[p - 1]
            p -= 1
        a[p] = v


@helper
def lazy_evict(i, F, L, full, row, cnt, t_kind, lz, lzi, real_list, n_sets, n_ways, tinfo_rs, tinfo_ro,
               region_cnt, h, bnd, alive):
    """Count what a new run evicts from the lazy sets of tier ``i`` (real sets excluded).

    ``full``: the run replaces every block (all ``W`` held blocks of each set are evicted); else the
    run ``F..L`` (at most ``W`` blocks per set, none resident) evicts, per set, as many of the oldest
    held blocks as it brings. Evictions go to ``cnt[row, kind, i, EVICTIONS]`` by the evicted block's
    tensor kind (lazy blocks are clean: no writebacks); the evicted blocks leave their residency
    regions. ``alive[r]`` is set to 1 when stack run ``r`` keeps a block in some set.
    """
    S = n_sets[i]
    W = n_ways[i]
    n = lzi[i, LZ_N]
    rs = tinfo_rs
    ro = tinfo_ro
    bnd[0] = 0
    bnd[1] = S
    nbd = 2
    for r in range(n):
        bnd[nbd] = lz[i, r, R_F] % S
        bnd[nbd + 1] = (lz[i, r, R_L] + 1) % S
        nbd += 2
    if not full:
        bnd[nbd] = F % S
        bnd[nbd + 1] = (L + 1) % S
        nbd += 2
    sort_in_place(bnd, nbd)
    cuts = bnd
    for r in range(n):
        alive[r] = 0
    for x in range(nbd - 1):
        a = cuts[x]
        e = cuts[x + 1]
        if a == e:
            continue
        held(lz, i, n, a, S, W, h)
        need = W if full else run_count(F, L, a, S)
        for r in range(n):
            e_r = h[r] if h[r] < need else need
            need -= e_r
            if h[r] > e_r:
                alive[r] = 1
            if e_r > 0:
                cnt[row, t_kind[lz[i, r, R_TID]], i, EVICTIONS] += e_r * (e - a)
                ls = last_in(lz[i, r, R_L], lz[i, r, R_LM], a, S)
                for j in range(h[r] - e_r, h[r]):
                    region_add(region_cnt, ro, rs, ls - j * S, ls - j * S + (e - a) - 1, np.int64(-1))
    # the real sets were counted above as if lazy: take that back
    so = lzi[i, LZ_SET_OFF]
    nb = L - F + 1
    fq, frem, ffm = nb // S, nb % S, F % S
    for x in range(lzi[i, LZ_N_REAL]):
        s = real_list[so + x]
        held(lz, i, n, s, S, W, h)
        need = W if full else count_in(fq, frem, ffm, s, S)
        for r in range(n):
            e_r = h[r] if h[r] < need else need
            need -= e_r
            if e_r > 0:
                cnt[row, t_kind[lz[i, r, R_TID]], i, EVICTIONS] -= e_r
                ls = last_in(lz[i, r, R_L], lz[i, r, R_LM], s, S)
                for j in range(h[r] - e_r, h[r]):
                    region_cnt[ro + ((ls - j * S) >> rs)] += 1


@njit(nogil=True, inline="always")
def _fen_add(fen, fo, S, x, delta):
    """Add ``delta`` at position ``x`` (0-based) of tier's Fenwick tree at ``fen[fo + 1 .. fo + S]``."""
    j = x + 1
    while j <= S:
        fen[fo + j] += delta
        j += j & -j


@helper
def rot_add(lzi, i, rot, S, F, L):
    """Count the fills of run ``F..L`` into every set's fill count (``q`` each, one more on the
    ``rem`` sets from ``F mod S`` on): ``q`` into the tier's base count, the cyclic interval of
    ``+1`` as a difference in a Fenwick tree — O(log S), not O(S), per run."""
    nb = L - F + 1
    lzi[i, LZ_ROT_BASE] += nb // S
    rem = nb % S
    if rem:
        fo = lzi[i, LZ_FEN_OFF]
        f = F % S
        e = f + rem
        _fen_add(rot, fo, S, f, 1)
        if e < S:
            _fen_add(rot, fo, S, e, -1)
        else:                                   # wraps: [f, S) and [0, e - S)
            _fen_add(rot, fo, S, 0, 1)
            _fen_add(rot, fo, S, e - S, -1)


@njit(nogil=True, inline="always")
def _fills(lzi, i, rot, s):
    """Fills counted into set ``s`` of tier ``i`` since the call began (base plus Fenwick prefix)."""
    fo = lzi[i, LZ_FEN_OFF]
    j = s + 1
    t = lzi[i, LZ_ROT_BASE]
    while j > 0:
        t += rot[fo + j]
        j -= j & -j
    return t


@njit(nogil=True, inline="always")
def rot_value(lzi, i, rot, s):
    """Fills into set ``s`` of tier ``i`` since it last became lazy (:func:`record_order`)."""
    return _fills(lzi, i, rot, s) - rot[lzi[i, LZ_SET_OFF] + s]


@helper
def record_order(i, s, lzi, perm, rot, n_ways, slot_off, tag, meta):
    """Set ``s`` of tier ``i`` becomes lazy: record its ways in fill order (empty ways lowest first,
    then resident blocks oldest first, as replacement takes them) and zero its fill count."""
    W = n_ways[i]
    base = slot_off[i] + s * W
    pb = lzi[i, LZ_SLOT_OFF] + s * W
    n = 0
    for x in range(W):
        if tag[base + x] < 0:
            perm[pb + n] = x
            n += 1
    n0 = n
    for x in range(W):
        if tag[base + x] >= 0:
            v = meta[base + x]
            p = n
            while p > n0 and meta[base + perm[pb + p - 1]] > v:
                perm[pb + p] = perm[pb + p - 1]
                p -= 1
            perm[pb + p] = x
            n += 1
    rot[lzi[i, LZ_SET_OFF] + s] = _fills(lzi, i, rot, s)
