"""``tierlab run MODEL --chip NAME|FILE [trace options] [--keep-trace DIR]``: trace and replay in one
go (:func:`tierlab.run`); ``--system NAME|FILE`` replays every device's slice on the system's chip and
costs the collectives on its network."""

from __future__ import annotations

import click

from tierlab.cli.params import capture_option, force_option, json_option, workload_options
from tierlab.cli.replay import groups, target_options


@click.command("run")
@click.argument("model")
@workload_options
@target_options
@click.option("--keep-trace", type=click.Path(), default=None,
              help="Write the trace to this directory and keep it (default: a temporary directory).")
@capture_option
@click.option("--strict-dtype", is_flag=True, default=False,
              help="Refuse an FP4 --activations format the chip has no compute for (default: a note, and the "
                   "next supported dtype; tierlab.chip.compute).")
@force_option
@json_option
def command(model, chip, system, output, keep_trace, force, as_json, strict_dtype, capture, **kw):
    """Trace MODEL (preset, config.json or directory) and replay it on a chip or a system."""
    from tierlab.api.replaying import run_model
    from tierlab.api.settings import Workload
    from tierlab.cli.views import show

    show(run_model(model, chip, system, Workload.take(kw), **groups(kw), keep_trace=keep_trace, output=output,
                   force=force, capture=capture, strict_dtype=strict_dtype), as_json)
