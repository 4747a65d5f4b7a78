"""tierlab sweep on Dask: the embedded LocalCluster against the same points one after another.

A grid of 32 points (qwen2-0.5b on h100 and a100 x batch 1, 2, 4, 8 x context 64, 128 x L2
capacity 25 MiB, 50 MiB; one generated token, or ``--generate N``), 8 trace groups of 4 points. Timed:

* ``sequential_s``: every group through :func:`tierlab.design_space.point.run_group` in this process
  (trace once, replay its 4 points), after one warm-up group (imports, JIT);
* ``dask_cold_s``: :func:`tierlab.design_space.runner.run_sweep` as ``tierlab sweep`` runs it, starting
  its LocalCluster (``--workers``, default 2) and stopping it;
* ``dask_warm_s``: the same sweep on an already started cluster whose workers ran a warm-up group.

Rows of both ways must agree (tokens per second, per point hash). Scheduler overhead per point is
``(dask_warm_s - sequential_s / workers) / points``: what the sweep costs beyond a perfect split.

    python benchmarks/bench_sweep_dask.py [--workers 2] [--generate 1]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import tempfile
import time
from pathlib import Path

from _common import emit, log

from tierlab.design_space.grid import grid_from_dict
from tierlab.design_space.point import run_group
from tierlab.design_space.runner import group_points, run_sweep
from tierlab.design_space.store import SweepStore

AXES = {"model": ["qwen2-0.5b"], "chip": ["h100", "a100"], "batch": [1, 2, 4, 8], "context": [64, 128],
        "generate": [1]}
OVERRIDES = {"tier.l2.capacity": ["25 MiB", "50 MiB"]}
WARM = {"model": ["qwen2-0.5b"], "chip": ["h100"], "batch": [3], "context": [32], "generate": [1]}


def _warm_group():
    g = grid_from_dict(dict(WARM))
    return g.points(), g.override_keys


def _warm():
    pts, keys = _warm_group()
    return len(run_group(pts, keys))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--generate", type=int, default=1, help="tokens generated per point (heavier points)")
    args = ap.parse_args()
    AXES["generate"] = [args.generate]
    grid = grid_from_dict(dict(AXES), dict(OVERRIDES))
    points = grid.points()
    groups = group_points(points)
    keys = grid.override_keys
    log(f"{len(points)} points in {len(groups)} trace groups")

    _warm()
    t0 = time.perf_counter()
    seq_rows = [r for g in groups for r in run_group(g, keys)]
    t_seq = time.perf_counter() - t0
    log(f"sequential {t_seq:.2f} s")

    tmp = Path(tempfile.mkdtemp(prefix="bench-sweep-dask-"))
    t0 = time.perf_counter()
    s_cold = run_sweep(grid, SweepStore(tmp / "cold.parquet", grid.columns), workers=args.workers)
    t_cold = time.perf_counter() - t0
    log(f"dask cold {t_cold:.2f} s")

    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None,
                           silence_logs=logging.ERROR)
    client = Client(cluster)
    t_start = time.perf_counter() - t0
    client.run(_warm)

    @contextlib.contextmanager
    def started(*_a):
        yield client

    store = SweepStore(tmp / "warm.parquet", grid.columns)
    t0 = time.perf_counter()
    s_warm = run_sweep(grid, store, client_factory=started)
    t_warm = time.perf_counter() - t0
    client.close()
    cluster.close()
    log(f"dask warm {t_warm:.2f} s")

    seq = {r["point_hash"]: r["tokens_per_s"] for r in seq_rows}
    dask = {r["point_hash"]: r["tokens_per_s"] for r in store.rows}
    assert seq == dask, "rows of the sweep differ from the sequential run"
    assert s_cold.computed == s_warm.computed == len(points) and s_cold.failed == s_warm.failed == 0
    n = len(points)
    emit("bench_sweep_dask", {
        "points": n, "trace_groups": len(groups), "workers": args.workers,
        "grid": {**AXES, "overrides": OVERRIDES},
        "sequential_s": round(t_seq, 3), "sequential_s_per_point": round(t_seq / n, 4),
        "dask_cold_s": round(t_cold, 3), "dask_warm_s": round(t_warm, 3),
        "cluster_start_s": round(t_start, 3),
        "speedup_cold": round(t_seq / t_cold, 2), "speedup_warm": round(t_seq / t_warm, 2),
        "scheduler_overhead_s_per_point": round((t_warm - t_seq / args.workers) / n, 4),
        "rows_agree": True,
    })


if __name__ == "__main__":
    main()
