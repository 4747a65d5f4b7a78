"""The engine room: a few Numba-compiled functions over plain arrays (no Python per access).

:mod:`emulator.replay` is the door: it validates, builds these arrays once and names the results.

State of the hierarchy (``T`` tiers, all tiers' slots concatenated; tier ``t`` owns slots
``slot_off[t] .. slot_off[t] + n_sets[t] * n_ways[t]``, set ``s`` of it the ``n_ways[t]`` slots from
``slot_off[t] + s * n_ways[t]``):

``tag[slot]``    block number held (``address // block_bytes[t]``), -1 when empty
``dirty[slot]``  1 when the block was written since it was filled
``meta[slot]``   the replacement policy's per-block word (recency stamp, fill stamp, next use, ...)
``owner[slot]``  tensor id of the block (blocks never straddle tensors), for its kind and home tier

Per tier: ``block_bytes``, ``n_sets``, ``n_ways``, ``mode`` (:data:`MODE_CACHE` looks blocks up,
:data:`MODE_PASS` passes everything not homed there to the next tier), ``policy`` (an id of
:data:`POLICY_IDS`), ``clock`` (lookups so far, the stamp source), ``rng`` (the random policy's
xorshift64 state) and, for ``opt``, ``opt_next`` (next-use position of every lookup the tier will see)
with ``opt_pos`` (lookups consumed).

Walking a request (tier ``i``, byte address, write flag, tensor id), see DESIGN.md and the
docstring of :mod:`emulator.replay` for the full rules: the tensor's home tier counts a hit; a
pass-through tier counts a bypass (read) or writethrough (write) and forwards the block; a caching
tier looks the block up, and on a miss first forwards the fetch, then evicts (writing a dirty victim
back to the next tier). Requests are kept on a small explicit stack, so the order in which a tier
sees its requests is the order the tier above issued them (fetch before writeback), exactly as a
recursive cache model would.
"""

from __future__ import annotations

import numpy as np

from emulator.counters import (
    BACK_INVALIDATIONS,
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
from emulator.jit import njit
from emulator.lazy import (
    LZ_EPOCH,
    LZ_N,
    LZ_FEN_OFF,
    LZ_N_REAL,
    LZ_SET_OFF,
    LZ_SLOT_OFF,
    N_LZ_FIELDS,
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
from emulator.policies import OPT_NEVER, POLICY_IDS, _policy_fill, _policy_hit, _policy_victim  # noqa: F401
from emulator.simd import set_lookup

MODE_CACHE = 0
MODE_PASS = 1


# ---------------------------------------------------------------------------------------------
# The walk
# ---------------------------------------------------------------------------------------------

# columns of ``tinfo[tier, :]`` (int64): log2 of the block, set mask (-1 when the set count is not
# a power of two), log2 of blocks per residency region, offset of the tier's regions in
# ``region_cnt``, the number of dirty blocks the tier holds whose home is not the next tier, and
# the requests the fast path served at the tier (a statistic)
TI_SHIFT, TI_SET_MASK, TI_REGION_SHIFT, TI_REGION_OFF, TI_DIRTY_FAR, TI_FAST_REQUESTS = range(6)
N_TINFO = 6


@njit(nogil=True)
def _fast_tier(i, lo, hi, ush, tid, row, cnt, t_kind,
               blk, n_sets, n_ways, mode, policy, slot_off,
               tag, dirty, meta, owner, clock, tinfo, region_cnt, seq, old_meta,
               lz, lzi, real_ep, real_list, lz_perm, lz_rot, lz_h, lz_bnd, lz_alive, absent):
    """Serve a run of read requests at tier ``i`` set by set; False (and nothing changed) if it may not.

    The requests are units ``lo..hi`` of ``2**ush`` bytes, in order (one tensor, reads). It applies
    when tier ``i`` is an LRU or FIFO cache, none of the run's blocks is resident there (every
    residency region the run covers is empty) and every dirty block the tier holds is homed in the
    next tier (so a writeback is a home hit there and changes no state). Then every block of the run
    misses once (repeated requests to it hit), and in each set the ways are reused in a fixed order:
    empty ways (lowest first), then the resident blocks oldest first, then the run's own blocks in
    the order they came — exactly what per-block LRU/FIFO replacement does, since all the run's blocks
    are distinct, newer than everything resident, and stamped in request order.

    Lazily (:mod:`emulator.lazy`): a run of at least ``S * W`` blocks replaces every block of the
    tier, so it only counts the evictions (real sets slot by slot, lazy ones per segment) and leaves
    the tier lazy with the run alone on its stack; a shorter run on a lazy tier serves the real sets
    set by set, counts its evictions from the lazy ones per segment and is pushed on the stack (runs
    no set holds anything of fall off the bottom). A full stack is materialised first.
    """
    if mode[i] != MODE_CACHE:
        return False
    pid = policy[i]
    if pid != 0 and pid != 1:
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
    if nb >= S * W:
        # every block of the tier is replaced: count what leaves, keep the run as the whole state
        if n_lz > 0:
            so = lzi[i, LZ_SET_OFF]
            for x in range(lzi[i, LZ_N_REAL]):
                s = real_list[so + x]
                record_order(i, s, lzi, lz_perm, lz_rot, n_ways, slot_off, tag, meta)
                _evict_set(i, slot_off[i] + s * W, W, row, cnt, t_kind, blk,
                           tag, dirty, owner, region_cnt, rs, ro)
            lazy_evict(i, F, L, True, row, cnt, t_kind, lz, lzi, real_list, n_sets, n_ways, rs, ro,
                       region_cnt, lz_h, lz_bnd, lz_alive)
        else:
            for s in range(S):
                record_order(i, s, lzi, lz_perm, lz_rot, n_ways, slot_off, tag, meta)
                _evict_set(i, slot_off[i] + s * W, W, row, cnt, t_kind, blk,
                           tag, dirty, owner, region_cnt, rs, ro)
        cnt[row, k_run, i, EVICTIONS] += nb - S * W
        rot_add(lzi, i, lz_rot, S, F, L)
        _push_run(lz, i, 0, F, L, tid, clock0, lo, hi, d, S)
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
                _fast_set(i, s, F + cyc(s, ffm, S), m, lo, hi, d, tid, row, cnt, t_kind, blk, n_sets, n_ways,
                          policy, slot_off, tag, dirty, meta, owner, clock0, tinfo, region_cnt, seq, old_meta)
        lazy_evict(i, F, L, False, row, cnt, t_kind, lz, lzi, real_list, n_sets, n_ways, rs, ro,
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
        materialise_all(i, lz, lzi, real_ep, real_list, lz_perm, lz_rot, n_sets, n_ways, policy, slot_off,
                        tag, dirty, meta, owner, lz_h)
    for k in range(n_touch):
        b_first = F + k
        s = (b_first & smask) if smask >= 0 else (b_first % S)
        m = (L - b_first) // S + 1
        if lzi[i, LZ_N] > 0 and real_ep[lzi[i, LZ_SET_OFF] + s] != lzi[i, LZ_EPOCH]:
            # a short run on a lazy tier: its few sets are made real and served as usual
            materialise_set(i, s, lz, lzi, real_ep, real_list, lz_perm, lz_rot, n_sets, n_ways, policy, slot_off,
                            tag, dirty, meta, owner, lz_h)
        _fast_set(i, s, b_first, m, lo, hi, d, tid, row, cnt, t_kind, blk, n_sets, n_ways, policy, slot_off,
                  tag, dirty, meta, owner, clock0, tinfo, region_cnt, seq, old_meta)
    # the run's blocks left resident are the last W of each set, i.e. its last S * W blocks:
    # count them into their regions a region at a time
    region_add(region_cnt, ro, rs, max(F, L - S * W + 1), L, 1)
    cnt[row, k_run, i, MISSES] += nb
    cnt[row, k_run, i, FILLS] += nb
    cnt[row, k_run, i, HITS] += n_req - nb
    cnt[row, k_run, i, BYTES_WRITTEN] += nb * b_i
    cnt[row, k_run, i, BYTES_READ] += n_req << ush
    clock[i] = clock0 + n_req
    tinfo[i, TI_FAST_REQUESTS] += n_req
    return True


@njit(nogil=True)
def _resident(i, b, n_sets, n_ways, slot_off, tinfo, tag, words, lz, lzi, real_ep, lz_h):
    """Whether tier ``i`` (a cache) holds block ``b``: a lookup in a real set; in a lazy one, whether
    a run on the stack has ``b`` among the blocks the set holds (:func:`emulator.lazy.held`)."""
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


@njit(nogil=True)
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


@njit(nogil=True)
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


@njit(nogil=True)
def _fast_set(i, s, b_first, m, lo, hi, d, tid, row, cnt, t_kind, blk, n_sets, n_ways, policy, slot_off,
              tag, dirty, meta, owner, clock0, tinfo, region_cnt, seq, old_meta):
    """Serve the ``m`` blocks ``b_first, b_first + S, ...`` of a run (see :func:`_fast_tier`) in set ``s``."""
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
            p_n = 0
            for x in range(W):
                if tag[base + x] >= 0:
                    old_meta[p_n] = meta[base + x]
                    p_n += 1
            order = np.argsort(old_meta[:p_n])
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
        if pid == 0:  # lru: the stamp of the block's last request
            u = ((b + 1) << d) - 1
            if u > hi:
                u = hi
        else:         # fifo: the stamp of its fill
            u = b << d
            if u < lo:
                u = lo
        meta[slot] = clock0 + (u - lo)
        b += S


@njit(nogil=True)
def _back_invalidate(k, v, row, cnt, t_home, t_kind, blk, n_sets, n_ways, mode, slot_off,
                     tag, dirty, owner, tinfo):
    """Inclusive mode: caching tier ``k`` evicts its block ``v``; nearer caching tiers drop theirs inside it.

    Tiers are visited nearest first. Each valid tier-j block inside ``v`` is invalidated (a
    ``back_invalidations`` at tier j, attributed to row ``row`` and the block's tensor kind); a dirty
    one is written back first (a writeback at tier j, ``block_j`` bytes read there): the write crosses
    any pass-through tiers as writethroughs and arrives at the next caching tier as a write hit
    (request size counted as bytes written, the block marked dirty, no replacement update; that block
    is itself about to be dropped, or is ``v``, which then writes back as dirty).
    """
    sh_k = tinfo[k, TI_SHIFT]
    for j in range(k):
        if mode[j] != MODE_CACHE:
            continue
        sh_j = tinfo[j, TI_SHIFT]
        d = sh_k - sh_j
        W = n_ways[j]
        S = n_sets[j]
        smask = tinfo[j, TI_SET_MASK]
        n_sub = np.int64(1) << d
        if n_sub <= S:
            # look each sub-block up in its set
            for u in range(v << d, (v << d) + n_sub):
                s = (u & smask) if smask >= 0 else (u % S)
                base = slot_off[j] + s * W
                for x in range(W):
                    if tag[base + x] == u:
                        _drop_block(j, base + x, row, cnt, t_home, t_kind, blk, n_sets, n_ways, mode,
                                    slot_off, tag, dirty, owner, tinfo)
                        break
        else:
            # fewer slots than sub-blocks: scan the tier
            for slot in range(slot_off[j], slot_off[j] + S * W):
                if tag[slot] >= 0 and (tag[slot] >> d) == v:
                    _drop_block(j, slot, row, cnt, t_home, t_kind, blk, n_sets, n_ways, mode,
                                slot_off, tag, dirty, owner, tinfo)


@njit(nogil=True)
def _drop_block(j, slot, row, cnt, t_home, t_kind, blk, n_sets, n_ways, mode, slot_off,
                tag, dirty, owner, tinfo):
    """Back-invalidate the block in ``slot`` of tier ``j`` (see :func:`_back_invalidate`)."""
    t = owner[slot]
    kd = t_kind[t]
    cnt[row, kd, j, BACK_INVALIDATIONS] += 1
    if dirty[slot]:
        if t_home[t] != j + 1:
            tinfo[j, TI_DIRTY_FAR] -= 1
        cnt[row, kd, j, WRITEBACKS] += 1
        cnt[row, kd, j, BYTES_READ] += blk[j]
        addr = tag[slot] << tinfo[j, TI_SHIFT]
        p = j + 1
        while mode[p] != MODE_CACHE:
            cnt[row, kd, p, WRITETHROUGHS] += 1
            p += 1
        cnt[row, kd, p, HITS] += 1
        cnt[row, kd, p, BYTES_WRITTEN] += blk[p - 1]
        b = addr >> tinfo[p, TI_SHIFT]
        smask = tinfo[p, TI_SET_MASK]
        W = n_ways[p]
        s = (b & smask) if smask >= 0 else (b % n_sets[p])
        base = slot_off[p] + s * W
        found = False
        for x in range(W):
            if tag[base + x] == b:
                if dirty[base + x] == 0 and t_home[t] != p + 1:
                    tinfo[p, TI_DIRTY_FAR] += 1
                dirty[base + x] = 1
                found = True
                break
        if not found:
            raise RuntimeError("inclusion broken: a back-invalidated block is missing from the next caching tier")
    tag[slot] = -1
    dirty[slot] = 0


@njit(nogil=True)
def _run(is_flush, acc_row, acc_tid, acc_offset, acc_nbytes, acc_count, acc_stride, acc_write, acc_pim,
         t_addr, t_home, t_kind,
         blk, n_sets, n_ways, mode, policy, slot_off,
         tag, dirty, meta, owner, clock, rng, opt_next, opt_off, opt_pos,
         store_hit_recency, fetch_on_write_miss, fetch_on_writeback_miss,
         rec_tier, rec_buf, rec_pos, tinfo, region_cnt, fast_path, fast_min_blocks, lazy_max_runs, inclusive, cnt):
    """Both entry points in one body (a call per block would cost more than the block itself).

    ``is_flush`` false: replay the descriptors. True: flush dirty blocks (descriptors unused).
    With ``fast_path``, a read chunk of at least ``fast_min_blocks`` tier-0 blocks is cut at tier-0
    residency-region boundaries; a piece with no resident block is served by :func:`_fast_tier`
    tier after tier (and counted in one step at its home tier), the rest block by block.
    With ``inclusive``, a caching tier's eviction back-invalidates nearer tiers
    (:func:`_back_invalidate`); the caller turns ``fast_path`` off then (the fast path assumes no
    block ever leaves a tier but by its own eviction).
    """
    n_tiers = blk.shape[0]
    words = tag.ctypes.data     # the set lookups take the address; ``tag`` outlives the loop
    depth = 2 * n_tiers + 4
    st_tier = np.empty(depth, np.int64)
    st_addr = np.empty(depth, np.int64)
    st_write = np.empty(depth, np.int64)
    st_tid = np.empty(depth, np.int64)
    max_w = 1
    for i in range(n_tiers):
        if mode[i] == MODE_CACHE and n_ways[i] > max_w:
            max_w = n_ways[i]
    seq = np.empty(max_w, np.int64)
    old_meta = np.empty(max_w, np.int64)
    fast = fast_path and rec_tier < 0
    # lazy tiers (emulator.lazy): state local to this call, every set made real before returning
    k_max = lazy_max_runs
    lz = np.zeros((n_tiers, k_max, N_RUN_FIELDS), np.int64)
    lzi = np.zeros((n_tiers, N_LZ_FIELDS), np.int64)
    n_all_sets = 0
    n_all_slots = 0
    for i in range(n_tiers):
        lzi[i, LZ_SET_OFF] = n_all_sets
        lzi[i, LZ_SLOT_OFF] = n_all_slots
        lzi[i, LZ_EPOCH] = 1
        if fast and mode[i] == MODE_CACHE:
            n_all_sets += n_sets[i]
            n_all_slots += n_sets[i] * n_ways[i]
    lz_perm = np.empty(n_all_slots, np.int64)
    # per set its fill count when it became lazy, then per lazy-capable tier a Fenwick tree (S + 1)
    n_fen = 0
    for i in range(n_tiers):
        if fast and mode[i] == MODE_CACHE:
            lzi[i, LZ_FEN_OFF] = n_all_sets + n_fen
            n_fen += n_sets[i] + 1
    lz_rot = np.zeros(n_all_sets + n_fen, np.int64)
    real_ep = np.zeros(n_all_sets, np.int64)
    real_list = np.empty(n_all_sets, np.int64)
    lz_h = np.empty(k_max + 1, np.int64)
    lz_bnd = np.empty(2 * k_max + 4, np.int64)
    lz_alive = np.empty(k_max + 1, np.int64)
    # counters through a flat view: cnt[row, kind, tier, c] is cf[row*s_row + kind*s_kind + tier*s_tier + c]
    cf = cnt.reshape(cnt.size)
    s_tier = cnt.shape[3]
    s_kind = cnt.shape[2] * s_tier
    s_row = cnt.shape[1] * s_kind
    b0 = blk[0]
    sh0 = tinfo[0, TI_SHIFT]
    n_blocks = 0
    if is_flush:
        n_src = slot_off[n_tiers - 1] + n_sets[n_tiers - 1] * n_ways[n_tiers - 1]
    else:
        n_src = acc_row.shape[0]
    src_tier = 0
    for a in range(n_src):
        if is_flush:
            # slots are tier-major, so a tier is flushed before the farther tiers it dirties
            while src_tier + 1 < n_tiers and a >= slot_off[src_tier + 1]:
                src_tier += 1
            if src_tier == n_tiers - 1 or mode[src_tier] != MODE_CACHE:
                continue
            if tag[a] < 0 or dirty[a] == 0:
                continue
            dirty[a] = 0
            vt = owner[a]
            if t_home[vt] != src_tier + 1:
                tinfo[src_tier, TI_DIRTY_FAR] -= 1
            cnt[0, t_kind[vt], src_tier, WRITEBACKS] += 1
            cnt[0, t_kind[vt], src_tier, BYTES_READ] += blk[src_tier]
            row = 0
            tid = vt
            w = 1
            n_chunks = 1
        else:
            row = acc_row[a]
            tid = acc_tid[a]
            w = 1 if acc_write[a] else 0
            n_chunks = acc_count[a]
        kd = t_kind[tid]
        for j in range(n_chunks):
            if is_flush:
                first = 0
                last = 0
            else:
                start = t_addr[tid] + acc_offset[a] + j * acc_stride[a]
                first = start >> sh0
                last = (start + acc_nbytes[a] - 1) >> sh0
                n_blocks += last - first + 1
                if acc_pim[a] > 0:
                    cnt[row, kd, t_home[tid], PIM_BYTES] += (last - first + 1) * b0
                    continue
            pos = first
            while pos <= last:
                g_tier = 0
                g_lo = pos
                g_hi = last
                g_ush = sh0
                if is_flush:
                    g_tier = src_tier + 1
                    g_lo = tag[a]
                    g_hi = tag[a]
                    g_ush = tinfo[src_tier, TI_SHIFT]
                    pos = last + 1
                elif fast and w == 0 and last - pos + 1 >= fast_min_blocks:
                    seg_hi = last
                    absent = False
                    if mode[0] == MODE_CACHE:
                        rs0 = tinfo[0, TI_REGION_SHIFT]
                        ro0 = tinfo[0, TI_REGION_OFF]
                        # the longest stretch from ``pos`` with no block resident at tier 0: whole
                        # regions that hold nothing, and in a region that holds something, the
                        # blocks up to the first resident one (looked up one by one)
                        q = pos
                        while q <= last:
                            r = q >> rs0
                            r_hi = min(last, ((r + 1) << rs0) - 1)
                            if region_cnt[ro0 + r] == 0:
                                q = r_hi + 1
                                continue
                            absent = True
                            while q <= r_hi and not _resident(0, q, n_sets, n_ways,
                                                                 slot_off, tinfo, tag, words, lz, lzi, real_ep, lz_h):
                                q += 1
                            if q <= r_hi:
                                break
                        if q == pos:                  # ``pos`` itself is resident: that block alone
                            seg_hi = -1
                            g_hi = pos
                        else:
                            seg_hi = q - 1
                    if seg_hi >= 0:
                        ti = 0
                        lo = pos
                        hi = seg_hi
                        ush = sh0
                        done = False
                        while True:
                            if ti == t_home[tid]:
                                cnt[row, kd, ti, HITS] += hi - lo + 1
                                cnt[row, kd, ti, BYTES_READ] += (hi - lo + 1) << ush
                                done = True
                                break
                            if mode[ti] == MODE_PASS and tinfo[ti, TI_SHIFT] == ush:
                                cnt[row, kd, ti, BYPASSES] += hi - lo + 1
                                ti += 1
                                continue
                            checked = absent and ti == 0
                            if _fast_tier(ti, lo, hi, ush, tid, row, cnt, t_kind,
                                          blk, n_sets, n_ways, mode, policy, slot_off,
                                          tag, dirty, meta, owner, clock, tinfo, region_cnt, seq, old_meta,
                                          lz, lzi, real_ep, real_list, lz_perm, lz_rot, lz_h, lz_bnd, lz_alive,
                                          checked):
                                dd = tinfo[ti, TI_SHIFT] - ush
                                lo = lo >> dd
                                hi = hi >> dd
                                ush = tinfo[ti, TI_SHIFT]
                                ti += 1
                                continue
                            break
                        pos = seg_hi + 1
                        if done:
                            continue
                        g_tier = ti
                        g_lo = lo
                        g_hi = hi
                        g_ush = ush
                    else:
                        pos = g_hi + 1
                else:
                    pos = last + 1
                # block by block: units g_lo..g_hi of 2**g_ush bytes, entering at tier g_tier
                for unit in range(g_lo, g_hi + 1):
                    st_tier[0] = g_tier
                    st_addr[0] = unit << g_ush
                    st_write[0] = w
                    st_tid[0] = tid
                    sp = 1
                    while sp > 0:
                        sp -= 1
                        i = st_tier[sp]
                        addr = st_addr[sp]
                        rw = st_write[sp]
                        rt = st_tid[sp]
                        k = t_kind[rt]
                        ci = row * s_row + k * s_kind + i * s_tier
                        req = b0 if i == 0 else blk[i - 1]
                        if i == t_home[rt]:
                            cf[ci + HITS] += 1
                            if rw:
                                cf[ci + BYTES_WRITTEN] += req
                            else:
                                cf[ci + BYTES_READ] += req
                            continue
                        sh_i = tinfo[i, TI_SHIFT]
                        b_i = blk[i]
                        b = addr >> sh_i
                        if mode[i] == MODE_PASS:
                            if t_home[rt] == i + 1:  # a home hit below changes no state: count it now
                                cf[ci + s_tier + HITS] += 1
                                cf[ci + s_tier + (BYTES_WRITTEN if rw else BYTES_READ)] += b_i
                            else:
                                st_tier[sp] = i + 1
                                st_addr[sp] = b << sh_i
                                st_write[sp] = rw
                                st_tid[sp] = rt
                                sp += 1
                            if rw:
                                cf[ci + WRITETHROUGHS] += 1
                            else:
                                cf[ci + BYPASSES] += 1
                            continue
                        # a caching tier: look the block up in its set
                        ways = n_ways[i]
                        smask = tinfo[i, TI_SET_MASK]
                        sidx = (b & smask) if smask >= 0 else (b % n_sets[i])
                        base = slot_off[i] + sidx * ways
                        if lzi[i, LZ_N] > 0 and real_ep[lzi[i, LZ_SET_OFF] + sidx] != lzi[i, LZ_EPOCH]:
                            materialise_set(i, sidx, lz, lzi, real_ep, real_list, lz_perm, lz_rot, n_sets, n_ways, policy, slot_off,
                                            tag, dirty, meta, owner, lz_h)
                        stamp = clock[i]
                        clock[i] = stamp + 1
                        pid = policy[i]
                        nxt = OPT_NEVER
                        if pid == 3:
                            nxt = opt_next[opt_off[i] + opt_pos[i]]
                            opt_pos[i] += 1
                        if i == rec_tier:
                            if rec_pos[0] < rec_buf.shape[0]:
                                rec_buf[rec_pos[0]] = b
                            rec_pos[0] += 1
                        # one vector compare of the set's ways (emulator.simd); on a miss, a
                        # second finds the first empty way (empty slots hold -1)
                        way = set_lookup(words, base, ways, b, 0)
                        empty = -1
                        if way == ways:
                            way = -1
                            empty = set_lookup(words, base, ways, -1, 0)
                            if empty == ways:
                                empty = -1
                        if way >= 0:
                            slot = base + way
                            cf[ci + HITS] += 1
                            if rw:
                                if dirty[slot] == 0 and t_home[rt] != i + 1:
                                    tinfo[i, TI_DIRTY_FAR] += 1
                                dirty[slot] = 1
                                cf[ci + BYTES_WRITTEN] += req
                                if store_hit_recency or pid == 3:  # opt's word is the next use
                                    _policy_hit(pid, meta, slot, stamp, nxt)
                            else:
                                cf[ci + BYTES_READ] += req
                                _policy_hit(pid, meta, slot, stamp, nxt)
                            continue
                        cf[ci + MISSES] += 1
                        fetch = True
                        if rw and req == b_i:
                            if i == 0:
                                fetch = fetch_on_write_miss
                            else:
                                fetch = fetch_on_writeback_miss
                        rs = tinfo[i, TI_REGION_SHIFT]
                        ro = tinfo[i, TI_REGION_OFF]
                        if empty >= 0:
                            way = empty
                        else:
                            way = _policy_victim(pid, meta, base, ways, rng, i)
                            slot = base + way
                            vt = owner[slot]
                            vk = t_kind[vt]
                            cv = row * s_row + vk * s_kind + i * s_tier
                            cf[cv + EVICTIONS] += 1
                            if fast:
                                region_cnt[ro + (tag[slot] >> rs)] -= 1
                            if inclusive:  # nearer tiers drop the victim's blocks (their dirty data lands in it)
                                _back_invalidate(i, tag[slot], row, cnt, t_home, t_kind, blk, n_sets, n_ways,
                                                 mode, slot_off, tag, dirty, owner, tinfo)
                            if dirty[slot]:
                                if t_home[vt] != i + 1:
                                    tinfo[i, TI_DIRTY_FAR] -= 1
                                cf[cv + WRITEBACKS] += 1
                                cf[cv + BYTES_READ] += b_i
                                if t_home[vt] == i + 1:
                                    cf[cv + s_tier + HITS] += 1
                                    cf[cv + s_tier + BYTES_WRITTEN] += b_i
                                else:
                                    # pushed first so the fetch below is served first
                                    st_tier[sp] = i + 1
                                    st_addr[sp] = tag[slot] << sh_i
                                    st_write[sp] = 1
                                    st_tid[sp] = vt
                                    sp += 1
                        slot = base + way
                        tag[slot] = b
                        owner[slot] = rt
                        if fast:
                            region_cnt[ro + (b >> rs)] += 1
                        if rw:
                            dirty[slot] = 1
                            if t_home[rt] != i + 1:
                                tinfo[i, TI_DIRTY_FAR] += 1
                        else:
                            dirty[slot] = 0
                        _policy_fill(pid, meta, slot, stamp, nxt)
                        cf[ci + FILLS] += 1
                        if fetch:
                            cf[ci + BYTES_WRITTEN] += b_i
                            if t_home[rt] == i + 1:
                                cf[ci + s_tier + HITS] += 1
                                cf[ci + s_tier + BYTES_READ] += b_i
                            else:
                                st_tier[sp] = i + 1
                                st_addr[sp] = b << sh_i
                                st_write[sp] = 0
                                st_tid[sp] = rt
                                sp += 1
                        else:
                            cf[ci + UNFETCHED] += 1
                        if rw:
                            cf[ci + BYTES_WRITTEN] += req
                        else:
                            cf[ci + BYTES_READ] += req
    for i in range(n_tiers):
        materialise_all(i, lz, lzi, real_ep, real_list, lz_perm, lz_rot, n_sets, n_ways, policy, slot_off,
                        tag, dirty, meta, owner, lz_h)
    return n_blocks


@njit(nogil=True)
def replay_batch(acc_row, acc_tid, acc_offset, acc_nbytes, acc_count, acc_stride, acc_write, acc_pim,
                 t_addr, t_home, t_kind,
                 blk, n_sets, n_ways, mode, policy, slot_off,
                 tag, dirty, meta, owner, clock, rng, opt_next, opt_off, opt_pos,
                 store_hit_recency, fetch_on_write_miss, fetch_on_writeback_miss,
                 rec_tier, rec_buf, rec_pos, tinfo, region_cnt, fast_path, fast_min_blocks, lazy_max_runs, inclusive, cnt):
    """Replay a batch of access descriptors; returns the number of tier-0 blocks requested.

    Descriptor ``a`` covers ``acc_count[a]`` chunks of ``acc_nbytes[a]`` bytes at
    ``t_addr[tid] + acc_offset[a] + j * acc_stride[a]``; each tier-0 block a chunk touches is one
    request at tier 0 (a block touched by two chunks is requested twice). ``acc_pim[a]`` > 0 marks
    an operand read in memory by the PIM unit of its home tier: its blocks are counted as
    ``pim_bytes`` there and walk nothing. Counters go to ``cnt[acc_row[a], kind, tier, counter]``.
    """
    return _run(False, acc_row, acc_tid, acc_offset, acc_nbytes, acc_count, acc_stride, acc_write, acc_pim,
                t_addr, t_home, t_kind, blk, n_sets, n_ways, mode, policy, slot_off,
                tag, dirty, meta, owner, clock, rng, opt_next, opt_off, opt_pos,
                store_hit_recency, fetch_on_write_miss, fetch_on_writeback_miss,
                rec_tier, rec_buf, rec_pos, tinfo, region_cnt, fast_path, fast_min_blocks, lazy_max_runs, inclusive, cnt)


@njit(nogil=True)
def flush_dirty(t_home, t_kind,
                blk, n_sets, n_ways, mode, policy, slot_off,
                tag, dirty, meta, owner, clock, rng, opt_next, opt_off, opt_pos,
                store_hit_recency, fetch_on_write_miss, fetch_on_writeback_miss,
                rec_tier, rec_buf, rec_pos, tinfo, region_cnt, fast_path, fast_min_blocks, lazy_max_runs, inclusive, cnt):
    """End-of-run flush: tier by tier from the nearest, write every dirty block to the next tier.

    Counted as writebacks in ``cnt[0]`` (which the caller reports separately); flushed blocks stay
    resident and clean. Writes arriving at a farther caching tier may dirty it; it is flushed next.
    """
    e = np.zeros(0, np.int64)
    _run(True, e, e, e, e, e, e, np.zeros(0, np.bool_), e,
         e, t_home, t_kind, blk, n_sets, n_ways, mode, policy, slot_off,
         tag, dirty, meta, owner, clock, rng, opt_next, opt_off, opt_pos,
         store_hit_recency, fetch_on_write_miss, fetch_on_writeback_miss,
         rec_tier, rec_buf, rec_pos, tinfo, region_cnt, False, fast_min_blocks, lazy_max_runs, inclusive, cnt)
