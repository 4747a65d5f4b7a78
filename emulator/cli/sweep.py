"""``tierlab sweep GRID.toml | --model A,B --chip X,Y ... [-o results.parquet] [--scheduler ADDRESS]``.

A design-space sweep on Dask (:mod:`tierlab.design_space`): the product of the grid's axes, one row per
point in a Parquet file, each trace generated once on a worker. Rerunning skips the points already
in the file.
"""

from __future__ import annotations

import click

from tierlab.common.errors import UsageError
from tierlab.cli.options import json_option
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
@click.option("--utilisation", type=click.FloatRange(min=0, max=1, min_open=True), default=None,
              help="Fraction of the time the hardware serves at the modelled rate (in usd_per_mtok). "
                   "[default: the grid's [cost], else 1.0]")
@click.option("--plot", type=click.Path(), default=None, metavar="FILE.png",
              help="Draw throughput per device against throughput per user, the Pareto front marked "
                   "(needs the plot extra).")
@click.option("--html", type=click.Path(), default=None, metavar="FILE.html",
              help="Write a self-contained HTML report: the sweep's table and its Pareto plot (needs the plot extra).")
@json_option
def command(grid, overrides, output, scheduler, workers, max_points, connect_timeout, price, usd_per_kwh,
            utilisation, plot, html, as_json, **axes):
    """Sweep a grid of models x chips/systems x run options x chip overrides; a row per point."""
    from pathlib import Path

    from tierlab.api.sweeping import run_grid
    from tierlab.design_space.grid import grid_from_options, load_grid

    given = {k: v for k, v in axes.items() if v is not None}
    if grid and (given or overrides):
        raise UsageError("give GRID.toml or the axis options, not both", field="grid")
    if grid:
        g = load_grid(grid)
        output = output or str(Path(grid).with_suffix(".parquet"))
    else:
        if not given:
            raise UsageError("give GRID.toml or axes such as --model a,b --chip x,y", field="grid")
        g = grid_from_options(given, overrides)
        if not output:
            raise UsageError("give -o FILE.parquet for a grid of command-line axes", field="output")
    result = run_grid(g, output, scheduler=scheduler, workers=workers, max_points=max_points,
                      connect_timeout=connect_timeout, price=price, usd_per_kwh=usd_per_kwh, utilisation=utilisation,
                      plot=plot, html=html)
    if as_json:
        click.echo(result.to_json(1))
    else:
        click.echo(result.to_text())
