"""Sweeps give exactly the results of one replay after the other, on every backend."""

import numpy as np
import pytest

from tierlab.chip.hierarchy import Tier
from tierlab.engine.door import replay_blocks
from tierlab.engine.options import ReplayOptions
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.analysis.sweep import sweep_blocks, sweep_trace
from tierlab.common.errors import UsageError
from tierlab.traces.format.writer import TraceWriter


def cache(name, cap, ways, policy, block=64):
    return Tier(name, cap, block, ways, policy, "cache", 1e12, 0.0, 0.0)


HIERARCHIES = [
    (cache("l1", 2048, 4, "lru"),),
    (cache("l1", 2048, 4, "fifo"), cache("l2", 16384, 8, "lru", 128)),
    (cache("l1", 1024, 2, "random"), cache("l2", 8192, None, "lru"), cache("l3", 65536, 16, "fifo", 256)),
    (cache("l1", 4096, 4, "opt"),),
]


@pytest.fixture(scope="module")
def stream():
    rng = np.random.default_rng(5)
    addrs = np.concatenate([np.arange(0, 200_000, 64), rng.integers(0, 1 << 16, 6000) * 8,
                            np.arange(0, 200_000, 64)])
    writes = rng.random(addrs.shape[0]) < 0.3
    return addrs.astype(np.int64), writes


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_sweep_equals_sequential_replays(stream, backend):
    addrs, writes = stream
    opts = ReplayOptions(seed=3, flush=True)
    got = sweep_blocks(addrs, HIERARCHIES, writes, options=opts, workers=2, backend=backend)
    assert len(got) == len(HIERARCHIES)
    for h, r in zip(HIERARCHIES, got):
        ref = replay_blocks(addrs, writes, tiers=h, options=opts)
        assert r.tier_names == ref.tier_names
        assert np.array_equal(r.tiers, ref.tiers)
        assert np.array_equal(r.flush, ref.flush)
        assert np.array_equal(r.per_op, ref.per_op)
        assert r.tiers[0, 0] + r.tiers[0, 1] == len(addrs)     # hits + misses at tier 0 = requests


def test_sweep_trace_equals_sequential(tmp_path):
    path = tmp_path / "s.trace"
    with TraceWriter(path) as w:
        wt = w.add_tensor("w", "weight", 3 << 20, "bf16")
        kv = w.add_tensor("kv", "kv", 1 << 20, "bf16")
        for step in range(2):
            op = w.add_op(f"o{step}", "linear", 0, "decode", step, 1, 1000)
            w.add_access(op, wt, 0, 3 << 20)
            w.add_access(op, kv, 4096, 512, count=100, stride=8192, is_write=step == 1)
    chips = ["h100", "a100"]
    got = sweep_trace(path, chips, workers=2, backend="process")
    for chip, (placement, result) in zip(chips, got):
        ref = replay_trace(path, chip)
        assert np.array_equal(placement.home, ref.placement.home)
        assert np.array_equal(result.tiers, ref.result.tiers)
        assert np.array_equal(result.per_op, ref.result.per_op)


def test_bad_arguments():
    with pytest.raises(UsageError):
        sweep_blocks(np.arange(4), HIERARCHIES[:2], workers=0)
    with pytest.raises(UsageError):
        sweep_blocks(np.arange(4), HIERARCHIES[:2], backend="gpu", workers=2)
    with pytest.raises(UsageError):
        sweep_blocks(np.arange(4), HIERARCHIES[:2], np.zeros(3, bool))
