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

MODE_CACHE = 0
MODE_PASS = 1

OPT_NEVER = np.int64(1) << np.int64(62)  # next use of a block never used again

# ---------------------------------------------------------------------------------------------
# Replacement policies. A policy is three tiny hooks over the per-slot ``meta`` word:
#   hit(meta, slot, stamp, next_use)       a lookup found the block
#   fill(meta, slot, stamp, next_use)      the block was just installed
#   victim(meta, base, ways, rng, t) -> way  which way of a full set to evict
# and one line in each dispatcher below plus one entry in POLICY_IDS. ``stamp`` is the tier's
# lookup counter (strictly increasing), ``next_use`` the position of the block's next lookup
# (only the offline ``opt`` policy uses it).
# ---------------------------------------------------------------------------------------------

POLICY_IDS = {"lru": 0, "fifo": 1, "random": 2, "opt": 3}


@njit
def _argmin_way(meta, base, ways):
    best = 0
    v = meta[base]
    for w in range(1, ways):
        if meta[base + w] < v:
            v = meta[base + w]
            best = w
    return best


@njit
def _argmax_way(meta, base, ways):
    best = 0
    v = meta[base]
    for w in range(1, ways):
        if meta[base + w] > v:
            v = meta[base + w]
            best = w
    return best


@njit
def xorshift64(rng, t):
    """Advance tier ``t``'s xorshift64 state (13, 7, 17) and return it."""
    x = rng[t]
    x ^= x << np.uint64(13)
    x ^= x >> np.uint64(7)
    x ^= x << np.uint64(17)
    rng[t] = x
    return x


# lru: evict the least recently used (stamp of the last hit or fill)
@njit
def _lru_hit(meta, slot, stamp, next_use):
    meta[slot] = stamp


@njit
def _lru_fill(meta, slot, stamp, next_use):
    meta[slot] = stamp


@njit
def _lru_victim(meta, base, ways, rng, t):
    return _argmin_way(meta, base, ways)


# fifo: evict the oldest fill; hits change nothing
@njit
def _fifo_hit(meta, slot, stamp, next_use):
    pass


@njit
def _fifo_fill(meta, slot, stamp, next_use):
    meta[slot] = stamp


@njit
def _fifo_victim(meta, base, ways, rng, t):
    return _argmin_way(meta, base, ways)


# random: evict way (xorshift64 state % ways), seeded per tier
@njit
def _random_hit(meta, slot, stamp, next_use):
    pass


@njit
def _random_fill(meta, slot, stamp, next_use):
    pass


@njit
def _random_victim(meta, base, ways, rng, t):
    return np.int64(xorshift64(rng, t) % np.uint64(ways))


# opt (Belady's MIN): evict the block used farthest in the future (lowest way on ties)
@njit
def _opt_hit(meta, slot, stamp, next_use):
    meta[slot] = next_use


@njit
def _opt_fill(meta, slot, stamp, next_use):
    meta[slot] = next_use


@njit
def _opt_victim(meta, base, ways, rng, t):
    return _argmax_way(meta, base, ways)


@njit
def _policy_hit(pid, meta, slot, stamp, next_use):
    if pid == 0:
        _lru_hit(meta, slot, stamp, next_use)
    elif pid == 1:
        _fifo_hit(meta, slot, stamp, next_use)
    elif pid == 2:
        _random_hit(meta, slot, stamp, next_use)
    else:
        _opt_hit(meta, slot, stamp, next_use)


@njit
def _policy_fill(pid, meta, slot, stamp, next_use):
    if pid == 0:
        _lru_fill(meta, slot, stamp, next_use)
    elif pid == 1:
        _fifo_fill(meta, slot, stamp, next_use)
    elif pid == 2:
        _random_fill(meta, slot, stamp, next_use)
    else:
        _opt_fill(meta, slot, stamp, next_use)


@njit
def _policy_victim(pid, meta, base, ways, rng, t):
    if pid == 0:
        return _lru_victim(meta, base, ways, rng, t)
    elif pid == 1:
        return _fifo_victim(meta, base, ways, rng, t)
    elif pid == 2:
        return _random_victim(meta, base, ways, rng, t)
    return _opt_victim(meta, base, ways, rng, t)


# ---------------------------------------------------------------------------------------------
# The walk
# ---------------------------------------------------------------------------------------------


@njit
def _run(is_flush, acc_row, acc_tid, acc_offset, acc_nbytes, acc_count, acc_stride, acc_write, acc_pim,
         t_addr, t_home, t_kind,
         blk, n_sets, n_ways, mode, policy, slot_off,
         tag, dirty, meta, owner, clock, rng, opt_next, opt_off, opt_pos,
         store_hit_recency, fetch_on_write_miss, fetch_on_writeback_miss,
         rec_tier, rec_buf, rec_pos, cnt):
    """Both entry points in one body (a call per block would cost more than the block itself).

    ``is_flush`` false: replay the descriptors. True: flush dirty blocks (descriptors unused).
    """
    n_tiers = blk.shape[0]
    depth = 2 * n_tiers + 4
    st_tier = np.empty(depth, np.int64)
    st_addr = np.empty(depth, np.int64)
    st_write = np.empty(depth, np.int64)
    st_tid = np.empty(depth, np.int64)
    b0 = blk[0]
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
            cnt[0, t_kind[vt], src_tier, WRITEBACKS] += 1
            cnt[0, t_kind[vt], src_tier, BYTES_READ] += blk[src_tier]
            row = 0
            tid = vt
            w = 1
            n_chunks = 1
            first = 0
            last = 0
        else:
            row = acc_row[a]
            tid = acc_tid[a]
            w = 1 if acc_write[a] else 0
            n_chunks = acc_count[a]
        for j in range(n_chunks):
            if not is_flush:
                start = t_addr[tid] + acc_offset[a] + j * acc_stride[a]
                first = start // b0
                last = (start + acc_nbytes[a] - 1) // b0
                n_blocks += last - first + 1
                if acc_pim[a] > 0:
                    cnt[row, t_kind[tid], t_home[tid], PIM_BYTES] += (last - first + 1) * b0
                    continue
            for blkno in range(first, last + 1):
                if is_flush:
                    st_tier[0] = src_tier + 1
                    st_addr[0] = tag[a] * blk[src_tier]
                else:
                    st_tier[0] = 0
                    st_addr[0] = blkno * b0
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
                    h = t_home[rt]
                    req = blk[0] if i == 0 else blk[i - 1]
                    if i == h:
                        cnt[row, k, i, HITS] += 1
                        if rw:
                            cnt[row, k, i, BYTES_WRITTEN] += req
                        else:
                            cnt[row, k, i, BYTES_READ] += req
                        continue
                    b_i = blk[i]
                    b = addr // b_i
                    if mode[i] == MODE_PASS:
                        st_tier[sp] = i + 1
                        st_addr[sp] = b * b_i
                        st_write[sp] = rw
                        st_tid[sp] = rt
                        sp += 1
                        if rw:
                            cnt[row, k, i, WRITETHROUGHS] += 1
                        else:
                            cnt[row, k, i, BYPASSES] += 1
                        continue
                    # a caching tier: look the block up in its set
                    ways = n_ways[i]
                    base = slot_off[i] + (b % n_sets[i]) * ways
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
                    way = -1
                    empty = -1
                    for x in range(ways):
                        tg = tag[base + x]
                        if tg == b:
                            way = x
                            break
                        if tg < 0 and empty < 0:
                            empty = x
                    if way >= 0:
                        slot = base + way
                        cnt[row, k, i, HITS] += 1
                        if rw:
                            dirty[slot] = 1
                            cnt[row, k, i, BYTES_WRITTEN] += req
                            if store_hit_recency or pid == 3:  # opt's word is the next use, not recency
                                _policy_hit(pid, meta, slot, stamp, nxt)
                        else:
                            cnt[row, k, i, BYTES_READ] += req
                            _policy_hit(pid, meta, slot, stamp, nxt)
                        continue
                    cnt[row, k, i, MISSES] += 1
                    fetch = True
                    if rw and req == b_i:
                        if i == 0:
                            fetch = fetch_on_write_miss
                        else:
                            fetch = fetch_on_writeback_miss
                    if empty >= 0:
                        way = empty
                    else:
                        way = _policy_victim(pid, meta, base, ways, rng, i)
                        slot = base + way
                        vt = owner[slot]
                        vk = t_kind[vt]
                        cnt[row, vk, i, EVICTIONS] += 1
                        if dirty[slot]:
                            cnt[row, vk, i, WRITEBACKS] += 1
                            cnt[row, vk, i, BYTES_READ] += b_i
                            # pushed first so the fetch below is served first
                            st_tier[sp] = i + 1
                            st_addr[sp] = tag[slot] * b_i
                            st_write[sp] = 1
                            st_tid[sp] = vt
                            sp += 1
                    slot = base + way
                    tag[slot] = b
                    owner[slot] = rt
                    dirty[slot] = 1 if rw else 0
                    _policy_fill(pid, meta, slot, stamp, nxt)
                    cnt[row, k, i, FILLS] += 1
                    if fetch:
                        cnt[row, k, i, BYTES_WRITTEN] += b_i
                        st_tier[sp] = i + 1
                        st_addr[sp] = b * b_i
                        st_write[sp] = 0
                        st_tid[sp] = rt
                        sp += 1
                    else:
                        cnt[row, k, i, UNFETCHED] += 1
                    if rw:
                        cnt[row, k, i, BYTES_WRITTEN] += req
                    else:
                        cnt[row, k, i, BYTES_READ] += req
    return n_blocks


@njit
def replay_batch(acc_row, acc_tid, acc_offset, acc_nbytes, acc_count, acc_stride, acc_write, acc_pim,
                 t_addr, t_home, t_kind,
                 blk, n_sets, n_ways, mode, policy, slot_off,
                 tag, dirty, meta, owner, clock, rng, opt_next, opt_off, opt_pos,
                 store_hit_recency, fetch_on_write_miss, fetch_on_writeback_miss,
                 rec_tier, rec_buf, rec_pos, cnt):
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
                rec_tier, rec_buf, rec_pos, cnt)


@njit
def flush_dirty(t_home, t_kind,
                blk, n_sets, n_ways, mode, policy, slot_off,
                tag, dirty, meta, owner, clock, rng, opt_next, opt_off, opt_pos,
                store_hit_recency, fetch_on_write_miss, fetch_on_writeback_miss,
                rec_tier, rec_buf, rec_pos, cnt):
    """End-of-run flush: tier by tier from the nearest, write every dirty block to the next tier.

    Counted as writebacks in ``cnt[0]`` (which the caller reports separately); flushed blocks stay
    resident and clean. Writes arriving at a farther caching tier may dirty it; it is flushed next.
    """
    e = np.zeros(0, np.int64)
    _run(True, e, e, e, e, e, e, np.zeros(0, np.bool_), e,
         e, t_home, t_kind, blk, n_sets, n_ways, mode, policy, slot_off,
         tag, dirty, meta, owner, clock, rng, opt_next, opt_off, opt_pos,
         store_hit_recency, fetch_on_write_miss, fetch_on_writeback_miss,
         rec_tier, rec_buf, rec_pos, cnt)
