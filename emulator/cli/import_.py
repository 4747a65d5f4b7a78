"""``tierlab import FILE -o OUT.trace [--format npy|text|din|csv] [--line 64] [--force] [--json]``:
an address trace (a .npy array, a text list, Dinero IV din, CSV) into a trace (:mod:`traces.importers`)."""

from __future__ import annotations

import json

import click

from emulator.cli.options import force_option, json_option


@click.command("import")
@click.argument("file", type=click.Path())
@click.option("-o", "--output", type=click.Path(), required=True, help="The trace directory to write.")
@click.option("--format", "fmt", type=click.Choice(["npy", "text", "din", "csv"]), default=None,
              help="The file's form (default: from its extension: .npy, .txt/.addr/.trace, .din, .csv).")
@click.option("--line", type=int, default=64, show_default=True,
              help="Line size in bytes: records touch whole lines; consecutive lines of one kind coalesce.")
@force_option
@json_option
def command(file, output, fmt, line, force, as_json):
    """Import FILE (addresses, optionally sizes and read/write) as a trace of one op."""
    from common.atomic import check_output
    from traces.importers import import_trace

    check_output(output, force=force, directory=True)
    s = import_trace(file, output, fmt=fmt, line=line, force=force)
    if as_json:
        click.echo(json.dumps(s, indent=1))
    else:
        click.echo(f"{s['trace']}: {s['records']} {s['format']} records -> {s['descriptors']} descriptors of "
                   f"{s['line']}-byte lines in {s['tensors']} tensor(s)")
