"""``tierlab import FILE -o OUT.trace [--format F] [--line 64] [--straddle both|once]
[--instructions | --data-only] [--force] [--json]``: an address trace (a .npy array, a text list,
Dinero IV din, CSV, Valgrind Lackey, drcachesim's view, ChampSim; gzip/xz read as a stream) into an
address trace (:mod:`tierlab.traces.importers.tracer_logs`, :mod:`tierlab.traces.format.addresses`)."""

from __future__ import annotations

import json

import click

from tierlab.cli.options import force_option, json_option

FORMATS = ["npy", "text", "din", "csv", "lackey", "drcachesim", "champsim"]


@click.command("import")
@click.argument("file", type=click.Path())
@click.option("-o", "--output", type=click.Path(), required=True, help="The trace directory to write.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="The file's form (default: from its extension, after .gz/.xz: .npy, .txt/.addr/.trace, .din, "
                   ".csv, .lackey, .view (drcachesim), .champsim/.champsimtrace).")
@click.option("--line", type=int, default=64, show_default=True,
              help="Line size in bytes: each access touches the lines covering it.")
@click.option("--straddle", type=click.Choice(["both", "once"]), default="both", show_default=True,
              help="An access straddling lines: each line counts at tier 0 (both), or the access once, a miss if "
                   "any line missed (once: cachegrind's convention).")
@click.option("--instructions/--data-only", default=None,
              help="Keep instruction fetches as reads (default: data only, except din, whose label 2 is kept).")
@force_option
@json_option
def command(file, output, fmt, line, straddle, instructions, force, as_json):
    """Import FILE (addresses, optionally sizes and read/write) as an address trace of one op."""
    from tierlab.common.atomic import check_output
    from tierlab.traces.importers.tracer_logs import import_trace

    check_output(output, force=force, directory=True)
    s = import_trace(file, output, fmt=fmt, line=line, force=force, straddle=straddle, instructions=instructions)
    if as_json:
        click.echo(json.dumps(s, indent=1))
    else:
        click.echo(f"{s['trace']}: {s['records']} {s['format']} records ({s['reads']} reads, {s['writes']} writes) -> "
                   f"{s['lines']} {s['line']}-byte lines, {s['straddles']} straddling, in {s['tensors']} region(s)")
