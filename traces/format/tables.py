"""Reading the small tables of a trace directory (tensors, ops, collectives, straddles): schema and
null checks, plain strings, the tensors' layout. Shared by :mod:`tierlab.traces.format.reader` (descriptor traces)
and :mod:`tierlab.traces.format.addresses` (address traces), which import it and never each other at module level."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from tierlab.common.errors import TraceError
from tierlab.traces.format.ipc import IpcTable, corrupt, ipc_form


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or (
        pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)))


def check_schema(schema: pa.Schema, expected: pa.Schema, file: Path) -> None:
    names = schema.names
    if names != expected.names:
        missing = [n for n in expected.names if n not in names]
        extra = [n for n in names if n not in expected.names]
        what = f"missing columns {missing}" if missing else f"unexpected columns {extra}" if extra else \
            f"columns in order {names}, expected {expected.names}"
        raise TraceError(f"schema mismatch: {what}", file=str(file))
    for f in expected:
        got = schema.field(f.name).type
        ok = _is_string(got) if pa.types.is_string(f.type) else got == f.type
        if not ok:
            raise TraceError(f"column has type {got}, expected {f.type}", file=str(file), field=f.name)


def normalise(table: pa.Table, expected: pa.Schema) -> pa.Table:
    """Decode dictionary/large strings to plain strings so consumers see one schema."""
    if table.schema.equals(expected):
        return table
    cols = []
    for f in expected:
        col = table.column(f.name)
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        cols.append(col.cast(f.type))
    return pa.Table.from_arrays(cols, schema=expected)


def check_nulls(data: pa.Table | pa.RecordBatch, path: Path, where: str = "") -> None:
    for name, col in zip(data.schema.names, data.columns):
        if col.null_count:
            n = col.null_count
            raise TraceError(f"{where}{n} null value{'' if n == 1 else 's'}; every cell must hold a value",
                             file=str(path), field=name)


def one_line(err: Exception) -> str:
    return " ".join(str(err).split())


def read_small_table(path: Path, schema: pa.Schema) -> pa.Table:
    form = ipc_form(path)
    try:
        src = IpcTable(path, form, advise=False)     # a small table: no read-ahead to ask for
        try:
            check_schema(src.schema, schema, path)
            table = pa.Table.from_batches(list(src.batches()), schema=src.schema)
        finally:
            src.close()
        # the IPC reader trusts buffer contents; corrupt offsets or dictionary indices would
        # crash (not raise) in later compute calls, so every buffer is checked first
        table.validate(full=True)
    except (pa.ArrowException, OSError, UnicodeDecodeError, ValueError) as err:
        raise TraceError(f"{corrupt(form)}: {one_line(err)}", file=str(path)) from None
    check_nulls(table, path)
    return normalise(table, schema)


# Tensors must end below this byte address: the emulator computes addresses and block numbers in
# int64, with room to spare for offsets and strides (every access stays inside its tensor).
MAX_ADDRESS = 1 << 62


def check_tensor_layout(tensors: pa.Table, manifest: dict, file: str, manifest_file: str) -> None:
    address = tensors.column("address").to_numpy()
    nbytes = tensors.column("nbytes").to_numpy()
    if np.any(nbytes < 1):
        raise TraceError("a tensor has 0 bytes", file=file, field="nbytes")
    limit = np.uint64(MAX_ADDRESS)
    beyond = np.flatnonzero((address >= limit) | (nbytes > limit) | (address + nbytes > limit))
    if len(beyond):
        i = int(beyond[0])
        raise TraceError(f"tensor {i} (address {int(address[i])}, {int(nbytes[i])} bytes) ends beyond the "
                         f"2**62-byte address space tierlab emulates", file=file, field="address")
    align = manifest.get("alignment")
    if align is None and isinstance(manifest.get("run"), dict):
        align = manifest["run"].get("alignment")
    if align is not None:
        if isinstance(align, bool) or not isinstance(align, int) or align < 1:
            raise TraceError(f"alignment {align!r} is not a positive integer", file=manifest_file, field="alignment")
        bad = np.flatnonzero(address % np.uint64(align))
        if len(bad):
            raise TraceError(f"tensor {int(bad[0])} address {int(address[bad[0]])} is not a multiple of the "
                             f"alignment {align}", file=file, field="address")
    # each device has its own address space: sort by (device, address)
    dev = tensors.column("device").to_numpy().astype(np.int64) if "device" in tensors.schema.names \
        else np.zeros(len(address), np.int64)
    order = np.lexsort((address, dev))
    a, n, dv = address[order], nbytes[order], dev[order]
    overlap = np.flatnonzero((a[:-1] + n[:-1] > a[1:]) & (dv[:-1] == dv[1:]))
    if len(overlap):
        raise TraceError(f"tensors {int(order[overlap[0]])} and {int(order[overlap[0] + 1])} overlap",
                         file=file, field="address")
