"""The range fast path of the walk: a run of read requests with no block resident, served set by set.

Exact because, at an LRU or FIFO tier whose dirty blocks are all homed in the next tier, every
block of such a run misses once and each set reuses its ways in a fixed order (empty ways, resident
blocks oldest first, then the run's own blocks). Long runs leave the tier lazy
(:mod:`tierlab.engine.lazy`). See ``docs/design.md`` (the dispatch table: ``walk``).
"""

from __future__ import annotations

import numpy as np

from tierlab.engine.counters import (
    BYTES_READ,
    BYTES_WRITTEN,
    EVICTIONS,
    FILLS,
    HITS,
    MISSES,
    WRITEBACKS,
)
from tierlab.engine.jit import helper, njit
from tierlab.engine.lazy import (
    LZ_EPOCH,
    LZ_N,
    LZ_N_REAL,
    LZ_SET_OFF,
    N_RUN_FIELDS,
    R_CLOCK0,
    R_D,
    R_F,
    R_FM,
    R_HI,
    R_L,
    R_LM,
    R_LO,
    R_Q,
    R_REM,
    R_TID,
    count_in,
    cyc,
    held,
    last_in,
    lazy_evict,
    materialise_all,
    materialise_set,
    record_order,
    region_add,
    rot_add,
)
from tierlab.engine.policies import FIFO, LRU, OPT_NEVER
from tierlab.engine.simd import set_lookup
from tierlab.engine.state import MODE_CACHE, TI_DIRTY_FAR, TI_FAST_REQUESTS, TI_REGION_OFF, TI_REGION_SHIFT, TI_SET_MASK, TI_SHIFT


@njit(nogil=True)
def argsort_unique(v, n):
    """The order of ``v[:n]`` (distinct values), ascending: a Shell sort of the indices with
    Knuth's gaps (compiling numba's ``np.argsort`` takes about a second, a merge sort half that)."""
    a = np.arange(n)
    gap = 1
    while gap < n // 3:
        gap = 3 * gap + 1
    while gap > 0:
        for x in range(gap, n):
            t = a[x]
            j = x
            while j >= gap and v[a[j - gap]] > v[t]:
                a[j] = a[j - gap]
                j -= gap
            a[j] = t
        gap //= 3
    return a


@helper
def fast_tier(i, lo, hi, ush, tid, row, cnt, t_kind, hier, st, seq, old_meta, lazy, absent):
    """Serve a run of read requests at tier ``i`` set by set; False (and nothing changed) if it may not.

    The requests are units ``lo..hi`` of ``2**ush`` bytes, in order (one tensor, reads). It applies
    when tier ``i`` is an LRU or FIFO cache, none of the run's blocks is resident there (every
    residency region the run covers is empty) and every dirty block the tier holds is homed in the
    next tier (so a writeback is a home hit there and changes no state). Then every block of the run
    misses once (repeated requests to it hit), and in each set the ways are reused in a fixed order:
    empty ways (lowest first), then the resident blocks oldest first, then the run's own blocks in
    the order they came — exactly what per-block LRU/FIFO replacement does, since all the run's blocks
    are distinct, newer than everything resident, and stamped in request order.

    Lazily (:mod:`tierlab.engine.lazy`): a run of at least ``S * W`` blocks replaces every block of the
    tier, so it only counts the evictions (real sets slot by slot, lazy ones per segment) and leaves
    the tier lazy with the run alone on its stack; a shorter run on a lazy tier serves the real sets
    set by set, counts its evictions from the lazy ones per segment and is pushed on the stack (runs
    no set holds anything of fall off the bottom). A full stack is materialised first.
    """
    blk, n_sets, n_ways, mode, policy, slot_off = hier
    tag, dirty, meta, owner, clock, _rng, tinfo, region_cnt = st
    lz, lzi, real_ep, real_list, lz_perm, lz_rot, lz_h, lz_bnd, lz_alive = lazy
    if mode[i] != MODE_CACHE:
        return False
    pid = policy[i]
    if pid != LRU and pid != FIFO:
        return False
    if tinfo[i, TI_DIRTY_FAR] != 0:
        return False
    sh = tinfo[i, TI_SHIFT]
    d = sh - ush
    F = lo >> d
    L = hi >> d
    rs = tinfo[i, TI_REGION_SHIFT]
    ro = tinfo[i, TI_REGION_OFF]
    if not absent:       # ``absent``: the caller found no block of the run resident, block by block
        for r in range(F >> rs, (L >> rs) + 1):
            if region_cnt[ro + r] != 0:
                return False
    nb = L - F + 1
    n_req = hi - lo + 1
    S = n_sets[i]
    W = n_ways[i]
    clock0 = clock[i]
    k_run = t_kind[tid]
    b_i = blk[i]
    smask = tinfo[i, TI_SET_MASK]
    n_touch = nb if nb < S else S
    k_max = lz.shape[1]
    n_lz = lzi[i, LZ_N]
    full = nb >= S * W        # passed on as a bool, not the literals True/False: lazy_evict compiles once
    if full:
        # every block of the tier is replaced: count what leaves, keep the run as the whole state
        if n_lz > 0:
            so = lzi[i, LZ_SET_OFF]
            for x in range(lzi[i, LZ_N_REAL]):
                s = real_list[so + x]
                record_order(i, s, lzi, lz_perm, lz_rot, n_ways, slot_off, tag, meta)
                _evict_set(i, slot_off[i] + s * W, W, row, cnt, t_kind, blk,
                           tag, dirty, owner, region_cnt, rs, ro)
            lazy_evict(i, F, L, full, row, cnt, t_kind, lz, lzi, real_list, n_sets, n_ways, rs, ro,
                       region_cnt, lz_h, lz_bnd, lz_alive)
        else:
            for s in range(S):
                record_order(i, s, lzi, lz_perm, lz_rot, n_ways, slot_off, tag, meta)
                _evict_set(i, slot_off[i] + s * W, W, row, cnt, t_kind, blk,
                           tag, dirty, owner, region_cnt, rs, ro)
        cnt[row, k_run, i, EVICTIONS] += nb - S * W
        rot_add(lzi, i, lz_rot, S, F, L)
        _push_run(lz, i, np.int64(0), F, L, tid, clock0, lo, hi, d, S)    # int64, not a literal: one compile
        lzi[i, LZ_N] = 1
        lzi[i, LZ_EPOCH] += 1
        lzi[i, LZ_N_REAL] = 0
        n_touch = 0
    elif n_lz > 0 and n_lz < k_max and nb * W >= S:
        so = lzi[i, LZ_SET_OFF]
        fq, frem, ffm = nb // S, nb % S, F % S
        for x in range(lzi[i, LZ_N_REAL]):
            s = real_list[so + x]
            m = count_in(fq, frem, ffm, s, S)
            if m > 0:
                _fast_set(i, s, F + cyc(s, ffm, S), m, lo, hi, d, tid, row, cnt, t_kind, hier, st, clock0, seq, old_meta)
        lazy_evict(i, F, L, full, row, cnt, t_kind, lz, lzi, real_list, n_sets, n_ways, rs, ro,
                   region_cnt, lz_h, lz_bnd, lz_alive)
        k0 = 0
        while k0 < n_lz and lz_alive[k0] == 0:
            k0 += 1
        for r in range(k0, n_lz):
            for f in range(N_RUN_FIELDS):
                lz[i, r - k0, f] = lz[i, r, f]
        n_lz -= k0
        rot_add(lzi, i, lz_rot, S, F, L)
        _push_run(lz, i, n_lz, F, L, tid, clock0, lo, hi, d, S)
        lzi[i, LZ_N] = n_lz + 1
        n_touch = 0
    elif n_lz > 0 and nb * W >= S:
        materialise_all(i, lazy, hier, st)
    for k in range(n_touch):
        b_first = F + k
        s = (b_first & smask) if smask >= 0 else (b_first % S)
        m = (L - b_first) // S + 1
        if lzi[i, LZ_N] > 0 and real_ep[lzi[i, LZ_SET_OFF] + s] != lzi[i, LZ_EPOCH]:
            # a short run on a lazy tier: its few sets are made real and served as usual
            materialise_set(i, s, lazy, hier, st)
        _fast_set(i, s, b_first, m, lo, hi, d, tid, row, cnt, t_kind, hier, st, clock0, seq, old_meta)
    # the run's blocks left resident are the last W of each set, i.e. its last S * W blocks:
    # count them into their regions a region at a time
    region_add(region_cnt, ro, rs, max(F, L - S * W + 1), L, np.int64(1))
    cnt[row, k_run, i, MISSES] += nb
    cnt[row, k_run, i, FILLS] += nb
    cnt[row, k_run, i, HITS] += n_req - nb
    cnt[row, k_run, i, BYTES_WRITTEN] += nb * b_i
    cnt[row, k_run, i, BYTES_READ] += n_req << ush
    clock[i] = clock0 + n_req
    tinfo[i, TI_FAST_REQUESTS] += n_req
    return True


@helper
def resident(i, b, hier, st, words, lazy):
    """Whether tier ``i`` (a cache) holds block ``b``: a lookup in a real set; in a lazy one, whether
    a run on the stack has ``b`` among the blocks the set holds (:func:`tierlab.engine.lazy.held`)."""
    n_sets, n_ways, slot_off = hier.n_sets, hier.n_ways, hier.slot_off
    tinfo = st.tinfo
    lz, lzi, real_ep, lz_h = lazy.runs, lazy.info, lazy.real_ep, lazy.h
    S = n_sets[i]
    W = n_ways[i]
    smask = tinfo[i, TI_SET_MASK]
    s = (b & smask) if smask >= 0 else (b % S)
    n = lzi[i, LZ_N]
    if n > 0 and real_ep[lzi[i, LZ_SET_OFF] + s] != lzi[i, LZ_EPOCH]:
        held(lz, i, n, s, S, W, lz_h)
        for r in range(n):
            if lz_h[r] > 0:
                ls = last_in(lz[i, r, R_L], lz[i, r, R_LM], s, S)
                if ls - (lz_h[r] - 1) * S <= b <= ls:
                    return True
        return False
    return set_lookup(words, slot_off[i] + s * W, W, b, 0) < W


@helper
def _push_run(lz, i, r, F, L, tid, clock0, lo, hi, d, S):
    """Store run ``F..L`` (with its stamp parameters and its shape over ``S`` sets) as entry ``r`` of
    tier ``i``'s lazy stack."""
    lz[i, r, R_FM] = F % S
    lz[i, r, R_LM] = L % S
    lz[i, r, R_Q] = (L - F + 1) // S
    lz[i, r, R_REM] = (L - F + 1) % S
    lz[i, r, R_F] = F
    lz[i, r, R_L] = L
    lz[i, r, R_TID] = tid
    lz[i, r, R_CLOCK0] = clock0
    lz[i, r, R_LO] = lo
    lz[i, r, R_HI] = hi
    lz[i, r, R_D] = d


@helper
def _evict_set(i, base, W, row, cnt, t_kind, blk, tag, dirty, owner, region_cnt, rs, ro):
    """Evict every valid block of the set at ``base`` (a full run replaces them all).

    Dirty ones are written back to the next tier, their home (a hit there that changes no state).
    """
    b_i = blk[i]
    for slot in range(base, base + W):
        if tag[slot] < 0:
            continue
        vk = t_kind[owner[slot]]
        cnt[row, vk, i, EVICTIONS] += 1
        region_cnt[ro + (tag[slot] >> rs)] -= 1
        if dirty[slot]:
            dirty[slot] = 0
            cnt[row, vk, i, WRITEBACKS] += 1
            cnt[row, vk, i, BYTES_READ] += b_i
            cnt[row, vk, i + 1, HITS] += 1
            cnt[row, vk, i + 1, BYTES_WRITTEN] += b_i


@helper
def _fast_set(i, s, b_first, m, lo, hi, d, tid, row, cnt, t_kind, hier, st, clock0, seq, old_meta):
    """Serve the ``m`` blocks ``b_first, b_first + S, ...`` of a run (see :func:`fast_tier`) in set ``s``."""
    blk, n_sets, n_ways, _mode, policy, slot_off = hier
    tag, dirty, meta, owner, _clock, _rng, tinfo, region_cnt = st
    W = n_ways[i]
    S = n_sets[i]
    pid = policy[i]
    b_i = blk[i]
    k_run = t_kind[tid]
    rs = tinfo[i, TI_REGION_SHIFT]
    ro = tinfo[i, TI_REGION_OFF]
    base = slot_off[i] + s * W
    # valid ways always form a prefix (fills take the lowest empty way; nothing is invalidated)
    n_empty = 0
    if tag[base + W - 1] < 0:
        for x in range(W):
            if tag[base + x] < 0:
                seq[n_empty] = base + x
                n_empty += 1
    n_old = W - n_empty
    n_evict_old = m - n_empty
    if n_evict_old > n_old:
        n_evict_old = n_old
    rot = -1
    if n_empty == 0 and (n_evict_old > 0 or m > n_empty):
        # a full set whose stamps rise cyclically from way ``rot`` (what fills of runs leave
        # behind) is already in age order from there: no sort
        n_desc = 0
        v_prev = meta[base + W - 1]
        for x in range(W):
            v = meta[base + x]
            if v < v_prev:
                n_desc += 1
                rot = x
            v_prev = v
        if n_desc == 1:
            p = rot
            for q in range(W):
                seq[q] = base + p
                p += 1
                if p == W:
                    p = 0
        elif W == 1:
            seq[0] = base
            rot = 0
        else:
            rot = -1
    if rot >= 0:
        pass
    elif n_evict_old > 0 and m <= W and n_evict_old <= 2:
        # few victims: pick the oldest ones by scanning (stamps are unique)
        prev = -1
        for q in range(n_evict_old):
            best = -1
            bv = OPT_NEVER
            for x in range(W):
                if tag[base + x] >= 0:
                    v = meta[base + x]
                    if v > prev and v < bv:
                        bv = v
                        best = x
            seq[n_empty + q] = base + best
            prev = bv
    elif n_evict_old > 0 or m > n_empty:
        # the resident blocks, oldest first (stamps are unique)
        if W <= 64:
            p_n = 0
            for x in range(W):
                if tag[base + x] >= 0:
                    v = meta[base + x]
                    p = p_n
                    while p > 0 and old_meta[p - 1] > v:
                        old_meta[p] = old_meta[p - 1]
                        seq[n_empty + p] = seq[n_empty + p - 1]
                        p -= 1
                    old_meta[p] = v
                    seq[n_empty + p] = base + x
                    p_n += 1
        else:
            p_n = np.int64(0)             # not the literal 0: argsort_unique compiles once
            for x in range(W):
                if tag[base + x] >= 0:
                    old_meta[p_n] = meta[base + x]
                    p_n += 1
            order = argsort_unique(old_meta, p_n)
            p_n = 0
            ways_valid = np.empty(n_old, np.int64)
            for x in range(W):
                if tag[base + x] >= 0:
                    ways_valid[p_n] = base + x
                    p_n += 1
            for p in range(n_old):
                seq[n_empty + p] = ways_valid[order[p]]
    for q in range(n_evict_old):
        slot = seq[n_empty + q]
        vt = owner[slot]
        vk = t_kind[vt]
        cnt[row, vk, i, EVICTIONS] += 1
        region_cnt[ro + (tag[slot] >> rs)] -= 1
        if dirty[slot]:
            cnt[row, vk, i, WRITEBACKS] += 1
            cnt[row, vk, i, BYTES_READ] += b_i
            cnt[row, vk, i + 1, HITS] += 1
            cnt[row, vk, i + 1, BYTES_WRITTEN] += b_i
    if m > W:
        cnt[row, k_run, i, EVICTIONS] += m - W
    j0 = m - W if m > W else 0
    p = j0 % W
    b = b_first + j0 * S
    for j in range(j0, m):
        slot = seq[p]
        p += 1
        if p == W:
            p = 0
        tag[slot] = b
        owner[slot] = tid
        dirty[slot] = 0
        if pid == LRU:  # lru: the stamp of the block's last request
            u = ((b + 1) << d) - 1
            if u > hi:
                u = hi
        else:         # fifo: the stamp of its fill
            u = b << d
            if u < lo:
                u = lo
        meta[slot] = clock0 + (u - lo)
        b += S
