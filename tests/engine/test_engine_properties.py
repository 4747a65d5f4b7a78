"""Properties of the engine that hold whatever the input (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlab.chip.hierarchy import Tier
from tierlab.engine.door import replay_blocks
from tierlab.engine.options import ReplayOptions
from tierlab.common.errors import UsageError


def _cache(name, n_blocks, block, ways, policy):
    return Tier(name, n_blocks * block, block, ways, policy, "cache", 1.0, 0.0, 0.0)


streams = st.lists(st.integers(0, 63), min_size=1, max_size=400).map(lambda x: np.array(x) * 64)


@settings(max_examples=100, deadline=None)
@given(streams, st.integers(1, 4), st.integers(1, 8), st.lists(st.booleans(), min_size=400, max_size=400))
def test_opt_never_misses_more_than_lru(addrs, sets, ways, writes):
    w = np.array(writes[: len(addrs)])
    n = sets * ways
    lru = replay_blocks(addrs, w, tiers=[_cache("c", n, 64, ways, "lru")]).tier("c")
    opt = replay_blocks(addrs, w, tiers=[_cache("c", n, 64, ways, "opt")]).tier("c")
    assert opt["misses"] <= lru["misses"]
    assert opt["hits"] + opt["misses"] == lru["hits"] + lru["misses"] == len(addrs)


@settings(max_examples=200, deadline=None)
@given(streams, st.integers(1, 20), st.integers(1, 20))
def test_larger_fully_associative_lru_never_misses_more(addrs, small, extra):
    a = replay_blocks(addrs, tiers=[_cache("c", small, 64, None, "lru")]).tier("c")
    b = replay_blocks(addrs, tiers=[_cache("c", small + extra, 64, None, "lru")]).tier("c")
    assert b["misses"] <= a["misses"]
    # cold misses: never fewer misses than distinct blocks
    assert b["misses"] >= len(np.unique(addrs // 64))


@settings(max_examples=100, deadline=None)
@given(streams, st.sampled_from(["lru", "fifo", "random", "opt"]), st.integers(0, 5))
def test_hits_plus_misses_is_lookups_two_levels(addrs, policy, seed):
    tiers = [_cache("l1", 4, 64, 2, policy), _cache("l2", 16, 128, 4, policy)]
    r = replay_blocks(addrs, tiers=tiers, options=ReplayOptions(seed=seed))
    l1, l2 = r.tier("l1"), r.tier("l2")
    assert l1["hits"] + l1["misses"] == len(addrs)
    assert l2["hits"] + l2["misses"] == l1["misses"]  # loads only: one fetch per l1 miss
    assert r.tier("memory")["hits"] == l2["misses"]


def test_random_policy_is_seeded_and_deterministic():
    addrs = np.random.default_rng(1).integers(0, 256, 5000) * 64
    t = [_cache("c", 16, 64, 4, "random")]
    a = replay_blocks(addrs, tiers=t, options=ReplayOptions(seed=3)).tiers
    b = replay_blocks(addrs, tiers=t, options=ReplayOptions(seed=3)).tiers
    c = replay_blocks(addrs, tiers=t, options=ReplayOptions(seed=4)).tiers
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_opt_refuses_an_unaffordable_future():
    addrs = np.arange(5000) * 64
    with pytest.raises(UsageError, match="opt_max_lookups"):
        replay_blocks(addrs, tiers=[_cache("c", 16, 64, 4, "opt")], options=ReplayOptions(opt_max_lookups=100))


def test_belady_textbook_example():
    # 3 frames, reference string 7 0 1 2 0 3 0 4 2 3 0 3 2: OPT has 7 faults, LRU 9, FIFO 10
    s = np.array([7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2]) * 64
    faults = {p: replay_blocks(s, tiers=[_cache("c", 3, 64, None, p)]).tier("c")["misses"]
              for p in ("opt", "lru", "fifo")}
    assert faults == {"opt": 7, "lru": 9, "fifo": 10}
