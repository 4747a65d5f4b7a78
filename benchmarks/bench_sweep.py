"""Sweep speed-up: one block stream against several hierarchies, all cores vs one after the other.

The issue-4 stream (``--lines``, default 2 M) on four hierarchies (1-, 2-, 3-level LRU and 2-level
FIFO of bench_replay's geometry): sequential replays, then :func:`tierlab.analysis.sweep.sweep_blocks`
with one worker per core on each backend; results must be identical. Other work on the machine
takes cores from the sweep, so the load average and the speed-up a GIL-free spin loop gets on the
same threads (``available_parallelism``, before and after) are recorded beside it.

    python benchmarks/bench_sweep.py [--lines N] [--backends thread,process]
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from _common import LINE_BYTES, emit, issue_blocks, log, timed
from bench_replay import tiers_for

from tierlab.engine.jit import njit
from tierlab.analysis.sweep import engine_releases_gil, sweep_blocks


@njit(nogil=True)
def _spin(n):
    x = 0
    for i in range(n):
        x = (x * 31 + i) % 1000003
    return x


def available_parallelism(workers: int, n: int = 100_000_000) -> float:
    """Speed-up of ``workers`` copies of a compiled, GIL-free spin loop run on threads vs one after
    the other: how many cores this process really gets right now (other jobs share the machine)."""
    _spin(10)
    t_seq, _ = timed(lambda: [_spin(n) for _ in range(workers)])
    with ThreadPoolExecutor(workers) as pool:
        t_par, _ = timed(lambda: list(pool.map(_spin, [n] * workers)))
    return t_seq / t_par


def same(a, b) -> bool:
    return all(np.array_equal(x.tiers, y.tiers) and np.array_equal(x.per_op, y.per_op) for x, y in zip(a, b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2_000_000, help="loads in the stream (default 2 M)")
    ap.add_argument("--backends", default="thread,process", help="backends to time (default thread,process)")
    ap.add_argument("--workers", type=int, default=os.cpu_count(), help="workers (default: cores)")
    args = ap.parse_args()
    addrs = issue_blocks(args.lines) * LINE_BYTES
    hierarchies = [tiers_for(1, "lru"), tiers_for(2, "lru"), tiers_for(3, "lru"), tiers_for(2, "fifo")]
    sweep_blocks(addrs[:2000], hierarchies, workers=1)             # warm the JIT in this process
    load_before = os.getloadavg()
    cores_before = available_parallelism(args.workers)
    t_seq, seq = timed(sweep_blocks, addrs, hierarchies, workers=1)
    log("sequential", t_seq)
    runs = []
    for backend in args.backends.split(","):
        t_par, par = timed(sweep_blocks, addrs, hierarchies, workers=args.workers, backend=backend)
        runs.append({"backend": backend, "workers": args.workers, "seconds": t_par,
                     "speedup": t_seq / t_par, "identical": same(seq, par)})
        log(runs[-1])
    emit("bench_sweep", {
        "lines": int(addrs.shape[0]), "hierarchies": len(hierarchies),
        "engine_releases_gil": engine_releases_gil(),
        "sequential_s": t_seq, "sequential_blocks_per_s": len(hierarchies) * addrs.shape[0] / t_seq,
        "parallel": runs, "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "available_parallelism": {"before": cores_before, "after": available_parallelism(args.workers)},
    })


if __name__ == "__main__":
    main()
