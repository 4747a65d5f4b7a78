"""``tierlab run MODEL --chip NAME|FILE [trace options] [--keep-trace DIR]``: trace and replay in one go."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from emulator.cli.options import force_option, json_option
from emulator.cli.replay import replay_and_report, replay_options
from emulator.cli.trace import run_options, run_config_from_options


@click.command("run")
@click.argument("model")
@run_options
@replay_options
@click.option("--keep-trace", type=click.Path(), default=None,
              help="Write the trace to this directory and keep it (default: a temporary directory).")
@force_option
@json_option
def command(model, keep_trace, force, as_json, **kw):
    """Trace MODEL (preset, config.json or directory) and replay it on a chip."""
    from common.atomic import check_output
    from traces.lower import generate_trace
    from traces.spec import load_model

    spec = load_model(model)
    run = run_config_from_options(kw)
    from emulator.chip.chipfile import load_chip

    load_chip(kw["chip"])  # a bad chip fails before the (long) tracing
    if kw.get("output"):   # so does an output that may not be written: nothing is left half-done
        check_output(kw["output"], force=force)
    if keep_trace:
        check_output(keep_trace, force=force, directory=True)
        path = generate_trace(spec, run, keep_trace, force=force)
        replay_and_report(path, kw, as_json=as_json, force=force)
        return
    with tempfile.TemporaryDirectory(prefix="tierlab-run-") as tmp:
        path = generate_trace(spec, run, Path(tmp) / f"{spec.name}.trace")
        replay_and_report(path, kw, as_json=as_json, force=force)
