"""A lean twin of the engine's walk for raw block streams on LRU/FIFO caches (``replay_blocks``).

Used by :func:`emulator.replay.replay_blocks` when every tier is an LRU or FIFO cache and no flush is
asked: no tensors, kinds, ops, homes or residency regions to look after, and a miss's fetch goes
straight on to the next tier instead of through the request stack. Same semantics and counters as
:func:`emulator.engine._run`, property-tested equal (``tests/test_engine_fastpath.py``).
"""

from __future__ import annotations

import numpy as np

from emulator.counters import (
    BYTES_READ,
    BYTES_WRITTEN,
    EVICTIONS,
    FILLS,
    HITS,
    MISSES,
    UNFETCHED,
    WRITEBACKS,
)
from emulator.jit import njit


@njit(nogil=True)
def replay_cache_stream(blocks, write, sh, n_sets, set_mask, n_ways, slot_off, fifo,
                        tag, dirty, meta, clock,
                        store_hit_recency, fetch_on_write_miss, fetch_on_writeback_miss, cnt):
    """A lean twin of the walk for a raw block stream on LRU/FIFO caches over one memory tier.

    ``blocks``: tier-0 block numbers, one request each; tiers ``0..T-1`` are caches, tier ``T``
    (``cnt`` has ``T + 1`` rows) homes everything. Same semantics and counters as :func:`_run`
    (no kinds, ops, homes, regions or policies other than lru/fifo to look up), property-tested
    equal to it; ``meta`` holds last-use (lru) or fill (fifo) stamps.
    """
    n_t = sh.shape[0]
    depth = 2 * n_t + 4
    st_tier = np.empty(depth, np.int64)
    st_blk = np.empty(depth, np.int64)
    st_write = np.empty(depth, np.int64)
    for j in range(blocks.shape[0]):
        # the current request; a miss's fetch becomes the next current request directly (the
        # walk's push-then-pop), only writebacks wait on the stack
        i = 0
        b = blocks[j]                 # block number at tier i
        rw = 1 if write[j] else 0
        sp = 0
        while True:
            req = (1 << sh[0]) if i == 0 else (1 << sh[i - 1])
            nxt = False
            if i == n_t:
                cnt[i, HITS] += 1
                if rw:
                    cnt[i, BYTES_WRITTEN] += req
                else:
                    cnt[i, BYTES_READ] += req
            else:
                ways = n_ways[i]
                m = set_mask[i]
                base = slot_off[i] + ((b & m) if m >= 0 else (b % n_sets[i])) * ways
                stamp = clock[i]
                clock[i] = stamp + 1
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
                    cnt[i, HITS] += 1
                    if rw:
                        dirty[base + way] = 1
                        cnt[i, BYTES_WRITTEN] += req
                        if store_hit_recency and not fifo[i]:
                            meta[base + way] = stamp
                    else:
                        cnt[i, BYTES_READ] += req
                        if not fifo[i]:
                            meta[base + way] = stamp
                else:
                    cnt[i, MISSES] += 1
                    b_i = 1 << sh[i]
                    fetch = True
                    if rw and req == b_i:
                        fetch = fetch_on_write_miss if i == 0 else fetch_on_writeback_miss
                    if empty >= 0:
                        way = empty
                    else:
                        way = 0
                        v = meta[base]
                        for x in range(1, ways):
                            if meta[base + x] < v:
                                v = meta[base + x]
                                way = x
                        slot = base + way
                        cnt[i, EVICTIONS] += 1
                        if dirty[slot]:
                            cnt[i, WRITEBACKS] += 1
                            cnt[i, BYTES_READ] += b_i
                            st_tier[sp] = i + 1
                            st_blk[sp] = tag[slot] >> (sh[i + 1] - sh[i]) if i + 1 < n_t else tag[slot]
                            st_write[sp] = 1
                            sp += 1
                    slot = base + way
                    tag[slot] = b
                    dirty[slot] = rw
                    meta[slot] = stamp
                    cnt[i, FILLS] += 1
                    if rw:
                        cnt[i, BYTES_WRITTEN] += req
                    else:
                        cnt[i, BYTES_READ] += req
                    if fetch:
                        cnt[i, BYTES_WRITTEN] += b_i
                        b = b >> (sh[i + 1] - sh[i]) if i + 1 < n_t else b
                        i += 1
                        rw = 0
                        nxt = True
                    else:
                        cnt[i, UNFETCHED] += 1
            if nxt:
                continue
            if sp == 0:
                break
            sp -= 1
            i = st_tier[sp]
            b = st_blk[sp]
            rw = st_write[sp]
