"""The range fast path gives bit-identical counters to per-block replay (and it does run)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlab.chip.hierarchy import Tier
from tierlab.engine.door import replay_arrays, replay_blocks
from tierlab.engine.options import ReplayOptions
from test_engine_reference import _engine, scenarios


def _both(sc):
    tiers, lent, tensors, n_ops, acc, opts, cuts = sc
    fast = _engine(tiers, lent, tensors, n_ops, acc,
                   dataclasses.replace(opts, fast_path=True, fast_min_blocks=1), cuts)
    slow = _engine(tiers, lent, tensors, n_ops, acc, dataclasses.replace(opts, fast_path=False), cuts)
    return fast, slow


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_fast_path_is_bit_identical(sc):
    fast, slow = _both(sc)
    np.testing.assert_array_equal(fast.per_op, slow.per_op)
    np.testing.assert_array_equal(fast.by_kind, slow.by_kind)
    np.testing.assert_array_equal(fast.flush, slow.flush)
    assert sum(slow.meta["fast_requests"]) == 0


def _cache(name, sets, ways, block, policy="lru"):
    return Tier(name, sets * ways * block, block, ways, policy, "cache", 1.0, 0.0, 0.0)


def test_fast_path_runs_on_cold_streams_at_every_level():
    rng = np.random.default_rng(0)
    # long sequential runs over a large region, a small hot set between them, some stores
    parts = []
    for _ in range(200):
        start = int(rng.integers(0, 1 << 16))
        parts.append((start + np.arange(int(rng.integers(50, 600)))) * 32)
        parts.append(rng.integers(0, 512, int(rng.integers(1, 100))) * 32 + (1 << 22))
    a = np.concatenate(parts)
    w = rng.random(len(a)) < 0.05
    for policy in ("lru", "fifo"):
        tiers = [_cache("l1", 8, 4, 32, policy), _cache("l2", 32, 8, 64, policy), _cache("l3", 64, 8, 128, policy)]
        fast = replay_blocks(a, w, tiers=tiers, options=ReplayOptions(fast_path=True, fast_min_blocks=8, flush=True))
        slow = replay_blocks(a, w, tiers=tiers, options=ReplayOptions(fast_path=False, flush=True))
        np.testing.assert_array_equal(fast.tiers, slow.tiers)
        np.testing.assert_array_equal(fast.flush, slow.flush)
        assert all(f > 0 for f in fast.meta["fast_requests"][:3]), fast.meta["fast_requests"]


def test_fast_path_with_dirty_victims_homed_below_and_farther():
    # two tensors: t0 homed in the lending memory tier right below the cache, t1 homed in the last
    # tier; writes leave dirty blocks of both in the cache, then long reads stream through it
    cache = _cache("c", 4, 4, 64)
    mid = Tier("mid", 1 << 20, 64, 4, "lru", "memory", 1.0, 0.0, 0.0, lend=True)
    mem = Tier("mem", 1 << 30, 128, None, "lru", "memory", 1.0, 0.0, 0.0)
    rows = [(0, 0, 0, 4096, 1, 0, True), (0, 1, 0, 2048, 1, 0, True), (0, 0, 0, 65536, 1, 0, False),
            (0, 1, 0, 32768, 1, 0, False), (0, 0, 4096, 8192, 2, 16384, False), (0, 1, 0, 64, 8, 128, True),
            (0, 1, 0, 65536, 1, 0, False)]
    cols = [np.array([r[j] for r in rows], np.int64) for j in range(7)]
    cols[6] = cols[6].astype(bool)
    out = {}
    for fp in (True, False):
        for lent in (0, 1024, 8192):
            r = replay_arrays((cache, mid, mem), tensor_address=[0, 1 << 20], tensor_nbytes=[1 << 17, 1 << 17],
                              tensor_home=[1, 2], tensor_kind=[0, 1], lent_bytes=[0, lent, 0],
                              batches=lambda: iter([tuple(cols) + (np.zeros(len(rows), np.int64),)]), n_ops=1,
                              options=ReplayOptions(fast_path=fp, fast_min_blocks=4, flush=True))
            out[fp, lent] = r
    for lent in (0, 1024, 8192):
        np.testing.assert_array_equal(out[True, lent].by_kind, out[False, lent].by_kind)
        np.testing.assert_array_equal(out[True, lent].flush, out[False, lent].flush)
    assert out[True, 0].meta["fast_requests"][0] > 0


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["lru", "fifo", "opt"]), st.integers(1, 3), st.booleans())
def test_two_thread_set_partition_is_exact(seed, policy, levels, flush):
    rng = np.random.default_rng(seed)
    n = 3000
    a = np.where(rng.random(n) < 0.5, rng.integers(0, 1 << 14, n), (rng.integers(0, 1 << 10) + np.arange(n)) % (1 << 14)) * 32
    w = (rng.random(n) < 0.2) & (np.arange(n) >= n // 2 * (seed % 3))   # some streams start read-only
    geoms = [(8, 4, 32), (16, 4, 64), (64, 2, 128)][:levels]
    tiers = [_cache(f"t{i}", s, wy, b, policy) for i, (s, wy, b) in enumerate(geoms)]
    one = replay_blocks(a, w, tiers=tiers, options=ReplayOptions(flush=flush, batch_rows=512))
    two = replay_blocks(a, w, tiers=tiers, options=ReplayOptions(flush=flush, threads=2, batch_rows=512))
    one_tier_chain = levels == 1 and not flush and policy != "opt" and not w.any()   # stays on one thread
    assert two.meta.get("partitions") == (1 if one_tier_chain else 2)
    np.testing.assert_array_equal(one.tiers, two.tiers)
    np.testing.assert_array_equal(one.flush, two.flush)


def test_partition_bit():
    from tierlab.engine.geometry import build_geometry
    from tierlab.engine.geometry import partition_bit as bit_of

    def partition_bit(tiers):
        return bit_of(build_geometry(tiers, [0] * len(tiers), [1 << 62] * len(tiers), ReplayOptions()))

    # 64 B blocks, 64 and 1024 sets: bit 0..5 of the block number index both
    assert partition_bit([_cache("l1", 64, 8, 64), _cache("l2", 1024, 16, 64)]) == 0
    # l2 blocks 4x larger: its set bits start at tier-0 bit 2
    assert partition_bit([_cache("l1", 64, 8, 64), _cache("l2", 1024, 16, 256)]) == 2
    # a fully associative tier has no set bits; random draws across sets
    assert partition_bit([_cache("l1", 1, 8, 64)]) is None
    assert partition_bit([_cache("l1", 64, 8, 64, "random")]) is None
    # 25600 sets (not a power of two) still has 10 low set bits equal to block bits
    assert partition_bit([_cache("l2", 25600, 16, 128)]) == 0


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["lru", "fifo", "random"]), st.integers(1, 3), st.booleans(),
       st.booleans(), st.booleans(),
       # each way count at each level, in few combinations: every shape is a compiled build
       st.sampled_from([(1, 2, 3), (4, 8, 16), (16, 3, 8), (2, 16, 1), (8, 4, 2), (3, 1, 4)]),
       st.sampled_from([0.0, 0.3]), st.sampled_from([0.0, 0.5, 1.0]))
def test_lean_cache_stream_kernel_equals_the_general_walk(seed, policy, levels, recency, fow, fowb, ways,
                                                           write_share, reads_first):
    rng = np.random.default_rng(seed)
    n = 2000
    a = np.where(rng.random(n) < 0.5, rng.integers(0, 1 << 12, n), (rng.integers(0, 1 << 10) + np.arange(n)) % (1 << 12))
    a = a * 32 + rng.integers(0, 32, n)
    # writes only after the first ``reads_first`` share of the stream: the kernel serves a tier with
    # its clean build until the tier is first sent a write (chunks of 256 requests), then the full one
    w = (rng.random(n) < write_share) & (np.arange(n) >= int(reads_first * n))
    # set counts not all powers of two; every way count the kernel specialises, and others
    geoms = [(3, ways[0], 32), (8, ways[1], 64), (5, ways[2], 256)][:levels]
    tiers = [_cache(f"t{i}", s, wy, b, policy) for i, (s, wy, b) in enumerate(geoms)]
    kw = dict(store_hit_recency=recency, fetch_on_write_miss=fow, fetch_on_writeback_miss=fowb)
    lean = replay_blocks(a, w, tiers=tiers, options=ReplayOptions(batch_rows=256, seed=seed, **kw))
    walk = replay_blocks(a, w, tiers=tiers, options=ReplayOptions(fast_path=False, seed=seed, **kw))
    assert lean.meta["kernel"]["name"] == ("cache_stream_chain" if policy != "random" and not w.any()
                                           else "cache_stream_passes")
    assert walk.meta["kernel"] == {"name": "walk", "why": "asked for"}
    np.testing.assert_array_equal(lean.tiers, walk.tiers)
    np.testing.assert_array_equal(lean.by_kind, walk.by_kind)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["lru", "fifo"]), st.integers(1, 3),
       st.sampled_from([1, 2, 3, 4, 8]), st.booleans())
def test_fast_path_on_streams_over_full_sets_is_bit_identical(seed, policy, levels, ways, recency):
    # back-to-back runs longer and shorter than a tier (sets stay full, their stamps rotate), with
    # scattered hits and stores in between (which break the rotation) and dirty victims
    rng = np.random.default_rng(seed)
    start = int(rng.integers(0, 1 << 11))
    parts = [(start + np.arange(int(rng.integers(64, 400)))) * 32]  # cold: the fast path runs
    for _ in range(int(rng.integers(5, 40))):
        # often near the last run, so a wrong victim shows up as a hit or miss later
        start = max(0, start + int(rng.integers(-64, 64))) if rng.random() < 0.5 else int(rng.integers(0, 1 << 11))
        parts.append((start + np.arange(int(rng.integers(1, 400)))) * 32)
        if rng.random() < 0.5:
            parts.append(rng.integers(0, 1 << 11, int(rng.integers(1, 20))) * 32)
    a = np.concatenate(parts)
    # stores in half the cases (dirty blocks homed past the next tier keep the fast path off there)
    w = rng.random(len(a)) < (0.05 if seed % 2 else 0.0)
    geoms = [(int(rng.integers(1, 9)), ways, 32), (int(rng.integers(1, 17)), ways, 64), (7, 2, 128)][:levels]
    tiers = [_cache(f"t{i}", s, wy, b, policy) for i, (s, wy, b) in enumerate(geoms)]
    opts = dict(flush=True, store_hit_recency=recency)
    fast = replay_blocks(a, w, tiers=tiers, options=ReplayOptions(fast_path=True, fast_min_blocks=4, set_groups=False, **opts))
    slow = replay_blocks(a, w, tiers=tiers, options=ReplayOptions(fast_path=False, **opts))
    np.testing.assert_array_equal(fast.tiers, slow.tiers)
    np.testing.assert_array_equal(fast.flush, slow.flush)
    assert fast.meta["fast_requests"][0] > 0 or w.any()


@pytest.mark.parametrize("levels", [1, 2, 3])
@pytest.mark.parametrize("policy", ["lru", "fifo"])
@pytest.mark.parametrize("batch_rows", [100, 1 << 16])
def test_read_only_chain_on_one_and_two_threads_equals_the_walk(levels, policy, batch_rows):
    # no writes: replay_blocks follows each block down the tiers in one loop; with two threads the
    # threads split each chunk between them and replay one half of the sets each
    rng = np.random.default_rng(levels * 7 + batch_rows)
    n = 5001
    a = np.where(rng.random(n) < 0.5, rng.integers(0, 1 << 13, n), (rng.integers(0, 1 << 10) + np.arange(n)) % (1 << 13))
    a = a * 32 + rng.integers(0, 32, n)
    geoms = [(16, 4, 32), (32, 8, 64), (64, 16, 128)][:levels]
    tiers = [_cache(f"t{i}", s, wy, b, policy) for i, (s, wy, b) in enumerate(geoms)]
    walk = replay_blocks(a, tiers=tiers, options=ReplayOptions(fast_path=False))
    for threads in (1, 2):
        got = replay_blocks(a, tiers=tiers, options=ReplayOptions(threads=threads, batch_rows=batch_rows))
        assert got.meta.get("partitions") == (1 if levels == 1 else threads)   # one tier: one thread
        np.testing.assert_array_equal(got.tiers, walk.tiers)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("writes", [False, True])
def test_negative_address_is_refused_on_every_path(threads, writes):
    from tierlab.common.errors import UsageError

    tiers = [_cache("l1", 16, 4, 64), _cache("l2", 64, 8, 64)]
    a = np.arange(0, 64 * 4000, 64)
    a[1234] = -64
    w = (np.arange(len(a)) % 7 == 0) if writes else None
    with pytest.raises(UsageError, match="non-negative"):
        replay_blocks(a, w, tiers=tiers, options=ReplayOptions(threads=threads))


@pytest.mark.parametrize("threads", [1, 2])
def test_read_only_chain_with_tags_of_every_width_equals_the_walk(threads):
    # the chain keeps each tier's tags in the narrowest word that holds the largest block's tag
    # (16, 32, 64 bits; the tiers may differ): the counts must not show which words were used.
    # Largest blocks: tier 0's (16 sets) tag 32766, the last in int16; 32767, int32 beside
    # tier 1's int16 (64 sets); then int32 at both, int64 at both
    rng = np.random.default_rng(5)
    tiers = [_cache("l1", 16, 4, 64), _cache("l2", 64, 8, 64)]
    for top in (16 * 32766 + 15, 16 * 32767, 1 << 29, (1 << 30) + 5, 1 << 50):
        a = (top - rng.integers(0, 3000, 4000)) * 64
        walk = replay_blocks(a, tiers=tiers, options=ReplayOptions(fast_path=False))
        got = replay_blocks(a, tiers=tiers, options=ReplayOptions(threads=threads, batch_rows=256))
        np.testing.assert_array_equal(got.tiers, walk.tiers)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_runs_over_a_region_holding_written_blocks_are_cut_at_them(seed, policy):
    # a KV-like pattern: a few blocks written into a tensor, then the whole tensor read (and long
    # streams between that leave the tier lazy). The read is cut where a block is resident, not at
    # the whole region: equal to per-block replay, and most of it still on the fast path
    rng = np.random.default_rng(seed)
    # one cache tier: its dirty blocks are homed in the next tier (the memory), as an h100's L2's are
    # in its HBM, so the fast path may serve reads while written blocks are held
    tiers = [_cache("l2", 64, 4, 64, policy)]
    region = 1 << 16                       # the "KV tensor", in blocks
    parts, writes = [], []
    for step in range(12):
        stream = np.arange(1 << 20, (1 << 20) + 64 * 4 * 3) + step * 997       # a full run: lazy tier
        parts.append(stream)
        writes.append(np.zeros(len(stream), bool))
        row = rng.integers(0, region - 8)
        parts.append(np.arange(row, row + int(rng.integers(1, 8))))            # the new KV row
        writes.append(np.ones(len(parts[-1]), bool))
        lo = int(rng.integers(0, 64))
        parts.append(np.arange(lo, min(region, row + 4000)))                   # read up to (past) it
        writes.append(np.zeros(len(parts[-1]), bool))
    parts.append(np.array([1 << 34]))      # a far address: residency regions of 2**16 blocks
    writes.append(np.zeros(1, bool))
    a = np.concatenate(parts) * 64
    w = np.concatenate(writes)
    fast = replay_blocks(a, w, tiers=tiers, options=ReplayOptions(flush=True, seed=seed, set_groups=False))
    walk = replay_blocks(a, w, tiers=tiers, options=ReplayOptions(flush=True, fast_path=False, seed=seed))
    np.testing.assert_array_equal(fast.tiers, walk.tiers)
    np.testing.assert_array_equal(fast.flush, walk.flush)
    assert fast.meta["fast_requests"][0] > 0.9 * len(a)      # whole regions per block: under 2%


def test_argsort_unique_is_numpys_order_of_distinct_values():
    from tierlab.engine.fastpath import argsort_unique
    rng = np.random.default_rng(2)
    for n in list(range(0, 70)) + [129, 1000, 4097]:
        v = np.concatenate([rng.permutation(10 * n + 5)[:n], [-7, 99]]).astype(np.int64)   # past n: ignored
        assert np.array_equal(argsort_unique(v, n), np.argsort(v[:n])), n
