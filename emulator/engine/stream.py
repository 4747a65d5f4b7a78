"""Lean twins of the engine's walk for raw block streams on LRU, FIFO and random caches.

Used by :func:`tierlab.engine.door.replay_blocks` (through :mod:`tierlab.engine.stream_driver`) when every tier
is such a cache and no flush is asked: no tensors, kinds, ops, homes or residency regions to look
after. Two kinds of kernel:

* :func:`tier_pass`: one tier serves a chunk of requests in order and writes what it issues (fetches,
  then dirty victims' writebacks) for the next tier; a chunk goes tier by tier. Exact because a
  tier's state depends only on the sequence of requests it sees.
* :func:`chain_pass`: for streams without writes on at most three LRU/FIFO tiers, each block is
  followed down the tiers in one loop (no buffers), each tier keeping tags in the narrowest word
  that holds them (16, 32 or 64 bits), or, keyed (:func:`can_key`), the input's words.

State: one word per way, ``block << 1 | dirty`` (-1 when empty). The ``ways`` words of a set (from
``slot_base + set * ways``) hold its blocks in replacement order instead of stamps — most recently
used first (lru) or most recently filled first (fifo), empty ways last — so the victim is always the
last way (random keeps physical ways instead, as the walk does). A lookup is one vector compare and
an update one blend (:mod:`tierlab.engine.simd`), with no branch on hit or miss. Which physical way holds
an LRU/FIFO block never shows in the counters (these kernels serve no flush). A tier's evictions are
its misses less its valid ways at the end (:func:`evictions`): no way is ever emptied.

Each kernel is compiled with its tiers' way counts as constants (other counts than 2, 4, 8, 16 and
32 share a build that reads them at run time); a build is made on first use and cached on disk.
Same counters as :func:`tierlab.engine.walk._run`, property-tested equal (``tests/engine/test_engine_fastpath.py``)
and equal to pycachesim (``tests/engine/test_pycachesim.py``).
"""

from __future__ import annotations

import numpy as np

from tierlab.engine.counters import (
    BYTES_READ,
    BYTES_WRITTEN,
    FILLS,
    HITS,
    MISSES,
    UNFETCHED,
    WRITEBACKS,
)
from tierlab.engine.jit import njit
from tierlab.engine.policies import xorshift64
from tierlab.engine.prefetch import prefetch
from tierlab.engine.set_ops import touch, touch_at, touch_key
from tierlab.engine.simd import (
    VECTOR_WAYS,
    set_front,
    set_lookup,
    set_push,
    set_put,
)


@njit(nogil=True, inline="always")
def _serve(blk, n, in_shift, wr, slot_base, n_sets, set_mask, ways, fifo,
           store_hit_recency, fetch_on_whole_write_miss, req_bytes, block_bytes, shift_next,
           tag, out_blk, out_wr, cnt_row, rng, pow2_sets, clean, random):
    """Serve one LRU/FIFO cache tier's requests ``blk[:n] >> in_shift`` (write flags ``wr``) in order;
    return how many it sent to the next tier.

    Each request is ``req_bytes`` bytes. What the tier issues — a miss's fetch, then its dirty
    victim's writeback — goes to ``out_blk``/``out_wr`` (room for ``2 * n``) as next-tier block
    numbers (``>> shift_next``); counters are added to ``cnt_row``, all but evictions: a miss fills an empty way or evicts and no
    way is ever emptied, so a tier's evictions are its misses less its valid ways at the end
    (:func:`evictions`). ``pow2_sets``: the set index is ``block & set_mask``.
    ``clean`` (a build constant): no request is a write and no block of the tier is dirty, so the
    loop leaves out dirty bits, store hits and writebacks. ``random`` (a build constant): the random
    policy; a set keeps its blocks in their physical ways (a fill takes the first empty way, else
    way ``xorshift64(rng) % ways``, as the walk does), so the order of the words is not used.

    Replaying the whole stream one tier at a time is exact: a tier's state depends only on the
    sequence of requests it sees, and that is the sequence the tier above issues, in issue order.
    Hit or miss is data, so the common path has no branch on it (a random mix would mispredict).
    """
    n_out = 0
    served = n_wr = misses = fetches = writebacks = 0
    last = ways - 1
    words = tag.ctypes.data     # the set operations take the address; ``tag`` outlives the loop
    reorder_read = not fifo
    reorder_write = not fifo and store_hit_recency
    skip_write_fetch = req_bytes == block_bytes and not fetch_on_whole_write_miss
    if clean and not random:
        for j in range(n):
            b = blk[j] >> in_shift
            base = slot_base + ((b & set_mask) if pow2_sets else (b % n_sets)) * ways
            r = set_lookup(words, base, ways, (b << 1) | 1, 1)
            miss = 1 if r == ways else 0
            if fifo:        # a hit leaves the set as it is; a miss pushes the block in front
                set_push(words, base, ways, b << 1, miss == 1)
            else:
                set_front(words, base, ways, r - miss, b << 1)   # clean: word = block
            served += 1
            misses += miss
            out_blk[n_out] = b >> shift_next
            out_wr[n_out] = False
            n_out += miss
        fetches = misses
        n = 0
    if random:
        for j in range(n):
            b = blk[j] >> in_shift
            rw = wr[j]
            d = 1 if rw else 0
            base = slot_base + ((b & set_mask) if pow2_sets else (b % n_sets)) * ways
            way = set_lookup(words, base, ways, (b << 1) | 1, 1)
            miss = 1 if way == ways else 0
            if miss:
                way = set_lookup(words, base, ways, -1, 0)        # the first empty way
                if way == ways:
                    way = np.int64(xorshift64(rng, 0) % np.uint64(ways))
            victim = tag[base + way]
            tag[base + way] = (b << 1) | d | (victim & (1 - miss))
            served += 1
            n_wr += d
            misses += miss
            fetch = 0 if rw and skip_write_fetch else miss
            fetches += fetch
            out_blk[n_out] = b >> shift_next
            out_wr[n_out] = False
            n_out += fetch
            if miss and victim >= 0 and victim & 1:
                writebacks += 1
                out_blk[n_out] = (victim >> 1) >> shift_next
                out_wr[n_out] = True
                n_out += 1
        n = 0
    for j in range(n):
        b = blk[j] >> in_shift
        rw = wr[j]
        d = 1 if rw else 0
        base = slot_base + ((b & set_mask) if pow2_sets else (b % n_sets)) * ways
        r = set_lookup(words, base, ways, (b << 1) | 1, 1)
        miss = 1 if r == ways else 0
        hit = miss == 0
        way = r - miss                            # the hit way, else the last (the victim)
        cur = tag[base + way]
        victim = tag[base + last]
        # a miss fills at the front; a hit moves to the front, or stays (fifo; a store hit without
        # recency) and only takes the dirty bit. The hit word keeps its dirty bit: arithmetic, not a
        # select, so the compiler does not turn it into a branch on ``hit``
        word = (b << 1) | d | (cur & (1 - miss))
        move = not hit or (reorder_write if rw else reorder_read)
        set_put(words, base, ways, way, word, move)
        served += 1
        n_wr += d
        misses += miss
        fetch = 0 if rw and skip_write_fetch else miss
        fetches += fetch
        out_blk[n_out] = b >> shift_next          # kept only when fetched (room for 2 per request)
        out_wr[n_out] = False
        n_out += fetch
        if miss & victim & (1 if victim >= 0 else 0):   # a dirty victim: written back
            writebacks += 1
            out_blk[n_out] = (victim >> 1) >> shift_next
            out_wr[n_out] = True
            n_out += 1
    cnt_row[HITS] += served - misses
    cnt_row[MISSES] += misses
    cnt_row[FILLS] += misses
    cnt_row[WRITEBACKS] += writebacks
    cnt_row[UNFETCHED] += misses - fetches
    cnt_row[BYTES_READ] += req_bytes * (served - n_wr) + block_bytes * writebacks
    cnt_row[BYTES_WRITTEN] += req_bytes * n_wr + block_bytes * fetches
    return n_out


def _build(ways_lit: int, pow2_sets: bool, clean: bool, fifo_build: bool, random: bool):
    """``_serve`` compiled with the way count ``ways_lit`` (0: read at run time), the kind of set
    index, ``clean`` and ``random`` as constants (and, for clean builds, the policy: ``fifo_build``).
    A constant way count folds the set operations' switch down to their vector form."""
    @njit(nogil=True)
    def serve(blk, n, in_shift, wr, slot_base, n_sets, set_mask, ways, fifo,
              store_hit_recency, fetch_on_whole_write_miss, req_bytes, block_bytes, shift_next,
              tag, out_blk, out_wr, cnt_row, rng):
        return _serve(blk, n, in_shift, wr, slot_base, n_sets, set_mask, ways_lit if ways_lit else ways,
                      fifo_build if clean else fifo,
                      store_hit_recency, fetch_on_whole_write_miss, req_bytes, block_bytes, shift_next,
                      tag, out_blk, out_wr, cnt_row, rng, pow2_sets, clean, random)
    return serve


_SERVE: dict = {}
_NO_RNG = np.zeros(1, np.uint64)


def tier_pass(blk, n, in_shift, wr, slot_base, n_sets, set_mask, ways, fifo,
              store_hit_recency, fetch_on_whole_write_miss, req_bytes, block_bytes, shift_next,
              tag, out_blk, out_wr, cnt_row, clean=False, rng=None) -> int:
    """One tier's pass (see :func:`_serve`), built for its way count as a constant when that is one
    of :data:`VECTOR_WAYS` (each build is compiled on first use, then cached on disk). ``clean``:
    the caller knows no request is a write and no block of the tier is dirty. ``rng``: the random
    policy's xorshift64 state (a uint64 array of one; None for lru/fifo)."""
    random = rng is not None
    key = (ways if ways in VECTOR_WAYS else 0, set_mask >= 0, bool(clean) and not random,
           bool(clean and fifo) and not random, random)
    fn = _SERVE.get(key)
    if fn is None:
        fn = _SERVE[key] = _build(*key)
    return fn(blk, n, in_shift, wr, slot_base, n_sets, set_mask, ways, fifo,
              store_hit_recency, fetch_on_whole_write_miss, req_bytes, block_bytes, shift_next,
              tag, out_blk, out_wr, cnt_row, _NO_RNG if rng is None else rng)


@njit(nogil=True, inline="always")
def _chain_tier(words, b, n_sets, set_mask, set_bits, ways, fifo, pow2_sets, width, act):
    """Look block ``b`` up in one clean tier of a chain (see :func:`_build_chain`) and update it;
    return 1 on a miss. A set holds tags (``b >> set_bits``, or ``b // n_sets``), not blocks, in
    words of ``width`` bits (a build constant). ``act`` 0 (the tier above hit): the lookup is made
    but nothing changes and 0 is returned (a tier looked up on every request, not behind a branch
    on the tier above)."""
    if pow2_sets:
        key = b >> set_bits
        base = (b & set_mask) * ways
    else:
        key = b // n_sets
        base = (b - key * n_sets) * ways
    return touch(words, base, ways, key, act, fifo, width)


def _direct(ways_lit: int, pow2_sets: bool, shift: int) -> tuple[int, bool]:
    """(log2 ways, whether the tier takes set and tag straight from a word ``>> shift``: power-of-two
    sets, a vector way count, ``shift`` <= log2 ways, so its set is the word shifted left, masked)."""
    lw = max(ways_lit, 1).bit_length() - 1
    return lw, bool(pow2_sets and ways_lit and shift <= lw)


@njit(nogil=True, inline="always")
def _tier_word(words, blk, j, word, sh, direct, lw, key_sh, base_mask, n_sets, set_mask, set_bits, ways, fifo,
               pow2_sets, width, act, keyed):
    """Look the block ``word >> sh`` up in one clean tier and update it (``word`` is ``blk[j]``;
    ``sh``, ``direct`` and ``lw`` build constants, :func:`_direct`; ``key_sh`` = ``set_bits + sh``,
    ``base_mask`` = ``set_mask << lw``); return 1 on a miss where ``act`` is 1. A direct tier makes
    its tag in the vector registers from ``blk[j]`` (past the first word: the intrinsic's load is
    of the word and the one before it). A ``keyed`` tier (direct, ``sh`` >= 1) keeps the words
    themselves, their bits below the tier's block cleared (:func:`can_key`)."""
    if direct:
        base = (word << (lw - sh)) & base_mask
        if keyed:
            return touch_key(words, base, ways, blk, j, -(1 << sh), act, fifo, width)
        if j:
            return touch_at(words, base, ways, blk, j, key_sh, act, fifo, width)
        return touch(words, base, ways, word >> key_sh, act, fifo, width)
    return _chain_tier(words, word >> sh, n_sets, set_mask, set_bits, ways, fifo, pow2_sets, width, act)


def can_key(ways_lit: int, pow2_sets: bool, shift: int) -> bool:
    """Whether a direct tier (:func:`_direct`) reached by input words ``>> shift`` can be keyed:
    keep the words themselves in their own width, their bits below the tier's block cleared (so
    never the empty word -1: ``shift`` >= 1), not tags; its key is then a mask of the word, not a
    shift (fewer operations on the vector unit's one lane-moving port of an Intel core)."""
    return shift >= 1 and _direct(ways_lit, pow2_sets, shift)[1]


def _check_keyed(spec: tuple, shifts: tuple) -> None:
    """Each keyed tier can be (``shifts``: each tier's from the input words; None: fed blocks)."""
    for i, t in enumerate(_tiers(spec)[:len(spec)]):
        if t[4] and (shifts[i] is None or not can_key(t[0], t[1], shifts[i])):
            raise ValueError(f"tier {i} of {spec} cannot be keyed under words shifted by {shifts[i]}")


# how far ahead (in words) the kernels ask for their input: the host's prefetcher stops at each 4 KiB
# page, where a kernel at ~1.2 ns a word waited (10 M words, one tier, an Intel Xeon: 17.0 -> 12.5 ms)
AHEAD = 512


def _tiers(spec: tuple) -> tuple:
    """``spec`` padded to three tiers of five fields (absent tiers never reached; four fields: not keyed)."""
    return tuple(tuple(t) + (False,) * (5 - len(t)) for t in spec) + ((1, True, False, 64, False),) * (3 - len(spec))


@njit(nogil=True, inline="always")
def _tier_par(par, i, ways_lit):
    """Tier ``i``'s sets, set mask, set bits and ways from ``par`` (``ways_lit``: the way count as
    built, 0 for a run-time one), taken into locals: the compiler cannot tell the rows of ``par``
    from the words."""
    return par[i, 0], par[i, 1], par[i, 2], ways_lit if ways_lit else par[i, 3]


@njit(nogil=True, inline="always")
def _add_counts(cnt, n, n_t, m0, m1, m2):
    """Requests and misses per tier into ``cnt``: a tier's requests are the misses of the tier
    above (the first's: the ``n`` blocks), so the kernels count misses alone."""
    cnt[0, 0] += n
    cnt[0, 1] += m0
    if n_t > 1:
        cnt[1, 0] += m0
        cnt[1, 1] += m1
    if n_t > 2:
        cnt[2, 0] += m1
        cnt[2, 1] += m2


def _build_chain(spec: tuple, shifts: tuple = (0, 0, 0)):
    """The clean read-only chain kernel for one to three LRU/FIFO cache tiers: each block is
    followed down the tiers until one holds it (no writes, so no writebacks). Each tier's (way
    count or 0 for a run-time count, power-of-two sets, fifo, word width in bits, and optionally
    keyed, :func:`can_key`) in ``spec`` is compiled in. Each tier keeps its own words
    (:func:`chain_state`): tags in the narrowest word that holds every tag of the address space
    (:func:`tag_width`; a 16-way set of 16-bit tags is one AVX2 register), or keyed words.

    The second tier is reached behind a branch on the first's miss (a first tier mostly hits or
    mostly misses: the branch is predicted); the third is looked up on every request that reached
    the second and changed only where the second missed (a second tier's hits and misses mix:
    a branch there would be mispredicted)."""
    # (the closure holds only numbers and flags: a captured function would change the cache key)
    n_t = len(spec)
    (w0, p0, f0, b0, y0), (w1, p1, f1, b1, y1), (w2, p2, f2, b2, y2) = _tiers(spec)
    # the input's shift to tier-0 blocks and the shifts between tiers (a handful of values: 0 where
    # the blocks are alike, 1 for an address trace's words) compiled in: three registers fewer
    g_in, g0, g1 = shifts
    # each tier's block is the input word shifted right (h0, h1, h2); a tier of power-of-two sets
    # and a vector way count takes its set and tag straight from the word
    h0, h1, h2 = g_in, g_in + g0, g_in + g0 + g1
    _check_keyed(spec, (h0, h1, h2))
    (lw0, d0), (lw1, d1), (lw2, d2) = _direct(w0, p0, h0), _direct(w1, p1, h1), _direct(w2, p2, h2)

    @njit(nogil=True)
    def chain(blk, n, par, t0, t1, t2, cnt):
        """Serve ``blk[:n] >> g_in`` (that shift and those to the next tiers as built); ``par``
        rows: sets, set mask, set bits, ways (shift to the next tier: as built); ``t0``..``t2``
        the tiers' words. Adds requests and misses per tier to
        ``cnt`` columns 0 and 1. Every block must be below the bound the widths were chosen for
        (the caller's to know: a larger one would be counted in a wrong set, never outside the
        words)."""
        a0, a1, a2 = t0.ctypes.data, t1.ctypes.data, t2.ctypes.data
        s0, k0, e0, x0 = _tier_par(par, 0, w0)
        s1, k1, e1, x1 = _tier_par(par, 1 % n_t, w1)
        s2, k2, e2, x2 = _tier_par(par, 2 % n_t, w2)
        q0, r0, q1, r1, q2, r2 = e0 + h0, k0 << lw0, e1 + h1, k1 << lw1, e2 + h2, k2 << lw2
        m0 = m1 = m2 = 0
        for j in range(n):
            prefetch(blk, j + AHEAD)      # (the input: see AHEAD)
            word = np.int64(blk[j])         # (uint64 words: kept in integer arithmetic)
            miss = _tier_word(a0, blk, j, word, h0, d0, lw0, q0, r0, s0, k0, e0, x0, f0, p0, b0, 1, y0)
            m0 += miss
            if n_t == 1 or not miss:
                continue
            miss = _tier_word(a1, blk, j, word, h1, d1, lw1, q1, r1, s1, k1, e1, x1, f1, p1, b1, 1, y1)
            m1 += miss
            if n_t == 2:
                continue
            miss = _tier_word(a2, blk, j, word, h2, d2, lw2, q2, r2, s2, k2, e2, x2, f2, p2, b2, miss, y2)
            m2 += miss
        _add_counts(cnt, n, n_t, m0, m1, m2)
    return chain


@njit(nogil=True, inline="always")
def _tier_run(src, lo, m, g_in, words, n_sets, set_mask, set_bits, ways, fifo, pow2_sets, width, out, g_out, last,
              direct, lw, ahead, keyed):
    """One clean tier serves ``src[lo:lo + m] >> g_in`` in order; its misses (``>> g_out``, the
    next tier's blocks) go to ``out`` unless ``last``; returns how many missed. No branch on hit
    or miss: the next tier's request is stored either way and kept on a miss. ``direct``, ``lw``:
    :func:`_direct` of the tier for ``g_in``; ``ahead``: whether ``src`` is the input (read ahead,
    :data:`AHEAD`) or a tier's misses (in the host's L1)."""
    k = 0
    key_sh, base_mask = set_bits + g_in, set_mask << lw
    for i in range(m):
        if ahead:
            prefetch(src, lo + i + AHEAD)
        word = np.int64(src[lo + i])
        miss = _tier_word(words, src, lo + i, word, g_in, direct, lw, key_sh, base_mask, n_sets, set_mask, set_bits,
                          ways, fifo, pow2_sets, width, 1, keyed)
        if not last:
            out[k] = word >> (g_in + g_out)
        k += miss
    return k


RUN_BLOCKS = 4096   # a chunk of the tier runs: its misses stay in the host's L1 between the tiers
# the form chain_pass takes by default, by tier count: the runs for three (AMD EPYC Zen 3: 13% faster)
CHAIN_FORM = {1: "chain", 2: "chain", 3: "runs"}


def _build_runs(spec: tuple, shifts: tuple = (0, 0, 0)):
    """The chain's counts by tier runs: each chunk of :data:`RUN_BLOCKS` requests is served by
    tier 0, whose misses (kept in a small buffer, in order) are then served by tier 1, and so on.
    Exact, as the tier passes are: a tier's state depends only on the sequence of requests it sees.
    Against :func:`_build_chain`: no branch between the tiers and a loop per tier that keeps its
    few values in registers. Same arguments as the chain's kernel."""
    n_t = len(spec)
    (w0, p0, f0, b0, y0), (w1, p1, f1, b1, y1), (w2, p2, f2, b2, y2) = _tiers(spec)
    g_in, g0, g1 = shifts
    C = RUN_BLOCKS
    _check_keyed(spec, (g_in, None, None))           # tiers 1 and 2 are fed blocks
    (lw0, d0), (lw1, d1), (lw2, d2) = _direct(w0, p0, g_in), _direct(w1, p1, 0), _direct(w2, p2, 0)

    @njit(nogil=True)
    def runs(blk, n, par, t0, t1, t2, cnt):
        a0, a1, a2 = t0.ctypes.data, t1.ctypes.data, t2.ctypes.data
        s0, k0, e0, x0 = _tier_par(par, 0, w0)
        s1, k1, e1, x1 = _tier_par(par, 1 % n_t, w1)
        s2, k2, e2, x2 = _tier_par(par, 2 % n_t, w2)
        q1 = np.empty(C, np.int64)
        q2 = np.empty(C, np.int64)
        m0 = m1 = m2 = 0
        for lo in range(0, n, C):
            m = min(C, n - lo)
            k = _tier_run(blk, lo, m, g_in, a0, s0, k0, e0, x0, f0, p0, b0, q1, g0, n_t == 1, d0, lw0, True, y0)
            m0 += k
            if n_t > 1:
                k = _tier_run(q1, 0, k, 0, a1, s1, k1, e1, x1, f1, p1, b1, q2, g1, n_t == 2, d1, lw1, False, y1)
                m1 += k
            if n_t > 2:
                k = _tier_run(q2, 0, k, 0, a2, s2, k2, e2, x2, f2, p2, b2, q1, 0, True, d2, lw2, False, y2)
                m2 += k
        _add_counts(cnt, n, n_t, m0, m1, m2)
    return runs


_CHAIN: dict = {}
_WORD = {16: np.int16, 32: np.int32, 64: np.int64}


def tag_width(top_block: int, n_sets: int) -> int:
    """The narrowest word (16, 32 or 64 bits) holding the tag of every block below ``top_block``
    at a tier of ``n_sets`` sets, beside the empty word -1."""
    top_tag = max(int(top_block) - 1, 0) // max(int(n_sets), 1)
    return 16 if top_tag < (1 << 15) - 1 else 32 if top_tag < (1 << 31) - 1 else 64


def chain_state(par: np.ndarray, widths) -> list:
    """The chain tiers' words, all empty, one array per tier (``par`` rows as :func:`chain_pass`
    takes them; ``widths`` from :func:`tag_width`), each aligned for vector loads."""
    return [new_state(int(row[0] * row[3]), _WORD[w]) for row, w in zip(par, widths)]


def chain_pass(blk, n, in_shift, par, tags, cnt, spec, form: str | None = None) -> None:
    """Serve ``blk[:n] >> in_shift`` on the chain's tiers (``spec``, ``par`` rows as
    :func:`_build_chain` takes them) over their words ``tags`` (:func:`chain_state`), adding
    requests and misses per tier to ``cnt``. ``form``: ``"chain"`` (:func:`_build_chain`) or
    ``"runs"`` (:func:`_build_runs`), the same counts; by default :data:`CHAIN_FORM`'s. Each build
    is made once, then cached on disk."""
    n_t = len(spec)
    form = form or CHAIN_FORM[n_t]
    shifts = (int(in_shift), int(par[0, 4]) if n_t > 1 else 0, int(par[1, 4]) if n_t > 2 else 0)
    fn = _CHAIN.get((spec, shifts, form))
    if fn is None:
        build = _build_runs if form == "runs" else _build_chain
        fn = _CHAIN[spec, shifts, form] = build(spec, shifts)
    t = list(tags) + [tags[0]] * (3 - len(tags))
    fn(blk, n, par, t[0], t[1], t[2], cnt)


def chain_blocks(tags: np.ndarray, n_sets: int, ways: int, keyed_shift: int | None = None) -> np.ndarray:
    """A chain tier's words as the tier passes keep them: ``block << 1`` (clean) in the same order,
    -1 where empty (the block is the tag and the set index, which the tag leaves out; of a keyed
    tier, its word ``>> keyed_shift``)."""
    if keyed_shift is not None:
        u = tags.view(np.uint32 if tags.itemsize == 4 else np.uint64).astype(np.int64)
        return np.where(tags != -1, (u >> keyed_shift) << 1, -1)
    t = tags.astype(np.int64)
    s = np.repeat(np.arange(n_sets, dtype=np.int64), ways)
    return np.where(t >= 0, (t * n_sets + s) << 1, -1)


def evictions(misses: int, tag, slot_base: int, n_slots: int) -> int:
    """A stream tier's evictions: each miss fills a way (an empty one, -1, or a victim's) and no way
    is ever emptied again, so every miss beyond the ways filled from empty evicted (keyed words may be < 0)."""
    return misses - int(np.count_nonzero(tag[slot_base:slot_base + n_slots] != -1))


def new_state(n_slots: int, dtype=np.int64) -> np.ndarray:
    """The tiers' words, all empty (-1), starting on a 64-byte boundary so that a set of 8 int64
    (16 int32) words is one cache line of the host and a vector load never splits one."""
    size = np.dtype(dtype).itemsize
    raw = np.full(n_slots + 64 // size, -1, dtype)
    skip = (-raw.ctypes.data % 64) // size
    return raw[skip:skip + n_slots]
