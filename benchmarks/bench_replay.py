"""Replay throughput on the issue-4 stream: tierlab vs pycachesim on the same block stream, same run.

10 M loads of 64-byte lines (see ``_common.issue_blocks``: 250-line sequential runs over 64 MiB
alternating with 250 random lines of a 512 KiB hot set, fixed seed) replayed on 1-, 2- and 3-level
hierarchies (L1 32 KiB 8-way, L2 1 MiB 16-way, L3 8 MiB 16-way; 64 B lines) for each policy.
For each: tierlab's blocks/s (warm JIT) on all cores and on one thread, pycachesim's blocks/s on the
same addresses (its C ``iterload``, one thread; the list conversion it needs is timed separately),
the ratios, and whether the per-level miss counts agree (lru, fifo; pycachesim's random differs by
design, opt it lacks). Timings are the best of ``--repeat`` runs (the machine may be shared).
Also: a floor loop (compiled; reads each address and one L1 tag row, nothing else) and the JIT
compile time cold (fresh NUMBA_CACHE_DIR, in a subprocess) and warm (same cache, new process) of
the block-stream kernels and of the trace engine.

    python benchmarks/bench_replay.py [--lines N] [--levels 1,2,3] [--policies lru,fifo,random,opt]
                                      [--threads N] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from _common import LINE_BYTES, REPO, emit, issue_blocks, log, timed, timed_cpu

from tierlab.chip.hierarchy import Tier
from tierlab.engine.jit import njit

GEOMETRY = (("l1", 32 << 10, 8), ("l2", 1 << 20, 16), ("l3", 8 << 20, 16))
PYCACHESIM_POLICY = {"lru": "LRU", "fifo": "FIFO", "random": "RR"}
EXACT_POLICIES = ("lru", "fifo")


def tiers_for(levels: int, policy: str) -> tuple[Tier, ...]:
    return tuple(Tier(name, cap, LINE_BYTES, ways, policy, "cache", 1e12, 0.0, 0.0)
                 for name, cap, ways in GEOMETRY[:levels])


def tierlab_replay(addresses: np.ndarray, tiers, threads: int = 1) -> list[int]:
    """The engine's raw-block entry point; returns misses per cache level. (The one place to
    plug a different entry point in.) ``threads`` > 1: the stream is split by a set-index bit
    shared by every tier and the halves replay on two threads (exact; see ReplayOptions.threads)."""
    from tierlab.engine.door import replay_blocks
    from tierlab.engine.options import ReplayOptions

    result = replay_blocks(addresses, tiers=tiers, options=ReplayOptions(threads=threads))
    return [int(m) for m in result.counter("misses")[:len(tiers)]]


def pycachesim_replay(addr_list: list[int], levels: int, policy: str) -> list[int]:
    from cachesim import Cache, CacheSimulator, MainMemory

    caches = []
    below = None
    for name, cap, ways in reversed(GEOMETRY[:levels]):
        sets = cap // (ways * LINE_BYTES)
        kw = {} if below is None else {"load_from": below, "store_to": below}
        c = Cache(name, sets, ways, LINE_BYTES, PYCACHESIM_POLICY[policy], **kw)
        caches.append(c)
        below = c
    mem = MainMemory()
    mem.load_to(caches[0])
    mem.store_from(caches[0])
    sim = CacheSimulator(caches[-1], mem)
    sim.load(addr_list)
    stats = {s["name"]: s for s in sim.stats()}
    return [stats[name]["MISS_count"] for name, _, _ in GEOMETRY[:levels]]


@njit
def floor_loop(blocks, tags):
    """Read each block number and its L1 tag row; nothing else (the bound on any per-block replay)."""
    n_sets = tags.shape[0]
    found = 0
    for i in range(blocks.shape[0]):
        b = blocks[i]
        row = b % n_sets
        for w in range(tags.shape[1]):
            found += tags[row, w] == b
    return found


_JIT_PROBE = """
import json, tempfile, time
t0 = time.perf_counter()
import numpy as np
from tierlab.chip.hierarchy import Tier
from tierlab.engine.door import replay_blocks
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model
t1 = time.perf_counter()
tiers = tuple(Tier(n, c, 64, w, "lru", "cache", 1e12, 0.0, 0.0)
              for n, c, w in (("l1", 32 << 10, 8), ("l2", 1 << 20, 16)))
a = np.arange(4096, dtype=np.int64) * 64
replay_blocks(a, tiers=tiers)                                    # the read-only chain
t2 = time.perf_counter()
replay_blocks(a, np.arange(4096) % 3 == 0, tiers=tiers)          # the tier passes (writes)
t3 = time.perf_counter()
with tempfile.TemporaryDirectory() as d:
    path = generate_trace(load_model("qwen2-0.5b"), RunConfig(context=16, generate=1), d + "/t")
    t4 = time.perf_counter()
    replay_trace(path, "h100")                                   # the trace engine (set groups on h100)
    t5 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "first_replay_s": t2 - t1, "first_write_replay_s": t3 - t2,
                  "first_trace_replay_s": t5 - t4}))
"""


def jit_times() -> dict:
    """First calls in a fresh process: with an empty Numba cache (cold), then with it filled (warm):
    the read-only block-stream chain, the tier passes (a stream with writes) and a trace replay on
    h100 (its L2 is the lone caching tier: the set-group engine, what `tierlab run --chip h100`
    compiles on a fresh machine)."""
    with tempfile.TemporaryDirectory(prefix="tierlab-numba-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        runs = []
        for _ in range(2):
            out = subprocess.run([sys.executable, "-c", _JIT_PROBE], env=env, cwd=REPO, check=True,
                                 capture_output=True, text=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
    keys = ("first_replay_s", "first_write_replay_s", "first_trace_replay_s")
    return {"cold": runs[0], "warm": runs[1],
            "compile_s": {k: runs[0][k] - runs[1][k] for k in keys}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=10_000_000, help="loads in the stream (default 10 M)")
    ap.add_argument("--levels", default="1,2,3", help="hierarchy depths to run (default 1,2,3)")
    ap.add_argument("--policies", default="lru,fifo,random,opt", help="policies (default lru,fifo,random,opt)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N timings of each replay (default 3)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="threads for the headline tierlab figure (default: the machine's cores); "
                         "the one-thread figure is reported too")
    ap.add_argument("--no-jit", action="store_true", help="skip the cold/warm JIT subprocesses")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    policies = [p.strip() for p in args.policies.split(",")]

    blocks = issue_blocks(args.lines)
    addrs = blocks * LINE_BYTES
    t_list, addr_list = timed(lambda: addrs.tolist())
    n = len(blocks)

    tags = np.full((GEOMETRY[0][1] // (GEOMETRY[0][2] * LINE_BYTES), GEOMETRY[0][2]), -1, np.int64)
    floor_loop(blocks[:10], tags)
    t_floor, _ = timed(floor_loop, blocks, tags, repeat=3)

    runs = []
    for policy in policies:
        for lv in levels:
            tiers = tiers_for(lv, policy)
            tierlab_replay(addrs[:2000], tiers)                      # warm: load/compile once
            tierlab_replay(addrs[:2000], tiers, args.threads)
            t_1, c_1, one_misses = timed_cpu(tierlab_replay, addrs, tiers, repeat=args.repeat)
            t_tl, c_tl, tl_misses = timed_cpu(tierlab_replay, addrs, tiers, args.threads, repeat=args.repeat)
            row = {"levels": lv, "policy": policy, "threads": args.threads, "tierlab_s": t_tl, "tierlab_cpu_s": c_tl,
                   "tierlab_blocks_per_s": n / t_tl, "tierlab_misses": tl_misses,
                   "tierlab_1thread_s": t_1, "tierlab_1thread_blocks_per_s": n / t_1,
                   "threads_equal": one_misses == tl_misses}
            if policy in PYCACHESIM_POLICY:
                t_pc, c_pc, pc_misses = timed_cpu(pycachesim_replay, addr_list, lv, policy, repeat=args.repeat)
                row.update(pycachesim_s=t_pc, pycachesim_cpu_s=c_pc, pycachesim_blocks_per_s=n / t_pc,
                           pycachesim_misses=pc_misses, ratio=t_pc / t_tl, ratio_1thread=t_pc / t_1,
                           ratio_cpu=c_pc / c_tl)
                if policy in EXACT_POLICIES:
                    row["counts_equal"] = pc_misses == tl_misses
            row["floor_ratio"] = t_floor / t_tl
            runs.append(row)
            log(json.dumps(row))
    out = {
        "lines": n, "line_bytes": LINE_BYTES, "distinct_lines": int(np.unique(blocks).size),
        "hierarchy": [{"name": nme, "capacity_bytes": c, "ways": w} for nme, c, w in GEOMETRY],
        "floor": {"seconds": t_floor, "blocks_per_s": n / t_floor,
                  "what": "reads each block number and one L1 tag row"},
        "pycachesim_list_conversion_s": t_list,
        "runs": runs,
    }
    if not args.no_jit:
        out["jit"] = jit_times()
    emit("bench_replay", out)


if __name__ == "__main__":
    main()
