"""Exactness against pycachesim: identical hits and misses per level on the same load stream."""

from __future__ import annotations

import numpy as np
import pytest

from cachesim import Cache, CacheSimulator, MainMemory

from tierlab.chip.hierarchy import Tier
from tierlab.engine.door import replay_blocks


def _tier(name, sets, ways, block, policy):
    return Tier(name, sets * ways * block, block, ways, policy, "cache", 1.0, 0.0, 0.0)


def _pycachesim(levels, policy, addresses):
    mem = MainMemory()
    below = None
    caches = []
    for name, sets, ways, block in reversed(levels):
        c = Cache(name, sets, ways, block, policy.upper(), load_from=below, store_to=below)
        caches.append(c)
        below = c
    mem.load_to(caches[0])
    mem.store_from(caches[0])
    sim = CacheSimulator(caches[-1], mem)
    for a in addresses:
        sim.load(int(a))
    return {c.name: (c.backend.HIT_count, c.backend.MISS_count) for c in caches}


def _stream(seed, n, span_blocks, block):
    rng = np.random.default_rng(seed)
    # mixture of sequential runs, a hot set and uniform noise
    parts = []
    while sum(len(p) for p in parts) < n:
        r = rng.random()
        if r < 0.4:
            start = int(rng.integers(0, span_blocks))
            parts.append((start + np.arange(int(rng.integers(1, 300)))) % span_blocks)
        elif r < 0.8:
            parts.append(rng.integers(0, max(1, span_blocks // 16), int(rng.integers(1, 200))))
        else:
            parts.append(rng.integers(0, span_blocks, int(rng.integers(1, 100))))
    blocks = np.concatenate(parts)[:n]
    return blocks * block + rng.integers(0, block, n)  # any byte inside the block


GEOMETRIES = [
    # (levels: (name, sets, ways, block)), 1, 2 and 3 levels, several sizes/ways/blocks
    [("l1", 64, 8, 64)],
    [("l1", 16, 1, 64)],
    [("l1", 1, 32, 128)],
    [("l1", 64, 8, 64), ("l2", 1024, 16, 64)],
    [("l1", 32, 4, 64), ("l2", 256, 8, 128)],
    [("l1", 8, 2, 32), ("l2", 64, 4, 64), ("l3", 128, 16, 256)],
    [("l1", 64, 8, 64), ("l2", 512, 16, 64), ("l3", 2048, 16, 64)],
]


@pytest.mark.parametrize("policy", ["lru", "fifo"])
@pytest.mark.parametrize("levels", GEOMETRIES, ids=lambda g: "-".join(f"{s}x{w}x{b}" for _, s, w, b in g))
def test_hits_and_misses_equal_pycachesim(levels, policy):
    block0 = levels[0][3]
    addrs = _stream(len(levels) * 7 + levels[0][1], 30_000, 8192, block0)
    ref = _pycachesim(levels, policy, addrs)
    tiers = [_tier(name, s, w, b, policy) for name, s, w, b in levels]
    res = replay_blocks(addrs, tiers=tiers)
    for name, _, _, _ in levels:
        t = res.tier(name)
        assert (t["hits"], t["misses"]) == ref[name], name
    # the stream is not trivial: every level misses and (where reachable) hits
    assert all(res.tier(n)["misses"] > 0 for n, *_ in levels)
    assert res.tier(levels[0][0])["hits"] > 0
