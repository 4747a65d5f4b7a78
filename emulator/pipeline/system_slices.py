"""Each device's slice of a multi-device trace, as a one-device trace, and which slices are alike.

A trace has one address space per device, so device ``d``'s **slice** — the tensors of device ``d``
(renumbered 0..n_d-1), the ops of device ``d`` (renumbered, the map to global op ids kept) and the
accesses of those ops — is exactly a one-chip trace (:class:`SliceTrace`, :func:`slices`); a
version-1 trace is one device and its slice is the trace itself.

In tensor parallelism most devices' slices are the same one-chip trace. A slice's content is its
tensor and op tables without the device and collective columns, and its access rows with op and
tensor ids renumbered locally. Slices held in memory (:func:`held_streams`: every device's access
rows as whole columns, one pass over the parent's and a compiled scatter) are compared exactly
(:func:`slice_classes`); longer traces stream, and :func:`slice_digests` hashes each slice's content.
"""

from __future__ import annotations

import functools
import hashlib
import types
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tierlab.common.errors import TraceError
from tierlab.engine.scatter import scatter_rows
from tierlab.traces.format import schema as fmt
from tierlab.traces.format.reader import Trace


class SliceTrace(Trace):
    """Device ``device``'s slice of a version-2 trace, as a one-device (version-1) trace.

    ``op_ids`` / ``tensor_ids``: the global ids of the slice's ops and tensors, in order (local id
    ``i`` is global ``op_ids[i]``); ``op_rows``: the parent's rows ``op_ids`` of its op table, when
    already cut. Accesses are streamed from the parent's file, filtered to the
    slice's ops and renumbered; an access of a slice op to another device's tensor is a TraceError.
    """

    def __init__(self, parent: Trace, device: int, op_device: np.ndarray | None = None,
                 tensor_device: np.ndarray | None = None, op_rows: pa.Table | None = None, *,
                 op_ids: np.ndarray | None = None, tensor_ids: np.ndarray | None = None,
                 tensor_rows: pa.Table | None = None):
        self.parent = parent
        self.device = device
        if op_ids is None:
            op_ids = np.nonzero((parent.op_device if op_device is None else op_device) == device)[0]
        if tensor_ids is None:
            tensor_ids = np.nonzero((parent.tensor_device if tensor_device is None else tensor_device) == device)[0]
        self.op_ids, self.tensor_ids = op_ids, tensor_ids
        tensors = _renumber(_rows(parent.tensors, self.tensor_ids) if tensor_rows is None else tensor_rows,
                            "tensor_id", fmt.TENSORS_SCHEMA)
        ops = _renumber(_rows(parent.ops, self.op_ids) if op_rows is None else op_rows, "op_id", fmt.OPS_SCHEMA)
        manifest = dict(parent.manifest)
        manifest.pop("devices", None)
        manifest["version"] = 1
        run = manifest.get("run")
        if isinstance(run, dict) and "conversation" in run:   # its op ranges are global: not a slice's
            manifest["run"] = {k: v for k, v in run.items() if k != "conversation"}
        manifest["tables"] = {"tensors": tensors.num_rows, "ops": ops.num_rows, "accesses": None}
        super().__init__(parent.path, manifest, tensors, ops)
        self._held: tuple[int, list[pa.RecordBatch]] | None = None   # (batch_rows, the batches)

    @functools.cached_property
    def _op_local(self) -> np.ndarray:
        """The local id of each of the parent's ops (-1: another device's)."""
        local = np.full(self.parent.n_ops, -1, np.int64)
        local[self.op_ids] = np.arange(len(self.op_ids))
        return local

    @functools.cached_property
    def _tensor_local(self) -> np.ndarray:
        """The local id of each of the parent's tensors (-1: another device's)."""
        local = np.full(self.parent.n_tensors, -1, np.int64)
        local[self.tensor_ids] = np.arange(len(self.tensor_ids))
        return local

    def hold(self, batch_rows: int, batches: list[pa.RecordBatch]) -> None:
        """Keep the slice's access batches in memory (exactly those :meth:`iter_accesses` would
        yield for ``batch_rows``, already checked): later passes with that ``batch_rows`` read them."""
        self._held = (batch_rows, batches)
        self.manifest["tables"]["accesses"] = sum(b.num_rows for b in batches)

    @property
    def n_accesses(self) -> int:
        n = self.manifest["tables"]["accesses"]
        if n is None:    # counted on first use: one pass over the parent's accesses
            n = sum(int(np.count_nonzero(self._op_local[rb.column(0).to_numpy()] >= 0))
                    for rb in self.parent.iter_accesses())
            self.manifest["tables"]["accesses"] = n
        return n

    def iter_accesses(self, batch_rows: int = 1 << 20):
        if self._held is not None and self._held[0] == batch_rows:
            yield from self._held[1]
            return
        for rb in self.parent.iter_accesses(batch_rows):
            op = rb.column(0).to_numpy().astype(np.int64)
            local = self._op_local[op]
            keep = local >= 0
            if not keep.any():
                continue
            sub = rb.filter(pa.array(keep))
            tid = self._tensor_local[sub.column(1).to_numpy().astype(np.int64)]
            if (tid < 0).any():
                i = int(np.argmax(tid < 0))
                raise TraceError(f"op {int(op[keep][i])} of device {self.device} accesses tensor "
                                 f"{int(sub.column(1)[i].as_py())} of another device (each device has its own "
                                 "address space)", file=str(self.path / fmt.ACCESSES_FILE), field="tensor_id")
            cols = list(sub.columns)
            cols[0] = pa.array(local[keep], pa.uint32())
            cols[1] = pa.array(tid, pa.uint32())
            yield pa.RecordBatch.from_arrays(cols, schema=fmt.ACCESSES_SCHEMA)


def _rows(table: pa.Table, ids: np.ndarray) -> pa.Table:
    """Rows ``ids`` (increasing) of ``table``: a zero-copy slice when they are consecutive."""
    if len(ids) and int(ids[-1]) - int(ids[0]) == len(ids) - 1:
        return table.slice(int(ids[0]), len(ids))
    return table.take(pa.array(ids, pa.int64()))


def _renumber(table: pa.Table, id_col: str, schema: pa.Schema) -> pa.Table:
    """``table`` with ``id_col`` set to 0..n-1 and only the version-1 columns of ``schema``."""
    cols = [pa.array(np.arange(table.num_rows), pa.uint32()) if f.name == id_col else table.column(f.name)
            for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


@dataclass
class DeviceRows:
    """Which ops and tensors each device has: ``op_ids(d)`` and ``tensor_ids(d)`` (global ids, in
    order), cut from one stable sort of each table by device (``*_order``, ``*_bounds``)."""

    op_order: np.ndarray
    op_bounds: np.ndarray
    tensor_order: np.ndarray
    tensor_bounds: np.ndarray

    @classmethod
    def of(cls, trace: Trace) -> "DeviceRows":
        def by_device(device: np.ndarray):
            order = np.argsort(device, kind="stable")
            return order, np.searchsorted(device[order], np.arange(trace.n_devices + 1))
        return cls(*by_device(trace.op_device), *by_device(trace.tensor_device))

    def op_ids(self, d: int) -> np.ndarray:
        return self.op_order[self.op_bounds[d]:self.op_bounds[d + 1]]

    def tensor_ids(self, d: int) -> np.ndarray:
        return self.tensor_order[self.tensor_bounds[d]:self.tensor_bounds[d + 1]]

    def ids(self) -> list:
        """One object per device with its ``op_ids`` and ``tensor_ids`` (what :func:`held_streams`
        reads of a slice)."""
        return [types.SimpleNamespace(op_ids=self.op_ids(d), tensor_ids=self.tensor_ids(d))
                for d in range(len(self.op_bounds) - 1)]


def slices(trace: Trace, rows: DeviceRows | None = None) -> list[Trace]:
    """Each device's slice (a version-1 trace is its own one slice)."""
    if trace.n_devices == 1:
        return [trace]
    rows = DeviceRows.of(trace) if rows is None else rows
    ops = trace.ops.take(pa.array(rows.op_order, pa.int64()))           # every device's rows in one take
    tensors = trace.tensors.take(pa.array(rows.tensor_order, pa.int64()))
    out: list[Trace] = []
    for d in range(trace.n_devices):
        o0, o1 = int(rows.op_bounds[d]), int(rows.op_bounds[d + 1])
        t0, t1 = int(rows.tensor_bounds[d]), int(rows.tensor_bounds[d + 1])
        out.append(SliceTrace(trace, d, op_rows=ops.slice(o0, o1 - o0), op_ids=rows.op_ids(d),
                              tensor_ids=rows.tensor_ids(d), tensor_rows=tensors.slice(t0, t1 - t0)))
    return out


def _table_digest(h, table: pa.Table, skip: tuple[str, ...]) -> None:
    """Feed ``table``'s columns (but ``skip``) to ``h``: values only, never buffer padding."""
    for name in table.schema.names:
        if name in skip:
            continue
        col = table.column(name).combine_chunks()
        h.update(name.encode() + b"\0" + str(col.type).encode() + b"\0" + str(len(col)).encode() + b"\0")
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            off_t = np.int32 if pa.types.is_string(col.type) else np.int64
            bufs = col.buffers()
            offs = np.frombuffer(bufs[1], off_t)[col.offset:col.offset + len(col) + 1]
            lo, hi = (int(offs[0]), int(offs[-1])) if len(offs) else (0, 0)
            h.update((offs - lo).astype(np.int64).tobytes())
            if bufs[2] is not None:
                h.update(memoryview(bufs[2])[lo:hi])
        else:
            h.update(np.ascontiguousarray(col.to_numpy(zero_copy_only=False)).tobytes())


def _split_accesses(trace: Trace, sls: list[Trace], batch_rows: int, on_part) -> np.ndarray:
    """One pass over the parent's accesses: ``on_part(d, arrays, foreign)`` with each batch's run of
    device ``d``'s rows (the columns of :func:`held_streams`), in order. Returns which devices'
    accesses reach another device's tensor."""
    n = len(sls)
    ids = (trace.op_device, trace.tensor_device, *_local_ids(trace, sls))
    foreign = np.zeros(n, np.bool_)
    for rb in trace.iter_accesses(batch_rows):
        out, starts, rows = _by_device([_columns(rb)], n, *ids, foreign)
        for d in np.flatnonzero(rows):
            on_part(d, [c[starts[d]:starts[d] + rows[d]] for c in out], foreign[d])
    return foreign


def _local_ids(trace: Trace, sls: list[Trace]) -> tuple[np.ndarray, np.ndarray]:
    """Each op's and each tensor's id within its device's slice."""
    op_local = np.zeros(trace.n_ops, np.int64)
    t_local = np.zeros(trace.n_tensors, np.int64)
    for sl in sls:
        op_local[sl.op_ids] = np.arange(len(sl.op_ids))
        t_local[sl.tensor_ids] = np.arange(len(sl.tensor_ids))
    return op_local, t_local


def _columns(rb: pa.RecordBatch) -> list[np.ndarray]:
    return [rb.column(i).to_numpy(zero_copy_only=False) for i in range(7)]


def _by_device(batches: list[list[np.ndarray]], n: int, op_dev, t_dev, op_local, t_local, foreign
               ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The rows of ``batches`` (each the seven access columns as read) sorted out by device, in one
    compiled counting sort (:func:`tierlab.engine.scatter.scatter_rows`): whole columns, device
    ``d``'s ``rows[d]`` rows in order from ``starts[d]``, op and tensor ids local to the device;
    ``foreign[d]`` is set where a row of device ``d`` reaches another device's tensor."""
    rows = np.zeros(n, np.int64)
    for cols in batches:
        rows += np.bincount(op_dev[cols[0]], minlength=n)
    total = int(rows.sum())
    out = [np.empty(total, np.int64) for _ in range(6)] + [np.empty(total, np.bool_)]
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
    at = starts.copy()
    for cols in batches:
        scatter_rows(*cols, op_dev, t_dev, op_local, t_local, at, *out, foreign)
    return out, starts, rows


def held_streams(trace: Trace, sls: list[Trace], batch_rows: int) -> list[tuple | None]:
    """Each slice's accesses as whole columns, in one pass over the parent's: op and tensor ids local
    to the device, offset, nbytes, count and stride (int64), is_write (bool). ``None``: a slice
    whose accesses reach another device's tensor (its own replay raises the TraceError)."""
    n = len(sls)
    foreign = np.zeros(n, np.bool_)
    out, starts, rows = _by_device([_columns(rb) for rb in trace.iter_accesses(batch_rows)], n,
                                   trace.op_device, trace.tensor_device, *_local_ids(trace, sls), foreign)
    return [None if foreign[d] else tuple(c[starts[d]:starts[d] + rows[d]] for c in out) for d in range(n)]


def hold_stream(sl: "SliceTrace", stream: tuple, batch_rows: int) -> None:
    """Keep ``stream`` (from :func:`held_streams`) as the slice's access batches of ``batch_rows``."""
    n = len(stream[0])
    types = [f.type for f in fmt.ACCESSES_SCHEMA]
    batches = [pa.RecordBatch.from_arrays([pa.array(c[lo:lo + batch_rows], t) for c, t in zip(stream, types)],
                                          schema=fmt.ACCESSES_SCHEMA) for lo in range(0, n, batch_rows)]
    sl.hold(batch_rows, batches)


def slice_digests(trace: Trace, sls: list[Trace], batch_rows: int = 1 << 20) -> list[bytes | None]:
    """A content digest of each slice: equal digests mean the slices are the same one-chip trace
    (tensor and op tables but their ids, device and collective columns; access rows with op and
    tensor ids local to the device). ``None``: a slice whose accesses reach another device's tensor
    (its own replay raises the TraceError). One pass over the parent's accesses."""
    n = len(sls)
    heads = []
    for sl in sls:
        h = hashlib.blake2b(digest_size=32)
        _table_digest(h, sl.tensors, TENSOR_SKIP)
        _table_digest(h, sl.ops, OP_SKIP)
        heads.append(h)
    cols = [[hashlib.blake2b(digest_size=32) for _ in range(7)] for _ in range(n)]
    rows = np.zeros(n, np.int64)

    def on_part(d, part, foreign):
        rows[d] += len(part[0])
        for h, a in zip(cols[d], part):
            h.update(a.tobytes())

    foreign = _split_accesses(trace, sls, batch_rows, on_part)
    out: list[bytes | None] = []
    for d in range(n):
        if foreign[d]:
            out.append(None)
            continue
        h = heads[d]
        h.update(str(int(rows[d])).encode())
        for c in cols[d]:
            h.update(c.digest())
        out.append(h.digest())
    return out


TENSOR_SKIP = ("tensor_id", "device")
OP_SKIP = ("op_id", "device", "collective")


def tables_of(sl: Trace) -> tuple[pa.Table, pa.Table]:
    """A slice's tensor and op tables as :func:`slice_digests` hashes them (ids, device and
    collective columns left out)."""
    def strip(t, skip):
        return t.drop_columns([c for c in skip if c in t.column_names])
    return strip(sl.tensors, TENSOR_SKIP), strip(sl.ops, OP_SKIP)


def same_tables(a: tuple[pa.Table, pa.Table], b: tuple[pa.Table, pa.Table]) -> bool:
    return all(x.num_rows == y.num_rows and x.equals(y) for x, y in zip(a, b))


def slice_classes(sls: list[Trace], streams: list[tuple | None]) -> list[int]:
    """``replayed_as`` by exact comparison instead of digests (for slices held in memory, as
    :func:`held_streams` gives them): each slice is compared with the first slice of each class so
    far (the content :func:`slice_digests` hashes); a slice whose accesses reach another device's
    tensor stands for itself."""
    reps: list[tuple[int, tuple]] = []
    out = []
    for d, sl in enumerate(sls):
        if streams[d] is None:
            out.append(d)
            continue
        tables = tables_of(sl)
        r = next((r for r, rt in reps if len(streams[r][0]) == len(streams[d][0])
                  and all(np.array_equal(x, y) for x, y in zip(streams[r], streams[d]))
                  and same_tables(rt, tables)), None)
        if r is None:
            reps.append((d, tables))
            r = d
        out.append(r)
    return out
