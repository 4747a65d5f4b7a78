"""Symbolic replay of a lone caching tier: sets that hold alike are kept once, as a group.

When tier 0 is the hierarchy's only caching tier (LRU or FIFO) and every farther tier is a home or
a pass-through, what leaves tier 0 is only counted there, so the replay is tier 0 alone. Its
requests come as chunks of consecutive blocks ``F..L``, and a chunk gives set ``s`` the blocks
``F + ((s - F) mod S) + j S``: one, a few, or (a weight matrix) dozens. Across a run of sets the
blocks differ only by the set number, so sets that started alike stay alike.

State: the set numbers are cut into **groups** ``[grp_lo[k], grp_lo[k + 1])``; every set ``s`` of a
group holds the same entries, youngest first, each an **offset** ``A`` (the set holds block
``A + s``; ``A`` is a multiple of ``S``), a tensor id and a dirty flag; empty entries (``A = -1``)
are last. The entries are in replacement order (LRU: last use; FIFO: fill), so the victim is the
last entry and no stamp is kept. A chunk is cut into at most three intervals of sets that receive
the same number of blocks from the same offset; the groups are split at the interval ends, every
group inside takes the chunk's blocks one at a time (a lookup is one vector compare of the entries,
an update one blend, :mod:`tierlab.engine.simd`) and counts each outcome once for all its sets;
neighbours left alike are merged. The blocks between two hits all miss and are counted in one step.

Counts are the per-block walk's (:mod:`tierlab.engine.walk`) exactly, per op, tensor kind, tier and
counter (writebacks to the evicting op and the victim's kind; bypasses, writethroughs and home hits
farther down as the walk counts them); which physical way holds a block is not kept (nothing in a
lone LRU/FIFO tier's counts depends on it). Tested equal to the walk in ``tests/engine/test_setgroups.py``.
"""

from __future__ import annotations

import numpy as np

from tierlab.engine.counters import (
    BYPASSES,
    BYTES_READ,
    BYTES_WRITTEN,
    EVICTIONS,
    FILLS,
    HITS,
    MISSES,
    PIM_BYTES,
    UNFETCHED,
    WRITEBACKS,
    WRITETHROUGHS,
)
from tierlab.engine.policies import LRU
from tierlab.engine.state import TI_DIRTY_FAR, TI_REGION_OFF, TI_REGION_SHIFT
from tierlab.engine.jit import helper, njit
from tierlab.engine.group_table import (EMPTY, N_ST, ST_FREE, ST_GROWN, ST_K, ST_K_MAX, ST_REQUESTS,  # noqa: F401
                                        ST_SWEEPS, find_group, grow_rows, merge_groups, new_state, same_rows,
                                        split_group)
from tierlab.engine.blocks import chunks_of
from tierlab.engine.lazy import count_in
from tierlab.engine.simd import set_lookup, set_put
from tierlab.engine.unowned import unowned

@helper
def _flat(cnt):
    """``cnt[row, kind, tier, c]`` as a flat view and its strides: ``cf[row * s_row + kind * s_kind
    + tier * s_tier + c]``."""
    s_tier = cnt.shape[3]
    s_kind = cnt.shape[2] * s_tier
    return cnt.reshape(cnt.size), cnt.shape[1] * s_kind, s_kind, s_tier


@helper
def _down(rw, tid, n, row, cf, s_row, s_kind, s_tier, t_home, t_kind, blk):
    """``n`` requests of tier 0's block leave it for ``tid``'s home: pass-through tiers count a
    bypass (read) or writethrough (write) each, the home a hit of the tier-above's block."""
    h = t_home[tid]
    c0 = row * s_row + t_kind[tid] * s_kind
    i = 1
    while i < h:
        cf[c0 + i * s_tier + (WRITETHROUGHS if rw else BYPASSES)] += n
        i += 1
    cf[c0 + h * s_tier + HITS] += n
    cf[c0 + h * s_tier + (BYTES_WRITTEN if rw else BYTES_READ)] += n * blk[h - 1]


@helper
def _count_fills(nr, ci, rw, fetch, b0, tid, row, cf, s_row, s_kind, s_tier, t_home, t_kind, blk):
    """``nr`` blocks of ``tid`` miss tier 0 and are filled there: fetched from below when ``fetch``
    (else counted unfetched), then read (``rw`` 0) or written at tier 0."""
    cf[ci + MISSES] += nr
    cf[ci + FILLS] += nr
    if fetch:
        cf[ci + BYTES_WRITTEN] += nr * b0
        _down(np.int64(0), tid, nr, row, cf, s_row, s_kind, s_tier, t_home, t_kind, blk)
    else:
        cf[ci + UNFETCHED] += nr
    cf[ci + (BYTES_WRITTEN if rw else BYTES_READ)] += nr * b0


@helper
def _writeback(vt, n, row, cf, s_row, s_kind, s_tier, t_home, t_kind, blk):
    """``n`` dirty blocks of tensor ``vt`` leave tier 0: writebacks, and the write farther down."""
    cv = row * s_row + t_kind[vt] * s_kind
    cf[cv + WRITEBACKS] += n
    cf[cv + BYTES_READ] += n * blk[0]
    _down(np.int64(1), vt, n, row, cf, s_row, s_kind, s_tier, t_home, t_kind, blk)


@helper
def _misses(r_base, n, t, a_first, S, W, rw, tid, row, fetch, ent, cf, s_row, s_kind, s_tier,
            t_home, t_kind, blk):
    """The ``t`` blocks ``a_first + i S + s`` (``i = 0..t-1``, in order) all miss in each of the
    ``n`` sets of the group at ``r_base``: the held entries leave oldest first (the empty ones
    without an eviction), then, past ``W``, the run's own blocks; the group ends holding the newest
    ``min(t, W)`` of them before the survivors."""
    b0 = blk[0]
    ci = row * s_row + t_kind[tid] * s_kind
    n_old = t if t < W else W
    for e in range(W - 1, W - 1 - n_old, -1):
        if ent[0, r_base + e] != EMPTY:
            vt = ent[1, r_base + e]
            cf[row * s_row + t_kind[vt] * s_kind + EVICTIONS] += n
            if ent[2, r_base + e]:
                _writeback(vt, n, row, cf, s_row, s_kind, s_tier, t_home, t_kind, blk)
    if t > W:
        n_own = (t - W) * n
        cf[ci + EVICTIONS] += n_own
        if rw:
            _writeback(tid, n_own, row, cf, s_row, s_kind, s_tier, t_home, t_kind, blk)
    _count_fills(t * n, ci, rw, fetch, b0, tid, row, cf, s_row, s_kind, s_tier, t_home, t_kind, blk)
    for e in range(W - 1, n_old - 1, -1):               # survivors move down by t
        for f in range(3):
            ent[f, r_base + e] = ent[f, r_base + e - t]
    for e in range(n_old):                              # youngest first: the last block, ...
        ent[0, r_base + e] = a_first + (t - 1 - e) * S
        ent[1, r_base + e] = tid
        ent[2, r_base + e] = rw


@helper
def _apply(r_base, n, m, a0, S, W, rw, tid, row, lru, store_recency, fetch_write, ent, words,
           cf, s_row, s_kind, s_tier, t_home, t_kind, blk):
    """The ``m`` blocks ``a0 + j S + s`` (``j = 0..m-1``, in order) in each of the ``n`` sets of the
    group whose entries start at ``r_base``.

    From block ``j`` on, the next hit is the first block ``j'`` some entry holds that is still held
    at its turn: the entry at position ``p`` (0 the youngest) leaves after ``W - p`` fills, and the
    ``j' - j`` blocks before it all miss (the chunk's blocks are distinct). Those misses are counted
    in one step (:func:`_misses`), the hit on its own, and so on: a group costs one step per hit
    plus one, not one per block."""
    wa = words
    wt = words + 8 * ent.shape[1]
    wd = wt + 8 * ent.shape[1]
    b0 = blk[0]
    ci = row * s_row + t_kind[tid] * s_kind
    fetch = fetch_write if rw else True
    a_last = a0 + (m - 1) * S
    j = 0
    while j < m:
        a = a0 + j * S
        j_hit = m
        for p in range(W):
            v = ent[0, r_base + p]
            if v >= a and v <= a_last:
                jj = (v - a0) // S
                if jj - j < W - p and jj < j_hit:
                    j_hit = jj
        if j_hit > j:
            _misses(r_base, n, j_hit - j, a, S, W, rw, tid, row, fetch, ent, cf, s_row, s_kind, s_tier,
                    t_home, t_kind, blk)
            j = j_hit
            if j == m:
                break
            a = a0 + j * S
        x = set_lookup(wa, r_base, W, a, 0)
        cf[ci + HITS] += n
        if rw:
            cf[ci + BYTES_WRITTEN] += n * b0
            ent[2, r_base + x] = 1
            move = lru and store_recency
        else:
            cf[ci + BYTES_READ] += n * b0
            move = lru
        if move and x > 0:
            t = ent[1, r_base + x]
            d = ent[2, r_base + x]
            set_put(wa, r_base, W, x, a, True)
            set_put(wt, r_base, W, x, t, True)
            set_put(wd, r_base, W, x, d, True)
        j += 1


@helper
def _sweep(F, rw, tid, row, S, W, q, rem, f, c1, c2, fetch_write, grp_lo, grp_row, ent, free, st,
           cf, s_row, s_kind, s_tier, t_home, t_kind, blk):
    """A chunk giving every set at least ``W`` blocks (``q >= W``) that holds none of them: every
    entry of every group leaves and each interval of sets ends holding its own newest ``W``
    blocks, so the groups are rebuilt as at most three, one per interval. Counted as
    :func:`_misses` counts each group, summed (each held entry once, weighted by its group's sets;
    the chunk's own counts once per interval). Returns False, changing nothing, when some entry
    holds a block of the chunk (the caller then serves it group by group)."""
    K = st[ST_K]
    for x in range(3):                  # a block of the chunk held in its set: not a sweep
        a = 0 if x == 0 else (c1 if x == 1 else c2)
        e = c1 if x == 0 else (c2 if x == 1 else S)
        if a == e:
            continue
        a0 = F - f + (S if a < f else 0)
        a_last = a0 + (count_in(q, rem, f, a, S) - 1) * S
        k = find_group(grp_lo, K, a)
        while k < K and grp_lo[k] < e:
            rb = grp_row[k] * W
            for p in range(W):
                v = ent[0, rb + p]
                if v >= a0 and v <= a_last:
                    return False
            k += 1
    for k in range(K):                  # every held entry leaves
        n = grp_lo[k + 1] - grp_lo[k]
        rb = grp_row[k] * W
        for e in range(W):
            if ent[0, rb + e] != EMPTY:
                vt = ent[1, rb + e]
                cf[row * s_row + t_kind[vt] * s_kind + EVICTIONS] += n
                if ent[2, rb + e]:
                    _writeback(vt, n, row, cf, s_row, s_kind, s_tier, t_home, t_kind, blk)
    b0 = blk[0]
    ci = row * s_row + t_kind[tid] * s_kind
    fetch = fetch_write if rw else True
    rows = ent.shape[1] // W
    K2 = np.int64(0)          # not a literal: merge_groups compiles once
    for x in range(3):      # the intervals [0, c1), [c1, c2), [c2, S), as in _chunk
        a = 0 if x == 0 else (c1 if x == 1 else c2)
        e = c1 if x == 0 else (c2 if x == 1 else S)
        if a == e:
            continue
        m = count_in(q, rem, f, a, S)
        a0 = F - f + (S if a < f else 0)
        n = e - a
        n_own = (m - W) * n
        cf[ci + EVICTIONS] += n_own
        if rw and n_own > 0:
            _writeback(tid, n_own, row, cf, s_row, s_kind, s_tier, t_home, t_kind, blk)
        _count_fills(m * n, ci, rw, fetch, b0, tid, row, cf, s_row, s_kind, s_tier, t_home, t_kind, blk)
        rb = K2 * W                     # group K2 takes row K2
        for p in range(W):              # youngest first: the interval's last block, ...
            ent[0, rb + p] = a0 + (m - 1 - p) * S
            ent[1, rb + p] = tid
            ent[2, rb + p] = rw
        grp_lo[K2] = a
        grp_row[K2] = K2
        K2 += 1
    grp_lo[K2] = S
    for r in range(K2, rows):           # every other row on the free stack (a row taken is overwritten)
        free[rows - 1 - r] = r
    st[ST_FREE] = rows - K2
    st[ST_K] = K2
    st[ST_SWEEPS] += 1
    if K2 > st[ST_K_MAX]:
        st[ST_K_MAX] = K2
    merge_groups(np.int64(0), K2, grp_lo, grp_row, ent, free, st, W)
    return True


@helper
def _chunk(F, L, rw, tid, row, S, W, lru, store_recency, fetch_write, grp_lo, grp_row, ent, free, st,
           cf, s_row, s_kind, s_tier, t_home, t_kind, blk):
    """Serve tier-0 blocks ``F..L`` (one chunk, in order) on the groups."""
    n = L - F + 1
    q = n // S
    rem = n % S
    f = F % S
    g = f + rem
    if g >= S:
        g -= S
    c1 = min(f, g)
    c2 = max(f, g)
    if q >= W and _sweep(F, rw, tid, row, S, W, q, rem, f, c1, c2, fetch_write, grp_lo, grp_row, ent, free,
                         st, cf, s_row, s_kind, s_tier, t_home, t_kind, blk):
        return
    words = ent.ctypes.data
    k_first = st[ST_K]
    k_last = np.int64(0)      # not a literal: merge_groups compiles once
    for x in range(3):      # the intervals [0, c1), [c1, c2), [c2, S)
        a = 0 if x == 0 else (c1 if x == 1 else c2)
        e = c1 if x == 0 else (c2 if x == 1 else S)
        if a == e:
            continue
        m = count_in(q, rem, f, a, S)
        if m == 0:
            continue
        a0 = F - f + (S if a < f else 0)
        k = find_group(grp_lo, st[ST_K], a)
        if grp_lo[k] < a:
            split_group(k, a, grp_lo, grp_row, ent, free, st, W)
            k += 1
        k_end = find_group(grp_lo, st[ST_K], e - 1)
        if grp_lo[k_end + 1] > e:
            split_group(k_end, e, grp_lo, grp_row, ent, free, st, W)
        for kk in range(k, k_end + 1):
            _apply(grp_row[kk] * W, grp_lo[kk + 1] - grp_lo[kk], m, a0, S, W, rw, tid, row, lru,
                   store_recency, fetch_write, ent, words, cf, s_row, s_kind, s_tier, t_home, t_kind, blk)
        k_first = min(k_first, k)
        k_last = max(k_last, k_end)
    if k_last >= k_first:
        merge_groups(k_first - 1, k_last + 1, grp_lo, grp_row, ent, free, st, W)


@njit(nogil=True)
def replay_groups(desc, ten, hier, sh0, store_recency, fetch_write, grp_lo, grp_row, ent, free, st,
                  max_groups, cnt):
    """Replay a batch of access descriptors (:class:`tierlab.engine.state.Descriptors`, tensors
    :class:`tierlab.engine.state.Tensors`, tiers :class:`tierlab.engine.state.Hierarchy`) on the group
    state of tier 0 (see the module docstring and :func:`tierlab.engine.walk.replay_batch`).

    Stops before a descriptor when tier 0 is cut into more than ``max_groups`` groups (the caller
    then writes the state out, :func:`write_slots`, and replays the rest per set). Returns the
    tier-0 blocks requested, the entry arrays (new ones when the row pool grew) and the index of
    the first descriptor not replayed (the batch's length when all were)."""
    acc_row, acc_tid, acc_offset, acc_nbytes, acc_count, acc_stride, acc_write, acc_pim = desc
    t_addr, t_home, t_kind = ten
    blk, n_sets, n_ways, _mode, policy, _slot_off = hier
    S = n_sets[0]
    W = n_ways[0]
    lru = policy[0] == LRU
    b0 = blk[0]
    cf, s_row, s_kind, s_tier = _flat(cnt)    # and views owning nothing (tierlab.engine.unowned)
    cf, vh, vk, vb = unowned(cf), unowned(t_home), unowned(t_kind), unowned(blk)
    vlo, vrow, vst, vent, vfree = unowned(grp_lo), unowned(grp_row), unowned(st), unowned(ent), unowned(free)
    n_blocks = 0
    for a in range(acc_row.shape[0]):
        if st[ST_K] > max_groups:
            return n_blocks, ent, free, a
        row = acc_row[a]
        tid = acc_tid[a]
        rw = 1 if acc_write[a] else 0
        kd = t_kind[tid]
        base = t_addr[tid] + acc_offset[a]
        reps, span = chunks_of(base, acc_nbytes[a], acc_count[a], acc_stride[a], b0)
        for j in range(reps):
            start = base + j * acc_stride[a]
            first = start >> sh0
            last = (start + span - 1) >> sh0
            nb = last - first + 1
            n_blocks += nb
            if nb <= 0:
                continue
            if acc_pim[a] > 0:
                cnt[row, kd, t_home[tid], PIM_BYTES] += nb * b0
                continue
            if t_home[tid] == 0:
                cnt[row, kd, 0, HITS] += nb
                cnt[row, kd, 0, BYTES_WRITTEN if rw else BYTES_READ] += nb * b0
                continue
            if st[ST_FREE] < 8:
                ent, free = grow_rows(ent, free, st, W)
                vent, vfree = unowned(ent), unowned(free)
            _chunk(first, last, rw, tid, row, S, W, lru, store_recency, fetch_write, vlo, vrow,
                   vent, vfree, vst, cf, s_row, s_kind, s_tier, vh, vk, vb)
            st[ST_REQUESTS] += nb
            if reps > 1 and acc_stride[a] == 0 and lru and (rw == 0 or store_recency) and nb <= S * W:
                # the same run again, reps - 1 times: each set took at most W of its blocks, and under
                # LRU (a store moving its block too) they are its youngest entries, in the run's order;
                # serving the run again hits every block and leaves that order as it was
                more = (reps - 1) * nb
                cnt[row, kd, 0, HITS] += more
                cnt[row, kd, 0, BYTES_WRITTEN if rw else BYTES_READ] += more * b0
                st[ST_REQUESTS] += more
                n_blocks += more
                break
    return n_blocks, ent, free, acc_row.shape[0]


@njit(nogil=True)
def write_slots(grp_lo, grp_row, ent, st, n_ways, t_home, tag, dirty, meta, owner, clock, tinfo, region_cnt):
    """Write the groups out as the walk's per-set state of tier 0 (:mod:`tierlab.engine.walk`): valid
    ways first (youngest in way 0), replacement words falling with age below a new clock, each
    resident block counted in its residency region and each dirty one homed past tier 1 in the
    tier's far-dirty count. The walk then replays on from there with the same counts."""
    W = n_ways[0]
    clock0 = clock[0] + W
    rs = tinfo[0, TI_REGION_SHIFT]
    ro = tinfo[0, TI_REGION_OFF]
    far = 0
    for k in range(st[ST_K]):
        rb = grp_row[k] * W
        for s in range(grp_lo[k], grp_lo[k + 1]):
            base = s * W
            for e in range(W):
                a = ent[0, rb + e]
                if a == EMPTY:
                    tag[base + e] = -1
                    dirty[base + e] = 0
                    meta[base + e] = 0
                    owner[base + e] = 0
                    continue
                b = a + s
                tag[base + e] = b
                owner[base + e] = ent[1, rb + e]
                dirty[base + e] = ent[2, rb + e]
                meta[base + e] = clock0 - 1 - e
                region_cnt[ro + (b >> rs)] += 1
                if ent[2, rb + e] and t_home[ent[1, rb + e]] != 1:
                    far += 1
    tinfo[0, TI_DIRTY_FAR] += far
    clock[0] = clock0


@njit(nogil=True)
def flush_groups(t_home, t_kind, blk, n_ways, grp_lo, grp_row, ent, st, cnt):
    """End-of-run flush: every dirty entry is written back (``cnt[0]``) and stays, clean."""
    W = n_ways[0]
    cf, s_row, s_kind, s_tier = _flat(cnt)
    for k in range(st[ST_K]):
        n = grp_lo[k + 1] - grp_lo[k]
        rb = grp_row[k] * W
        for e in range(W):
            if ent[0, rb + e] != EMPTY and ent[2, rb + e]:
                _writeback(ent[1, rb + e], n, 0, cf, s_row, s_kind, s_tier, t_home, t_kind, blk)
                ent[2, rb + e] = 0
