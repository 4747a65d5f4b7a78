"""Every counter of the engine equals the plain-Python reference (tests/reference.py).

Random and adversarial hierarchies (caches, scratchpads, lending and non-lending memory tiers, all
policies, per-tier block sizes), tensors with arbitrary homes and kinds, descriptors with strides,
overlaps, writes and PIM flags, random batch splits, every count-changing option.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlab.engine.counters import TIER_COUNTERS, link_bytes
from tierlab.chip.hierarchy import Tier
from tierlab.engine.door import replay_arrays
from tierlab.engine.geometry import KINDS
from tierlab.engine.options import ReplayOptions
from reference import reference_replay

TENSOR_SPAN = 1024  # tensors start at multiples of this (aligned for every block size used)


def draw_accesses(draw, tensors, n_ops, max_acc, max_count, nbytes):
    """Descriptors ``[op, tensor, offset, nbytes, count, stride, write, pim]`` over ``tensors``
    (``(address, home, kind, size)``): chunk sizes from ``nbytes(size)``, strided chunks that may
    overlap, writes, one in ten PIM, op ids in order."""
    acc = []
    for _ in range(draw(st.integers(1, max_acc))):
        tid = draw(st.integers(0, len(tensors) - 1))
        size = tensors[tid][3]
        nb = draw(nbytes(size))
        count = draw(st.integers(1, max_count))
        stride = draw(st.integers(0, max(0, (size - nb) // max(1, count - 1)))) if count > 1 else 0
        off = draw(st.integers(0, size - nb - (count - 1) * stride))
        acc.append([0, tid, off, nb, count, stride, draw(st.booleans()), draw(st.sampled_from([0] * 9 + [1]))])
    ops = sorted(draw(st.lists(st.integers(0, n_ops - 1), min_size=len(acc), max_size=len(acc))))
    for a, o in zip(acc, ops):
        a[0] = o
    return acc


@st.composite
def scenarios(draw):
    n_upper = draw(st.integers(1, 3))
    blocks = sorted(draw(st.lists(st.sampled_from([16, 32, 64]), min_size=n_upper + 1,
                                  max_size=n_upper + 1)))
    tiers, lent, home_ok = [], [], []
    for i in range(n_upper):
        managed = draw(st.sampled_from(["cache", "cache", "scratchpad", "memory_lend", "memory"]))
        ways = draw(st.one_of(st.none(), st.integers(1, 4)))
        sets = draw(st.integers(1, 4))
        n_blocks = sets * (ways or draw(st.integers(1, 6)))
        policy = draw(st.sampled_from(["lru", "fifo", "random", "opt"]))
        m = "memory" if managed.startswith("memory") else managed
        tiers.append(Tier(f"t{i}", n_blocks * blocks[i], blocks[i], ways, policy, m, 1.0, 0.0, 0.0,
                          lend=managed == "memory_lend"))
        lent.append(draw(st.integers(0, 8)) * blocks[i] if managed == "memory_lend" else 0)
        if m != "cache":
            home_ok.append(i)
    tiers.append(Tier("mem", 1 << 40, blocks[-1], None, "lru", "memory", 1.0, 0.0, 0.0))
    lent.append(0)
    home_ok.append(n_upper)
    n_t = draw(st.integers(1, 4))
    tensors = []
    for t in range(n_t):
        nbytes = draw(st.integers(1, TENSOR_SPAN))
        tensors.append((t * TENSOR_SPAN, draw(st.sampled_from(home_ok)), draw(st.integers(0, len(KINDS) - 1)),
                        nbytes))
    n_ops = draw(st.integers(1, 5))
    acc = draw_accesses(draw, tensors, n_ops, 40, 4, lambda size: st.integers(1, size))
    opts = ReplayOptions(store_hit_recency=draw(st.booleans()), fetch_on_write_miss=draw(st.booleans()),
                         fetch_on_writeback_miss=draw(st.booleans()), flush=draw(st.booleans()),
                         seed=draw(st.integers(0, 3)), fast_path=draw(st.booleans()),
                         fast_min_blocks=draw(st.sampled_from([1, 2, 8])))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(acc) - 1)), max_size=3))))
    return tiers, lent, tensors, n_ops, acc, opts, cuts


def _engine(tiers, lent, tensors, n_ops, acc, opts, cuts):
    cols = [np.array([a[j] for a in acc], np.int64) for j in range(8)]
    cols[6] = cols[6].astype(bool)
    bounds = [0] + [c for c in cuts if c < len(acc)] + [len(acc)]

    def batches():
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            if hi > lo:
                yield tuple(c[lo:hi] for c in cols)

    return replay_arrays(tiers, tensor_address=[t[0] for t in tensors], tensor_nbytes=[t[3] for t in tensors],
                         tensor_home=[t[1] for t in tensors], tensor_kind=[t[2] for t in tensors],
                         batches=batches, n_ops=n_ops, lent_bytes=lent, options=opts)


def _expected(tiers, lent, tensors, n_ops, acc, opts):
    counts, fcounts = reference_replay(
        tiers, lent, [(t[0], t[1], t[2]) for t in tensors], [tuple(a) for a in acc],
        store_hit_recency=opts.store_hit_recency, fetch_on_write_miss=opts.fetch_on_write_miss,
        fetch_on_writeback_miss=opts.fetch_on_writeback_miss, flush=opts.flush, seed=opts.seed)
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
    return per_op, by_kind, flush


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_every_counter_matches_reference(sc):
    tiers, lent, tensors, n_ops, acc, opts, cuts = sc
    res = _engine(*sc)
    per_op, by_kind, flush = _expected(tiers, lent, tensors, n_ops, acc, opts)
    np.testing.assert_array_equal(res.per_op, per_op)
    np.testing.assert_array_equal(res.by_kind, by_kind)
    np.testing.assert_array_equal(res.flush, flush)


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_conservation_and_lookups(sc):
    tiers, lent, tensors, n_ops, acc, opts, cuts = sc
    res = _engine(*sc)
    t = res.tiers
    C = {n: i for i, n in enumerate(TIER_COUNTERS)}
    # bytes that arrive at tier i+1 from above, counted independently at tier i+1: every request there
    # carries block_i bytes, and each is a hit, miss, bypass or writethrough there
    for i in range(len(tiers) - 1):
        down, up = res.links[i]
        below = t[i + 1]
        arrived = below[C["hits"]] + below[C["misses"]] + below[C["bypasses"]] + below[C["writethroughs"]]
        assert (down + up) == arrived * tiers[i].block_bytes
    # fills = misses at every tier; evictions never exceed fills
    np.testing.assert_array_equal(t[:, C["fills"]], t[:, C["misses"]])
    assert (t[:, C["evictions"]] <= t[:, C["fills"]]).all()
    assert (t[:, C["writebacks"]] <= t[:, C["evictions"]]).all()
    # per-op sums and per-kind sums agree
    np.testing.assert_array_equal(res.per_op.sum(axis=0), res.by_kind.sum(axis=0))
    # tier-0 requests: every tier-0 block of every non-PIM chunk is one request at tier 0
    n0 = t[0, C["hits"]] + t[0, C["misses"]] + t[0, C["bypasses"]] + t[0, C["writethroughs"]]
    b0 = tiers[0].block_bytes
    pim_bytes = t[:, C["pim_bytes"]].sum()
    assert n0 * b0 + pim_bytes == res.n_blocks * b0
    np.testing.assert_array_equal(link_bytes(res.tiers, res.block_bytes), res.links)
