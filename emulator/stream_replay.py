"""``replay_blocks`` on LRU, FIFO and random caches without flush: the drivers of the stream kernels.

:func:`replay_cache_stream` checks the stream, lays out the tiers' words and picks a kernel from
:mod:`emulator.stream`: the read-only chain (no write at all, at most three LRU/FIFO tiers; int32
words while every block is below ``2**30``, else replayed again with int64) or the tier passes
(chunk by chunk, each chunk tier by tier). With ``ReplayOptions.threads`` > 1 and a
:func:`emulator.replay.partition_bit`, two threads replay the two halves of the sets. Counts are the
walk's (``tests/test_engine_fastpath.py``) and pycachesim's (``tests/test_pycachesim.py``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from emulator import stream
from emulator.counters import BYTES_READ, BYTES_WRITTEN, EVICTIONS, FILLS, HITS, MISSES, N_COUNTERS, ReplayResult
from emulator.hierarchy import Tier
from emulator.replay import KINDS, ReplayOptions, build_geometry, partition_bit, random_seed_state
from traces.errors import UsageError


def replay_cache_stream(a: np.ndarray, is_write, tiers: Sequence[Tier], options: ReplayOptions,
                         memory_name: str) -> ReplayResult:
    """replay_blocks on LRU/FIFO caches without flush: the lean kernel (same counts, tested).

    With ``options.threads`` > 1 and a :func:`partition_bit`, two threads each serve the half of the
    stream on their side of that bit (both read the same array; each keeps its own sets)."""
    n = len(a)
    w = np.zeros(n, np.bool_) if is_write is None else np.ascontiguousarray(is_write, np.bool_)
    if w.shape != a.shape:
        raise UsageError("is_write must have one flag per address", field="is_write")
    # no write at all and at most three tiers: each block follows the chain of clean tiers in one
    # compiled loop (no buffers between tiers), which also reports a negative address afterwards
    chain = (len(tiers) <= 3 and all(t.policy in ("lru", "fifo") for t in tiers)
             and (is_write is None or not w.any()))
    if not chain and a.min() < 0:
        raise UsageError("addresses must be non-negative", field="addresses")
    n_t = len(tiers)
    geo = build_geometry(tiers, [0] * n_t, [1 << 62] * n_t, options)
    sh = [t.block_bytes.bit_length() - 1 for t in tiers]
    args = []   # per tier: slot_base, n_sets, set_mask, ways, fifo, fetch-on-whole-write-miss, req, block, shift_next
    for i, t in enumerate(tiers):
        s_i = int(geo.n_sets[i])
        args.append((int(geo.slot_off[i]), s_i, s_i - 1 if s_i & (s_i - 1) == 0 else -1, int(geo.n_ways[i]),
                     t.policy == "fifo", options.store_hit_recency,
                     options.fetch_on_write_miss if i == 0 else options.fetch_on_writeback_miss,
                     1 << (sh[i - 1] if i else sh[0]), 1 << sh[i], sh[i + 1] - sh[i] if i + 1 < n_t else 0))
    bit = partition_bit(tiers) if options.threads > 1 and n > 1 else None
    if chain and n_t == 1:
        bit = None      # one tier is less work per block than splitting the stream (measured)
    parts = [(-1, 0)] if bit is None else [(bit, 0), (bit, 1)]
    if chain:
        # int32 words while every block is below 2**30 (known only afterwards: redo if not)
        states, seen = _run_chain(a, geo, args, sh, bit, options.batch_rows, np.int32)
        if seen >= stream.NARROW_LIMIT:
            states, seen = _run_chain(a, geo, args, sh, bit, options.batch_rows, np.int64)
        if seen < 0:
            raise UsageError("addresses must be non-negative", field="addresses")
    else:
        rngs = [np.array([random_seed_state(options.seed, i)], np.uint64) if t.policy == "random" else None
                for i, t in enumerate(tiers)]
        states = _run_passes(a, w, geo, args, sh, parts, options.batch_rows, rngs)
    for tag, cnt in states:
        for i in range(n_t):
            cnt[i, EVICTIONS] += stream.evictions(int(cnt[i, MISSES]), tag, int(geo.slot_off[i]),
                                                  int(geo.n_sets[i] * geo.n_ways[i]))
    cnt = sum(c for _, c in states)
    by_kind = np.zeros((len(KINDS), n_t + 1, N_COUNTERS), np.int64)
    by_kind[KINDS.index("other")] = cnt
    result = ReplayResult(tier_names=tuple(t.name for t in tiers) + (memory_name,),
                          block_bytes=np.array([t.block_bytes for t in tiers] + [tiers[-1].block_bytes], np.int64),
                          kinds=KINDS, tiers=cnt, by_kind=by_kind, per_op=cnt[None].copy(),
                          flush=np.zeros_like(cnt), n_accesses=n, n_blocks=n,
                          meta={"geometry": {"n_sets": geo.n_sets.tolist() + [1], "n_ways": geo.n_ways.tolist() + [1],
                                             "caching": [True] * n_t + [False]},
                                "fast_requests": [0] * (n_t + 1), "kernel": "cache_stream",
                                "partitions": len(parts)})
    from emulator.invariants import check_result, debug_from_env

    if options.debug or debug_from_env():
        check_result(result)
    return result


def _on_threads(fn, n_parts: int) -> None:
    """``fn(k)`` for each partition ``k``, on its own thread when there are two."""
    if n_parts == 1:
        fn(0)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(n_parts) as pool:
        list(pool.map(fn, range(n_parts)))


def _run_chain(a, geo, args, sh, bit, step, dtype):
    """The read-only chain kernel over the whole stream (see :func:`emulator.stream.chain_pass`):
    one partition, or two threads splitting the stream by ``bit``. Returns the per-partition
    (words, counters) and the OR of all blocks served."""
    n, n_t = len(a), len(args)
    spec = tuple((t[3] if t[3] in stream.VECTOR_WAYS else 0, t[2] >= 0, bool(t[4])) for t in args)
    par = np.array([[t[0], t[1], t[2], t[3], t[9]] for t in args], np.int64)
    n_parts = 1 if bit is None else 2
    states = [(stream.new_state(geo.n_slots, dtype), np.zeros((n_t + 1, N_COUNTERS), np.int64)) for _ in range(n_parts)]
    reqs = np.zeros((n_parts, n_t, 2), np.int64)   # requests and misses per tier
    seen = np.zeros(n_parts, np.int64)
    if n_parts == 1:
        seen[0] = stream.chain_pass(a, n, sh[0], par, states[0][0], reqs[0], spec)
    else:
        # for each chunk, thread k splits its half of the chunk by the partition bit into two
        # buffers, both wait, then thread k replays part k from both buffers in stream order
        # (double-buffered: one wait per chunk; a wait costs more than a small chunk's work)
        import threading

        chunk = 16 * step
        # blocks in the word type: int32 buffers halve the traffic between the threads
        bufs = [[[np.empty(chunk // 2 + 1, dtype) for _ in range(2)] for _ in range(2)] for _ in range(2)]
        counts = np.zeros((2, 2, 2), np.int64)      # [buffer set][splitter][part]
        barrier = threading.Barrier(2)

        def serve(k):
            try:
                for c, lo in enumerate(range(0, n, chunk)):
                    hi = min(n, lo + chunk)
                    mid = (lo + hi) // 2
                    k0, k1, or_ = stream.split_blocks(a, mid if k else lo, hi if k else mid, sh[0], bit,
                                                      bufs[c % 2][k][0], bufs[c % 2][k][1])
                    counts[c % 2, k] = k0, k1
                    seen[k] |= or_
                    barrier.wait()
                    for s_ in range(2):
                        stream.chain_pass(bufs[c % 2][s_][k], int(counts[c % 2, s_, k]), 0, par,
                                          states[k][0], reqs[k], spec)
            except BaseException:
                barrier.abort()
                raise

        _on_threads(serve, 2)
    for k, (_, cnt) in enumerate(states):
        for i in range(n_t):
            q, miss = int(reqs[k, i, 0]), int(reqs[k, i, 1])
            cnt[i, HITS] += q - miss
            cnt[i, MISSES] += miss
            cnt[i, FILLS] += miss
            cnt[i, BYTES_READ] += q * args[i][7]
            cnt[i, BYTES_WRITTEN] += miss * args[i][8]
        # the memory below the last tier serves the last tier's misses
        cnt[n_t, HITS] += int(reqs[k, n_t - 1, 1])
        cnt[n_t, BYTES_READ] += int(reqs[k, n_t - 1, 1]) << sh[-1]
    return states, int(np.bitwise_or.reduce(seen))


def _run_passes(a, w, geo, args, sh, parts, step, rngs):
    """The tier passes (see :func:`emulator.stream.tier_pass`): chunk by chunk, each chunk tier by
    tier, per partition (a thread each; never with a random tier, whose draws are one sequence).
    ``rngs[i]``: tier ``i``'s xorshift64 state if it is random. Returns the per-partition (words,
    counters)."""
    n, n_t = len(a), len(args)
    states = [(stream.new_state(geo.n_slots), np.zeros((n_t + 1, N_COUNTERS), np.int64)) for _ in parts]

    def serve(k):
        tag, cnt = states[k]
        part_bit, part_val = parts[k]
        half = (np.empty(step, np.int64), np.empty(step, np.bool_)) if part_bit >= 0 else None
        out = [(np.empty(2 * step, np.int64), np.empty(2 * step, np.bool_))]
        dirty = [False] * n_t        # a tier that was ever sent a write may hold dirty blocks
        for lo in range(0, n, step):
            blk, wr, m = a[lo:lo + step], w[lo:lo + step], min(step, n - lo)
            shift = sh[0]
            if half is not None:
                m = stream.select_half(blk, m, shift, wr, part_bit, part_val, *half)
                (blk, wr), shift = half, 0
            for i in range(n_t):
                if len(out) <= i or len(out[i][0]) < 2 * m:
                    out[i:i + 1] = [(np.empty(2 * m, np.int64), np.empty(2 * m, np.bool_))]
                ob, ow = out[i]
                dirty[i] = dirty[i] or bool(wr[:m].any())
                m = stream.tier_pass(blk, m, shift, wr, *args[i], tag, ob, ow, cnt[i], clean=not dirty[i],
                                     rng=rngs[i])
                blk, wr, shift = ob, ow, 0
            # the memory tier homes everything: every request is a hit there
            n_wr = int(np.count_nonzero(wr[:m]))
            cnt[n_t, HITS] += m
            cnt[n_t, BYTES_WRITTEN] += n_wr << sh[-1]
            cnt[n_t, BYTES_READ] += (m - n_wr) << sh[-1]

    _on_threads(serve, len(parts))
    return states
