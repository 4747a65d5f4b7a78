"""A design-space sweep on Dask (:func:`tierlab.sweep`, ``tierlab sweep``): the product of a grid's
axes, one row per point in a Parquet file, each trace generated once on a worker; rerunning on the
same file skips the points already in it."""

from __future__ import annotations

import os  # noqa: F401  (annotations)
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from tierlab.api.settings import check_value
from tierlab.common.errors import UsageError

if TYPE_CHECKING:
    from tierlab.api.results import SweepResult


def grid_of(grid) -> Any:
    """A :class:`~tierlab.design_space.grid.Grid` from a grid ``.toml`` path or a dict of axes (the
    file's keys, with ``overrides`` and ``cost`` as dicts)."""
    from tierlab.design_space.grid import economics_from_table, grid_from_dict, load_grid

    if isinstance(grid, Mapping):
        d = dict(grid)
        overrides = d.pop("overrides", {})
        if not isinstance(overrides, Mapping):
            raise UsageError("expected a dict of chip-file keys", field="overrides")
        cost = d.pop("cost", {})
        g = grid_from_dict(d, dict(overrides))
        g.economics = economics_from_table(dict(cost) if isinstance(cost, Mapping) else cost)
        return g
    if hasattr(grid, "points"):
        return grid
    return load_grid(check_value("grid", "text", grid))


def run_grid(g, output, *, scheduler: str | None = None, workers: int | None = None, max_points: int | None = None,
             connect_timeout: float | None = None, price: float | None = None, usd_per_kwh: float | None = None,
             utilisation: float | None = None, plot=None, html=None, progress: bool = True):
    """The work of :func:`sweep` on a grid; ``None`` options are the grid file's ``[cost]`` or the defaults."""
    from tierlab.api.results import SweepResult
    from tierlab.design_space.grid import DEFAULT_MAX_POINTS
    from tierlab.design_space.runner import DEFAULT_CONNECT_TIMEOUT_S, run_sweep
    from tierlab.design_space.store import SweepStore, read_rows
    from tierlab.present.progress import fraction_bar

    max_points = DEFAULT_MAX_POINTS if max_points is None else max_points
    connect_timeout = DEFAULT_CONNECT_TIMEOUT_S if connect_timeout is None else connect_timeout
    given = {"price_per_hour": price, "usd_per_kwh": usd_per_kwh, "utilisation": utilisation}
    g.economics = {**{k: None if k != "utilisation" else 1.0 for k in given}, **g.economics,
                   **{k: v for k, v in given.items() if v is not None}}     # given here wins over the grid's [cost]
    if plot or html:
        from tierlab.common.atomic import check_output
        from tierlab.present.views import need_matplotlib

        need_matplotlib("plot" if plot else "html")   # no matplotlib: one line, before any work
        for p in (plot, html):
            if p:
                check_output(p, force=True)
    points = g.points(max_points)        # over the limit: fails before anything else
    store = SweepStore(output, g.columns)
    with fraction_bar(unit="pt", desc="sweep", enabled=progress) as bar:
        summary = run_sweep(g, store, scheduler=scheduler, workers=workers, max_points=max_points,
                            connect_timeout=connect_timeout, progress=bar)
    d = {"output": str(output), **summary.as_dict()}
    wanted = {p.hash for p in points}
    rows = [r for r in read_rows(output) if r["point_hash"] in wanted]
    written = []
    if plot:
        from tierlab.present.plots import plot_pareto

        plot_pareto(rows, plot)
        d["plot"] = str(plot)
        written.append(plot)
    if html:
        from tierlab.present.html import sweep_report, write_html

        write_html(sweep_report(rows, str(output)), html, force=True)  # a view of the sweep file: redrawn each run
        d["html"] = str(html)
        written.append(html)
    import pyarrow as pa

    return SweepResult(d, pa.Table.from_pylist(rows), written)


def sweep(grid: str | os.PathLike[str] | Mapping[str, Any], scheduler: str | None = None, workers: int | None = None,
          *, output: str | None = None, max_points: int | None = None, connect_timeout: float | None = None,
          price: float | None = None, usd_per_kwh: float | None = None, utilisation: float | None = None,
          plot: str | None = None, html: str | None = None, progress: bool = True) -> SweepResult:
    """Sweep a design-space grid on Dask (``tierlab sweep``).

    Parameters
    ----------
    grid : str, path or dict
        A grid ``.toml`` file, or a dict of axes: ``{"model": ["gpt2"], "chip": ["h100", "a100"],
        "batch": [1, 4], "context": 64, "generate": 2, "overrides": {"tier.l2.capacity": ["25 MiB",
        "50 MiB"]}, "cost": {...}}``.
    scheduler : str, optional
        A running Dask scheduler's address (default: an embedded LocalCluster).
    workers : int, optional
        Worker processes of the embedded cluster (default: one per core).
    output : str, optional
        The sweep's Parquet file (default: a temporary file, its rows kept in the result). An existing
        sweep of the same grid columns is resumed.
    max_points : int, optional
        Refuse a grid of more points than this (default 10,000).
    connect_timeout : float, optional
        Seconds to wait for ``scheduler``.
    price : float, optional
        Rental price in USD per hour for every point (default: each chip's or system's ``[price]``).
    usd_per_kwh : float, optional
        Also charge the modelled energy per token at this price (default: not charged).
    utilisation : float, optional
        Fraction of the time the hardware serves at the modelled rate (default: the grid's, else 1).
    plot, html : str, optional
        The Pareto plot; a self-contained HTML report of the sweep.
    progress : bool, default True
        Draw a progress bar on a terminal's stderr.

    Returns
    -------
    SweepResult
        ``to_dict()`` is ``tierlab sweep --json``; ``to_arrow()`` one row per point.
    """
    g = grid_of(grid)
    if scheduler is not None:
        check_value("scheduler", "text", scheduler)
    for name, v in (("workers", workers), ("max_points", max_points)):
        if v is not None and check_value(name, "int", v) < 1:
            raise UsageError(f"expected at least 1, got {v}", field=name)
    if connect_timeout is not None and check_value("connect_timeout", "float", connect_timeout) < 0.1:
        raise UsageError(f"expected at least 0.1 s, got {connect_timeout}", field="connect_timeout")
    if price is not None and check_value("price", "float", price) <= 0:
        raise UsageError(f"expected a price above 0, got {price}", field="price")
    if usd_per_kwh is not None and check_value("usd_per_kwh", "float", usd_per_kwh) < 0:
        raise UsageError(f"expected at least 0, got {usd_per_kwh}", field="usd_per_kwh")
    if utilisation is not None and not 0 < check_value("utilisation", "float", utilisation) <= 1:
        raise UsageError(f"expected a fraction in (0, 1], got {utilisation}", field="utilisation")
    keep = None
    if output is None:
        keep = tempfile.TemporaryDirectory(prefix="tierlab-sweep-")
        output = str(Path(keep.name) / "sweep.parquet")
    try:
        return run_grid(g, check_value("output", "text", output), scheduler=scheduler, workers=workers,
                        max_points=max_points, connect_timeout=connect_timeout, price=price, usd_per_kwh=usd_per_kwh,
                        utilisation=utilisation, plot=plot, html=html, progress=progress)
    finally:
        if keep is not None:
            keep.cleanup()
