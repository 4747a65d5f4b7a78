"""A trace replayed on a system of many chips: each device's slice on its chip, the whole way.

:func:`replay_system` opens what it is given (a trace path, a system name or file) and, for each
device ``d`` of the trace, cuts its **slice** — the tensors of device ``d`` (renumbered 0..n_d-1),
the ops of device ``d`` (renumbered, the map to global op ids kept) and the accesses of those ops —
and replays it with :func:`emulator.pipeline.replay_trace` on ``system.chip`` (placement, PIM plan
and the engine's door exactly as for one chip). A trace has one address space per device, so a
slice is exactly a one-chip trace; a version-1 trace is one device and its slice is the trace
itself. Costing the collectives and the critical path is :mod:`emulator.cost.system_cost`.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    ``i`` is global ``op_ids[i]``). Accesses are streamed from the parent's file, filtered to the
    slice's ops and renumbered; an access of a slice op to another device's tensor is a TraceError.
    """

    def __init__(self, parent: Trace, device: int):
        self.parent = parent
        self.device = device
        self.op_ids = np.nonzero(parent.op_device == device)[0]
        self.tensor_ids = np.nonzero(parent.tensor_device == device)[0]
        self._op_local = np.full(parent.n_ops, -1, np.int64)
        self._op_local[self.op_ids] = np.arange(len(self.op_ids))
        self._tensor_local = np.full(parent.n_tensors, -1, np.int64)
        self._tensor_local[self.tensor_ids] = np.arange(len(self.tensor_ids))
        tensors = _renumber(parent.tensors.take(pa.array(self.tensor_ids, pa.int64())), "tensor_id",
                            fmt.TENSORS_SCHEMA)
        ops = _renumber(parent.ops.take(pa.array(self.op_ids, pa.int64())), "op_id", fmt.OPS_SCHEMA)
        manifest = dict(parent.manifest)
        manifest.pop("devices", None)
        manifest["version"] = 1
        run = manifest.get("run")
        if isinstance(run, dict) and "conversation" in run:   # its op ranges are global: not a slice's
            manifest["run"] = {k: v for k, v in run.items() if k != "conversation"}
        manifest["tables"] = {"tensors": tensors.num_rows, "ops": ops.num_rows, "accesses": None}
        super().__init__(parent.path, manifest, tensors, ops)

    @property
    def n_accesses(self) -> int:
        n = self.manifest["tables"]["accesses"]
        if n is None:    # counted on first use: one pass over the parent's accesses
            n = sum(int(np.count_nonzero(self._op_local[rb.column(0).to_numpy()] >= 0))
                    for rb in self.parent.iter_accesses())
            self.manifest["tables"]["accesses"] = n
        return n

    def iter_accesses(self, batch_rows: int = 1 << 20):
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


def slices(trace: Trace) -> list[Trace]:
    """Each device's slice (a version-1 trace is its own one slice)."""
    if trace.n_devices == 1:
        return [trace]
    return [SliceTrace(trace, d) for d in range(trace.n_devices)]


def check_fits(trace: Trace, system: System) -> None:
    """A trace needing more devices than the system has chips is a UsageError."""
    if trace.n_devices > system.n_chips:
        raise UsageError(f"the trace needs {trace.n_devices} devices; {system.name} has {system.n_chips} chips",
                         field=DEVICE_FIELD)


def replay_system(trace, system: System | str, options: ReplayOptions = ReplayOptions(), *,
                  extra_rules=(), collective_algo: str = "auto",
                  progress: Callable[[int], None] | None = None) -> SystemReplay:
    """Replay every device's slice of ``trace`` (a path or an opened Trace) on ``system``'s chip.

    Each slice is placed, PIM-planned and replayed by :func:`emulator.pipeline.replay_trace`, so a
    device's counts are exactly a one-chip replay of its slice. ``progress(n)`` is called with the
    descriptors of each batch replayed, over all devices.
    """
    if not isinstance(trace, Trace):
        trace = open_trace(trace)
    if not isinstance(system, System):
        system = load_system(system)
    check_fits(trace, system)
    devices, op_ids = [], []
    for sl in slices(trace):
        devices.append(replay_trace(sl, system.chip, options, extra_rules=extra_rules, progress=progress))
        op_ids.append(sl.op_ids if isinstance(sl, SliceTrace) else np.arange(trace.n_ops))
    return SystemReplay(system=system, trace=trace, options=options, devices=devices, op_ids=op_ids,
                        collective_algo=collective_algo)
