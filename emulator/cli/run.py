"""``tierlab run MODEL --chip NAME|FILE [trace options] [--keep-trace DIR]``: trace and replay in one go.

``--system NAME|FILE`` (instead of ``--chip``) replays every device's slice of the trace on the
system's chip and costs the collectives on its network (:mod:`tierlab.pipeline.system_replay`,
:mod:`tierlab.cost.system_cost`); ``--collective-algo`` picks the collective algorithm.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from tierlab.common.errors import UsageError
from tierlab.cli.on_system import (check_chip_run, check_system_run, check_target, chip_optional, system_of, system_options,
                                    system_replay_and_report)
from tierlab.cli.options import force_option, json_option
from tierlab.cli.replay import options_from, replay_and_report, replay_options
from tierlab.cli.trace import capture_option, plan_trace, run_options, write_trace
from tierlab.cli.views import check_views, view_options


@chip_optional
@click.command("run")
@click.argument("model")
@run_options
@replay_options
@system_options
@view_options
@click.option("--keep-trace", type=click.Path(), default=None,
              help="Write the trace to this directory and keep it (default: a temporary directory).")
@capture_option
@click.option("--strict-dtype", is_flag=True, default=False,
              help="Refuse an FP4 --activations format the chip has no compute for (default: a note, and the "
                   "next supported dtype; tierlab.chip.compute).")
@force_option
@json_option
def command(model, keep_trace, force, as_json, strict_dtype, capture, **kw):
    """Trace MODEL (preset, config.json or directory) and replay it on a chip or a system."""
    from tierlab.common.atomic import check_output

    check_target(kw)
    system = system_of(kw) if kw.get("system") else None    # a bad system fails before the (long) tracing
    plan = plan_trace(model, kw, capture=capture)
    run = plan.run
    if system is not None:
        n = getattr(run, "devices", 1)
        if n > system.n_chips:
            raise UsageError(f"the trace needs {n} devices; {system.name} has {system.n_chips} chips",
                             field="--system or --tp")
        check_system_run(kw)

        def report(path):
            system_replay_and_report(path, system, kw, options_from(kw), as_json=as_json)
    else:
        from tierlab.chip.chipfile import load_chip
        from tierlab.cli.execution import apply_execution

        check_chip_run(kw)
        apply_execution(load_chip(kw["chip"]), kw)  # a bad chip or --kernel-overhead fails before the (long) tracing
        if getattr(run, "devices", 1) > 1:
            raise UsageError(f"--tp/--pp/--ep/--dp make {run.devices} devices; replay them on a system "
                             "(--system NAME), not one chip", field="--chip")

        def report(path):
            replay_and_report(path, kw, as_json=as_json, force=force)
    if strict_dtype:     # an FP4 format the chip cannot run fails before the tracing, as a bad chip does
        from tierlab.chip.chipfile import load_chip
        from tierlab.chip.compute import resolve_compute_dtype
        resolve_compute_dtype(system.chip if system is not None else load_chip(kw["chip"]), run.activations,
                              run.weights, strict=True)
    if kw.get("output"):   # so does an output that may not be written: nothing is left half-done
        check_output(kw["output"], force=force)
    check_views(kw, force=force)
    kw["force"] = force
    if keep_trace:
        report(write_trace(plan, keep_trace, force=force, progress=True))
        return
    with tempfile.TemporaryDirectory(prefix="tierlab-run-") as tmp:
        report(write_trace(plan, Path(tmp) / f"{plan.name}.trace", progress=True))
