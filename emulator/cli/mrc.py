"""``tierlab mrc``: exact miss-ratio curves of one tier of a chip, from a trace, in one pass.

The work is :func:`tierlab.analysis.tier_mrc.tier_mrc` (which stream the tier sees, what each row
means); its text is :func:`tierlab.present.mrc.format_mrc` and its plot
:func:`tierlab.present.plots.plot_mrc`.
"""

from __future__ import annotations

import json

import click

from tierlab.chip.units import parse_quantity
from tierlab.cli.options import force_option, json_option
from tierlab.cli.progress import counting_bar

# the library's default (tierlab.analysis.tier_mrc.DEFAULT_OPT_LIMIT_BLOCKS; a test holds them
# equal): the analysis, and Numba with it, is imported only when the command runs
OPT_LIMIT_BLOCKS = 1 << 24


def _sizes(text: str | None) -> list[int]:
    if not text:
        return []
    return [int(parse_quantity(s.strip(), "size", field="--sizes")) for s in text.split(",") if s.strip()]


@click.command("mrc")
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@click.option("--tier", "tier_name", required=True, help="Tier of the chip to study.")
@click.option("--chip", "chip_name", default="h100", show_default=True, help="Chip preset name or TOML file.")
@click.option("--sizes", help="Capacities for the table, e.g. 1MiB,2MiB,4MiB (default: around the tier's).")
@click.option("--max-ways", type=click.IntRange(1, 4096), help="Deepest way count of the per-set curve "
              "(set-associative tiers; default 2x the tier's ways).")
@click.option("--opt/--no-opt", default=None, help="Compute the OPT curve (default: when the stream fits --opt-limit).")
@click.option("--opt-limit", type=click.IntRange(1), default=OPT_LIMIT_BLOCKS, show_default=True,
              help="Longest block stream OPT may hold in memory (blocks).")
@click.option("--plot", type=click.Path(), help="Write the curve as an image (png/svg/pdf; needs matplotlib).")
@force_option
@json_option
def command(trace_path, tier_name, chip_name, sizes, max_ways, opt, opt_limit, plot, force, as_json):
    """Exact LRU (and OPT) miss-ratio curve of one tier, every capacity in one pass."""
    from tierlab.analysis.tier_mrc import tier_mrc
    from tierlab.chip.chipfile import load_chip
    from tierlab.present.mrc import format_mrc
    from tierlab.present.plots import plot_mrc, pyplot
    from tierlab.common.atomic import check_output
    from tierlab.traces.reader import open_trace

    if plot:
        check_output(plot, force=force)
        pyplot()  # no matplotlib: say so before the work
    chip = load_chip(chip_name)
    trace = open_trace(trace_path)
    with counting_bar(trace.n_accesses, unit="row", desc=f"mrc {tier_name}") as progress:
        result, curves = tier_mrc(trace, chip, tier_name, sizes=_sizes(sizes), max_ways=max_ways, opt=opt,
                                  opt_limit_blocks=opt_limit, progress=progress)
    if plot:
        plot_mrc(result, curves, plot, force=force)
    click.echo(json.dumps(result, indent=2) if as_json else format_mrc(result))
