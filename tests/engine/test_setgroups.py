"""The group replay of a lone caching tier (emulator/engine/setgroups.py) counts exactly what the walk does.

Hierarchies where it applies (tier 0 the only caching tier, LRU or FIFO, over memory, lending-off
memory and scratchpad tiers), tensors homed anywhere below, descriptors long and short (runs of
many times the tier, runs of a few sets, strided and overlapping chunks), reads and writes, PIM
flags, random batch cuts and every count-changing option: every counter per op, per kind and of the
flush equals the plain-Python reference (tests/reference.py) and the per-block walk.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tierlab.engine import setgroups
from tierlab.chip.hierarchy import Tier
from tierlab.engine.door import kernel_for, replay_arrays, replay_blocks
from tierlab.engine.geometry import KINDS, build_geometry
from tierlab.engine.groups_driver import SetGroupReplayer
from tierlab.engine.options import ReplayOptions
from tierlab.engine.state import Descriptors, Tensors
from test_engine_reference import _engine, _expected, draw_accesses
from tierlab.common.errors import UsageError


@st.composite
def lone_cache(draw, span=4096, max_acc=40):
    """A scenario (as tests/test_engine_reference.scenarios) whose only caching tier is tier 0."""
    b0 = draw(st.sampled_from([16, 32, 64]))
    sets = draw(st.integers(1, 13))
    ways = draw(st.integers(1, 6))
    policy = draw(st.sampled_from(["lru", "fifo"]))
    tiers = [Tier("c", sets * ways * b0, b0, ways, policy, "cache", 1.0, 0.0, 0.0)]
    lent = [0]
    for i in range(draw(st.integers(0, 2))):
        managed = draw(st.sampled_from(["memory", "scratchpad"]))
        b = tiers[-1].block_bytes * draw(st.sampled_from([1, 2]))
        tiers.append(Tier(f"m{i}", 1 << 20, b, None, "lru", managed, 1.0, 0.0, 0.0))
        lent.append(0)
    tiers.append(Tier("mem", 1 << 40, max(128, tiers[-1].block_bytes), None, "lru", "memory", 1.0, 0.0, 0.0))
    lent.append(0)
    homes = [i for i in range(1, len(tiers)) if tiers[i].managed == "memory"]
    n_t = draw(st.integers(1, 4))
    tensors = [(t * span, draw(st.sampled_from(homes)), draw(st.integers(0, len(KINDS) - 1)),
                draw(st.integers(1, span))) for t in range(n_t)]
    n_ops = draw(st.integers(1, 5))
    # chunks of a few blocks (a few sets) as often as of any size (up to many times the tier)
    acc = draw_accesses(draw, tensors, n_ops, max_acc, 3,
                        lambda size: st.one_of(st.integers(1, min(size, 4 * b0)), st.integers(1, size)))
    opts = ReplayOptions(store_hit_recency=draw(st.booleans()), fetch_on_write_miss=draw(st.booleans()),
                         flush=draw(st.booleans()))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(acc) - 1)), max_size=3))))
    return tiers, lent, tensors, n_ops, acc, opts, cuts


def _geometry(tiers, lent, tensors, opts):
    below = [sum(-(-t[3] // tier.block_bytes) for t in tensors if t[1] > i) for i, tier in enumerate(tiers)]
    return build_geometry(tiers, np.asarray(lent, np.int64), np.asarray(below, np.int64), opts)


def set_groups_apply(geo, opts):
    """Whether the door picks set groups for a descriptor replay of several ops on ``geo``."""
    return kernel_for(geo, [len(geo.names) - 1], [0, 1], 2, opts).kernel.name == "set_groups"


def _assert_same(a, b):
    np.testing.assert_array_equal(a.per_op, b.per_op)
    np.testing.assert_array_equal(a.by_kind, b.by_kind)
    np.testing.assert_array_equal(a.flush, b.flush)
    assert a.n_blocks == b.n_blocks


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lone_cache(span=1024, max_acc=25))
def test_groups_match_the_reference(sc):
    tiers, lent, tensors, n_ops, acc, opts, cuts = sc
    assert set_groups_apply(_geometry(tiers, lent, tensors, opts), opts)
    res = _engine(*sc)
    per_op, by_kind, flush = _expected(tiers, lent, tensors, n_ops, acc, opts)
    np.testing.assert_array_equal(res.per_op, per_op)
    np.testing.assert_array_equal(res.by_kind, by_kind)
    np.testing.assert_array_equal(res.flush, flush)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lone_cache())
def test_groups_match_the_walk(sc):
    tiers, lent, tensors, n_ops, acc, opts, cuts = sc
    seg = _engine(tiers, lent, tensors, n_ops, acc, opts, cuts)
    walk = _engine(tiers, lent, tensors, n_ops, acc, dataclasses.replace(opts, fast_path=False), cuts)
    _assert_same(seg, walk)
    requests = sum(int(np.ceil((a[2] % tiers[0].block_bytes + a[3]) / tiers[0].block_bytes)) * a[4]
                   for a in acc if not a[7] and tensors[a[1]][1] != 0)
    assert seg.meta["fast_requests"][0] >= min(1, requests)
    assert sum(walk.meta["fast_requests"]) == 0


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lone_cache(), st.integers(1, 6))
def test_written_out_when_cut_too_fine_and_walked_on_with_the_same_counts(sc, max_groups):
    # past max_set_groups groups the state is written out per set and the walk (with its range
    # fast path) replays the rest: from any point of any stream, the counts stay the walk's
    tiers, lent, tensors, n_ops, acc, opts, cuts = sc
    opts = dataclasses.replace(opts, max_set_groups=max_groups, fast_min_blocks=1)
    mixed = _engine(tiers, lent, tensors, n_ops, acc, opts, cuts)
    walk = _engine(tiers, lent, tensors, n_ops, acc, dataclasses.replace(opts, fast_path=False), cuts)
    _assert_same(mixed, walk)
    assert mixed.meta["set_groups_max"] <= max_groups + 6 * max(a[4] for a in acc)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lone_cache(), st.integers(1, 3), st.sampled_from([2, 4, 1 << 20]))
def test_calls_folded_in_compiled_code_count_as_the_walk(sc, call_ops, max_groups):
    """The door replays a batch on set groups ``CALL_OPS`` ops a call without returning to Python
    (``groups_driver.replay_calls``, each call folded before the next); with one to three ops a
    call, a batch is many calls, and a hand-over to the walk may come in any of them."""
    from unittest import mock

    from tierlab.engine import door

    tiers, lent, tensors, n_ops, acc, opts, cuts = sc
    opts = dataclasses.replace(opts, max_set_groups=max_groups, fast_min_blocks=1)
    with mock.patch.object(door, "CALL_OPS", call_ops):
        calls = _engine(tiers, lent, tensors, n_ops, acc, opts, cuts)
    walk = _engine(tiers, lent, tensors, n_ops, acc, dataclasses.replace(opts, fast_path=False), cuts)
    _assert_same(calls, walk)
    assert calls.meta["kernel"]["name"] == "set_groups"


@pytest.mark.parametrize("call_ops", [16, 128])
def test_a_hand_over_inside_a_call_of_many_ops_keeps_every_ops_counts(call_ops):
    """Ops 0-19 read one block again and again, the next ones scattered blocks, which cut tier 0
    past 4 groups: the hand-over to the walk comes at op 20 or so, inside a call that began at op
    16 or 0, whose counts so far must land on their own ops (per op equal to the walk's)."""
    from unittest import mock

    from tierlab.engine import door

    rng = np.random.default_rng(11)
    tiers = [Tier("c", 64 * 2 * 32, 32, 2, "lru", "cache", 1.0, 0.0, 0.0),
             Tier("mem", 1 << 30, 128, None, "lru", "memory", 1.0, 0.0, 0.0)]
    n_ops = 200
    row = np.repeat(np.arange(n_ops), 3)
    offset = np.where(row < 20, 0, rng.integers(0, 4096, len(row)) * 32)
    cols = (row, np.zeros(len(row), np.int64), offset, np.full(len(row), 32), np.ones(len(row), np.int64),
            np.zeros(len(row), np.int64), rng.random(len(row)) < 0.2, np.zeros(len(row), np.int64))

    def run(opts):
        return replay_arrays(tiers, tensor_address=[0], tensor_nbytes=[4096 * 32], tensor_home=[1], tensor_kind=[0],
                             batches=lambda: iter([cols]), n_ops=n_ops, options=opts)

    o = ReplayOptions(max_set_groups=4, flush=True)
    with mock.patch.object(door, "CALL_OPS", call_ops):
        mixed = run(o)
    walk = run(dataclasses.replace(o, fast_path=False))
    assert mixed.meta["kernel"]["name"] == "set_groups" and mixed.meta["set_groups_written_out"]
    assert mixed.meta["fast_requests"][0] >= 60        # ops 0-19 were replayed on set groups
    _assert_same(mixed, walk)


def test_a_scattered_stream_is_written_out_and_walked():
    rng = np.random.default_rng(5)
    tiers = [Tier("c", 512 * 4 * 32, 32, 4, "lru", "cache", 1.0, 0.0, 0.0)]
    a = rng.integers(0, 1 << 16, 20_000) * 32
    w = rng.random(len(a)) < 0.3
    o = ReplayOptions(flush=True, max_set_groups=64)
    mixed = replay_blocks(a, w, tiers=tiers, options=o)
    walk = replay_blocks(a, w, tiers=tiers, options=dataclasses.replace(o, fast_path=False))
    np.testing.assert_array_equal(mixed.tiers, walk.tiers)
    np.testing.assert_array_equal(mixed.flush, walk.flush)
    assert mixed.meta["set_groups_written_out"] and mixed.meta["set_groups_max"] > 64
    few = replay_blocks(np.arange(4096) * 32, None, tiers=tiers, options=o)
    assert not few.meta["set_groups_written_out"]


@pytest.mark.parametrize("policy", ["lru", "fifo"])
@pytest.mark.parametrize("recency", [True, False])
def test_streams_of_full_and_partial_runs_with_stores(policy, recency):
    # the lazy-stack streams (tests/engine/test_engine_lazy.py) on one tier with a flush: full runs, runs
    # stacked on them, short runs and per-block reads and stores near them
    from test_engine_lazy import _cache, _stream

    for seed in range(12):
        rng = np.random.default_rng(seed)
        sets, ways = int(rng.integers(1, 24)), int(rng.choice([1, 2, 3, 4, 8]))
        a, w = _stream(rng, sets, ways, int(rng.integers(3, 30)), seed % 2 == 0)
        tiers = [_cache("t0", sets, ways, 32, policy)]
        o = ReplayOptions(flush=True, store_hit_recency=recency)
        seg = replay_blocks(a * 32, w, tiers=tiers, options=o)
        walk = replay_blocks(a * 32, w, tiers=tiers, options=dataclasses.replace(o, fast_path=False))
        lazy = replay_blocks(a * 32, w, tiers=tiers, options=dataclasses.replace(o, set_groups=False))
        for r in (walk, lazy):
            np.testing.assert_array_equal(seg.tiers, r.tiers)
            np.testing.assert_array_equal(seg.flush, r.flush)
        assert seg.meta["fast_requests"][0] == len(a)


def test_hand_counted_two_sets_lru():
    # 2 sets x 2 ways, 32 B blocks, one tensor homed in memory. Blocks 0..5 (a run of 3 per set:
    # 6 misses, blocks 0 and 1 evicted), then 4 and 5 again (hits), then a write of block 2 (set 0
    # holds 4, 2: a hit, dirty), then blocks 6, 8 (set 0: evict 4 then 2, which is dirty)
    tiers = [Tier("c", 4 * 32, 32, 2, "lru", "cache", 1.0, 0.0, 0.0),
             Tier("mem", 1 << 30, 32, None, "lru", "memory", 1.0, 0.0, 0.0)]
    acc = [(0, 0, 0, 6 * 32, 1, 0, False, 0), (0, 0, 4 * 32, 2 * 32, 1, 0, False, 0),
           (0, 0, 2 * 32, 32, 1, 0, True, 0), (0, 0, 6 * 32, 32, 2, 64, False, 0)]
    cols = [np.array([a[j] for a in acc], np.int64) for j in range(8)]
    cols[6] = cols[6].astype(bool)
    res = replay_arrays(tiers, tensor_address=[0], tensor_nbytes=[1 << 10], tensor_home=[1], tensor_kind=[0],
                        batches=lambda: [tuple(cols)], n_ops=1)
    c = dict(zip(("hits", "misses", "bypasses", "fills", "evictions", "writebacks"), res.tiers[0][:6].tolist()))
    assert c == {"hits": 3, "misses": 8, "bypasses": 0, "fills": 8, "evictions": 4, "writebacks": 1}
    assert res.meta["fast_requests"][0] == 11


def test_a_run_over_the_whole_tier_leaves_few_groups_and_the_pool_grows():
    # scattered single blocks cut a 4096-set tier into many groups (more than the first pool of
    # rows); a run of sets x ways blocks then replaces every block and they merge back
    tiers = [Tier("c", 4096 * 2 * 32, 32, 2, "lru", "cache", 1.0, 0.0, 0.0),
             Tier("mem", 1 << 30, 32, None, "lru", "memory", 1.0, 0.0, 0.0)]
    opts = ReplayOptions()
    geo = build_geometry(tiers, np.zeros(2, np.int64), np.array([1 << 20, 0], np.int64), opts)
    assert set_groups_apply(geo, opts)
    r = SetGroupReplayer(geo, Tensors(np.zeros(1, np.int64), np.ones(1, np.int64), np.zeros(1, np.int64)), opts)
    rng = np.random.default_rng(3)
    offs = np.sort(rng.choice(1 << 14, 300, replace=False)) * 2 * 32
    n = len(offs)

    def batch(o, nb, w):
        m = len(o)
        return Descriptors(np.zeros(m, np.int64), np.zeros(m, np.int64), np.asarray(o, np.int64),
                           np.full(m, nb, np.int64), np.ones(m, np.int64), np.zeros(m, np.int64), np.full(m, w),
                           np.zeros(m, np.int64))

    cnt = np.zeros((1, len(KINDS), 2, 12), np.int64)
    r.run(batch(offs, 32, True), cnt)
    assert r.st[setgroups.ST_K] > 100 and r.st[setgroups.ST_GROWN] > 0
    r.run(batch([1 << 20], 4096 * 2 * 32 * 3, False), cnt)
    assert r.st[setgroups.ST_K] <= 2
    c = cnt[0].sum(axis=0)[0]
    assert c[0] + c[1] == n + 4096 * 2 * 3          # hits + misses = requests
    assert c[5] == n                                 # every written block was written back
    assert r.st[setgroups.ST_REQUESTS] == n + 4096 * 2 * 3


def test_where_set_groups_apply():
    def geo(*tiers):
        return build_geometry(tiers, np.zeros(len(tiers), np.int64), np.array([1 << 20] * len(tiers), np.int64),
                              ReplayOptions())

    c = Tier("c", 1 << 12, 32, 2, "lru", "cache", 1.0, 0.0, 0.0)
    mem = Tier("mem", 1 << 30, 32, None, "lru", "memory", 1.0, 0.0, 0.0)
    on = ReplayOptions()
    assert set_groups_apply(geo(c, mem), on)
    assert not set_groups_apply(geo(c, mem), ReplayOptions(set_groups=False))
    assert not set_groups_apply(geo(c, mem), ReplayOptions(fast_path=False))
    assert not set_groups_apply(geo(dataclasses.replace(c, policy="random"), mem), on)
    assert not set_groups_apply(geo(dataclasses.replace(c, policy="opt"), mem), on)
    assert not set_groups_apply(geo(c, c, mem), on)                      # two caching tiers
    assert not set_groups_apply(geo(dataclasses.replace(c, managed="scratchpad"), c, mem), on)
    assert not set_groups_apply(geo(c), on)                              # nothing below it
    with pytest.raises(UsageError, match="max_set_groups"):
        ReplayOptions(max_set_groups=0)


def test_model_decode_on_h100_equals_the_lazy_engine(tmp_path):
    # a real trace on a real preset (one caching tier over HBM and DDR): the group replay and the
    # lazy-stack engine (itself tested against the walk) give the same counters
    from tierlab.pipeline.chip_replay import replay_trace
    from tierlab.traces.lowering.generate import generate_trace
    from tierlab.traces.format.reader import open_trace
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model

    path = generate_trace(load_model("qwen2-0.5b"), RunConfig(context=64, generate=2), tmp_path / "q.trace")
    tr = open_trace(path)
    seg = replay_trace(tr, "h100", ReplayOptions(flush=True)).result
    lazy = replay_trace(tr, "h100", ReplayOptions(flush=True, set_groups=False)).result
    _assert_same(seg, lazy)
    assert seg.meta["fast_requests"][0] > 0.99 * seg.n_blocks


@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_sweeps_of_whole_tier_runs_count_as_the_walk(policy):
    # runs of at least sets x ways blocks (every set takes >= ways blocks: a sweep, emulator/engine/
    # setgroups._sweep) between short reads and writes that cut the tier into many groups (dirty
    # entries of several kinds and homes), over adjacent tensors; each sweep sometimes re-reads
    # blocks still held at an interval's edge (then it is served group by group), and ends mid-set
    for seed in range(8):
        rng = np.random.default_rng(seed)
        sets, ways, b0 = int(rng.integers(3, 40)), int(rng.integers(1, 9)), 32
        tiers = [Tier("c", sets * ways * b0, b0, ways, policy, "cache", 1.0, 0.0, 0.0),
                 Tier("m", 1 << 20, b0, None, "lru", "memory", 1.0, 0.0, 0.0),
                 Tier("mem", 1 << 40, 128, None, "lru", "memory", 1.0, 0.0, 0.0)]
        tier_bytes = sets * ways * b0
        size = 6 * tier_bytes
        n_t = 4
        pitch = -(-size // 128) * 128      # adjacent tensors, aligned to the farthest tier's block
        tensors = [(t * pitch, int(rng.integers(1, 3)), int(rng.integers(0, len(KINDS))), size) for t in range(n_t)]
        acc = []
        op = 0
        for _ in range(60):
            tid = int(rng.integers(0, n_t))
            if rng.random() < 0.4:      # a sweep: one to three times the tier, from any block
                nb = int(rng.integers(tier_bytes, 3 * tier_bytes + 1)) // b0 * b0
                off = int(rng.integers(0, size - nb + 1)) // b0 * b0
                acc.append((op, tid, off, nb, 1, 0, bool(rng.random() < 0.3), 0))
            else:                       # short, strided, possibly unaligned reads and writes
                cnt_ = int(rng.integers(1, 6))
                stride = int(rng.integers(1, 4 * sets)) * b0
                nb = int(rng.integers(1, 3 * b0))
                off = int(rng.integers(0, max(1, size - nb - cnt_ * stride)))
                acc.append((op, tid, off, nb, cnt_, stride, bool(rng.random() < 0.5), 0))
            op += int(rng.random() < 0.3)
        n_ops = op + 1
        for recency, fetch in ((True, True), (False, False)):
            opts = ReplayOptions(flush=True, store_hit_recency=recency, fetch_on_write_miss=fetch)
            cuts = sorted(set(int(c) for c in rng.integers(1, len(acc), 3)))
            seg = _engine(tiers, [0, 0, 0], tensors, n_ops, acc, opts, cuts)
            walk = _engine(tiers, [0, 0, 0], tensors, n_ops, acc, dataclasses.replace(opts, fast_path=False), cuts)
            _assert_same(seg, walk)
            assert seg.meta["set_groups_sweeps"] > 0
            per_op, by_kind, flush = _expected(tiers, [0, 0, 0], tensors, n_ops, acc, opts)
            np.testing.assert_array_equal(seg.per_op, per_op)
            np.testing.assert_array_equal(seg.flush, flush)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_many_groups_on_a_large_cache_stay_on_groups_with_the_walks_counts(data):
    """A large lone cache (thousands of sets) cut by many short chunks into more than 1,024 groups,
    the fixed cap before issue 42 (a 256 MB Infinity Cache passed it on every prefill and the walk
    took over, 50-250x slower): with the default options the groups go on serving, with the walk's
    counts and the reference's."""
    b0 = 16
    sets = data.draw(st.sampled_from([8192, 12000, 16384]))
    ways = data.draw(st.integers(8, 16))
    policy = data.draw(st.sampled_from(["lru", "fifo"]))
    tiers = [Tier("c", sets * ways * b0, b0, ways, policy, "cache", 1.0, 0.0, 0.0),
             Tier("mem", 1 << 40, 128, None, "lru", "memory", 1.0, 0.0, 0.0)]
    lent = [0, 0]
    span = sets * b0 * 3
    tensors = [(t * span, 1, t % len(KINDS), span) for t in range(3)]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    acc = []
    for i in range(1800):       # short chunks at scattered offsets cut two group ends each
        tid = int(rng.integers(0, 3))
        nb = int(rng.integers(1, 24)) * b0
        off = int(rng.integers(0, span - nb))
        acc.append([i // 200, tid, off, nb, 1, 0, bool(rng.random() < 0.3), 0])
    for t in range(3):          # and a whole tensor now and then, hitting what is held
        acc.insert(600 * t + 300, [acc[600 * t + 300][0], t, 0, span, 1, 0, False, 0])
    opts = ReplayOptions(flush=True)
    res = _engine(tiers, lent, tensors, 9, acc, opts, [1000])
    assert res.meta["kernel"]["name"] == "set_groups"
    assert res.meta["set_groups_max"] > 1024 and not res.meta["set_groups_written_out"]
    walk = _engine(tiers, lent, tensors, 9, acc, dataclasses.replace(opts, fast_path=False), [1000])
    _assert_same(res, walk)
    per_op, by_kind, flush = _expected(tiers, lent, tensors, 9, acc, opts)
    np.testing.assert_array_equal(res.per_op, per_op)
    np.testing.assert_array_equal(res.by_kind, by_kind)
    np.testing.assert_array_equal(res.flush, flush)


def _cache_over_memory(rng, policy, lo_sets, hi_sets, hi_ways):
    """A cache of 32 B blocks (sets and ways drawn) over a memory of 128 B blocks; with its block."""
    sets, ways, b0 = int(rng.integers(lo_sets, hi_sets)), int(rng.integers(1, hi_ways)), 32
    return [Tier("c", sets * ways * b0, b0, ways, policy, "cache", 1.0, 0.0, 0.0),
            Tier("mem", 1 << 40, 128, None, "lru", "memory", 1.0, 0.0, 0.0)], b0


def _as_the_walk_and_the_reference(tiers, tensors, n_ops, acc, opts):
    """The set groups' counts of ``acc`` (a cache over one home, nothing lent) equal to the walk's
    and the reference's; the set groups' result."""
    lent = [0] * len(tiers)
    seg = _engine(tiers, lent, tensors, n_ops, acc, opts, [])
    _assert_same(seg, _engine(tiers, lent, tensors, n_ops, acc, dataclasses.replace(opts, fast_path=False), []))
    per_op, by_kind, flush = _expected(tiers, lent, tensors, n_ops, acc, opts)
    np.testing.assert_array_equal(seg.per_op, per_op)
    np.testing.assert_array_equal(seg.by_kind, by_kind)
    np.testing.assert_array_equal(seg.flush, flush)
    return seg


@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_back_to_back_repetitions_are_one_run_with_the_walks_counts(policy):
    # a batch's KV read: count repetitions, each stride == nbytes after the last, of a run shorter
    # than the tier, that together cover it several times. On block boundaries they are served as
    # one run (setgroups.replay_groups), which sweeps; off them (a block shared by two repetitions,
    # read twice) they are served one by one. Both must count as the walk and the reference do.
    for seed in range(8):
        rng = np.random.default_rng(100 + seed)
        tiers, b0 = _cache_over_memory(rng, policy, 3, 30, 9)
        tier_bytes = tiers[0].capacity_bytes
        reps = int(rng.integers(4, 12))
        aligned = seed % 2 == 0
        run = max(b0, tier_bytes // int(rng.integers(2, 5)) // b0 * b0) + (0 if aligned else int(rng.integers(1, b0)))
        size = reps * run + 4 * b0
        tensors = [(0, 1, 2, size), (-(-size // 128) * 128, 1, 0, size)]
        acc = []
        for op in range(6):
            off = 0 if aligned else int(rng.integers(0, b0))
            acc.append((op, 0, off, run, reps, run, bool(op == 3), 0))          # the repeated run
            acc.append((op, 1, int(rng.integers(0, size - 2 * b0)), int(rng.integers(1, 2 * b0)), 1, 0,
                        bool(rng.random() < 0.5), 0))                            # a short access between
        opts = ReplayOptions(flush=True, store_hit_recency=bool(seed & 2), fetch_on_write_miss=bool(seed & 4))
        seg = _as_the_walk_and_the_reference(tiers, tensors, 6, acc, opts)
        if aligned:
            assert seg.meta["set_groups_sweeps"] > 0      # served as one run, which sweeps the tier


@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_a_run_read_again_in_place_counts_as_the_walk(policy):
    # a prefill's activation tile read count times in place (stride 0): when each set takes at most its
    # ways of the run, under LRU (reads, or stores that move their block) the repetitions after the
    # first are counted at once (setgroups.replay_groups); FIFO, stores that keep their place, and runs
    # over more than the tier are served one by one. Every case must count as the walk and the reference.
    for seed in range(12):
        rng = np.random.default_rng(200 + seed)
        tiers, b0 = _cache_over_memory(rng, policy, 2, 20, 7)
        tier_bytes = tiers[0].capacity_bytes
        size = 3 * tier_bytes
        tensors = [(0, 1, 1, size), (-(-size // 128) * 128, 1, 3, size)]
        acc = []
        for op in range(8):
            nb = int(rng.integers(1, tier_bytes + 1)) if rng.random() < 0.7 else int(rng.integers(1, 2 * tier_bytes))
            off = int(rng.integers(0, size - nb + 1))
            acc.append((op, 0, off, nb, int(rng.integers(2, 9)), 0, bool(rng.random() < 0.4), 0))   # in place
            acc.append((op, 1, int(rng.integers(0, size - b0)), int(rng.integers(1, 3 * b0)), 1, 0,
                        bool(rng.random() < 0.5), 0))
        for recency in (True, False):
            opts = ReplayOptions(flush=True, store_hit_recency=recency, fetch_on_write_miss=bool(seed & 1))
            _as_the_walk_and_the_reference(tiers, tensors, 8, acc, opts)
