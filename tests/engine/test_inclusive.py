"""The inclusive option: every counter equals the depth-first reference, inclusion holds, a textbook case.

The reference (:func:`reference.reference_replay_inclusive`) shares no code with the engine.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tierlab.engine.counters import TIER_COUNTERS
from tierlab.chip.hierarchy import Tier
from tierlab.engine.door import replay_blocks
from tierlab.engine.geometry import KINDS
from tierlab.engine.options import ReplayOptions
from reference import reference_replay_inclusive
from test_engine_reference import _engine, scenarios
from tierlab.common.errors import UsageError


def _inclusive(sc):
    """A scenario made replayable inclusive: no opt tiers, fetches never skipped."""
    tiers, lent, tensors, n_ops, acc, opts, cuts = sc
    tiers = [dataclasses.replace(t, policy="lru") if t.policy == "opt" else t for t in tiers]
    opts = dataclasses.replace(opts, inclusive=True, fetch_on_write_miss=True, fetch_on_writeback_miss=True)
    return tiers, lent, tensors, n_ops, acc, opts, cuts


def _reference(tiers, lent, tensors, n_ops, acc, opts):
    counts, fcounts, states = reference_replay_inclusive(
        tiers, lent, [(t[0], t[1], t[2]) for t in tensors], [tuple(a) for a in acc],
        store_hit_recency=opts.store_hit_recency, flush=opts.flush, seed=opts.seed)
    n_t = len(tiers)
    per_op = np.zeros((n_ops, n_t, len(TIER_COUNTERS)), np.int64)
    by_kind = np.zeros((len(KINDS), n_t, len(TIER_COUNTERS)), np.int64)
    flush = np.zeros((n_t, len(TIER_COUNTERS)), np.int64)
    for (op, kind, tier), d in counts.items():
        for j, name in enumerate(TIER_COUNTERS):
            per_op[op, tier, j] += d[name]
            by_kind[kind, tier, j] += d[name]
    for (kind, tier), d in fcounts.items():
        for j, name in enumerate(TIER_COUNTERS):
            flush[tier, j] += d[name]
    return per_op, by_kind, flush, states


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios().map(_inclusive))
def test_every_counter_matches_inclusive_reference(sc):
    tiers, lent, tensors, n_ops, acc, opts, cuts = sc
    res = _engine(*sc)  # TIERLAB_DEBUG is on in the suite: the invariants are checked too
    per_op, by_kind, flush, _ = _reference(tiers, lent, tensors, n_ops, acc, opts)
    np.testing.assert_array_equal(res.per_op, per_op)
    np.testing.assert_array_equal(res.by_kind, by_kind)
    np.testing.assert_array_equal(res.flush, flush)


def _caching(tier, lent):
    return tier.managed == "cache" or (tier.managed == "memory" and tier.lend and lent > 0)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios().map(_inclusive))
def test_nearer_caching_tier_is_contained_in_the_next(sc):
    tiers, lent, tensors, n_ops, acc, opts, cuts = sc
    *_, states = _reference(tiers, lent, tensors, n_ops, acc, opts)
    for j, held in enumerate(states):
        if held is None:
            continue
        for block, _dirty, tid in held:
            home = tensors[tid][1]
            assert home > j
            # the next tier that caches this tensor, if any before its home, holds the block too
            nxt = next((c for c in range(j + 1, home) if states[c] is not None), None)
            if nxt is None:
                continue
            per = tiers[nxt].block_bytes // tiers[j].block_bytes
            assert (block // per) in {b for b, _, _ in states[nxt]}, (j, nxt, block)


def test_non_inclusive_breaks_inclusion():
    """The textbook stream below leaves L1 holding a block L2 dropped unless inclusive."""
    a = [0, 64, 0, 128, 0]
    res = replay_blocks(a, tiers=_two_level(), options=ReplayOptions(fast_path=False))
    assert res.tier("l1")["hits"] == 2  # the last A hits in L1 although L2 evicted it


def _two_level():
    l1 = Tier("l1", 128, 64, None, "lru", "cache", 1.0, 0.0, 0.0)
    l2 = Tier("l2", 128, 64, None, "lru", "cache", 1.0, 0.0, 0.0)
    return [l1, l2]


def test_textbook_two_level_reads():
    """L1 and L2 of two 64 B blocks each, LRU; reads A B A C A (A=0, B=64, C=128).

    A, B: miss in both. A: L1 hit (L2 keeps A as its LRU block). C: L1 evicts B; L2 evicts A, which
    back-invalidates A in L1. A: misses in L1 (an empty way, no eviction) and in L2 (evicts B; B is
    not in L1). L1: 1 hit, 4 misses, 1 eviction, 1 back-invalidation; L2: 0 hits, 4 misses, 2
    evictions; memory: 4 hits.
    """
    res = replay_blocks([0, 64, 0, 128, 0], tiers=_two_level(), options=ReplayOptions(inclusive=True))
    l1, l2, mem = res.tier("l1"), res.tier("l2"), res.tier("memory")
    assert (l1["hits"], l1["misses"], l1["evictions"], l1["back_invalidations"], l1["writebacks"]) == (1, 4, 1, 1, 0)
    assert (l2["hits"], l2["misses"], l2["evictions"], l2["back_invalidations"], l2["writebacks"]) == (0, 4, 2, 0, 0)
    assert mem["hits"] == 4
    assert res.links.tolist() == [[4 * 64, 0], [4 * 64, 0]]


def test_textbook_two_level_dirty_back_invalidation():
    """The same with the first A a store: A's dirty data is back-invalidated out of L1, lands in L2's victim.

    L1 writes A back (1 writeback, a write hit at L2 marking A dirty), L2 then evicts A dirty (1
    writeback to memory). Memory: 4 fetches + 1 write.
    """
    w = [True, False, False, False, False]
    res = replay_blocks([0, 64, 0, 128, 0], w, tiers=_two_level(), options=ReplayOptions(inclusive=True))
    l1, l2, mem = res.tier("l1"), res.tier("l2"), res.tier("memory")
    assert (l1["hits"], l1["misses"], l1["evictions"], l1["back_invalidations"], l1["writebacks"]) == (1, 4, 1, 1, 1)
    assert (l1["bytes_read"], l1["bytes_written"]) == (4 * 64 + 64, 4 * 64 + 64)
    assert (l2["hits"], l2["misses"], l2["evictions"], l2["back_invalidations"], l2["writebacks"]) == (1, 4, 2, 0, 1)
    assert (l2["bytes_read"], l2["bytes_written"]) == (4 * 64 + 64, 4 * 64 + 64)
    assert (mem["hits"], mem["bytes_read"], mem["bytes_written"]) == (5, 4 * 64, 64)
    assert res.links.tolist() == [[4 * 64, 64], [4 * 64, 64]]


def test_default_replay_has_no_back_invalidations():
    res = replay_blocks(np.arange(0, 64 * 40, 64) % (64 * 7), tiers=_two_level())
    assert res.counter("back_invalidations").sum() == 0


@pytest.mark.parametrize("bad", [dict(fetch_on_write_miss=False), dict(fetch_on_writeback_miss=False)])
def test_inclusive_refuses_skipped_fetches(bad):
    with pytest.raises(UsageError, match="inclusive"):
        replay_blocks([0, 64], tiers=_two_level(), options=ReplayOptions(inclusive=True, **bad))


def test_inclusive_refuses_opt():
    tiers = [_two_level()[0], dataclasses.replace(_two_level()[1], policy="opt")]
    with pytest.raises(UsageError, match="opt"):
        replay_blocks([0, 64], tiers=tiers, options=ReplayOptions(inclusive=True))


def test_cli_flag_reaches_the_options():
    from click.testing import CliRunner

    from tierlab.cli import main
    from tierlab.api.settings import ReplaySettings

    assert "--inclusive / --no-inclusive" in CliRunner().invoke(main, ["replay", "--help"]).output
    assert ReplaySettings(inclusive=True).options().inclusive
    assert not ReplaySettings().options().inclusive


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios().map(_inclusive))
def test_inclusive_equals_non_inclusive_with_one_caching_tier(sc):
    tiers, lent, tensors, n_ops, acc, opts, cuts = sc
    caching = [_caching(t, x) for t, x in zip(tiers, lent)]
    res = _engine(*sc)
    plain = _engine(tiers, lent, tensors, n_ops, acc, dataclasses.replace(opts, inclusive=False), cuts)
    if sum(caching) < 2:
        np.testing.assert_array_equal(res.per_op, plain.per_op)
    assert res.counter("back_invalidations")[[not c for c in caching]].sum() == 0


def _engine_state(tiers, lent, tensors, acc, opts):
    """Replay with the engine and return its final state: per caching tier the set of (block, tensor)."""
    from tierlab.engine.door import drive
    from tierlab.engine.geometry import build_geometry
    from tierlab.engine.state import MODE_CACHE, Tensors
    from tierlab.engine.walker import WalkReplayer

    addr = np.array([t[0] for t in tensors], np.int64)
    nbytes = np.array([t[3] for t in tensors], np.int64)
    home = np.array([t[1] for t in tensors], np.int64)
    below = [int((-(-nbytes[home > i] // t.block_bytes)).sum()) for i, t in enumerate(tiers)]
    geo = build_geometry(tiers, np.asarray(lent, np.int64), below, opts)
    geo.space_bytes = int((addr + nbytes).max())
    r = WalkReplayer(geo, Tensors(addr, home, np.array([t[2] for t in tensors], np.int64)), opts,
                     fast_path=True)
    cols = [np.array([a[j] for a in acc], np.int64) for j in range(8)]
    cols[6] = cols[6].astype(bool)
    cols[0] = np.zeros(len(acc), np.int64)
    drive(r, [tuple(cols)], opts, None, None)
    states = []
    for i in range(len(tiers)):
        if geo.mode[i] != MODE_CACHE:
            states.append(None)
            continue
        lo = int(geo.slot_off[i])
        sl = slice(lo, lo + int(geo.n_sets[i] * geo.n_ways[i]))
        states.append({(int(b), int(o)) for b, o in zip(r.state.tag[sl], r.state.owner[sl]) if b >= 0})
    return states


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios().map(_inclusive))
def test_engine_final_state_is_inclusive(sc):
    """On the engine's own final state: a nearer caching tier's blocks are all in the next caching tier."""
    tiers, lent, tensors, n_ops, acc, opts, cuts = sc
    states = _engine_state(tiers, lent, tensors, acc, opts)
    for j, held in enumerate(states):
        if held is None:
            continue
        for block, tid in held:
            nxt = next((c for c in range(j + 1, tensors[tid][1]) if states[c] is not None), None)
            if nxt is not None:
                per = tiers[nxt].block_bytes // tiers[j].block_bytes
                assert (block // per, tid) in states[nxt], (j, nxt, block)
