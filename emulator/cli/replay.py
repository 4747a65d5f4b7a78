"""``tierlab replay TRACE --chip NAME|FILE.toml [--json] [-o results.parquet] [--force] [options]``, or
``--system NAME|FILE`` for a trace of several devices (:func:`tierlab.replay`)."""

from __future__ import annotations

import click

from tierlab.cli.params import (collective_options, execution_options, force_option, json_option, replay_options,
                                view_options)

CHIP = click.option("--chip", default=None,
                    help="Chip preset name (see `tierlab chips`) or a chip .toml file (or --system).")
SYSTEM = click.option("--system", default=None,
                      help="System preset (see `tierlab systems`) or a system .toml file: replay every device of "
                           "the trace on its chip and cost the collectives on its network.")
OUTPUT = click.option("-o", "--output", type=click.Path(), default=None,
                      help="Write the per-op breakdown to this Parquet file.")


def target_options(f):
    """``--chip``, the replay's options, ``-o``, ``--system``, the collectives' and the views'."""
    return CHIP(replay_options(OUTPUT(execution_options(SYSTEM(collective_options(view_options(f)))))))


def groups(kw: dict) -> dict:
    """The library's option groups from a command's keyword arguments."""
    from tierlab.api.settings import Collectives, Execution, ReplaySettings, Views

    return dict(replay=ReplaySettings.take(kw), execution=Execution.take(kw), collectives=Collectives.take(kw),
                views=Views.take(kw))


@click.command("replay")
@click.argument("trace", type=click.Path())
@target_options
@force_option
@json_option
def command(trace, chip, system, output, force, as_json, **kw):
    """Replay TRACE on a chip, or a trace of several devices on a system: bytes per tier and link,
    hits, energy and latency per token."""
    from tierlab.api.replaying import replay_trace_on
    from tierlab.cli.views import show

    show(replay_trace_on(trace, chip, system, **groups(kw), output=output, force=force), as_json)
