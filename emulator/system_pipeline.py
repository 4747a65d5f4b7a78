"""A trace replayed on a system of many chips: each device's slice on its chip, the whole way.

:func:`replay_system` opens what it is given (a trace path, a system name or file) and, for each
device ``d`` of the trace, cuts its **slice** — the tensors of device ``d`` (renumbered 0..n_d-1),
the ops of device ``d`` (renumbered, the map to global op ids kept) and the accesses of those ops —
and replays it with :func:`emulator.pipeline.replay_trace` on ``system.chip`` (placement, PIM plan
and the engine's door exactly as for one chip). A trace has one address space per device, so a
slice is exactly a one-chip trace; a version-1 trace is one device and its slice is the trace
itself. Costing the collectives and the critical path is :mod:`emulator.cost.system_cost`.

Two speed-ups, neither changing a count. **Identical slices are replayed once**: in tensor
parallelism most devices' slices are the same one-chip trace (each device has its own address
space from 0); a slice's content is its tensor and op tables without the device and collective
columns, and its access rows with op and tensor ids renumbered locally, all cut in one pass over the
accesses. Slices held in memory are compared exactly (:func:`slice_classes`); longer traces stream,
and :func:`slice_digests` hashes each slice's content. One device per class is replayed, the others
sharing its counts (``dedupe=False`` replays every device). **Distinct slices replay on threads**
(``threads``, default ``os.cpu_count()``): the engine's kernels release the GIL.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa

from common.errors import TraceError, UsageError
from emulator.engine.options import ReplayOptions
from emulator.pipeline import TraceReplay, replay_trace
from emulator.system.model import System
from emulator.system.systemfile import load_system
from traces import format as fmt
from traces.reader import Trace, open_trace

DEVICE_FIELD = "--system or --tp"


class SliceTrace(Trace):
    """Device ``device``'s slice of a version-2 trace, as a one-device (version-1) trace.

    ``op_ids`` / ``tensor_ids``: the global ids of the slice's ops and tensors, in order (local id
    ``i`` is global ``op_ids[i]``); ``op_rows``: the parent's rows ``op_ids`` of its op table, when
    already cut. Accesses are streamed from the parent's file, filtered to the
    slice's ops and renumbered; an access of a slice op to another device's tensor is a TraceError.
    """

    def __init__(self, parent: Trace, device: int, op_device: np.ndarray | None = None,
                 tensor_device: np.ndarray | None = None, op_rows: pa.Table | None = None):
        self.parent = parent
        self.device = device
        self.op_ids = np.nonzero((parent.op_device if op_device is None else op_device) == device)[0]
        self.tensor_ids = np.nonzero((parent.tensor_device if tensor_device is None else tensor_device) == device)[0]
        self._op_local = np.full(parent.n_ops, -1, np.int64)
        self._op_local[self.op_ids] = np.arange(len(self.op_ids))
        self._tensor_local = np.full(parent.n_tensors, -1, np.int64)
        self._tensor_local[self.tensor_ids] = np.arange(len(self.tensor_ids))
        tensors = _renumber(_rows(parent.tensors, self.tensor_ids), "tensor_id", fmt.TENSORS_SCHEMA)
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
class SystemReplay:
    """A trace replayed on a system: one :class:`~emulator.pipeline.TraceReplay` per device (its
    ``trace`` the device's slice) and ``op_ids[d]``, the global op ids of device ``d``'s ops."""

    system: System
    trace: Trace
    options: ReplayOptions
    devices: list[TraceReplay]
    op_ids: list[np.ndarray]
    collective_algo: str = "auto"
    #: ``replayed_as[d]``: the device whose replay device ``d``'s counts are (``d`` itself unless
    #: its slice is identical to that device's); ``threads``: the host threads the slices replayed on
    replayed_as: list[int] = field(default_factory=list)
    threads: int = 1

    @property
    def distinct_slices(self) -> int:
        """How many slice replays were run (devices with identical slices share one)."""
        return len(set(self.replayed_as)) if self.replayed_as else len(self.devices)


def slices(trace: Trace) -> list[Trace]:
    """Each device's slice (a version-1 trace is its own one slice)."""
    if trace.n_devices == 1:
        return [trace]
    op_device, tensor_device = trace.op_device, trace.tensor_device
    order = np.argsort(op_device, kind="stable")          # every device's op rows in one take
    bounds = np.searchsorted(op_device[order], np.arange(trace.n_devices + 1))
    by_device = trace.ops.take(pa.array(order, pa.int64()))
    return [SliceTrace(trace, d, op_device, tensor_device, by_device.slice(int(bounds[d]), int(bounds[d + 1] - bounds[d])))
            for d in range(trace.n_devices)]


def check_fits(trace: Trace, system: System) -> None:
    """A trace needing more devices than the system has chips is a UsageError."""
    if trace.n_devices > system.n_chips:
        raise UsageError(f"the trace needs {trace.n_devices} devices; {system.name} has {system.n_chips} chips",
                         field=DEVICE_FIELD)


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


HOLD_ROWS = 1 << 22    # traces of at most this many access rows (~170 MB) keep the slices' batches in memory


def _split_accesses(trace: Trace, sls: list[Trace], batch_rows: int, on_part) -> np.ndarray:
    """One pass over the parent's accesses: ``on_part(d, arrays)`` with each run of device ``d``'s
    rows (op and tensor ids local to the device, then the other five columns), in order. Returns
    which devices' accesses reach another device's tensor."""
    n = len(sls)
    op_dev = trace.op_device
    t_dev = trace.tensor_device
    op_local = np.zeros(trace.n_ops, np.int64)
    t_local = np.zeros(trace.n_tensors, np.int64)
    for sl in sls:
        op_local[sl.op_ids] = np.arange(len(sl.op_ids))
        t_local[sl.tensor_ids] = np.arange(len(sl.tensor_ids))
    foreign = np.zeros(n, bool)
    small = np.uint8 if n <= 255 else np.uint16 if n <= 65535 else np.int64    # a radix sort below
    for rb in trace.iter_accesses(batch_rows):
        op = rb.column(0).to_numpy().astype(np.int64)
        tid = rb.column(1).to_numpy().astype(np.int64)
        dev = op_dev[op]
        foreign |= np.bincount(dev[t_dev[tid] != dev], minlength=n).astype(bool)
        order = np.argsort(dev.astype(small), kind="stable")
        bounds = np.searchsorted(dev[order], np.arange(n + 1))
        arrays = [op_local[op], t_local[tid]] + [rb.column(i).to_numpy(zero_copy_only=False) for i in range(2, 7)]
        arrays = [a[order] for a in arrays]
        for d in np.flatnonzero(bounds[1:] > bounds[:-1]):
            lo, hi = bounds[d], bounds[d + 1]
            on_part(d, [np.ascontiguousarray(a[lo:hi]) for a in arrays], foreign[d])
    return foreign


def _hold_part(held: list[list[pa.RecordBatch]], d: int, part: list[np.ndarray]) -> None:
    part[0], part[1] = part[0].astype(np.uint32), part[1].astype(np.uint32)
    held[d].append(pa.RecordBatch.from_arrays([pa.array(a) for a in part], schema=fmt.ACCESSES_SCHEMA))


def slice_digests(trace: Trace, sls: list[Trace], batch_rows: int = 1 << 20,
                  held: list[list[pa.RecordBatch]] | None = None) -> list[bytes | None]:
    """A content digest of each slice: equal digests mean the slices are the same one-chip trace
    (tensor and op tables but their ids, device and collective columns; access rows with op and
    tensor ids local to the device). ``None``: a slice whose accesses reach another device's tensor
    (its own replay raises the TraceError). One pass over the parent's accesses. ``held``: a list
    of one empty list per slice, filled with the slice's access batches as
    :meth:`SliceTrace.iter_accesses` yields them for ``batch_rows`` (a foreign slice's left empty)."""
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
        if held is not None and not foreign:
            _hold_part(held, d, part)

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


def _content(sl: Trace, batches: list[pa.RecordBatch]) -> tuple[pa.Table, pa.Table, pa.Table]:
    """What :func:`slice_digests` hashes of a slice, as tables (compared with ``equals``)."""
    def strip(t, skip):
        return t.drop_columns([c for c in skip if c in t.column_names])
    return (strip(sl.tensors, TENSOR_SKIP), strip(sl.ops, OP_SKIP),
            pa.Table.from_batches(batches, schema=fmt.ACCESSES_SCHEMA))


def slice_classes(trace: Trace, sls: list[Trace], batch_rows: int,
                  held: list[list[pa.RecordBatch]]) -> list[int]:
    """``replayed_as`` by exact comparison instead of digests (for slices held in memory, which
    ``held`` is filled with as :func:`slice_digests` fills it): each slice is compared with the
    first slice of each class so far (the same content :func:`slice_digests` hashes); a slice whose
    accesses reach another device's tensor stands for itself."""
    foreign = _split_accesses(trace, sls, batch_rows,
                              lambda d, part, f: None if f else _hold_part(held, d, part))
    reps: list[tuple[int, tuple]] = []
    out = []
    for d, sl in enumerate(sls):
        if foreign[d]:
            held[d].clear()
            out.append(d)
            continue
        c = _content(sl, held[d])
        r = next((r for r, rc in reps if all(x.num_rows == y.num_rows for x, y in zip(c, rc))
                  and all(x.equals(y) for x, y in zip(c, rc))), None)
        if r is None:
            reps.append((d, c))
            r = d
        out.append(r)
    return out


def replay_system(trace, system: System | str, options: ReplayOptions = ReplayOptions(), *,
                  extra_rules=(), collective_algo: str = "auto",
                  progress: Callable[[int], None] | None = None, dedupe: bool = True,
                  threads: int | None = None) -> SystemReplay:
    """Replay every device's slice of ``trace`` (a path or an opened Trace) on ``system``'s chip.

    Each slice is placed, PIM-planned and replayed by :func:`emulator.pipeline.replay_trace`, so a
    device's counts are exactly a one-chip replay of its slice. ``dedupe``: replay one device per
    class of identical slices (:func:`slice_digests`); the others get a :class:`TraceReplay` with
    their own slice as ``trace`` and the same placement, PIM plan and counts (shared objects: read
    them, do not modify them). ``threads``: host threads the distinct slices replay on (default
    ``os.cpu_count()``; 1: one after another). ``progress(n)`` is called with the descriptors of
    each batch replayed, counted once for every device the replay stands for (from the worker
    threads, one call at a time).
    """
    if not isinstance(trace, Trace):
        trace = open_trace(trace)
    if not isinstance(system, System):
        system = load_system(system)
    check_fits(trace, system)
    sls = slices(trace)
    n = len(sls)
    if dedupe and n > 1:
        if trace.n_accesses <= HOLD_ROWS:   # compared exactly; the slices replayed read their batches from memory
            held = [[] for _ in sls]
            replayed_as = slice_classes(trace, sls, options.batch_rows, held)
            for d in set(replayed_as):
                if held[d]:
                    sls[d].hold(options.batch_rows, held[d])
            del held
        else:
            digests = slice_digests(trace, sls, options.batch_rows)
            first: dict[bytes, int] = {}
            replayed_as = [d if g is None else first.setdefault(g, d) for d, g in enumerate(digests)]
    else:
        replayed_as = list(range(n))
    reps = sorted(set(replayed_as))
    weight = {r: replayed_as.count(r) for r in reps}
    n_threads = max(1, min(threads if threads is not None else (os.cpu_count() or 1), len(reps)))

    lock = threading.Lock()

    def run(r: int) -> TraceReplay:
        prog = None
        if progress is not None:
            k = weight[r]

            def prog(m: int) -> None:
                with lock:
                    progress(m * k)
        return replay_trace(sls[r], system.chip, options, extra_rules=extra_rules, progress=prog)

    if n_threads == 1:
        done = {r: run(r) for r in reps}
    else:
        with ThreadPoolExecutor(n_threads, thread_name_prefix="tierlab-slice") as pool:
            done = dict(zip(reps, pool.map(run, reps)))
    for sl in sls:            # later readers stream from the file again: the memory is not kept
        if isinstance(sl, SliceTrace):
            sl._held = None
    devices = [done[r] if r == d else dataclasses.replace(done[r], trace=sls[d])
               for d, r in enumerate(replayed_as)]
    op_ids = [sl.op_ids if isinstance(sl, SliceTrace) else np.arange(trace.n_ops) for sl in sls]
    return SystemReplay(system=system, trace=trace, options=options, devices=devices, op_ids=op_ids,
                        collective_algo=collective_algo, replayed_as=replayed_as, threads=n_threads)
