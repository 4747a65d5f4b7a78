"""Miss-ratio curves against per-size replays by a naive simulator (tests/reference.py), and pycachesim."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tierlab.analysis.mrc import LruDistances, SetLruDistances, lru_curve
from tierlab.analysis.mrc_opt import opt_misses
from tierlab.common.errors import UsageError
from reference import naive_lru_misses

B = 64


def naive_opt_misses(blocks, n_sets, ways):
    """Belady's MIN by brute force: on a miss in a full set evict the block used again farthest ahead."""
    sets = [set() for _ in range(n_sets)]
    misses = 0
    for t, b in enumerate(blocks):
        s = sets[b % n_sets]
        if b in s:
            continue
        misses += 1
        if len(s) == ways:
            def next_use(x):
                for u in range(t + 1, len(blocks)):
                    if blocks[u] == x:
                        return u
                return len(blocks) + x
            s.remove(max(s, key=next_use))
        s.add(b)
    return misses


def chunks(blocks, cuts):
    edges = sorted({0, len(blocks), *[c % (len(blocks) + 1) for c in cuts]})
    return [np.array(blocks[a:b], dtype=np.int64) for a, b in zip(edges, edges[1:])]


streams = st.lists(st.integers(0, 40), max_size=300)


@settings(max_examples=120, deadline=None)
@given(blocks=streams, cuts=st.lists(st.integers(0, 300), max_size=4))
def test_fully_associative_every_capacity_matches_replay(blocks, cuts):
    acc = LruDistances(initial_log2=1)          # tiny tables: growth and renumbering on every stream
    for c in chunks(blocks, cuts):
        acc.update(c)
    curve = acc.curve(B)
    assert curve.accesses == len(blocks)
    assert curve.cold_misses == len(set(blocks))
    for cap in range(1, len(set(blocks)) + 2):
        assert curve.misses(cap * B) == naive_lru_misses(blocks, 1, cap), cap
    caps, misses = curve.curve()
    assert misses[0] == len(blocks)
    assert all(misses[1:] <= misses[:-1])
    if blocks:
        assert misses[-1] == len(set(blocks))
        assert [curve.misses(int(c)) for c in caps[1:]] == misses[1:].tolist()


runs = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 40)), max_size=12)


@settings(max_examples=150, deadline=None)
@given(spans=runs, limit=st.one_of(st.none(), st.integers(1, 50)), cuts=st.lists(st.integers(0, 300), max_size=3))
def test_sequential_runs_match_replay(spans, limit, cuts):
    """Streams of overlapping sequential runs (re-read in the same order, as weights are each
    token): the run shortcut and the deferred tree updates must change nothing."""
    blocks = [b for start, length in spans for b in range(start, start + length)]
    acc = LruDistances(limit=limit, initial_log2=1)
    for c in chunks(blocks, cuts):
        acc.update(c)
    curve = acc.curve(B)
    top = limit if limit is not None else len(set(blocks)) + 1
    for cap in range(1, top + 1):
        assert curve.misses(cap * B) == naive_lru_misses(blocks, 1, cap), cap


@settings(max_examples=120, deadline=None)
@given(blocks=streams, n_sets=st.sampled_from([1, 2, 3, 4, 8]), max_ways=st.integers(1, 12),
       cuts=st.lists(st.integers(0, 300), max_size=3))
def test_set_associative_every_way_count_matches_replay(blocks, n_sets, max_ways, cuts):
    acc = SetLruDistances(n_sets, max_ways)
    for c in chunks(blocks, cuts):
        acc.update(c)
    curve = acc.curve(B)
    for ways in range(1, max_ways + 1):
        assert curve.misses(ways * n_sets * B) == naive_lru_misses(blocks, n_sets, ways), ways
        assert curve.misses(ways * n_sets * B) >= len(set(blocks))
    caps, misses = curve.curve()
    assert caps.tolist() == [w * n_sets * B for w in range(max_ways + 1)]
    assert all(misses[1:] <= misses[:-1])


@settings(max_examples=120, deadline=None)
@given(blocks=streams, limit=st.integers(1, 30), cuts=st.lists(st.integers(0, 300), max_size=4))
def test_bounded_curve_is_exact_up_to_its_limit(blocks, limit, cuts):
    """Tracking only the top ``limit`` blocks of the LRU stack loses nothing below ``limit``."""
    acc = LruDistances(limit=limit, initial_log2=1)
    for c in chunks(blocks, cuts):
        acc.update(c)
    curve = acc.curve(B)
    for cap in range(1, limit + 1):
        assert curve.misses(cap * B) == naive_lru_misses(blocks, 1, cap), cap
    distinct = len(set(blocks))
    assert curve.cold_misses == (distinct if distinct <= limit else None)
    assert acc._table.keys.shape[0] <= max(16, 4 * (limit + 1))   # memory follows the limit, not the stream
    with pytest.raises(UsageError):
        curve.misses((limit + 1) * B)


@settings(max_examples=80, deadline=None)
@given(blocks=st.lists(st.integers(0, 25), max_size=150), n_sets=st.sampled_from([None, 1, 2, 4]),
       ways=st.integers(1, 10))
def test_opt_matches_brute_force_and_never_misses_more_than_lru(blocks, n_sets, ways):
    got = opt_misses(np.array(blocks, np.int64), [ways], n_sets=n_sets)[ways]
    assert got == naive_opt_misses(blocks, n_sets or 1, ways)
    assert got <= naive_lru_misses(blocks, n_sets or 1, ways)
    assert got >= len(set(blocks))


def test_opt_curve_is_monotone_and_heap_rebuild_is_exact():
    rng = np.random.default_rng(3)
    # a skewed stream long enough that the heap of stale entries is rebuilt many times
    blocks = (rng.zipf(1.3, 20_000) % 300).astype(np.int64)
    caps = [1, 2, 5, 10, 40, 100, 299, 300]
    got = opt_misses(blocks, caps)
    vals = [got[c] for c in caps]
    assert all(a >= b for a, b in zip(vals, vals[1:]))
    assert got[300] == len(np.unique(blocks))
    for c in (5, 40):
        assert got[c] == opt_misses(blocks, [c], n_sets=1)[c]   # heap vs per-set scan, independent kernels
        assert got[c] <= naive_lru_misses(blocks.tolist(), 1, c)


def test_opt_at_a_memory_sized_capacity_needs_no_memory_of_that_size():
    """An HBM-sized tier (10^10 blocks) once asked for a heap of 4 x capacity entries: MemoryError.
    A capacity holding every distinct block never evicts, so OPT misses only the cold blocks."""
    blocks = np.array([5, 1, 5, 2, 1, 9, 9, 2], np.int64)
    got = opt_misses(blocks, [2, 4, 10 ** 10])
    assert got[10 ** 10] == got[4] == 4 == naive_opt_misses(blocks.tolist(), 1, 4)
    assert got[2] == naive_opt_misses(blocks.tolist(), 1, 2)


def pycachesim_misses(blocks, n_sets, ways):
    from cachesim import Cache, CacheSimulator, MainMemory

    mem = MainMemory()
    cache = Cache("T", n_sets, ways, B, "LRU")
    mem.load_to(cache)
    mem.store_from(cache)
    sim = CacheSimulator(cache, mem)
    sim.load([int(b) * B for b in blocks])
    return next(s for s in sim.stats() if s["name"] == "T")["MISS_count"]


def test_agrees_with_pycachesim_across_renumbering():
    rng = np.random.default_rng(7)
    # sequential runs over 4096 blocks alternating with a hot set: the pattern, scaled down;
    # 150k accesses against a 64k-entry tree forces several renumberings and table growths
    runs = [np.arange(s, s + 50) for s in rng.integers(0, 4096, 1500)]
    hot = [rng.integers(5000, 5200, 50) for _ in range(1500)]
    blocks = np.concatenate([x for pair in zip(runs, hot) for x in pair]).astype(np.int64)
    full = lru_curve(np.array_split(blocks, 7), B)
    bounded = lru_curve(np.array_split(blocks, 5), B, limit=1024)
    for cap in (16, 256, 1024, 4096):
        expected = pycachesim_misses(blocks, 1, cap)
        assert full.misses(cap * B) == expected
        if cap <= 1024:
            assert bounded.misses(cap * B) == expected
    per_set = lru_curve(np.array_split(blocks, 3), B, n_sets=64, max_ways=16)
    for ways in (1, 4, 8, 16):
        assert per_set.misses(64 * ways * B) == pycachesim_misses(blocks, 64, ways)


def test_capacity_errors():
    curve = lru_curve([np.arange(10)], B, n_sets=4, max_ways=8)
    with pytest.raises(UsageError):
        curve.misses(4 * B + 1)                  # not whole ways
    with pytest.raises(UsageError):
        curve.misses(4 * 9 * B)                  # beyond the tracked depth
    with pytest.raises(UsageError):
        lru_curve([np.array([-1])], B)
    with pytest.raises(UsageError):
        opt_misses(np.arange(4), [0])
