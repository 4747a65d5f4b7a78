"""``tierlab compare MODEL --chips a,b,c [--systems x,y] [trace options] [--pim/--no-pim] [--json] [--csv FILE]
[--plot FILE] [--html FILE]`` (:func:`tierlab.compare`).

MODEL is a model (preset, config.json or directory), traced once with the trace options, or an
existing trace directory (then the trace options must be left at their defaults).
"""

from __future__ import annotations

import click

from tierlab.api.settings import Collectives, Execution, ReplaySettings
from tierlab.cli.params import capture_option, execution_options, force_option, json_option, options, workload_options


@click.command("compare")
@click.argument("model")
@click.option("--chips", default=None, help="Comma-separated chip presets or .toml files, e.g. sn40l,h100.")
@click.option("--systems", default=None,
              help="Comma-separated system presets or .toml files, e.g. dgx-h100,sn40l-16 (see `tierlab systems`).")
@options(Collectives, only=("collective_algo",),
         help={"collective_algo": "Collective algorithm of the --systems runs where it serves the collective's kind."})
@workload_options
@options(ReplaySettings, only=("pim",),
         help={"pim": "Run PIM-eligible ops in the memory's PIM unit where a chip has one."})
@click.option("--csv", type=click.Path(), default=None, help="Also write one row per chip to this CSV file.")
@click.option("--plot", type=click.Path(), default=None,
              help="Also draw bytes and energy per token per chip to this image (needs matplotlib).")
@click.option("--html", type=click.Path(), default=None,
              help="Also write a self-contained HTML report of the comparison (needs the plot extra).")
@click.option("--keep-trace", type=click.Path(), default=None, help="Write the trace to this directory and keep it.")
@capture_option
@options(ReplaySettings, only=("kernel", "place"))
@execution_options
@force_option
@json_option
def command(model, chips, systems, collective_algo, pim, kernel, place, csv, plot, html, keep_trace, capture, force,
            as_json, **kw):
    """Replay one trace of MODEL on every chip (and system) and show the per-token figures side by side."""
    from tierlab.api.comparing import compare_on, name_list
    from tierlab.api.settings import Workload
    from tierlab.cli.views import show

    chip_names = name_list(chips, "chip", "sn40l,h100", "chips") if chips else []
    system_names = name_list(systems, "system", "dgx-h100,sn40l-16", "systems") if systems else []
    result = compare_on(model, chip_names, system_names, Workload.take(kw),
                        ReplaySettings(pim=pim, kernel=kernel, place=place), Execution.take(kw),
                        collective_algo=collective_algo, csv=csv, plot=plot, html=html, keep_trace=keep_trace,
                        capture=capture, force=force)
    show(result, as_json)
