"""``tierlab sweep GRID.toml | --model A,B --chip X,Y ... [-o results.parquet] [--scheduler ADDRESS]``.

A design-space sweep on Dask (:mod:`tierlab.design_space`): the product of the grid's axes, one row per
point in a Parquet file, each trace generated once on a worker. Rerunning skips the points already
in the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from tierlab.common.errors import UsageError
from tierlab.cli.options import json_option
from tierlab.cli.progress import fraction_bar
from tierlab.design_space.grid import AXES, DEFAULT_MAX_POINTS
from tierlab.design_space.runner import DEFAULT_CONNECT_TIMEOUT_S


def axis_options(f):
    for name in reversed(AXES):
        f = click.option(f"--{name.replace('_', '-')}", default=None, metavar="V1,V2,...",
                         help=f"Axis {name}: a comma-separated list of values.")(f)
    return f


@click.command("sweep")
@click.argument("grid", required=False, type=click.Path())
@axis_options
@click.option("--override", "overrides", multiple=True, metavar="KEY=V1,V2",
              help="A chip-file override axis, e.g. --override 'tier.l2.capacity=25 MiB,50 MiB' (repeatable).")
@click.option("-o", "--output", type=click.Path(), default=None,
              help="The sweep's Parquet file (default: GRID with .parquet; required without GRID). An "
                   "existing sweep of the same grid columns is resumed.")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="A running Dask scheduler (default: an embedded LocalCluster).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes of the embedded cluster (default: one per core).")
@click.option("--max-points", type=click.IntRange(min=1), default=DEFAULT_MAX_POINTS, show_default=True,
              help="Refuse a grid of more points than this.")
@click.option("--connect-timeout", type=click.FloatRange(min=0.1), default=DEFAULT_CONNECT_TIMEOUT_S,
              show_default=True, help="Seconds to wait for --scheduler.")
@click.option("--price", "price", type=click.FloatRange(min=0, min_open=True), default=None, metavar="USD_PER_HOUR",
              help="Rental price in USD per hour for every point (default: each chip's or system's [price]).")
@click.option("--usd-per-kwh", type=click.FloatRange(min=0), default=None,
              help="Also charge the modelled energy per token at this price (default: not charged; a "
                   "rental price includes power).")
@click.option("--utilisation", type=click.FloatRange(min=0, max=1, min_open=True), default=1.0, show_default=True,
              help="Fraction of the time the hardware serves at the modelled rate (in usd_per_mtok).")
@click.option("--plot", "plot_path", type=click.Path(), default=None, metavar="FILE.png",
              help="Draw throughput per device against throughput per user, the Pareto front marked "
                   "(needs the plot extra).")
@click.option("--html", "html_path", type=click.Path(), default=None, metavar="FILE.html",
              help="Write a self-contained HTML report: the sweep's table and its Pareto plot (needs the plot extra).")
@json_option
def command(grid, overrides, output, scheduler, workers, max_points, connect_timeout, price, usd_per_kwh,
            utilisation, plot_path, html_path, as_json, **axes):
    """Sweep a grid of models x chips/systems x run options x chip overrides; a row per point."""
    from tierlab.design_space.grid import grid_from_options, load_grid
    from tierlab.design_space.runner import run_sweep
    from tierlab.design_space.store import SweepStore

    given = {k: v for k, v in axes.items() if v is not None}
    if grid and (given or overrides):
        raise UsageError("give GRID.toml or the axis options, not both", field="grid")
    if grid:
        g = grid if hasattr(grid, "points") else load_grid(grid)   # a Grid from the Python API, or a file
        output = output or str(Path(grid).with_suffix(".parquet"))
    else:
        if not given:
            raise UsageError("give GRID.toml or axes such as --model a,b --chip x,y", field="grid")
        g = grid_from_options(given, overrides)
        if not output:
            raise UsageError("give -o FILE.parquet for a grid of command-line axes", field="--output")
    # the options win over a grid file's [cost] table where given on the command line
    given_opts = {"price_per_hour": price, "usd_per_kwh": usd_per_kwh, "utilisation": utilisation}
    ctx = click.get_current_context()
    source = {"price_per_hour": "price", "usd_per_kwh": "usd_per_kwh", "utilisation": "utilisation"}
    g.economics = {**{k: None if k != "utilisation" else 1.0 for k in given_opts}, **g.economics,
                   **{k: v for k, v in given_opts.items()
                      if ctx.get_parameter_source(source[k]) is not click.core.ParameterSource.DEFAULT}}
    if plot_path or html_path:
        from tierlab.common.atomic import check_output
        from tierlab.cli.views import need_matplotlib

        need_matplotlib("--plot" if plot_path else "--html")   # no matplotlib: one line, before any work
        for p in (plot_path, html_path):
            if p:
                check_output(p, force=True)
    g.points(max_points)        # over the limit: fails before anything else
    store = SweepStore(output, g.columns)
    with fraction_bar(unit="pt", desc="sweep") as progress:
        summary = run_sweep(g, store, scheduler=scheduler, workers=workers, max_points=max_points,
                            connect_timeout=connect_timeout, progress=progress)
    d = {"output": str(output), **summary.as_dict()}
    if plot_path:
        from tierlab.present.plots import plot_pareto
        from tierlab.design_space.store import read_rows

        wanted = {p.hash for p in g.points(max_points)}
        plot_pareto([r for r in read_rows(output) if r["point_hash"] in wanted], plot_path)
        d["plot"] = str(plot_path)
    if html_path:
        from tierlab.present.html import sweep_report, write_html
        from tierlab.design_space.store import read_rows

        wanted = {p.hash for p in g.points(max_points)}
        write_html(sweep_report([r for r in read_rows(output) if r["point_hash"] in wanted], str(output)), html_path,
                   force=True)     # a view of the sweep file, as the plot: redrawn on each run
        d["html"] = str(html_path)
    from tierlab.api.handover import hand_over

    if hand_over(d, grid=g, max_points=max_points):   # the Python API (tierlab.api) takes it instead
        return
    if as_json:
        click.echo(json.dumps(d, indent=1))
    else:
        click.echo(f"{output}: {summary.points} points ({summary.present} already present, "
                   f"{summary.computed} computed, {summary.failed} failed)")
        if plot_path:
            click.echo(f"plot: {plot_path}")
        if html_path:
            click.echo(f"report: {html_path}")
