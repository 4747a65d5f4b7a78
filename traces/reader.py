"""Open and validate a trace directory; stream its accesses in checked record batches.

:func:`open_trace` checks the manifest (format name, version — an unknown or newer version is
refused, never guessed), the presence of every table file, each table's schema (strings may be
plain, large or dictionary-encoded; they are decoded to plain strings) and the row counts of the
tensors and ops tables against the manifest. Tensor ids and op ids must be 0..n-1 in order; tensor
byte ranges must not overlap and addresses must be multiples of the recorded alignment. Every table
may be in the Arrow IPC file form (version 3) or the stream form (versions 1 and 2); both are read
from a memory map (:mod:`traces.ipc`).

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
from typing import Iterator

import numpy as np
import pyarrow as pa

from traces import format as fmt
from traces.ipc import IpcTable, corrupt, ipc_form
from common.errors import TraceError


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or (
        pa.types.is_dictionary(t) and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)))


def _check_schema(schema: pa.Schema, expected: pa.Schema, file: Path) -> None:
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


def _normalise(table: pa.Table, expected: pa.Schema) -> pa.Table:
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


def _check_nulls(data: pa.Table | pa.RecordBatch, path: Path, where: str = "") -> None:
    for name, col in zip(data.schema.names, data.columns):
        if col.null_count:
            n = col.null_count
            raise TraceError(f"{where}{n} null value{'' if n == 1 else 's'}; every cell must hold a value",
                             file=str(path), field=name)


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())


def _read_small_table(path: Path, schema: pa.Schema) -> pa.Table:
    form = ipc_form(path)
    try:
        src = IpcTable(path, form)
        try:
            _check_schema(src.schema, schema, path)
            table = pa.Table.from_batches(list(src.batches()), schema=src.schema)
        finally:
            src.close()
        # the IPC reader trusts buffer contents; corrupt offsets or dictionary indices would
        # crash (not raise) in later compute calls, so every buffer is checked first
        table.validate(full=True)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as err:
        raise TraceError(f"{corrupt(form)}: {_one_line(err)}", file=str(path)) from None
    _check_nulls(table, path)
    return _normalise(table, schema)


class Trace:
    """A validated trace. ``tensors``, ``ops`` and ``collectives`` are whole pa.Tables; accesses are
    streamed. A version-1 trace is one device: :attr:`tensor_device` and :attr:`op_device` are all 0,
    :attr:`op_collective` all -1 and :attr:`collectives` empty."""

    def __init__(self, path: Path, manifest: dict, tensors: pa.Table, ops: pa.Table,
                 collectives: pa.Table | None = None):
        self.path = path
        self.manifest = manifest
        self.tensors = tensors
        self.ops = ops
        self.collectives = collectives if collectives is not None else fmt.COLLECTIVES_SCHEMA.empty_table()
        self._tensor_nbytes = tensors.column("nbytes").to_numpy()

    @property
    def kind(self) -> str:
        """``"descriptors"`` (versions 1-3, and 4 without a kind) or ``"addresses"`` (:mod:`traces.addresses`)."""
        return "descriptors"

    @property
    def version(self) -> int:
        return int(self.manifest["version"])

    @property
    def n_devices(self) -> int:
        return int(self.manifest.get("devices", 1))

    @property
    def tensor_device(self) -> np.ndarray:
        """The device holding each tensor (int64, by tensor id)."""
        if "device" not in self.tensors.schema.names:
            return np.zeros(self.n_tensors, np.int64)
        return self.tensors.column("device").to_numpy().astype(np.int64)

    @property
    def op_device(self) -> np.ndarray:
        """The device running each op (int64, by op id)."""
        if "device" not in self.ops.schema.names:
            return np.zeros(self.n_ops, np.int64)
        return self.ops.column("device").to_numpy().astype(np.int64)

    @property
    def op_collective(self) -> np.ndarray:
        """The collective each op takes part in (int64, by op id; -1 for a compute op)."""
        if "collective" not in self.ops.schema.names:
            return np.full(self.n_ops, -1, np.int64)
        return self.ops.column("collective").to_numpy().astype(np.int64)

    @property
    def n_tensors(self) -> int:
        return self.tensors.num_rows

    @property
    def n_ops(self) -> int:
        return self.ops.num_rows

    @property
    def n_accesses(self) -> int:
        return int(self.manifest["tables"]["accesses"])

    @property
    def alignment(self) -> int | None:
        a = self.manifest.get("alignment")
        if a is None and isinstance(self.manifest.get("run"), dict):
            a = self.manifest["run"].get("alignment")
        return a

    def tensor_arrays(self) -> dict[str, np.ndarray]:
        """Tensor columns as numpy arrays (strings as object arrays), indexed by tensor id."""
        return {n: self.tensors.column(n).to_numpy(zero_copy_only=False) for n in self.tensors.schema.names}

    def op_arrays(self) -> dict[str, np.ndarray]:
        """Op columns as numpy arrays (strings as object arrays), indexed by op id."""
        return {n: self.ops.column(n).to_numpy(zero_copy_only=False) for n in self.ops.schema.names}

    def iter_accesses(self, batch_rows: int = 1 << 20) -> Iterator[pa.RecordBatch]:
        """Yield validated access batches of ``batch_rows`` rows (the last may be shorter), in
        issue order. A batch lying inside one stored record batch is a zero-copy slice of the
        memory-mapped file (read-only); one spanning several is a copy."""
        yield from _rebatch(self._checked_batches(), batch_rows)

    def access_columns(self) -> dict[str, np.ndarray]:
        """Every access column as one numpy array (uint32/uint64/bool as stored), checked as
        :meth:`iter_accesses` checks. Zero-copy read-only views of the memory-mapped file when the
        table is one stored record batch (as the writer stores a table of up to ``batch_rows``
        rows or one bulk-added block); otherwise concatenated. ``is_write`` is bit-packed in
        Arrow, so it is always a (1 byte per row) copy."""
        batches = list(self._checked_batches())
        names = fmt.ACCESSES_SCHEMA.names
        if not batches:
            return {f.name: np.empty(0, f.type.to_pandas_dtype()) for f in fmt.ACCESSES_SCHEMA}
        cols = [[b.column(i).to_numpy(zero_copy_only=False) for b in batches] for i in range(len(names))]
        return {n: c[0] if len(c) == 1 else np.concatenate(c) for n, c in zip(names, cols)}

    def _checked_batches(self) -> Iterator[pa.RecordBatch]:
        """The stored access record batches, each checked, then the row count."""
        path = self.path / fmt.ACCESSES_FILE
        n_ops = self.n_ops
        sizes = self._tensor_nbytes
        last_op = 0
        rows = 0
        form = ipc_form(path)
        try:
            src = IpcTable(path, form)
        except OSError as err:
            raise TraceError(f"cannot open: {err}", file=str(path)) from None
        except (pa.ArrowException, UnicodeDecodeError) as err:
            raise TraceError(f"{corrupt(form)} after 0 rows: {_one_line(err)}", file=str(path)) from None
        try:
            try:
                _check_schema(src.schema, fmt.ACCESSES_SCHEMA, path)
            except (pa.ArrowException, UnicodeDecodeError) as err:      # a damaged schema message
                raise TraceError(f"{corrupt(form)} after 0 rows: {_one_line(err)}", file=str(path)) from None
            batches = src.batches()
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                except (pa.ArrowException, OSError, UnicodeDecodeError) as err:
                    raise TraceError(f"{corrupt(form)} after {rows} rows: {_one_line(err)}",
                                     file=str(path)) from None
                if batch.num_rows == 0:
                    continue
                try:
                    batch.validate(full=True)
                except pa.ArrowException as err:
                    raise TraceError(f"{corrupt(form)} after {rows} rows: {_one_line(err)}",
                                     file=str(path)) from None
                _check_nulls(batch, path, f"rows {rows}..{rows + batch.num_rows - 1}: ")
                last_op = self._check_batch(batch, path, rows, last_op, n_ops, sizes)
                rows += batch.num_rows
                yield batch
        finally:
            src.close()
        if rows != self.n_accesses:
            raise TraceError(f"holds {rows} access rows, the manifest says {self.n_accesses} (truncated?)",
                             file=str(path))

    @staticmethod
    def _check_batch(batch: pa.RecordBatch, path: Path, start: int, last_op: int, n_ops: int,
                     sizes: np.ndarray) -> int:
        """Check one batch: numpy passes over blocks of :data:`CHECK_ROWS` rows (cache-sized
        temporaries, no per-row Python); on a failure, :func:`_explain` names it as a whole-batch
        check would (the first failing check in order, the first offending row)."""
        col = [batch.column(i).to_numpy(zero_copy_only=False) for i in range(6)]
        if not _all_good(col, last_op, n_ops, sizes):
            _explain(col, path, start, last_op, n_ops, sizes)
        return int(col[0][-1])


# Rows per block of the access checks: its temporaries (a few arrays of 8 bytes a row) stay in
# the core's L2 cache, where whole-batch temporaries of 10 M rows would stream through memory.
CHECK_ROWS = 1 << 15


def _all_good(col: list[np.ndarray], last_op: int, n_ops: int, sizes: np.ndarray) -> bool:
    """Whether a batch's accesses pass every check of :func:`_explain` (same conditions)."""
    op, tid, offset, nbytes, count, stride = col
    n = len(op)
    if op[0] < last_op or op[-1] >= n_ops:
        return False
    one = sizes[0] if len(sizes) == 1 else None
    for lo in range(0, n, CHECK_ROWS):
        hi = min(n, lo + CHECK_ROWS)
        o = op[lo:hi + 1]                                   # one row into the next block
        if len(o) > 1 and np.any(o[1:] < o[:-1]):
            return False
        t, off, nb, c = tid[lo:hi], offset[lo:hi], nbytes[lo:hi], count[lo:hi]
        if int(t.max()) >= len(sizes) or int(c.min()) < 1 or int(nb.min()) < 1:
            return False
        limit = one if one is not None else sizes[t]
        room = limit - off
        if np.any((off >= limit) | (nb > room)):
            return False
        if int(c.max()) > 1:
            many = np.flatnonzero(c > 1)
            span = c[many].astype(np.uint64) - np.uint64(1)
            if np.any(stride[lo:hi][many] > (room[many] - nb[many]) // span):
                return False
    return True


def _explain(col: list[np.ndarray], path: Path, start: int, last_op: int, n_ops: int, sizes: np.ndarray) -> None:
    """Raise the TraceError for a batch that fails a check, whole-array: op ids never decrease and
    exist, tensor ids exist, count and nbytes >= 1, every chunk inside its tensor."""
    op, tid, offset, nbytes, count, stride = col
    where = f"rows {start}..{start + len(op) - 1}"
    if op[0] < last_op or (len(op) > 1 and np.any(op[1:] < op[:-1])):
        raise TraceError(f"{where}: op ids decrease; accesses must be grouped by op in execution order",
                         file=str(path), field="op_id")
    if op[-1] >= n_ops:
        raise TraceError(f"{where}: op id {int(op.max())} does not exist ({n_ops} ops)", file=str(path),
                         field="op_id")
    if int(tid.max()) >= len(sizes):
        raise TraceError(f"{where}: tensor id {int(tid.max())} does not exist ({len(sizes)} tensors)",
                         file=str(path), field="tensor_id")
    if int(count.min()) < 1:
        raise TraceError(f"{where}: count below 1", file=str(path), field="count")
    if int(nbytes.min()) < 1:
        raise TraceError(f"{where}: nbytes below 1", file=str(path), field="nbytes")
    # Every chunk inside its tensor: offset + (count-1)*stride + nbytes <= limit, exactly (no
    # uint64 wrap: limit < 2**62 by the tensor layout check, so limit - offset is exact once
    # offset < limit, and the strided part divides instead of multiplying).
    limit = sizes[0] if len(sizes) == 1 else sizes[tid]    # one tensor: no gather
    room = limit - offset                                   # wraps where offset >= limit: flagged
    bad = (offset >= limit) | (nbytes > room)
    if int(count.max()) > 1:
        many = np.flatnonzero(count > 1)
        span = count[many].astype(np.uint64) - np.uint64(1)
        rest = room[many] - nbytes[many]                    # meaningful where not yet bad
        bad[many] |= stride[many] > rest // span
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(f"row {start + i}: access (offset {int(offset[i])}, nbytes {int(nbytes[i])}, "
                         f"count {int(count[i])}, stride {int(stride[i])}) lies outside tensor {int(tid[i])} "
                         f"of {int(sizes[tid[i]])} bytes", file=str(path), field="offset")
    raise AssertionError("a batch failed the block checks but not the whole-batch ones")


def _rebatch(batches: Iterator[pa.RecordBatch], n: int) -> Iterator[pa.RecordBatch]:
    """Re-cut record batches into batches of ``n`` rows (the last may be shorter). An output lying
    inside one input batch is a zero-copy slice of it; one spanning several is concatenated."""
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for b in batches:
        start = 0
        if pending:
            need = n - pending_rows
            if b.num_rows < need:
                pending.append(b)
                pending_rows += b.num_rows
                continue
            pending.append(b.slice(0, need))
            yield _concat(pending)
            pending, pending_rows, start = [], 0, need
        while b.num_rows - start >= n:
            yield b.slice(start, n)
            start += n
        if start < b.num_rows:
            pending, pending_rows = [b.slice(start)], b.num_rows - start
    if pending:
        yield _concat(pending)


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


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
        from traces.addresses import open_address_trace
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
    tensors = _read_small_table(p / fmt.TENSORS_FILE, layout["tensors"][1])
    ops = _read_small_table(p / fmt.OPS_FILE, layout["ops"][1])
    small = [("tensors", tensors), ("ops", ops)]
    collectives = None
    if "collectives" in layout:
        collectives = _read_small_table(p / fmt.COLLECTIVES_FILE, fmt.COLLECTIVES_SCHEMA)
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
    _check_tensor_layout(tensors, manifest, str(p / fmt.TENSORS_FILE), str(mpath))
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


# Tensors must end below this byte address: the emulator computes addresses and block numbers in
# int64, with room to spare for offsets and strides (every access stays inside its tensor).
MAX_ADDRESS = 1 << 62


def _check_tensor_layout(tensors: pa.Table, manifest: dict, file: str, manifest_file: str) -> None:
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
