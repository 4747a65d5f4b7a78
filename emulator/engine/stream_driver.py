"""The driver of the stream kernels ``cache_stream_chain`` and ``cache_stream_passes``
(:mod:`tierlab.engine.stream`): caches over one home, fed a stream of tier-0 blocks.

Where the dispatch table lets them serve, the first ``n_caches`` tiers are caches (LRU, FIFO; the
passes also random) and every tensor is homed in tier ``n_caches``, which serves the last cache's
misses and writebacks as home hits; no tier beyond it is reached. The chain (no write at all, at
most three LRU/FIFO tiers) follows each block down the tiers in one loop; the passes serve a chunk
tier by tier (a tier sees exactly what the tier above issued, in order). With two partitions (a
set-index bit every cache shares, :func:`tierlab.engine.geometry.partition_bit`) two threads
replay the two halves of the sets. Counts are the walk's (``tests/engine/test_engine_fastpath.py``) and
pycachesim's (``tests/engine/test_pycachesim.py``).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tierlab.engine import split, stream
from tierlab.engine.counters import BYTES_READ, BYTES_WRITTEN, EVICTIONS, FILLS, HITS, MISSES, N_COUNTERS
from tierlab.engine.geometry import Geometry
from tierlab.engine.options import ReplayOptions, random_seed_state
from tierlab.engine.policies import FIFO, RANDOM


def _on_threads(fn, n_parts: int) -> None:
    """``fn(k)`` for each partition ``k``, on its own thread when there are two."""
    if n_parts == 1:
        fn(0)
        return
    with ThreadPoolExecutor(n_parts) as pool:
        list(pool.map(fn, range(n_parts)))


# the most bytes of words a keyed tier keeps (an estimate of a host core's L2: 1-2 MiB on the
# Intel Xeon and AMD EPYC hosts measured). 3 tiers over the issue-4 stream on an Intel Xeon, every
# tier keyed in the chain form against the runs with the first keyed: 4% faster with a third tier
# of 8 MiB (512 KiB of 32-bit words), 11% slower with one of 64 MiB (4 MiB)
KEYED_BYTES = 1 << 20


def _keyed(spec: list, args: list, bits: int, shift: int, form: str) -> tuple | None:
    """Per tier, the shift from the words to its blocks where it is keyed (else None), or None for
    none: in the chain every tier or none (a mix of keyed tiers and tags was slower than either on
    an Intel Xeon: 2 tiers over the issue-4 stream, 28.6 ms against 27.4 with tags, 24.5 keyed),
    in the runs the first (the others are fed blocks); each where it can be
    (:func:`tierlab.engine.stream.can_key`) and its words are at most :data:`KEYED_BYTES`."""
    shifts = [shift]
    for a in args[:-1]:
        shifts.append(shifts[-1] + a[9])
    reach = range(len(spec)) if form == "chain" else range(1)
    if not all(stream.can_key(spec[i][0], spec[i][1], shifts[i]) and args[i][1] * args[i][3] * bits // 8 <= KEYED_BYTES
               for i in reach):
        return None
    return tuple(shifts[i] if i in reach else None for i in range(len(spec)))


class StreamReplayer:
    """State of the stream kernels over the first ``n_caches`` tiers of ``geo``; :meth:`feed` it
    block streams in order, then :meth:`counts`.

    ``chain``: the read-only chain kernel (else the tier passes); ``top_block``: every tier-0 block
    fed is below it (default: the geometry's space), the caller's to know (the chain's tag words
    are sized from it, :func:`tierlab.engine.stream.tag_width`: a block beyond it would be counted
    in a wrong set, never outside the words); ``bit``: the partition bit for two threads, or None;
    ``words``: (bits, shift) when every feed is of words of that many bits, shifted so to tier-0
    blocks (an address trace's): the chain's first tier is then keyed where it can be
    (:func:`tierlab.engine.stream.can_key`: it keeps the words, not tags)."""

    def __init__(self, geo: Geometry, n_caches: int, options: ReplayOptions, *, chain: bool,
                 top_block: int | None = None, bit: int | None = None, hand_over: bool = False,
                 words: tuple[int, int] | None = None):
        self.geo, self.n_t, self.chain = geo, n_caches, chain
        if top_block is None:
            top_block = int(geo.space_bytes) >> (int(geo.block_bytes[0]).bit_length() - 1)
        self.top_block = max(int(top_block), 1)
        # the two threads' buffers of blocks: int32 halves the traffic between them
        self.dtype = np.int32 if self.top_block <= 1 << 31 else np.int64
        self.options, self.hand_over, self.handed_over_at = options, hand_over, None
        self.step = options.batch_rows
        n_t = n_caches
        sh = [int(b).bit_length() - 1 for b in geo.block_bytes[:n_t + 1]]
        self.sh = sh
        # per tier: slot_base, n_sets, set_mask, ways, fifo, store-hit recency, fetch on a whole
        # write miss, request bytes, block bytes, shift to the next tier
        self.args = []
        for i in range(n_t):
            s_i = int(geo.n_sets[i])
            self.args.append((int(geo.slot_off[i]), s_i, s_i - 1 if s_i & (s_i - 1) == 0 else -1,
                              int(geo.n_ways[i]), int(geo.policy[i]) == FIFO, options.store_hit_recency,
                              options.fetch_on_write_miss if i == 0 else options.fetch_on_writeback_miss,
                              1 << (sh[i - 1] if i else sh[0]), 1 << sh[i], sh[i + 1] - sh[i]))
        self.parts = [(-1, 0)] if bit is None else [(bit, 0), (bit, 1)]
        n_slots = int(geo.slot_off[n_t - 1] + geo.n_sets[n_t - 1] * geo.n_ways[n_t - 1])
        self.n_slots = n_slots
        self.blocks_fed = 0
        self.reqs = None            # the chain's requests and misses per tier
        self.keyed = None           # per chain tier, keyed: the shift from the words to its blocks (else None)
        if chain:
            # per tier: its sets, set mask, set bits, ways, shift to the next; its tags' width
            self.par = np.array([[a[1], a[2], max(a[2], 0).bit_length(), a[3], a[9]] for a in self.args], np.int64)
            widths, top = [], self.top_block
            for a in self.args:
                widths.append(stream.tag_width(top, a[1]))
                top = ((top - 1) >> a[9]) + 1
            spec = [(a[3] if a[3] in stream.VECTOR_WAYS else 0, a[2] >= 0, bool(a[4]), w)
                    for a, w in zip(self.args, widths)]
            self.form = stream.CHAIN_FORM[n_t]
            # keyed tiers, on one thread (the two threads' halves are fed as blocks)
            if words is not None and words[0] in (32, 64) and bit is None:
                self.keyed = _keyed(spec, self.args, int(words[0]), int(words[1]), self.form)
            for i, h in enumerate(self.keyed or ()):
                if h is not None:
                    spec[i], widths[i] = spec[i][:3] + (int(words[0]), True), int(words[0])
            self.spec = tuple(spec)
            self.states = [(stream.chain_state(self.par, widths), np.zeros((n_t + 1, N_COUNTERS), np.int64))
                           for _ in self.parts]
            self.reqs = np.zeros((len(self.parts), n_t, 2), np.int64)
        else:
            self.states = [(stream.new_state(n_slots, np.int64), np.zeros((n_t + 1, N_COUNTERS), np.int64))
                           for _ in self.parts]
            self._init_passes()

    def _init_passes(self) -> None:
        n_t, options, geo = self.n_t, self.options, self.geo
        self.rngs = [np.array([random_seed_state(options.seed, i)], np.uint64)
                     if int(geo.policy[i]) == RANDOM else None for i in range(n_t)]
        self.dirty = [[False] * n_t for _ in self.parts]   # a tier ever sent a write may hold dirty blocks
        self.bufs = [[(np.empty(2 * self.step, np.int64), np.empty(2 * self.step, np.bool_))]
                     for _ in self.parts]
        self.halves = [(np.empty(self.step, np.int64), np.empty(self.step, np.bool_)) if b >= 0 else None
                       for b, _ in self.parts]

    def _to_passes(self) -> None:
        """Hand the chain's state over to the tier passes (at the first write of a stream whose
        writes were not known before). Exact: both keep a set's blocks in replacement order (the
        chain as tags, all clean; the passes as ``block << 1`` words), so the passes go on from the
        same state; the chain's counts so far stay in :attr:`reqs`."""
        states = []
        for tags, cnt in self.states:
            wide = stream.new_state(self.n_slots, np.int64)
            for i, t in enumerate(tags):
                s_i, w_i = int(self.geo.n_sets[i]), int(self.geo.n_ways[i])
                off = int(self.geo.slot_off[i])
                wide[off:off + s_i * w_i] = stream.chain_blocks(t, s_i, w_i, self.keyed[i] if self.keyed else None)
            states.append((wide, cnt))
        self.states, self.chain, self.handed_over_at = states, False, self.blocks_fed
        self._init_passes()

    def feed(self, blocks: np.ndarray, shift: int, writes: np.ndarray | None = None,
             any_write: bool | None = None) -> None:
        """Replay ``blocks >> shift`` (tier-0 block numbers; int64) in order, with their write flags
        (``any_write``: whether any is set, when the caller knows). A chain made with
        ``hand_over`` hands over to the tier passes at the first write; any other chain must be
        fed no write."""
        if len(blocks) == 0:
            return
        if self.chain and writes is not None and self.hand_over:
            if any_write is None:
                any_write = bool(writes.any())
            if any_write:
                self._to_passes()
        self.blocks_fed += len(blocks)
        if self.chain:
            self._chain(blocks, shift)
        else:
            w = np.zeros(len(blocks), np.bool_) if writes is None else writes
            _on_threads(lambda k: self._passes(k, blocks, shift, w), len(self.parts))

    def _chain(self, a, shift):
        n = len(a)
        if self.keyed and (a.dtype.itemsize * 8 != self.spec[0][3] or shift != self.keyed[0]):
            raise ValueError(f"{a.dtype} words >> {shift} fed to a chain keyed for {self.spec[0][3]}-bit words "
                             f">> {self.keyed[0]}")
        if len(self.parts) == 1:
            stream.chain_pass(a, n, shift, self.par, self.states[0][0], self.reqs[0], self.spec, form=self.form)
            return
        # for each chunk, thread k splits its half of the chunk by the partition bit into two
        # buffers, both wait, then thread k replays part k from both buffers in stream order
        # (double-buffered: one wait per chunk; a wait costs more than a small chunk's work)
        bit = self.parts[0][0]
        chunk = 16 * self.step
        # blocks in the word type: int32 buffers halve the traffic between the threads
        bufs = [[[np.empty(chunk // 2 + 1, self.dtype) for _ in range(2)] for _ in range(2)] for _ in range(2)]
        counts = np.zeros((2, 2, 2), np.int64)      # [buffer set][splitter][part]
        seen = np.zeros(2, np.int64)                # the OR of the blocks each thread split
        barrier = threading.Barrier(2)

        def serve(k):
            try:
                for c, lo in enumerate(range(0, n, chunk)):
                    hi = min(n, lo + chunk)
                    mid = (lo + hi) // 2
                    k0, k1, or_ = split.split_blocks(a, mid if k else lo, hi if k else mid, shift, bit,
                                                      bufs[c % 2][k][0], bufs[c % 2][k][1])
                    counts[c % 2, k] = k0, k1
                    seen[k] |= or_
                    barrier.wait()
                    for s_ in range(2):
                        stream.chain_pass(bufs[c % 2][s_][k], int(counts[c % 2, s_, k]), 0, self.par,
                                          self.states[k][0], self.reqs[k], self.spec)
            except BaseException:
                barrier.abort()
                raise

        _on_threads(serve, 2)
        or_ = int(np.bitwise_or.reduce(seen))
        # the buffers hold blocks in the word type: one beyond it (or negative) was split wrongly
        if or_ < 0 or or_ > np.iinfo(self.dtype).max:
            raise ValueError(f"blocks outside [0, {np.iinfo(self.dtype).max}] fed to a chain sized for "
                             f"blocks below {self.top_block}")

    def _passes(self, k, a, shift0, w):
        tag, cnt = self.states[k]
        part_bit, part_val = self.parts[k]
        half, out, dirty = self.halves[k], self.bufs[k], self.dirty[k]
        n, n_t, step, sh = len(a), self.n_t, self.step, self.sh
        for lo in range(0, n, step):
            blk, wr, m = a[lo:lo + step], w[lo:lo + step], min(step, n - lo)
            shift = shift0
            if half is not None:
                m = split.select_half(blk, m, shift, wr, part_bit, part_val, *half)
                (blk, wr), shift = half, 0
            for i in range(n_t):
                if len(out) <= i or len(out[i][0]) < 2 * m:
                    out[i:i + 1] = [(np.empty(2 * m, np.int64), np.empty(2 * m, np.bool_))]
                ob, ow = out[i]
                dirty[i] = dirty[i] or bool(wr[:m].any())
                m = stream.tier_pass(blk, m, shift, wr, *self.args[i], tag, ob, ow, cnt[i], clean=not dirty[i],
                                     rng=self.rngs[i])
                blk, wr, shift = ob, ow, 0
            # the home below the caches: every request is a hit there
            n_wr = int(np.count_nonzero(wr[:m]))
            cnt[n_t, HITS] += m
            cnt[n_t, BYTES_WRITTEN] += n_wr << sh[n_t - 1]
            cnt[n_t, BYTES_READ] += (m - n_wr) << sh[n_t - 1]

    def counts(self) -> np.ndarray:
        """``[tier, counter]`` over every tier of the geometry (tiers past the home count nothing)."""
        n_t = self.n_t
        out = np.zeros((len(self.geo.names), N_COUNTERS), np.int64)
        for k, (tag, cnt) in enumerate(self.states):
            c = cnt.copy()
            if self.reqs is not None:
                for i in range(n_t):
                    q, miss = int(self.reqs[k, i, 0]), int(self.reqs[k, i, 1])
                    c[i, HITS] += q - miss
                    c[i, MISSES] += miss
                    c[i, FILLS] += miss
                    c[i, BYTES_READ] += q * self.args[i][7]
                    c[i, BYTES_WRITTEN] += miss * self.args[i][8]
                # the home below the last cache serves its misses
                c[n_t, HITS] += int(self.reqs[k, n_t - 1, 1])
                c[n_t, BYTES_READ] += int(self.reqs[k, n_t - 1, 1]) << self.sh[n_t - 1]
            for i in range(n_t):
                if self.chain:      # each tier's own words
                    c[i, EVICTIONS] += stream.evictions(int(c[i, MISSES]), tag[i], 0, len(tag[i]))
                else:
                    c[i, EVICTIONS] += stream.evictions(int(c[i, MISSES]), tag, int(self.geo.slot_off[i]),
                                                        int(self.geo.n_sets[i] * self.geo.n_ways[i]))
            out[:n_t + 1] += c
        return out

    def stats(self) -> dict:
        out = {"fast_requests": [0] * len(self.geo.names), "partitions": len(self.parts)}
        if self.handed_over_at is not None:
            out["handed_over_at_block"] = self.handed_over_at
        return out
