"""One-pass miss-ratio curves vs a naive stack-distance loop and vs one replay per size.

On the issue-4 stream (64-byte lines): the fully-associative one-pass curve (bitset + Fenwick
stack distances) against a naive stack-distance loop (compiled; linear search of an LRU stack) on
the same prefix, with equal histograms required; the per-set curve of an L2-like geometry (1 MiB,
16-way, 1024 sets; every way count up to 32) against one pycachesim replay per way count, with
equal miss counts required; and the cost of OPT per size.

    python benchmarks/bench_mrc.py [--lines N] [--naive-lines N]
"""

from __future__ import annotations

import argparse

import numpy as np

from _common import LINE_BYTES, emit, issue_blocks, log, timed_cpu

from tierlab.engine.jit import njit
from tierlab.analysis.mrc import LruDistances, SetLruDistances
from tierlab.analysis.mrc_opt import opt_misses


@njit
def naive_stack_distances(blocks, hist):
    """The textbook loop: an LRU stack as an array, searched from the top, moved to front.
    ``hist[d]`` counts distance d; returns the number of cold accesses."""
    stack = np.empty(blocks.shape[0], np.int64)
    depth = 0
    cold = 0
    for t in range(blocks.shape[0]):
        b = blocks[t]
        d = 0
        while d < depth and stack[d] != b:
            d += 1
        if d == depth:
            cold += 1
            depth += 1
        else:
            hist[d] += 1
        for j in range(d, 0, -1):
            stack[j] = stack[j - 1]
        stack[0] = b
    return cold


def one_pass(blocks):
    acc = LruDistances()
    acc.update(blocks)
    return acc.curve(LINE_BYTES)


def per_set_pass(blocks, n_sets, max_ways):
    acc = SetLruDistances(n_sets, max_ways)
    acc.update(blocks)
    return acc.curve(LINE_BYTES)


def pycachesim_misses(addrs, n_sets, ways):
    from cachesim import Cache, CacheSimulator, MainMemory

    mem = MainMemory()
    cache = Cache("L", n_sets, ways, LINE_BYTES, "LRU")
    mem.load_to(cache)
    mem.store_from(cache)
    sim = CacheSimulator(cache, mem)
    sim.load(addrs)
    return next(s for s in sim.stats() if s["name"] == "L")["MISS_count"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=10_000_000, help="length of the stream (default 10 M)")
    ap.add_argument("--naive-lines", type=int, default=100_000, help="prefix for the naive loop (default 100 k)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N timings")
    args = ap.parse_args()
    blocks = issue_blocks(args.lines)
    out: dict = {"lines": args.lines, "line_bytes": LINE_BYTES}

    # warm the JIT (compiled functions are cached on disk; the first call still loads them)
    one_pass(blocks[:1000])
    per_set_pass(blocks[:1000], 4, 4)
    naive_stack_distances(blocks[:100], np.zeros(100, np.int64))
    opt_misses(blocks[:1000], [4])

    # 1. one pass vs the naive stack-distance loop, same prefix, same histogram
    prefix = blocks[:args.naive_lines]
    hist = np.zeros(prefix.shape[0], np.int64)
    t_naive, c_naive, cold = timed_cpu(naive_stack_distances, prefix, hist)
    t_fast, c_fast, curve = timed_cpu(one_pass, prefix, repeat=args.repeat)
    k = curve.hist.shape[0]
    if cold != curve.cold_misses or not np.array_equal(hist[:k], curve.hist) or hist[k:].any():
        raise SystemExit("one-pass histogram differs from the naive loop")
    out["vs_naive"] = {
        "prefix_lines": int(prefix.shape[0]), "distinct_blocks": int(cold),
        "naive_s": t_naive, "one_pass_s": t_fast, "naive_cpu_s": c_naive, "one_pass_cpu_s": c_fast,
        "naive_blocks_per_s": prefix.shape[0] / t_naive, "one_pass_blocks_per_s": prefix.shape[0] / t_fast,
        "speedup": t_naive / t_fast, "speedup_cpu": c_naive / c_fast, "histograms_equal": True,
    }
    log("vs naive:", out["vs_naive"])

    # 2. one pass over the whole stream, fully associative
    t_full, c_full, curve = timed_cpu(one_pass, blocks, repeat=args.repeat)
    caps = [32 << 10, 1 << 20, 8 << 20, 64 << 20, 128 << 20]
    out["fully_associative"] = {
        "seconds": t_full, "blocks_per_s": blocks.shape[0] / t_full,
        "cpu_seconds": c_full, "blocks_per_cpu_s": blocks.shape[0] / c_full,
        "distinct_blocks": curve.cold_misses, "capacities_covered": curve.cold_misses,
        "miss_ratio": {str(c): curve.miss_ratio(c) for c in caps},
    }
    log("fully associative:", out["fully_associative"])

    # 3. per-set curve (L2-like geometry) vs one pycachesim replay per way count
    n_sets, max_ways = 1024, 32
    t_sets, c_sets, set_curve = timed_cpu(per_set_pass, blocks, n_sets, max_ways, repeat=args.repeat)
    addrs = (blocks * LINE_BYTES).tolist()
    ways_list = [1, 2, 4, 8, 16, 32]
    replays, t_replays, c_replays = {}, 0.0, 0.0
    for w in ways_list:
        t, c, m = timed_cpu(pycachesim_misses, addrs, n_sets, w)
        replays[w] = m
        t_replays += t
        c_replays += c
        if m != set_curve.misses(n_sets * w * LINE_BYTES):
            raise SystemExit(f"per-set curve differs from pycachesim at {w} ways")
    out["per_set_vs_replays"] = {
        "n_sets": n_sets, "max_ways": max_ways, "one_pass_s": t_sets, "one_pass_cpu_s": c_sets,
        "one_pass_blocks_per_s": blocks.shape[0] / t_sets,
        "pycachesim_replays": len(ways_list), "pycachesim_total_s": t_replays,
        "pycachesim_total_cpu_s": c_replays, "pycachesim_s_per_replay": t_replays / len(ways_list),
        "speedup_vs_replays": t_replays / t_sets, "speedup_vs_replays_cpu": c_replays / c_sets,
        "miss_ratio_by_ways": {str(w): replays[w] / blocks.shape[0] for w in ways_list},
        "counts_equal": True,
    }
    log("per set:", out["per_set_vs_replays"])

    # 4. OPT, one exact pass per size (fully associative)
    opt_caps = [c // LINE_BYTES for c in (32 << 10, 1 << 20, 8 << 20)]
    t_opt, c_opt, got = timed_cpu(opt_misses, blocks, opt_caps, workers=1)
    out["opt"] = {"sizes": len(opt_caps), "seconds": t_opt, "cpu_seconds": c_opt,
                  "seconds_per_size": t_opt / len(opt_caps),
                  "miss_ratio": {str(c * LINE_BYTES): got[c] / blocks.shape[0] for c in opt_caps},
                  "lru_miss_ratio": {str(c * LINE_BYTES): curve.miss_ratio(c * LINE_BYTES) for c in opt_caps}}
    log("opt:", out["opt"])
    emit("bench_mrc", out)


if __name__ == "__main__":
    main()
