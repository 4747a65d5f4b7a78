"""Twins (emulator/engine/twins.py): a stream replayed only where it differs from a base stream gives
exactly the counts of its own whole replay.

Base streams as in tests/engine/test_setgroups.py (a lone LRU/FIFO tier over memory tiers, reads, writes,
PIM flags, every count-changing option), over more ops; each twin is the base with a few ops
changed: rows inserted, dropped, moved or turned into writes. Every counter per op, per kind and of
the flush, the blocks, the descriptors and the replayer's statistics equal those of
:func:`tierlab.engine.door.replay_arrays` on the twin alone (itself tested against the reference
and the walk), whether the twin joins the base again or not.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlab.chip.hierarchy import Tier
from tierlab.engine.door import replay_arrays, replay_twins
from tierlab.engine.geometry import KINDS
from tierlab.engine.options import ReplayOptions
from tierlab.engine.twins import diff_ops
from test_engine_reference import draw_accesses

STATS = ("fast_requests", "set_groups_sweeps", "set_groups_max", "set_groups_written_out")


@st.composite
def family(draw):
    """Tiers, tensors, options, a base stream (rows ``[op, tensor, offset, nbytes, count, stride,
    write, pim]``) and a few twins of it."""
    b0 = draw(st.sampled_from([16, 32, 64]))
    sets, ways = draw(st.integers(1, 9)), draw(st.integers(1, 5))
    tiers = [Tier("c", sets * ways * b0, b0, ways, draw(st.sampled_from(["lru", "fifo"])), "cache", 1.0, 0.0, 0.0),
             Tier("m", 1 << 20, b0, None, "lru", "memory", 1.0, 0.0, 0.0)]
    if draw(st.booleans()):
        tiers.append(Tier("far", 1 << 40, 2 * b0, None, "lru", "memory", 1.0, 0.0, 0.0))
    span = 1024
    tensors = [(t * span, draw(st.integers(1, len(tiers) - 1)), draw(st.integers(0, len(KINDS) - 1)),
                draw(st.integers(1, span))) for t in range(draw(st.integers(1, 4)))]
    n_ops = draw(st.integers(2, 14))
    base = draw_accesses(draw, tensors, n_ops, 40, 3,
                         lambda size: st.one_of(st.integers(1, min(size, 4 * b0)), st.integers(1, size)))
    twins = []
    for _ in range(draw(st.integers(1, 3))):
        rows = [list(a) for a in base]
        for _ in range(draw(st.integers(0, 3))):
            how = draw(st.sampled_from(["insert", "drop", "move", "write"]))
            if how == "insert" or not rows:
                op = draw(st.integers(0, n_ops - 1))
                tid = draw(st.integers(0, len(tensors) - 1))
                nb = draw(st.integers(1, tensors[tid][3]))
                rows.append([op, tid, draw(st.integers(0, tensors[tid][3] - nb)), nb, 1, 0,
                             draw(st.booleans()), 0])
                continue
            i = draw(st.integers(0, len(rows) - 1))
            if how == "drop":
                rows.pop(i)
            elif how == "move":
                t = tensors[rows[i][1]]
                rows[i][2] = draw(st.integers(0, t[3] - rows[i][3] - (rows[i][4] - 1) * rows[i][5]))
            else:
                rows[i][6] = not rows[i][6]
        rows.sort(key=lambda a: a[0])          # stable: an inserted row goes after its op's rows
        twins.append(rows)
    opts = ReplayOptions(store_hit_recency=draw(st.booleans()), fetch_on_write_miss=draw(st.booleans()),
                         flush=draw(st.booleans()), max_set_groups=draw(st.sampled_from([2, 4, 1 << 20])))
    return tiers, tensors, n_ops, base, twins, opts


def _cols(rows):
    cols = [np.array([a[j] for a in rows], np.int64).reshape(-1) for j in range(8)]
    cols[6] = cols[6].astype(bool)
    return tuple(cols)


def _kw(tiers, tensors, n_ops, opts):
    return dict(tensor_address=[t[0] for t in tensors], tensor_nbytes=[t[3] for t in tensors],
                tensor_home=[t[1] for t in tensors], tensor_kind=[t[2] for t in tensors], n_ops=n_ops,
                options=opts)


def _alone(tiers, tensors, n_ops, rows, opts):
    cols = _cols(rows)
    return replay_arrays(tiers, batches=lambda: iter([cols]) if len(rows) else iter([]),
                         **_kw(tiers, tensors, n_ops, opts))


def _assert_same(a, b):
    np.testing.assert_array_equal(a.per_op, b.per_op)
    np.testing.assert_array_equal(a.by_kind, b.by_kind)
    np.testing.assert_array_equal(a.flush, b.flush)
    np.testing.assert_array_equal(a.tiers, b.tiers)
    assert (a.n_blocks, a.n_accesses) == (b.n_blocks, b.n_accesses)
    for k in STATS:
        assert a.meta.get(k) == b.meta.get(k), k


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family())
def test_twins_count_as_their_own_replay(fam):
    tiers, tensors, n_ops, base, twins, opts = fam
    # every twin followed, however many of its few ops differ (the default leaves out one differing
    # in more than 1/16 of them: tests below)
    out = replay_twins(tiers, base=_cols(base), twins=[_cols(t) for t in twins], max_diff_share=1.0,
                       **_kw(tiers, tensors, n_ops, opts))
    assert out is not None and len(out) == 1 + len(twins)
    _assert_same(out[0], _alone(tiers, tensors, n_ops, base, opts))
    for rows, res in zip(twins, out[1:]):
        n_diff = len(diff_ops(_cols(base), _cols(rows), n_ops))
        if res is None:     # the base was handed to the walk before the twin forked
            assert opts.max_set_groups < 1 << 20
            continue
        _assert_same(res, _alone(tiers, tensors, n_ops, rows, opts))
        assert res.meta["twin"]["diff_ops"] == n_diff


def _sweeps(n_ops, weight_bytes, extra_at=()):
    """A model-like stream: each op reads a weight larger than the tier, then writes an activation;
    ``extra_at``: ops that also read one more row of an embedding table first."""
    rows = []
    for op in range(n_ops):
        if op in extra_at:
            rows.append([op, 2, 64 * op, 64, 1, 0, False, 0])
        rows.append([op, 0, 0, weight_bytes, 1, 0, False, 0])
        rows.append([op, 1, 0, 256, 1, 0, True, 0])
    return rows


def test_a_twin_rejoins_after_a_sweep_and_counts_as_alone():
    tiers = [Tier("l2", 64 * 4 * 64, 64, 4, "lru", "cache", 1.0, 0.0, 0.0),
             Tier("hbm", 1 << 30, 64, None, "lru", "memory", 1.0, 0.0, 0.0)]
    tensors = [(0, 1, 0, 1 << 16), (1 << 16, 1, 1, 1024), (1 << 17, 1, 2, 1 << 14)]
    opts = ReplayOptions(flush=True)
    base = _sweeps(40, 1 << 16)
    twins = [_sweeps(40, 1 << 16, extra_at=(0, 20)), _sweeps(40, 1 << 16, extra_at=(39,))]
    out = replay_twins(tiers, base=_cols(base), twins=[_cols(t) for t in twins], **_kw(tiers, tensors, 40, opts))
    for rows, res in zip([base] + twins, out):
        _assert_same(res, _alone(tiers, tensors, 40, rows, opts))
    first, last = out[1].meta["twin"], out[2].meta["twin"]
    assert first["joined"] and first["windows"] == 2 and first["window_ops"] < 10
    assert not last["joined"] and last["window_ops"] == 1          # the last op differs: never joins


def test_a_stream_differing_in_many_ops_is_left_to_replay_on_its_own():
    tiers = [Tier("l2", 64 * 4 * 64, 64, 4, "lru", "cache", 1.0, 0.0, 0.0),
             Tier("hbm", 1 << 30, 64, None, "lru", "memory", 1.0, 0.0, 0.0)]
    tensors = [(0, 1, 0, 1 << 16), (1 << 16, 1, 1, 1024), (1 << 17, 1, 2, 1 << 14)]
    base = _sweeps(40, 1 << 16)
    few, many = _sweeps(40, 1 << 16, extra_at=(3,)), _sweeps(40, 1 << 16, extra_at=range(0, 40, 4))
    out = replay_twins(tiers, base=_cols(base), twins=[_cols(few), _cols(many)],
                       **_kw(tiers, tensors, 40, ReplayOptions()))
    assert out[1] is not None and out[2] is None     # 1 and 10 of 40 ops differ: 10 is more than 1/16
    _assert_same(out[1], _alone(tiers, tensors, 40, few, ReplayOptions()))


def test_no_twins_on_a_kernel_whose_state_does_not_fork():
    tiers = [Tier("l1", 4 * 64, 64, 2, "lru", "cache", 1.0, 0.0, 0.0),
             Tier("l2", 16 * 64, 64, 4, "lru", "cache", 1.0, 0.0, 0.0),
             Tier("hbm", 1 << 30, 64, None, "lru", "memory", 1.0, 0.0, 0.0)]
    tensors = [(0, 2, 0, 4096), (4096, 2, 1, 1024), (8192, 2, 2, 1024)]
    rows = _sweeps(4, 4096)
    opts = dataclasses.replace(ReplayOptions())
    assert replay_twins(tiers, base=_cols(rows), twins=[_cols(rows)], **_kw(tiers, tensors, 4, opts)) is None
