"""The walk: every tier-0 block of every descriptor followed down the hierarchy (the general kernel).

State layout and the named structures the kernel takes: :mod:`tierlab.engine.state`. Walking a
request (tier ``i``, byte address, write flag, tensor id), see ``docs/design.md`` (accounting rules)
for the full rules: the tensor's home tier counts a hit; a pass-through tier counts a bypass (read)
or writethrough (write) and forwards the block; a caching tier looks the block up, and on a miss
first forwards the fetch, then evicts (writing a dirty victim back to the next tier). Requests are
kept on a small explicit stack, so the order in which a tier sees its requests is the order the tier
above issued them (fetch before writeback), exactly as a recursive cache model would.

With ``Rules.fast_path`` long read runs take the range fast path (:mod:`tierlab.engine.fastpath`,
lazy run stacks in :mod:`tierlab.engine.lazy`); the dispatch table names the two as the kernels
``walk`` (fast path off) and ``walk_fast``. Inclusive back-invalidation: :mod:`tierlab.engine.inclusive`.
"""

from __future__ import annotations

import numpy as np

from tierlab.engine.blocks import chunks_of
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
from tierlab.engine.jit import helper, njit
from tierlab.engine.lazy import (
    LZ_EPOCH,
    LZ_N,
    LZ_FEN_OFF,
    LZ_SET_OFF,
    LZ_SLOT_OFF,
    N_LZ_FIELDS,
    N_RUN_FIELDS,
    LazyState,
    materialise_all,
    materialise_set,
)
from tierlab.engine.policies import OPT, OPT_NEVER, policy_fill, policy_hit, policy_victim
from tierlab.engine.simd import set_lookup
from tierlab.engine.state import MODE_CACHE, MODE_PASS, TI_DIRTY_FAR, TI_REGION_OFF, TI_REGION_SHIFT, TI_SET_MASK, TI_SHIFT
from tierlab.engine.fastpath import fast_tier, resident
from tierlab.engine.inclusive import back_invalidate


@helper
def _run(is_flush, desc, ten, hier, st, opt, rules, back, cnt):
    """Both entry points in one body (a call per block would cost more than the block itself).

    ``is_flush`` false: replay the descriptors. True: flush dirty blocks (descriptors unused).
    With ``fast_path``, a read chunk of at least ``fast_min_blocks`` tier-0 blocks is cut at tier-0
    residency-region boundaries; a piece with no resident block is served by :func:`fast_tier`
    tier after tier (and counted in one step at its home tier), the rest block by block.
    With ``back`` not None (the rules' ``inclusive``), a caching tier's eviction back-invalidates
    nearer tiers (:func:`back_invalidate`); the caller turns ``fast_path`` off then (the fast path
    assumes no block ever leaves a tier but by its own eviction). ``back`` is None otherwise, so
    Numba prunes that branch and never compiles the back-invalidation for a non-inclusive replay.
    """
    acc_row, acc_tid, acc_offset, acc_nbytes, acc_count, acc_stride, acc_write, acc_pim = desc
    t_addr, t_home, t_kind = ten
    blk, n_sets, n_ways, mode, policy, slot_off = hier
    tag, dirty, meta, owner, clock, rng, tinfo, region_cnt = st
    opt_next, opt_off, opt_pos, rec_tier, rec_buf, rec_pos = opt
    store_hit_recency, fetch_on_write_miss, fetch_on_writeback_miss, _inclusive, fast_path, fast_min_blocks, \
        lazy_max_runs = rules
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
    # lazy tiers (tierlab.engine.lazy): state local to this call, every set made real before returning
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
    lazy = LazyState(lz, lzi, real_ep, real_list, lz_perm, lz_rot, lz_h, lz_bnd, lz_alive)
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
            n_chunks, span = chunks_of(t_addr[tid] + acc_offset[a], acc_nbytes[a], acc_count[a], acc_stride[a], b0)
        kd = t_kind[tid]
        for j in range(n_chunks):
            if is_flush:
                first = 0
                last = 0
            else:
                start = t_addr[tid] + acc_offset[a] + j * acc_stride[a]
                first = start >> sh0
                last = (start + span - 1) >> sh0
                n_blocks += last - first + 1
                if acc_pim[a] > 0:
                    cnt[row, kd, t_home[tid], PIM_BYTES] += (last - first + 1) * b0
                    continue
                if fast and _passes_to_home(t_home[tid], mode):
                    # no caching tier before the home: every block passes the same tiers and changes no
                    # state; counted as the block-by-block walk below counts each, for all at once
                    _count_passed(last - first + 1, w, row, kd, t_home[tid], cnt, blk, b0)
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
                            while q <= r_hi and not resident(np.int64(0), q, hier, st, words, lazy):
                                q += 1
                            if q <= r_hi:
                                break
                        if q == pos:                  # ``pos`` itself is resident: that block alone
                            seg_hi = -1
                            g_hi = pos
                        else:
                            seg_hi = q - 1
                    if seg_hi >= 0:
                        ti = np.int64(0)          # not the literal 0: the callees compile once, for int64
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
                            if fast_tier(ti, lo, hi, ush, tid, row, cnt, t_kind, hier, st, seq, old_meta,
                                         lazy, checked):
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
                            materialise_set(i, sidx, lazy, hier, st)
                        stamp = clock[i]
                        clock[i] = stamp + 1
                        pid = policy[i]
                        nxt = OPT_NEVER
                        if pid == OPT:
                            nxt = opt_next[opt_off[i] + opt_pos[i]]
                            opt_pos[i] += 1
                        if i == rec_tier:
                            if rec_pos[0] < rec_buf.shape[0]:
                                rec_buf[rec_pos[0]] = b
                            rec_pos[0] += 1
                        # one vector compare of the set's ways (tierlab.engine.simd); on a miss, a
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
                                if store_hit_recency or pid == OPT:  # opt's word is the next use
                                    policy_hit(pid, meta, slot, stamp, nxt)
                            else:
                                cf[ci + BYTES_READ] += req
                                policy_hit(pid, meta, slot, stamp, nxt)
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
                            way = policy_victim(pid, meta, base, ways, rng, i)
                            slot = base + way
                            vt = owner[slot]
                            vk = t_kind[vt]
                            cv = row * s_row + vk * s_kind + i * s_tier
                            cf[cv + EVICTIONS] += 1
                            if fast:
                                region_cnt[ro + (tag[slot] >> rs)] -= 1
                            if back is not None:  # nearer tiers drop the victim's blocks (their dirty data lands in it)
                                back_invalidate(i, tag[slot], row, cnt, t_home, t_kind, blk, n_sets, n_ways,
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
                        policy_fill(pid, meta, slot, stamp, nxt)
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
        materialise_all(i, lazy, hier, st)
    return n_blocks


def back_arg(rules) -> bool | None:
    """What the walk's entry points take as ``back``: True for an inclusive replay, else None (the
    back-invalidation then is not even compiled)."""
    return True if rules.inclusive else None


@helper
def _passes_to_home(home, mode):
    """Whether every tier before ``home`` passes blocks through (none caches them)."""
    for i in range(home):
        if mode[i] != MODE_PASS:
            return False
    return True


@helper
def _count_passed(n, w, row, kd, home, cnt, blk, b0):
    """``n`` tier-0 blocks that pass every tier before ``home`` (:func:`_passes_to_home`), as the walk
    counts each: a writethrough (store) or bypass (load) at each of those tiers, a hit at the home of
    the nearest tier's block size (tier 0's own when it is the home)."""
    c = BYTES_WRITTEN if w else BYTES_READ
    if home == 0:
        cnt[row, kd, 0, HITS] += n
        cnt[row, kd, 0, c] += n * b0
        return
    for i in range(home):
        cnt[row, kd, i, WRITETHROUGHS if w else BYPASSES] += n
    cnt[row, kd, home, HITS] += n
    cnt[row, kd, home, c] += n * blk[home - 1]


@njit(nogil=True)
def replay_batch(desc, ten, hier, st, opt, rules, back, cnt):
    """Replay a batch of access descriptors (:class:`tierlab.engine.state.Descriptors`); returns the
    number of tier-0 blocks requested.

    Each tier-0 block a chunk touches is one request at tier 0 (a block touched by two chunks is
    requested twice). A descriptor flagged ``pim`` is an operand read in memory by the PIM unit of its
    home tier: its blocks are counted as ``pim_bytes`` there and walk nothing. Counters go to
    ``cnt[desc.row[a], kind, tier, counter]``. ``back``: None, or True for an inclusive replay
    (:func:`back_arg`).
    """
    return _run(False, desc, ten, hier, st, opt, rules, back, cnt)


@njit(nogil=True)
def flush_dirty(no_desc, ten, hier, st, opt, rules, back, cnt):
    """End-of-run flush: tier by tier from the nearest, write every dirty block to the next tier.

    ``no_desc``: an empty :class:`tierlab.engine.state.Descriptors` (:func:`tierlab.engine.state.no_descriptors`).
    Counted as writebacks in ``cnt[0]`` (which the caller reports separately); flushed blocks stay
    resident and clean. Writes arriving at a farther caching tier may dirty it; it is flushed next.
    The caller passes ``rules`` with the fast path off (flushing touches no run).
    """
    _run(True, no_desc, ten, hier, st, opt, rules, back, cnt)
