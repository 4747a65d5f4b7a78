"""Write a trace directory: tensors, ops and accesses as Arrow IPC files of record batches.

Rows are buffered in column lists and flushed as record batches of ``batch_rows`` rows, so memory
stays bounded however long the run. Everything goes to a temporary sibling directory; on a clean
exit ``manifest.json`` is written last (with the row count of every table) and the directory is
renamed into place. On an error or interrupt the temporary directory is removed.

Tables are written in the Arrow IPC **file** form (format version 3: ``polars.read_ipc`` opens
them, and the reader memory-maps them); each flush is one record batch.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from tierlab.traces.format import schema as fmt
from tierlab.common.atomic import atomic_path
from tierlab.common.errors import TraceError, UsageError
from tierlab.common.version import tierlab_version

GENERATOR = "tierlab"

# Deterministic interrupt points for tests (tests/cli/test_kill.py), so no test decides by timing where
# a signal lands: with TIERLAB_TEST_PAUSE_AT set to ``start`` (the temporary directory and its
# table files open, nothing written), ``op:N`` (op N added), ``closed`` (tables complete, no
# manifest) or ``manifest`` (manifest written, not yet renamed), the writer creates the file named
# by TIERLAB_TEST_PAUSE_FILE there and waits (up to PAUSE_S) for the signal the test then sends.
PAUSE_AT, PAUSE_FILE, PAUSE_S = "TIERLAB_TEST_PAUSE_AT", "TIERLAB_TEST_PAUSE_FILE", 600.0


def _pause(point: str) -> None:
    if os.environ.get(PAUSE_AT) != point:
        return
    with open(os.environ[PAUSE_FILE], "w") as f:
        f.write(point)
    t0 = time.monotonic()
    while time.monotonic() - t0 < PAUSE_S:
        time.sleep(0.01)


def generator_name() -> str:
    v = tierlab_version()
    return GENERATOR if v is None else f"{GENERATOR} {v}"     # None: running from a checkout


class _Table:
    """Row buffer for one table, written to an Arrow IPC file (file form) in record batches."""

    def __init__(self, path: Path, schema: pa.Schema, batch_rows: int):
        self.schema, self.batch_rows = schema, batch_rows
        self.names = schema.names
        self.pending: list = []      # row tuples, or dicts of numpy columns (bulk-added), in order
        self.buffered = 0
        self.rows = 0
        self.sink = pa.OSFile(str(path), "wb")
        self.writer = pa.ipc.new_file(self.sink, schema)
        self._tuples: list[tuple] = []

    def append(self, row: tuple) -> None:
        self._tuples.append(row)
        self.buffered += 1
        if self.buffered >= self.batch_rows:
            self.flush()

    def extend(self, columns: dict[str, np.ndarray], n: int) -> None:
        self._move_rows()
        self.pending.append(columns)
        self.buffered += n
        if self.buffered >= self.batch_rows:
            self.flush()

    def _move_rows(self) -> None:
        if self._tuples:
            cols = list(zip(*self._tuples))
            self.pending.append(dict(zip(self.names, cols)))
            self._tuples = []

    def flush(self) -> None:
        """Write what is buffered as one record batch (chunks concatenated: fewer, larger batches
        let the reader hand out zero-copy slices)."""
        self._move_rows()
        if self.pending:
            arrays = [pa.concat_arrays([pa.array(chunk[f.name], type=f.type) for chunk in self.pending])
                      if len(self.pending) > 1 else pa.array(self.pending[0][f.name], type=f.type)
                      for f in self.schema]
            batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
            self.writer.write_batch(batch)
            self.rows += batch.num_rows
        self.pending = []
        self.buffered = 0

    def close(self) -> None:
        self.flush()
        self.writer.close()
        self.sink.close()


class TraceWriter:
    """Context manager writing one trace directory.

    ``model`` is the model config dict (or None for a synthetic trace); ``run`` the run parameters
    (dict, or an object with ``to_dict()``). Tensor base addresses are assigned consecutively,
    each a multiple of ``alignment`` bytes, which is recorded in the manifest (top-level
    ``alignment`` and ``run["alignment"]``).

    Writes format version 3 (the IPC file form). ``devices`` > 1: version 2's tables, where every
    tensor and op names its device (each device has its own address space), and collectives are
    declared with :meth:`add_collective`. One device: version 1's tables (no device columns, no
    collectives), so a one-device trace replays exactly as a version-1 trace.
    """

    def __init__(self, path: str | os.PathLike, *, model: dict | None = None, run=None,
                 force: bool = False, alignment: int = fmt.DEFAULT_ALIGNMENT, batch_rows: int = 1 << 16,
                 extra: dict | None = None, devices: int = 1):
        if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
            raise UsageError(f"devices must be a positive integer, got {devices!r}", field="devices")
        if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
            raise UsageError(f"alignment must be a power of two number of bytes, got {alignment!r}",
                             field="alignment")
        self.path = Path(path)
        self.model = model
        self.run = run.to_dict() if hasattr(run, "to_dict") else (dict(run) if run is not None else None)
        self.force = force
        self.alignment = alignment
        self.batch_rows = batch_rows
        self.extra = dict(extra or {})
        self.devices = devices
        self.version = fmt.FORMAT_VERSION
        self._ctx = None
        self._next_address = [0] * devices       # each device its own address space
        self._tensor_nbytes: list[int] = []
        self._n_collectives = 0
        self._n_ops = 0
        self._last_access_op = 0
        self._extra_tables: dict[str, _Table] = {}
        at = os.environ.get(PAUSE_AT, "")
        self._pause_op = int(at[3:]) if at.startswith("op:") else -1

    # ---- context management -------------------------------------------------------------------
    def __enter__(self) -> "TraceWriter":
        self._ctx = atomic_path(self.path, directory=True, force=self.force)
        self.tmp = self._ctx.__enter__()
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self.tmp, 0o777 & ~umask)   # mkdtemp makes it private; a trace is ordinary output
            self._tables = {name: _Table(self.tmp / file, schema, self.batch_rows)
                            for name, (file, schema) in fmt.tables(self.version, devices=self.devices).items()}
            _pause("start")
        except BaseException as err:
            self._ctx.__exit__(type(err), err, err.__traceback__)
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            try:
                for t in [*self._tables.values(), *self._extra_tables.values()]:
                    t.close()
                _pause("closed")
                self._write_manifest()
                _pause("manifest")
            except BaseException as err:
                self._ctx.__exit__(type(err), err, err.__traceback__)   # removes the temporary directory
                raise
            return self._ctx.__exit__(None, None, None)                 # renames into place
        for t in [*self._tables.values(), *self._extra_tables.values()]:
            try:
                t.writer.close()
                t.sink.close()
            except Exception:
                pass
        return self._ctx.__exit__(exc_type, exc, tb)                    # removes it; the error propagates

    def _write_manifest(self) -> None:
        run = None if self.run is None else {**self.run, "alignment": self.alignment}
        manifest = {
            "format": fmt.FORMAT_NAME,
            "version": self.version,
            "devices": self.devices,
            "generator": generator_name(),
            "model": self.model,
            "run": run,
            "alignment": self.alignment,
            "tables": {name: t.rows for name, t in self._tables.items()},
            **({"extra_tables": {name: {"file": t.file, "rows": t.rows} for name, t in self._extra_tables.items()}}
               if self._extra_tables else {}),
            **self.extra,
        }
        (self.tmp / fmt.MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")

    def add_extra_table(self, name: str, file: str, schema: pa.Schema) -> "_Table":
        """Open an optional side table (e.g. the routing log) streamed to ``file`` in the trace;
        feed it with ``.extend({column: array}, n)``. Listed in the manifest's ``extra_tables``;
        readers of format v1 need not know it."""
        if name in fmt.TABLES_V2 or name in self._extra_tables or "/" in file or file in (fmt.MANIFEST,):
            raise TraceError(f"extra table {name!r} ({file}) clashes with the trace's files", field="extra_tables")
        t = _Table(self.tmp / file, schema, self.batch_rows)
        t.file = file
        self._extra_tables[name] = t
        return t

    # ---- rows ---------------------------------------------------------------------------------
    @property
    def n_tensors(self) -> int:
        return len(self._tensor_nbytes)

    @property
    def n_ops(self) -> int:
        return self._n_ops

    @property
    def n_collectives(self) -> int:
        return self._n_collectives

    def _check_device(self, device: int) -> None:
        if not 0 <= device < self.devices:
            raise TraceError(f"device {device} outside the trace's {self.devices} device(s)", field="device")

    def add_tensor(self, name: str, kind: str, nbytes: int, dtype: str, layer: int = -1, expert: int = -1,
                   device: int = 0) -> int:
        """Declare a tensor of ``nbytes`` bytes in ``device``'s memory; return its id. Its address is
        the next aligned one of that device."""
        nbytes = int(nbytes)
        if nbytes < 1:
            raise TraceError(f"tensor {name!r} has {nbytes} bytes; expected at least 1", field="nbytes")
        self._check_device(device)
        tid = len(self._tensor_nbytes)
        address = self._next_address[device]
        self._next_address[device] = -(-(address + nbytes) // self.alignment) * self.alignment
        self._tensor_nbytes.append(nbytes)
        row = (tid, name, kind, layer, expert, dtype, address, nbytes)
        self._tables["tensors"].append(row if self.devices == 1 else row + (device,))
        return tid

    def add_op(self, name: str, kind: str, layer: int, phase: str, step: int, tokens: int, flops: int,
               expert: int = -1, pim_eligible: bool = False, device: int = 0, collective: int = -1) -> int:
        """Append an operator of ``device`` (execution order = call order); return its id. An op
        taking part in a collective names it (an id from :meth:`add_collective`)."""
        if phase not in fmt.PHASES:
            raise TraceError(f"phase {phase!r}; expected one of {', '.join(fmt.PHASES)}", field="phase")
        self._check_device(device)
        if not -1 <= collective < self._n_collectives:
            raise TraceError(f"op names collective {collective}, which is not declared", field="collective")
        oid = self._n_ops
        self._n_ops += 1
        row = (oid, name, kind, layer, phase, step, int(tokens), int(flops), expert, bool(pim_eligible))
        self._tables["ops"].append(row if self.devices == 1 else row + (device, collective))
        if oid == self._pause_op:
            _pause(f"op:{oid}")
        return oid

    def add_collective(self, kind: str, ranks, size_bytes: int, phase: str, step: int, layer: int = -1,
                       send_bytes=None) -> int:
        """Declare a collective among ``ranks`` (devices, in group order) of size ``size_bytes`` (see
        :data:`tierlab.traces.format.schema.COLLECTIVE_KINDS`); ``send_bytes`` (all_to_all only, optional): the
        n x n bytes each rank sends each rank, row-major. Returns its id (version 2 only)."""
        if self.devices == 1:
            raise TraceError("a one-device trace has no collectives", field="collective")
        if kind not in fmt.COLLECTIVE_KINDS:
            raise TraceError(f"collective kind {kind!r}; expected one of {', '.join(fmt.COLLECTIVE_KINDS)}",
                             field="kind")
        if phase not in fmt.PHASES:
            raise TraceError(f"phase {phase!r}; expected one of {', '.join(fmt.PHASES)}", field="phase")
        ranks = [int(r) for r in ranks]
        for r in ranks:
            self._check_device(r)
        n = len(ranks)
        if n < 2 or len(set(ranks)) != n or (kind == "send_recv" and n != 2):
            raise TraceError(f"{kind} among ranks {ranks}: expected {'two' if kind == 'send_recv' else 'two or more'} "
                             "distinct devices", field="ranks")
        sb = [] if send_bytes is None else [int(x) for x in np.asarray(send_bytes).ravel()]
        if sb and (kind != "all_to_all" or len(sb) != n * n or min(sb) < 0):
            raise TraceError(f"send_bytes of a {kind} among {n} ranks: expected an all_to_all's {n} x {n} "
                             "non-negative bytes", field="send_bytes")
        if int(size_bytes) < 0:
            raise TraceError(f"collective of {size_bytes} bytes", field="size_bytes")
        cid = self._n_collectives
        self._n_collectives += 1
        self._tables["collectives"].append((cid, kind, ranks, int(size_bytes), sb, phase, int(step), int(layer)))
        return cid

    def add_access(self, op_id: int, tensor_id: int, offset: int, nbytes: int, count: int = 1,
                   stride: int = 0, is_write: bool = False) -> None:
        """Append one descriptor: ``count`` chunks of ``nbytes`` at ``offset + k*stride`` in the tensor."""
        if not (self._last_access_op <= op_id < self._n_ops):
            raise TraceError(f"access for op {op_id}: ops must be declared first and accesses issued in op order",
                             field="op_id")
        if not 0 <= tensor_id < len(self._tensor_nbytes):
            raise TraceError(f"access names unknown tensor {tensor_id}", field="tensor_id")
        if count < 1 or nbytes < 1 or offset < 0 or stride < 0:
            raise TraceError(f"access (offset {offset}, nbytes {nbytes}, count {count}, stride {stride}) "
                             "needs count >= 1, nbytes >= 1", field="count")
        end = offset + (count - 1) * stride + nbytes
        if end > self._tensor_nbytes[tensor_id]:
            raise TraceError(f"access to tensor {tensor_id} ends at byte {end}, past its "
                             f"{self._tensor_nbytes[tensor_id]} bytes", field="offset")
        self._last_access_op = op_id
        self._tables["accesses"].append((op_id, tensor_id, offset, nbytes, count, stride, bool(is_write)))

    def add_accesses(self, op_id, tensor_id, offset, nbytes, count=None, stride=None, is_write=None) -> None:
        """Vectorised :meth:`add_access`: equal-length arrays (``count``/``stride``/``is_write`` may
        be None for 1/0/False). Checked with numpy like the reader does."""
        op_id = np.asarray(op_id, dtype=np.uint32)
        n = len(op_id)
        if n == 0:
            return
        tensor_id = np.asarray(tensor_id, dtype=np.uint32)
        offset = np.asarray(offset, dtype=np.uint64)
        nbytes = np.asarray(nbytes, dtype=np.uint64)
        count = np.ones(n, np.uint32) if count is None else np.asarray(count, dtype=np.uint32)
        stride = np.zeros(n, np.uint64) if stride is None else np.asarray(stride, dtype=np.uint64)
        is_write = np.zeros(n, bool) if is_write is None else np.asarray(is_write, dtype=bool)
        if any(len(a) != n for a in (tensor_id, offset, nbytes, count, stride, is_write)):
            raise TraceError("bulk access columns differ in length", field="accesses")
        if op_id[0] < self._last_access_op or np.any(np.diff(op_id.astype(np.int64)) < 0) or op_id[-1] >= self._n_ops:
            raise TraceError("bulk accesses must be in op order and name declared ops", field="op_id")
        sizes = np.asarray(self._tensor_nbytes, dtype=np.uint64)
        if np.any(tensor_id >= len(sizes)):
            raise TraceError("bulk access names an unknown tensor", field="tensor_id")
        if np.any(count < 1) or np.any(nbytes < 1):
            raise TraceError("bulk access with count or nbytes below 1", field="count")
        end = offset + (count.astype(np.uint64) - 1) * stride + nbytes
        if np.any(end > sizes[tensor_id]):
            raise TraceError("bulk access lies outside its tensor", field="offset")
        self._last_access_op = int(op_id[-1])
        self._tables["accesses"].extend({"op_id": op_id, "tensor_id": tensor_id, "offset": offset,
                                         "nbytes": nbytes, "count": count, "stride": stride,
                                         "is_write": is_write}, n)
