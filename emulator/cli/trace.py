"""``tierlab trace MODEL -o DIR``: lower a model and a run into a trace directory
(:func:`tierlab.trace`); the run's options are :class:`tierlab.api.settings.Workload`'s."""

from __future__ import annotations

import click

from tierlab.cli.params import capture_option, force_option, json_option, workload_options


@click.command("trace")
@click.argument("model")
@click.option("-o", "--output", required=True, type=click.Path(), help="Trace directory to write (e.g. llama.trace).")
@workload_options
@click.option("--record-routing", is_flag=True,
              help="MoE: also write every token's experts to routing.arrow in the trace (replayable with "
                   "--router table:DIR/routing.arrow).")
@capture_option
@force_option
@json_option
def command(model, output, force, as_json, record_routing, capture, **workload):
    """Lower MODEL (a preset name, a config.json, or a directory holding one) into a trace."""
    from tierlab.api.settings import Workload
    from tierlab.api.tracing import make_trace
    from tierlab.cli.views import show

    result = make_trace(model, Workload.take(workload), output, force=force, record_routing=record_routing,
                        capture=capture)
    show(result, as_json, indent=1)
