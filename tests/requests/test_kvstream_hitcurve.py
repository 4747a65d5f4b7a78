"""The prefix hit curve equals plain replays (LRU in one pass; FIFO and OPT per capacity)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tierlab.analysis.mrc import COLD_DISTANCE, LruDistances
from tierlab.kvstream.hitcurve import hit_curve
from tierlab.kvstream.reader import read_requests
from kvstream_reference import random_requests, replay, seen_before, write_csv

TRACES = "/work/scratch/traces"


@pytest.mark.parametrize("policy", ["lru", "fifo", "opt"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_curve_equals_plain_replay(tmp_path, policy, seed):
    reqs, inps, bt = random_requests(seed, n=50 + 10 * seed)
    trace = read_requests(write_csv(tmp_path / "r.csv", reqs, inps), block_tokens=bt)
    caps_blocks = [1, 2, 3, 5, 8, 13, 30, trace.n_unique_blocks, trace.n_unique_blocks + 5]
    curve = hit_curve(trace, capacities_tokens=[c * bt + (c % 3) for c in caps_blocks], policy=policy)
    for c, hb, ht in zip(caps_blocks, curve.hit_blocks, curve.hit_tokens):
        assert (hb, ht) == replay(reqs, inps, bt, c, policy), (policy, c)
    assert (curve.max_hit_blocks, curve.max_hit_tokens) == seen_before(reqs, inps, bt)


@pytest.mark.parametrize("seed", [3, 4])
def test_infinite_capacity_is_seen_before(tmp_path, seed):
    reqs, inps, bt = random_requests(seed, n=120)
    trace = read_requests(write_csv(tmp_path / "r.csv", reqs, inps), block_tokens=bt)
    hb, ht = seen_before(reqs, inps, bt)
    d = hit_curve(trace).to_dict()
    assert d["max_hit_ratio_tokens"] == ht / sum(inps)
    assert d["requests"] == len(reqs) and d["input_tokens"] == sum(inps)
    assert d["unique_blocks"] == len({b for r in reqs for b in r})
    last = d["curve"][-1]                       # the default curve ends at every distinct block
    assert last["capacity_tokens"] == d["unique_blocks"] * bt
    assert last["hit_ratio_tokens"] == d["max_hit_ratio_tokens"]
    assert last["hit_ratio_blocks"] == hb / sum(len(r) for r in reqs)
    assert set(d) == {"curve", "max_hit_ratio_tokens", "requests", "input_tokens", "unique_blocks",
                      "block_tokens", "policy"}
    assert set(d["curve"][0]) == {"capacity_tokens", "hit_ratio_tokens", "hit_ratio_blocks"}


def test_repeated_id_within_a_request(tmp_path):
    reqs = [[5, 6, 5, 7], [5, 6, 5, 8], [9, 5, 6, 5]]
    inps = [60, 64, 50]
    trace = read_requests(write_csv(tmp_path / "r.csv", reqs, inps), block_tokens=16)
    for policy in ("lru", "fifo", "opt"):
        curve = hit_curve(trace, capacities_tokens=[16, 32, 48, 64, 160], policy=policy)
        for c, hb, ht in zip([1, 2, 3, 4, 10], curve.hit_blocks, curve.hit_tokens):
            assert (hb, ht) == replay(reqs, inps, 16, c, policy), (policy, c)


def test_distances_patch_is_consistent_with_the_histogram():
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 300, 5000)
    a, b = LruDistances(initial_log2=1), LruDistances(initial_log2=1)   # growth and renumbering too
    d = np.empty(blocks.size, np.int64)
    for lo in range(0, blocks.size, 700):
        a.update(blocks[lo:lo + 700], distances=d[lo:lo + 700])
        b.update(blocks[lo:lo + 700])
    ca, cb = a.curve(1), b.curve(1)
    assert np.array_equal(ca.hist, cb.hist) and ca.beyond == cb.beyond
    warm = d != COLD_DISTANCE
    assert np.array_equal(np.bincount(d[warm], minlength=ca.hist.size)[:ca.hist.size], ca.hist)
    assert int((~warm).sum()) == ca.beyond == len(set(blocks.tolist()))


def test_trace_without_hash_ids_never_hits(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44\r\n"
                 "2023-11-16 18:15:50.9951690,1396,109")
    d = hit_curve(read_requests(p)).to_dict()
    assert d["max_hit_ratio_tokens"] == 0.0 and d["unique_blocks"] == 1 + 3


@pytest.mark.skipif(not os.path.exists(f"{TRACES}/conversation_trace.jsonl"), reason="real traces not shipped")
def test_mooncake_figures():
    for name, want in (("conversation_trace.jsonl", 0.3736), ("synthetic_trace.jsonl", 0.6512)):
        d = hit_curve(read_requests(f"{TRACES}/{name}")).to_dict()
        assert round(d["max_hit_ratio_tokens"], 4) == want
