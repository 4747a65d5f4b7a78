"""Run a sweep on Dask: an embedded ``LocalCluster`` or a running scheduler, one task per trace group.

Points already in the store are skipped (by hash); when none is left, no cluster is started. The
rest are grouped by trace (same model and run options): each group is one task
(:func:`tierlab.design_space.point.run_group`) that traces once on its worker and replays every point of
the group there, so traces never travel through the scheduler. Rows are stored as groups finish.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Callable

from tierlab.common.errors import UsageError
from tierlab.design_space.grid import Grid, Point
from tierlab.design_space.point import run_group
from tierlab.design_space.store import SweepStore

DEFAULT_CONNECT_TIMEOUT_S = 5.0


@dataclass
class SweepSummary:
    """What a sweep did: points in the grid, already present, computed now, failed now."""

    points: int
    present: int
    computed: int = 0
    failed: int = 0
    groups: int = 0
    cluster_started: bool = False
    errors: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"points": self.points, "present": self.present, "computed": self.computed,
                "failed": self.failed, "groups": self.groups, "cluster_started": self.cluster_started,
                "errors": self.errors[:20]}


def group_points(points: list[Point]) -> list[list[Point]]:
    """Points grouped by trace, in first-seen order."""
    groups: dict[str, list[Point]] = {}
    for p in points:
        groups.setdefault(p.trace_key(), []).append(p)
    return list(groups.values())


@contextlib.contextmanager
def dask_client(scheduler: str | None, workers: int | None, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S):
    """A ``distributed.Client``: to ``scheduler`` (one-line error if unreachable within the timeout),
    else to an embedded LocalCluster of worker processes (one per core, or ``workers``)."""
    import os

    from distributed import Client, LocalCluster

    if scheduler:
        try:
            client = Client(scheduler, timeout=connect_timeout)
        except (OSError, TimeoutError, ValueError):
            raise UsageError(f"cannot reach the scheduler {scheduler} within {connect_timeout:g} s",
                             field="scheduler") from None
        try:
            yield client
        finally:
            client.close()
        return
    n = workers or os.cpu_count() or 1
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                           silence_logs=logging.ERROR)
    try:
        client = Client(cluster)
        try:
            yield client
        finally:
            client.close()
    finally:
        cluster.close()


def run_sweep(grid: Grid, store: SweepStore, *, scheduler: str | None = None, workers: int | None = None,
              max_points: int | None = None, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
              progress: Callable[[int, int], None] | None = None, client_factory=None) -> SweepSummary:
    """Sweep ``grid`` into ``store``; ``progress(done, total)`` after each finished group."""
    from distributed import as_completed

    points = grid.points() if max_points is None else grid.points(max_points)
    done = store.done()
    todo = [p for p in points if p.hash not in done]
    summary = SweepSummary(points=len(points), present=len(points) - len(todo))
    if progress:
        progress(summary.present, len(points))
    if not todo:
        return summary
    groups = group_points(todo)
    summary.groups = len(groups)
    keys = grid.override_keys
    factory = client_factory or dask_client
    with factory(scheduler, workers, connect_timeout) as client:
        summary.cluster_started = True
        futures = [client.submit(run_group, g, keys, pure=False) for g in groups]
        finished = summary.present
        for fut in as_completed(futures):
            rows = fut.result()
            store.append(rows)
            finished += len(rows)
            summary.computed += len(rows)
            for r in rows:
                if r["error"] is not None:
                    summary.failed += 1
                    summary.errors.append({"point_hash": r["point_hash"], "error": r["error"]})
            if progress:
                progress(finished, len(points))
    store.flush()
    return summary
