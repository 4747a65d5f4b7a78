"""The block store against an OrderedDict, operation by operation."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from tierlab.common.errors import UsageError
from tierlab.kvstream.blockstore import BlockStore
from tierlab.kvstream.hitcurve import hit_curve
from tierlab.kvstream.reader import read_requests
from kvstream_reference import random_requests, write_csv


@pytest.mark.parametrize("policy", ["lru", "fifo"])
@pytest.mark.parametrize("capacity", [1, 3, 8])
def test_store_equals_ordered_dict(policy, capacity):
    rng = np.random.default_rng(capacity)
    n_ids = 20
    store = BlockStore(n_ids, capacity, policy)
    ref: OrderedDict[int, None] = OrderedDict()
    for _ in range(400):
        ids = rng.choice(n_ids, rng.integers(0, 6), replace=False)
        op = rng.integers(0, 3)
        k = 0
        while k < len(ids) and ids[k] in ref:
            k += 1
        assert store.lookup_prefix(ids) == k
        assert store.contains(ids).tolist() == [i in ref for i in ids]
        if op < 2:
            evicted = []
            for b in ids.tolist():
                if b in ref:
                    if policy == "lru":
                        ref.move_to_end(b)
                    continue
                if len(ref) == capacity:
                    evicted.append(ref.popitem(last=False)[0])
                ref[b] = None
            assert store.touch(ids).tolist() == evicted
        else:
            held = [b for b in ids.tolist() if b in ref]
            for b in held:
                del ref[b]
            assert store.remove(ids) == len(held)
        assert store.size == len(ref) and store.resident().tolist() == list(ref)


def test_request_longer_than_capacity_evicts_its_own_first_blocks():
    s = BlockStore(10, 2)
    assert s.touch([0, 1, 2, 3]).tolist() == [0, 1]
    assert s.lookup_prefix([2, 3]) == 2 and s.lookup_prefix([0, 2]) == 0


def test_store_errors():
    for bad in (0, -1, 1.5):
        with pytest.raises(UsageError, match="capacity"):
            BlockStore(4, bad)
    with pytest.raises(UsageError, match="policy"):
        BlockStore(4, 2, "opt")
    with pytest.raises(UsageError, match="0..3"):
        BlockStore(4, 2).touch([4])


@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_store_replay_equals_the_hit_curve(tmp_path, policy):
    reqs, inps, bt = random_requests(21, n=80)
    trace = read_requests(write_csv(tmp_path / "r.csv", reqs, inps), block_tokens=bt)
    for cap in (2, 7, 20):
        store = BlockStore(trace.n_unique_blocks, cap, policy)
        hit = 0
        for i in range(len(trace)):
            ids = trace.request_blocks(i)
            hit += store.lookup_prefix(ids)
            store.touch(ids)
        assert hit == hit_curve(trace, capacities_tokens=[cap * bt], policy=policy).hit_blocks[0]
