"""Descriptors on the stream kernels: the compiled expansion from the columns as read, and the chain
handing its state over to the tier passes at a stream's first write, give the walk's counts (and
pycachesim's, on a trace of single-line loads replayed end to end)."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from cachesim import Cache, CacheSimulator, MainMemory

from tierlab.chip.hierarchy import Chip, Compute, Link, Tier
from tierlab.engine import door
from tierlab.engine.blocks import BlockExpander, expand_rows
from tierlab.engine.door import replay_arrays
from tierlab.engine.options import ReplayOptions
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.traces.format.writer import TraceWriter

BLOCK = 64


def _rows(draw, n_rows, tensor_bytes):
    """Random descriptors inside one tensor: offsets, sizes (across block boundaries), counts, strides."""
    rows = []
    for _ in range(n_rows):
        count = draw(st.sampled_from([1, 1, 1, 2, 3]))
        nbytes = draw(st.integers(1, 3 * BLOCK))
        stride = draw(st.integers(0, 4 * BLOCK)) if count > 1 else 0
        span = (count - 1) * stride + nbytes
        offset = draw(st.integers(0, tensor_bytes - span))
        rows.append((offset, nbytes, count, stride, draw(st.booleans())))
    return rows


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_expand_rows_gives_the_expanders_blocks_from_uint_columns_through_any_buffer(data):
    n_rows = data.draw(st.integers(1, 30))
    rows = _rows(data.draw, n_rows, 1 << 14)
    addr = np.array([0, 1 << 16], np.int64)
    tid = np.array([data.draw(st.integers(0, 1)) for _ in rows], np.uint32)
    off, nb, cnt, stride, wr = (np.array(c) for c in zip(*rows))
    cols = (tid, off.astype(np.uint64), nb.astype(np.uint64), cnt.astype(np.uint32), stride.astype(np.uint64),
            wr.astype(np.bool_))
    want_b, want_w = [], []
    for b, w in BlockExpander(addr, BLOCK).expand(*cols):
        want_b.append(b.copy())
        want_w.append(w.copy())
    want_b, want_w = np.concatenate(want_b), np.concatenate(want_w)
    cap = data.draw(st.integers(1, 40))
    out_b, out_w = np.empty(cap, np.int64), np.empty(cap, np.bool_)
    state = np.array([0, 0, -1], np.int64)
    got_b, got_w = [], []
    while state[0] < n_rows:
        n, wrote = expand_rows(addr, *cols, 6, state, out_b, out_w)
        assert n > 0 and wrote == bool(out_w[:n].any())
        got_b.append(out_b[:n].copy())
        got_w.append(out_w[:n].copy())
    np.testing.assert_array_equal(np.concatenate(got_b), want_b)
    np.testing.assert_array_equal(np.concatenate(got_w), want_w)


def _cache(name, sets, ways, policy):
    return Tier(name, sets * ways * BLOCK, BLOCK, ways, policy, "cache", 1e12, 0.0, 0.0)


MEMORY = Tier("mem", 1 << 30, BLOCK, None, "lru", "memory", 1e11, 0.0, 0.0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_chain_hands_over_to_the_passes_at_the_first_write_with_the_walks_counts(data):
    policy = data.draw(st.sampled_from(["lru", "fifo"]))
    levels = data.draw(st.integers(1, 3))
    geometry = [(4, 2), (8, 4), (16, 4)][:levels]
    tiers = tuple(_cache(f"l{i}", s, w, policy) for i, (s, w) in enumerate(geometry)) + (MEMORY,)
    n_rows = data.draw(st.integers(1, 80))
    rows = _rows(data.draw, n_rows, 1 << 13)
    first_write = data.draw(st.integers(0, n_rows))        # n_rows: the stream never writes
    rows = [(o, n, c, s, w and i >= first_write) for i, (o, n, c, s, w) in enumerate(rows)]
    if first_write < n_rows:
        rows[first_write] = rows[first_write][:4] + (True,)
    off, nb, cnt, stride, wr = (np.array(c) for c in zip(*rows))
    batch = (np.zeros(n_rows, np.uint32), np.zeros(n_rows, np.uint32), off.astype(np.uint64),
             nb.astype(np.uint64), cnt.astype(np.uint32), stride.astype(np.uint64), wr.astype(np.bool_),
             np.zeros(n_rows, np.int64))
    kw = dict(tensor_address=[0], tensor_nbytes=[1 << 13], tensor_home=[levels], tensor_kind=[0],
              batches=lambda: iter([batch]), n_ops=1, writes=None, pim=False)
    saved = door.STREAM_BUFFER_BLOCKS
    door.STREAM_BUFFER_BLOCKS = data.draw(st.integers(1, 64))
    try:
        auto = replay_arrays(tiers, **kw)
    finally:
        door.STREAM_BUFFER_BLOCKS = saved
    walk = replay_arrays(tiers, **kw, options=ReplayOptions(kernel="walk"))
    assert auto.meta["kernel"]["name"] == "cache_stream_chain"
    assert ("then" in auto.meta["kernel"]) == (first_write < n_rows)
    np.testing.assert_array_equal(auto.tiers, walk.tiers)
    np.testing.assert_array_equal(auto.per_op, walk.per_op)
    np.testing.assert_array_equal(auto.by_kind, walk.by_kind)
    assert auto.n_blocks == walk.n_blocks
    passes = replay_arrays(tiers, **{**kw, "writes": True})
    assert passes.meta["kernel"]["name"] == "cache_stream_passes"
    np.testing.assert_array_equal(passes.tiers, walk.tiers)


def _pycachesim_misses(geometry, policy, addresses):
    below, caches = None, []
    for name, sets, ways in reversed(geometry):
        c = Cache(name, sets, ways, BLOCK, policy.upper(), load_from=below, store_to=below)
        caches.append(c)
        below = c
    mem = MainMemory()
    mem.load_to(caches[0])
    mem.store_from(caches[0])
    sim = CacheSimulator(caches[-1], mem)
    sim.load([int(a) for a in addresses])
    return [c.backend.MISS_count for c in reversed(caches)]


def test_a_trace_of_single_line_loads_counts_as_pycachesim_on_every_kernel(tmp_path):
    rng = np.random.default_rng(7)
    runs = [np.arange(s, s + 40) for s in rng.integers(0, 4000, 60)]
    hot = [rng.integers(4000, 4300, 40) for _ in range(60)]
    lines = np.concatenate([x for pair in zip(runs, hot) for x in pair]).astype(np.int64)
    with TraceWriter(tmp_path / "lines.trace", alignment=BLOCK) as w:
        t = w.add_tensor("lines", "weight", 4300 * BLOCK, "bf16")
        op = w.add_op("loads", "matmul", 0, "decode", 0, 1, 0)
        w.add_accesses(np.full(len(lines), op), np.full(len(lines), t), lines * BLOCK, np.full(len(lines), BLOCK))
    for policy in ("lru", "fifo"):
        geometry = [("l1", 8, 4), ("l2", 64, 8), ("l3", 128, 16)]
        for levels in (1, 2, 3):
            g = geometry[:levels]
            tiers = tuple(_cache(n, s, w_, policy) for n, s, w_ in g) + (MEMORY,)
            links = tuple(Link(x.name, y.name, 1e11, 0.0) for x, y in zip(tiers, tiers[1:]))
            chip = Chip("lines", tiers, links, Compute({"bf16": 1e15}, {"bf16": 0.0}))
            want = _pycachesim_misses(g, policy, lines * BLOCK)
            auto = replay_trace(tmp_path / "lines.trace", chip).result
            assert auto.meta["kernel"]["name"] == "cache_stream_chain"
            assert [int(m) for m in auto.counter("misses")[:levels]] == want
            for kernel in ("cache_stream_passes", "walk"):
                other = replay_trace(tmp_path / "lines.trace", chip,
                                     dataclasses.replace(ReplayOptions(), kernel=kernel)).result
                np.testing.assert_array_equal(auto.tiers, other.tiers)
