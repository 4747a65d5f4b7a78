"""Lazy tier state (tierlab.engine.lazy): stacks of runs give bit-identical counters to per-block replay.

Streams are built so the lazy paths all run: full runs (at least sets x ways blocks of tier 0),
partial runs stacked on them (at least sets / ways blocks), short runs (a few sets, made real),
and per-block reads and stores in between that land on lazily held blocks (materialised sets, hits
on them, dirty blocks in real sets), often near the last run so a wrong victim or a wrong way
order shows up later as a hit, a miss or a different flush. A lone caching tier would be replayed
as groups (tests/engine/test_setgroups.py), so these tests turn that off.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlab.engine.counters import TIER_COUNTERS
from tierlab.engine.jit import njit
from tierlab.engine.lazy import LZ_FEN_OFF, LZ_SET_OFF, N_LZ_FIELDS, rot_add, rot_value, run_count
from tierlab.chip.hierarchy import Tier
from tierlab.engine.door import replay_blocks
from tierlab.engine.options import ReplayOptions
from tierlab.common.errors import UsageError


def _cache(name, sets, ways, block, policy):
    return Tier(name, sets * ways * block, block, ways, policy, "cache", 1.0, 0.0, 0.0)


def _stream(rng, s0, w0, n_parts, stores):
    full = s0 * w0
    space = 16 * full + 64
    start = int(rng.integers(0, space))
    parts = [(start + np.arange(full + int(rng.integers(0, full + 1)))) % space]
    for _ in range(n_parts):
        kind = rng.random()
        if kind < 0.3:
            n = full + int(rng.integers(0, 2 * full + 1))
        elif kind < 0.7:
            n = max(1, -(-s0 // w0)) + int(rng.integers(0, full))
        else:
            n = int(rng.integers(1, max(2, s0 // w0 + 1)))
        end = int(parts[-1][-1])
        start = (end + 1 + int(rng.integers(-2 * w0, 2 * w0 + 1))) % space if rng.random() < 0.6 \
            else int(rng.integers(0, space))
        parts.append((start + np.arange(n)) % space)
        if rng.random() < 0.6:
            # per-block traffic on recently streamed blocks (lazily held ones) and elsewhere
            near = end - rng.integers(0, 2 * full, int(rng.integers(1, 2 * w0 + 2)))
            parts.append(np.where(near < 0, 0, near))
    a = np.concatenate(parts).astype(np.int64)
    w = rng.random(len(a)) < (0.1 if stores else 0.0)
    return a, w


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 100_000), st.sampled_from(["lru", "fifo"]), st.integers(1, 3), st.booleans(),
       st.booleans(), st.integers(1, 24), st.sampled_from([1, 2, 3, 4, 8]))
def test_lazy_stacks_are_bit_identical_to_per_block_replay(seed, policy, levels, stores, recency, sets0, ways0):
    rng = np.random.default_rng(seed)
    a, w = _stream(rng, sets0, ways0, int(rng.integers(3, 30)), stores)
    geoms = [(sets0, ways0, 32), (int(rng.integers(1, 13)), int(rng.choice([1, 2, 4])), 64), (5, 2, 128)][:levels]
    tiers = [_cache(f"t{i}", s, wy, b, policy) for i, (s, wy, b) in enumerate(geoms)]
    opts = dict(flush=True, store_hit_recency=recency)
    fast = replay_blocks(a * 32, w, tiers=tiers, options=ReplayOptions(fast_path=True, fast_min_blocks=1, set_groups=False, **opts))
    slow = replay_blocks(a * 32, w, tiers=tiers, options=ReplayOptions(fast_path=False, **opts))
    np.testing.assert_array_equal(fast.tiers, slow.tiers)
    np.testing.assert_array_equal(fast.by_kind, slow.by_kind)
    np.testing.assert_array_equal(fast.flush, slow.flush)
    assert fast.meta["fast_requests"][0] > 0 or w.any()


def test_lazy_full_then_partial_runs_hand_counted():
    # one tier, 4 sets x 2 ways of 32 B blocks: a 12-block run (a full run: 12 misses, 12 - 8 = 4 of
    # its own blocks evicted), a 6-block partial run pushed on it (6 misses, evicting the 6 oldest
    # held blocks: 4, 8 in set 0, 5, 9 in set 1, 6, 7), then blocks 10 and 11 of the first run
    # (still held, the newest of their sets) hit and block 8 (evicted) misses
    tiers = [_cache("c", 4, 2, 32, "lru")]
    a = np.concatenate([np.arange(12), 100 + np.arange(6), [10, 11, 8]]) * 32
    fast = replay_blocks(a, None, tiers=tiers, options=ReplayOptions(fast_path=True, fast_min_blocks=1, set_groups=False, flush=True))
    slow = replay_blocks(a, None, tiers=tiers, options=ReplayOptions(fast_path=False, flush=True))
    np.testing.assert_array_equal(fast.tiers, slow.tiers)
    c = dict(zip(TIER_COUNTERS, fast.tiers[0].tolist()))
    assert (c["hits"], c["misses"], c["evictions"]) == (2, 12 + 6 + 1, 4 + 6 + 1), c
    assert fast.meta["fast_requests"][0] == 12 + 6 + 1  # block 8 is no longer resident: a run of one


def test_lazy_stack_depth_is_an_option_and_changes_no_count():
    # Numba freezes globals, so the stack depth is an argument; every depth gives the per-block counts
    # (a depth of 1 overflows at once, so it also exercises the write-out fallback).
    rng = np.random.default_rng(7)
    a, w = _stream(rng, 8, 4, 40, False)
    tiers = [_cache("l1", 8, 4, 32, "lru"), _cache("l2", 16, 4, 64, "lru")]
    slow = replay_blocks(a * 32, w, tiers=tiers, options=ReplayOptions(fast_path=False, flush=True))
    for depth in (1, 2, 16):
        fast = replay_blocks(a * 32, w, tiers=tiers,
                             options=ReplayOptions(fast_min_blocks=1, lazy_max_runs=depth, flush=True))
        np.testing.assert_array_equal(fast.tiers, slow.tiers)
        np.testing.assert_array_equal(fast.by_kind, slow.by_kind)
        assert fast.meta["fast_requests"][0] > 0  # the engine's fast path ran, not the lean kernel
    with pytest.raises(UsageError, match="lazy_max_runs"):
        ReplayOptions(lazy_max_runs=0)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 1 << 40), st.integers(0, 1 << 20), st.integers(1, 30000), st.integers(0, 29999))
def test_division_free_run_shape_equals_run_count(F, length, S, s):
    from tierlab.engine.lazy import count_in, last_in, run_count

    s %= S
    L = F + length
    nb = L - F + 1
    assert count_in(nb // S, nb % S, F % S, s, S) == run_count(F, L, s, S)
    if run_count(F, L, s, S):
        assert last_in(L, L % S, s, S) == L - (L - s) % S



@njit(cache=False)
def _reset_fills(lzi, rot, s):
    # what record_order does to a set's fill count (the way order is not under test here)
    rot[lzi[0, LZ_SET_OFF] + s] += rot_value(lzi, 0, rot, s)


@njit(cache=False)
def _fill_value(lzi, rot, s):
    return rot_value(lzi, 0, rot, s)


@njit(cache=False)
def _add_fills(lzi, rot, S, F, L):
    rot_add(lzi, 0, rot, S, F, L)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300), st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 2000), st.integers(0, 299)),
                                     min_size=1, max_size=30))
def test_fill_counts_match_per_set_counting(S, runs):
    # rot_add keeps each run's fills in a base count and a Fenwick tree; rot_value must give, per
    # set, the fills since its count was last reset, as counting them set by set does
    lzi = np.zeros((1, N_LZ_FIELDS), np.int64)
    lzi[0, LZ_SET_OFF] = 0
    lzi[0, LZ_FEN_OFF] = S
    rot = np.zeros(2 * S + 1, np.int64)
    want = np.zeros(S, np.int64)
    for F, length, reset_set in runs:
        _add_fills(lzi, rot, S, F, F + length)
        want += [run_count(F, F + length, s, S) for s in range(S)]
        s = reset_set % S
        _reset_fills(lzi, rot, s)
        want[s] = 0
        assert [_fill_value(lzi, rot, x) for x in range(S)] == want.tolist()


def test_sort_in_place_sorts_the_first_n_and_leaves_the_rest():
    from tierlab.engine.lazy import sort_in_place
    rng = np.random.default_rng(1)
    for n in list(range(0, 40)) + [257]:
        a = rng.integers(-5, 5, n + 3).astype(np.int64)
        b = a.copy()
        sort_in_place(b, n)
        assert np.array_equal(b[:n], np.sort(a[:n])) and np.array_equal(b[n:], a[n:]), n
