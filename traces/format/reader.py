"""Open and validate a trace directory; stream its accesses in checked record batches.

:func:`open_trace` checks the manifest (format name, version — an unknown or newer version is
refused, never guessed), the presence of every table file, each table's schema (strings may be
plain, large or dictionary-encoded; they are decoded to plain strings) and the row counts of the
tensors and ops tables against the manifest. Tensor ids and op ids must be 0..n-1 in order; tensor
byte ranges must not overlap and addresses must be multiples of the recorded alignment. Every table
may be in the Arrow IPC file form (version 3) or the stream form (versions 1 and 2); both are read
from a memory map (:mod:`tierlab.traces.format.ipc`).

:meth:`Trace.iter_accesses` checks every batch with numpy (op ids exist and never decrease, tensor
ids exist, count >= 1, nbytes >= 1, every chunk lies inside its tensor) and, at the end, the access
row count against the manifest — a truncated file is a TraceError naming the file. Batches are
zero-copy views of the mapped file wherever a yielded batch lies inside one stored record batch;
:meth:`Trace.access_columns` gives whole checked columns as numpy arrays.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from tierlab.traces.format import schema as fmt
from tierlab.traces.format.tables import check_tensor_layout, read_small_table
from tierlab.traces.format.trace import Trace
from tierlab.common.errors import TraceError


def open_trace(path: str | os.PathLike) -> Trace:
    """Open and validate the trace directory at ``path``."""
    p = Path(path)
    if not p.is_dir():
        raise TraceError("not a trace directory" if p.exists() else "no such trace", file=str(p))
    mpath = p / fmt.MANIFEST
    if not mpath.is_file():
        raise TraceError("no manifest.json: not a complete trace (interrupted write?)", file=str(p))
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TraceError(f"unreadable manifest: {err}", file=str(mpath)) from None
    if not isinstance(manifest, dict) or manifest.get("format") != fmt.FORMAT_NAME:
        got = manifest.get("format") if isinstance(manifest, dict) else None
        raise TraceError(f"format is {got!r}, expected {fmt.FORMAT_NAME!r}", file=str(mpath), field="format")
    version = manifest.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise TraceError(f"version {version!r} is not an integer", file=str(mpath), field="version")
    if version > max(fmt.READ_VERSIONS):
        raise TraceError(f"trace format version {version} is newer than this tierlab reads "
                         f"({max(fmt.READ_VERSIONS)}); upgrade tierlab", file=str(mpath), field="version")
    if version not in fmt.READ_VERSIONS:
        raise TraceError(f"unknown trace format version {version}; this tierlab reads versions "
                         f"{', '.join(map(str, fmt.READ_VERSIONS))}", file=str(mpath), field="version")
    kind = manifest.get("kind", "descriptors") if version >= 4 else "descriptors"
    if kind == fmt.ADDRESS_KIND:
        from tierlab.traces.format.addresses import open_address_trace
        return open_address_trace(p, manifest, mpath)
    if kind != "descriptors":
        raise TraceError(f"kind {kind!r}; expected {fmt.ADDRESS_KIND!r} or 'descriptors'", file=str(mpath),
                         field="kind")
    devices = 1
    if version >= 2:
        devices = manifest.get("devices")
        if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
            raise TraceError(f"devices is {devices!r}, expected a positive integer", file=str(mpath),
                             field="devices")
    layout = fmt.tables(version, devices)
    tables = manifest.get("tables")
    if not isinstance(tables, dict):
        raise TraceError("missing row counts", file=str(mpath), field="tables")
    for name in layout:
        n = tables.get(name)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise TraceError(f"row count of {name} is {n!r}, expected a non-negative integer", file=str(mpath),
                             field=f"tables.{name}")
        if not (p / layout[name][0]).is_file():
            raise TraceError("missing table file", file=str(p / layout[name][0]))
    for key in ("model", "run"):
        if key not in manifest:
            raise TraceError("missing key (null is allowed)", file=str(mpath), field=key)
    tensors = read_small_table(p / fmt.TENSORS_FILE, layout["tensors"][1])
    ops = read_small_table(p / fmt.OPS_FILE, layout["ops"][1])
    small = [("tensors", tensors), ("ops", ops)]
    collectives = None
    if "collectives" in layout:
        collectives = read_small_table(p / fmt.COLLECTIVES_FILE, fmt.COLLECTIVES_SCHEMA)
        small.append(("collectives", collectives))
    for name, table in small:
        file = str(p / layout[name][0])
        if table.num_rows != tables[name]:
            raise TraceError(f"holds {table.num_rows} rows, the manifest says {tables[name]}", file=file)
        ids = table.column(table.schema.names[0]).to_numpy()
        if np.any(ids != np.arange(len(ids), dtype=ids.dtype)):
            raise TraceError(f"{table.schema.names[0]} must be 0..n-1 in order", file=file,
                             field=table.schema.names[0])
    if "collectives" in layout:
        _check_devices(p, tensors, ops, collectives, devices)
    check_tensor_layout(tensors, manifest, str(p / fmt.TENSORS_FILE), str(mpath))
    return Trace(p, manifest, tensors, ops, collectives)


def _check_devices(p: Path, tensors: pa.Table, ops: pa.Table, coll: pa.Table, devices: int) -> None:
    """Version 2: every device in range, every op's collective declared, every collective well formed."""
    for name, table in (("tensors", tensors), ("ops", ops)):
        d = table.column("device").to_numpy()
        bad = np.flatnonzero((d < 0) | (d >= devices))
        if len(bad):
            raise TraceError(f"row {int(bad[0])}: device {int(d[bad[0]])} outside the trace's {devices} devices",
                             file=str(p / fmt.TABLES_V2[name][0]), field="device")
    c = ops.column("collective").to_numpy()
    bad = np.flatnonzero((c < -1) | (c >= coll.num_rows))
    if len(bad):
        raise TraceError(f"op {int(bad[0])} names collective {int(c[bad[0]])}, which is not declared "
                         f"({coll.num_rows} collectives)", file=str(p / fmt.OPS_FILE), field="collective")
    file = str(p / fmt.COLLECTIVES_FILE)
    for i, (kind, ranks, send) in enumerate(zip(coll.column("kind").to_pylist(), coll.column("ranks").to_pylist(),
                                                coll.column("send_bytes").to_pylist())):
        if kind not in fmt.COLLECTIVE_KINDS:
            raise TraceError(f"collective {i}: kind {kind!r}; expected one of {', '.join(fmt.COLLECTIVE_KINDS)}",
                             file=file, field="kind")
        n = len(ranks)
        if n < 2 or len(set(ranks)) != n or (kind == "send_recv" and n != 2) or \
                any(r < 0 or r >= devices for r in ranks):
            raise TraceError(f"collective {i}: ranks {ranks} are not distinct devices of the trace's {devices}",
                             file=file, field="ranks")
        if send and (kind != "all_to_all" or len(send) != n * n):
            raise TraceError(f"collective {i}: send_bytes holds {len(send)} values; expected an all_to_all's "
                             f"{n} x {n}", file=file, field="send_bytes")


