"""A lean twin of the engine's walk for raw block streams on LRU/FIFO caches (``replay_blocks``).

Used by :func:`emulator.replay.replay_blocks` when every tier is an LRU or FIFO cache and no flush is
asked: no tensors, kinds, ops, homes or residency regions to look after, so the stream is replayed
one tier at a time (:func:`cache_tier_pass`), each pass a tight loop over one tier's state. Same
semantics and counters as :func:`emulator.engine._run`, property-tested equal
(``tests/test_engine_fastpath.py``).
"""

from __future__ import annotations

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


@njit(inline="always")
def _find(tag, base, ways, key):
    """(hit, way): the way of set ``base`` holding ``key`` (``block << 1 | 1``), else (False, its
    last way); every way compared, no early exit."""
    way = ways - 1
    hit = False
    for x in range(ways):
        e = (tag[base + x] | 1) == key
        way = x if e else way
        hit |= e
    return hit, way


@njit(inline="always")
def _to_front(tag, base, ways, way, word):
    """Ways ``0..way-1`` of set ``base`` move one down; ``word`` goes to way 0."""
    for x in range(ways - 1, 0, -1):
        tag[base + x] = tag[base + x - 1] if x <= way else tag[base + x]
    tag[base] = word


# the way count as a compile-time constant lets the compiler unroll and vectorise both loops
@njit(inline="always")
def _find_ways(tag, base, ways, key):
    if ways == 8:
        return _find(tag, base, 8, key)
    if ways == 16:
        return _find(tag, base, 16, key)
    if ways == 4:
        return _find(tag, base, 4, key)
    if ways == 2:
        return _find(tag, base, 2, key)
    return _find(tag, base, ways, key)


@njit(inline="always")
def _to_front_ways(tag, base, ways, way, word):
    if ways == 8:
        _to_front(tag, base, 8, way, word)
    elif ways == 16:
        _to_front(tag, base, 16, way, word)
    elif ways == 4:
        _to_front(tag, base, 4, way, word)
    elif ways == 2:
        _to_front(tag, base, 2, way, word)
    else:
        _to_front(tag, base, ways, way, word)


@njit(nogil=True)
def cache_tier_pass(blk, wr, slot_base, n_sets, set_mask, ways, fifo, store_hit_recency,
                    fetch_on_whole_write_miss, req_bytes, block_bytes, shift_next,
                    tag, out_blk, out_wr, cnt_row):
    """Serve one LRU/FIFO cache tier's requests in order; return how many it sent to the next tier.

    ``blk``/``wr``: the tier's requests (block numbers of this tier, write flags) in the order the
    tier above issued them, each ``req_bytes`` bytes. What the tier issues — a miss's fetch, then
    its dirty victim's writeback — goes to ``out_blk``/``out_wr`` (room for ``2 * len(blk)``) as
    next-tier block numbers (``>> shift_next``); counters are added to ``cnt_row``.

    Replaying the whole stream one tier at a time is exact: a tier's state depends only on the
    sequence of requests it sees, and that is the sequence the tier above issues, in issue order.

    State: ``tag`` words are ``block << 1 | dirty`` (-1 when empty); the ``ways`` words of a set from
    ``slot_base + set * ways`` hold its blocks in replacement order instead of stamps — most recently used first (lru) or most recently filled first (fifo),
    empty ways (-1) last — so the victim is always the last way and a lookup is a compare of every
    way plus one shift, both without data-dependent branches. Which physical way holds a block never
    shows in the counters (this kernel serves no flush).
    """
    n_out = 0
    hits = misses = evictions = writebacks = unfetched = bytes_read = bytes_written = 0
    last = ways - 1
    for j in range(blk.shape[0]):
        b = blk[j]
        rw = wr[j]
        key = (b << 1) | 1
        base = slot_base + ((b & set_mask) if set_mask >= 0 else (b % n_sets)) * ways
        hit, way = _find_ways(tag, base, ways, key)
        if rw:
            bytes_written += req_bytes
        else:
            bytes_read += req_bytes
        if hit:
            hits += 1
            if way > 0 and not fifo and (store_hit_recency or not rw):
                _to_front_ways(tag, base, ways, way, tag[base + way] | (1 if rw else 0))
            elif rw:
                tag[base + way] |= 1
            continue
        misses += 1
        victim = tag[base + last]
        _to_front_ways(tag, base, ways, last, (b << 1) | (1 if rw else 0))
        if rw and req_bytes == block_bytes and not fetch_on_whole_write_miss:
            unfetched += 1
        else:
            bytes_written += block_bytes
            out_blk[n_out] = b >> shift_next
            out_wr[n_out] = False
            n_out += 1
        if victim >= 0:
            evictions += 1
            if victim & 1:
                writebacks += 1
                bytes_read += block_bytes
                out_blk[n_out] = (victim >> 1) >> shift_next
                out_wr[n_out] = True
                n_out += 1
    cnt_row[HITS] += hits
    cnt_row[MISSES] += misses
    cnt_row[FILLS] += misses
    cnt_row[EVICTIONS] += evictions
    cnt_row[WRITEBACKS] += writebacks
    cnt_row[UNFETCHED] += unfetched
    cnt_row[BYTES_READ] += bytes_read
    cnt_row[BYTES_WRITTEN] += bytes_written
    return n_out
