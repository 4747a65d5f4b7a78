"""``tierlab export TRACE --format parquet|ramulator|dramsim3 -o OUT [--table T] [--chip C --tier T]``.

* ``parquet``: the trace's tables as Parquet (for DuckDB, which reads no Arrow IPC file without an
  extension): ``-o DIR`` writes ``DIR/tensors.parquet``, ``ops.parquet``, ``accesses.parquet`` (and
  ``collectives.parquet`` for several devices); ``--table NAME -o FILE.parquet`` writes one table.
  Each file carries the trace's manifest as the schema metadata key ``tierlab_manifest``.
* ``ramulator`` / ``dramsim3``: the requests reaching tier ``--tier`` of ``--chip`` during the replay,
  in order (:mod:`tierlab.analysis.tier_requests`): Ramulator 2's ``LoadStoreTrace`` lines
  ``LD 0xADDR`` / ``ST 0xADDR``, or DRAMsim3's ``0xADDR READ|WRITE CYCLE`` with CYCLE the request's
  index (one request per cycle: the order, not a timing).
Every output is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import json

import click

from tierlab.cli.options import force_option

FORMATS = ("parquet", "ramulator", "dramsim3")
TABLE_NAMES = ("tensors", "ops", "accesses", "collectives")


def write_parquet_tables(trace, out, *, table: str | None = None, force: bool = False) -> list[str]:
    """Write the trace's tables as Parquet (a directory of them, or the one ``table`` to a file);
    return the files written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tierlab.common.atomic import atomic_path
    from tierlab.common.errors import UsageError
    from tierlab.traces.format.schema import ACCESSES_SCHEMA

    meta = {b"tierlab_manifest": json.dumps(trace.manifest).encode()}
    present = ["tensors", "ops", "accesses"] + (["collectives"] if "device" in trace.ops.schema.names else [])

    def write(name, path):
        if name == "accesses":
            with pq.ParquetWriter(str(path), ACCESSES_SCHEMA.with_metadata(meta)) as w:
                for rb in trace.iter_accesses():          # bounded memory: one batch at a time
                    w.write_table(pa.Table.from_batches([rb]))
        else:
            t = getattr(trace, name)
            pq.write_table(t.replace_schema_metadata(meta), str(path))

    if table is not None:
        if table not in present:
            raise UsageError(f"the trace has no {table!r} table; it has {', '.join(present)}", field="--table")
        with atomic_path(out, force=force) as tmp:
            write(table, tmp)
        return [str(out)]
    with atomic_path(out, directory=True, force=force) as tmp:
        for name in present:
            write(name, tmp / f"{name}.parquet")
    return [f"{out}/{name}.parquet" for name in present]


def write_requests(trace, chip: str, tier: str, fmt: str, out, *, force: bool = False) -> int:
    """Write the requests reaching ``tier`` in Ramulator 2 or DRAMsim3 trace form; return their number."""
    from tierlab.common.atomic import atomic_path
    from tierlab.analysis.tier_requests import tier_requests

    from tierlab.present.progress import counting_bar

    n = 0
    # the requests of a model's run are many (hundreds of millions for a few tokens of an 8 B model):
    # a bar of requests written on stderr when it is a terminal
    with atomic_path(out, force=force) as tmp, open(tmp, "w") as f, \
            counting_bar(None, unit="req", desc=f"requests at {tier}") as advance:
        for addr, write in tier_requests(trace, chip, tier):
            if fmt == "ramulator":
                f.writelines([f"ST 0x{a:x}\n" if w else f"LD 0x{a:x}\n"
                              for a, w in zip(addr.tolist(), write.tolist())])
            else:
                f.writelines([f"0x{a:x} {'WRITE' if w else 'READ'} {n + k}\n"
                              for k, (a, w) in enumerate(zip(addr.tolist(), write.tolist()))])
            n += len(addr)
            if advance is not None:
                advance(len(addr))
    return n


@click.command("export")
@click.argument("trace", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True,
              help="parquet: the trace's tables; ramulator / dramsim3: the requests reaching --tier.")
@click.option("-o", "--output", type=click.Path(), required=True,
              help="parquet: a directory (or a file with --table); otherwise the trace file to write.")
@click.option("--table", type=click.Choice(TABLE_NAMES), default=None,
              help="parquet: write only this table, to the file -o.")
@click.option("--chip", default=None, help="ramulator / dramsim3: chip preset name or .toml file.")
@click.option("--tier", default=None, help="ramulator / dramsim3: the tier whose incoming requests are written.")
@force_option
def command(trace, fmt, output, table, chip, tier, force):
    """Export TRACE: its tables as Parquet, or the memory requests reaching one tier of a chip."""
    from tierlab.common.errors import UsageError
    from tierlab.traces.format.reader import open_trace

    if fmt == "parquet":
        if chip or tier:
            raise UsageError("--chip and --tier belong to --format ramulator or dramsim3", field="--chip")
        files = write_parquet_tables(open_trace(trace), output, table=table, force=force)
        click.echo("\n".join(files))
        return
    if not chip or not tier:
        raise UsageError(f"--format {fmt} needs --chip and --tier", field="--tier" if chip else "--chip")
    if table:
        raise UsageError("--table belongs to --format parquet", field="--table")
    from tierlab.common.atomic import check_output
    from tierlab.chip.chipfile import load_chip

    load_chip(chip)
    check_output(output, force=force)
    n = write_requests(open_trace(trace), chip, tier, fmt, output, force=force)
    click.echo(f"{output}: {n} requests reaching {tier}")
