"""A validated trace: :class:`Trace` holds its small tables and streams its accesses in checked
record batches (:meth:`Trace.iter_accesses`, :meth:`Trace.access_columns`). Made by
:func:`tierlab.traces.format.reader.open_trace`, which validates the directory first; :mod:`tierlab.traces.format.addresses`
builds its address traces on it."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from tierlab.common.errors import TraceError
from tierlab.traces.format import schema as fmt
from tierlab.traces.format.ipc import IpcTable, corrupt, ipc_form
from tierlab.traces.format.tables import check_nulls, check_schema, one_line


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
        """``"descriptors"`` (versions 1-3, and 4 without a kind) or ``"addresses"`` (:mod:`tierlab.traces.format.addresses`)."""
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
            raise TraceError(f"{corrupt(form)} after 0 rows: {one_line(err)}", file=str(path)) from None
        try:
            try:
                check_schema(src.schema, fmt.ACCESSES_SCHEMA, path)
            except (pa.ArrowException, UnicodeDecodeError) as err:      # a damaged schema message
                raise TraceError(f"{corrupt(form)} after 0 rows: {one_line(err)}", file=str(path)) from None
            batches = src.batches()
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                except (pa.ArrowException, OSError, UnicodeDecodeError) as err:
                    raise TraceError(f"{corrupt(form)} after {rows} rows: {one_line(err)}",
                                     file=str(path)) from None
                if batch.num_rows == 0:
                    continue
                try:
                    batch.validate(full=True)
                except pa.ArrowException as err:
                    raise TraceError(f"{corrupt(form)} after {rows} rows: {one_line(err)}",
                                     file=str(path)) from None
                check_nulls(batch, path, f"rows {rows}..{rows + batch.num_rows - 1}: ")
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
