"""The requests that reach one tier of a chip when a trace replays on it, in order.

Placement, the PIM plan and the engine's geometry are those :func:`emulator.pipeline.replay_trace`
uses, so the stream is the one the replay counts: its length is the tier's ``hits + misses +
bypasses + writethroughs`` (:mod:`emulator.engine.requests`). For ``tierlab export --format
ramulator|dramsim3``.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from common.errors import TraceError, UsageError
from emulator.chip.chipfile import load_chip
from emulator.chip.hierarchy import Chip
from emulator.chip.placement import place
from emulator.cost.pim import plan_for_trace
from emulator.engine.door import prepare
from emulator.engine.geometry import kind_index
from emulator.engine.options import ReplayOptions
from emulator.engine.requests import RequestRecorder
from traces.reader import Trace, open_trace


def tier_requests(trace, chip, tier_name: str, options: ReplayOptions = ReplayOptions(), *,
                  extra_rules=(), chunk: int = 1 << 20) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(byte addresses int64, is_write bool)`` chunks of the requests reaching tier
    ``tier_name`` of ``chip`` (object or name) while ``trace`` (path or opened) replays, in order.
    Chunks (at most ``chunk`` requests) are views of reused buffers: write or copy them before the
    next one."""
    if not isinstance(trace, Trace):
        trace = open_trace(trace)
    if not isinstance(chip, Chip):
        chip = load_chip(chip)
    names = [t.name for t in chip.tiers]
    if tier_name not in names:
        raise UsageError(f"unknown tier {tier_name!r}; chip {chip.name} has {', '.join(names)}", field="--tier")
    if trace.n_devices > 1:
        raise UsageError(f"the trace has {trace.n_devices} devices; requests are exported for a one-device "
                         "trace on one chip", file=str(trace.path))
    target = names.index(tier_name)
    placement = place(chip, trace.tensors, extra_rules, align_bytes=trace.alignment or 1)
    t = trace.tensors
    addr = t.column("address").to_numpy().astype(np.int64)
    nbytes = t.column("nbytes").to_numpy().astype(np.int64)
    kinds = kind_index(t.column("kind").to_pylist())
    home = np.asarray(placement.home, np.int64)
    pim = plan_for_trace(chip, trace, home, enabled=options.pim, batch_rows=options.batch_rows)
    try:
        geo, tensors = prepare(chip.tiers, addr, nbytes, home, kinds, placement.lent_bytes, options)
    except TraceError as err:
        if err.file is None:      # the tensor table's addresses do not suit this chip
            err.file = str(trace.path / "tensors.arrow")
        raise
    recorder = RequestRecorder(geo, tensors, target, options, chunk=chunk)
    for rb in trace.iter_accesses(options.batch_rows):
        op = rb.column(0).to_numpy()
        tid = rb.column(1).to_numpy()
        write = rb.column(6).to_numpy(zero_copy_only=False)
        flag = np.zeros(len(op), np.int64) if pim is None else \
            pim.flags(op.astype(np.int64), tid.astype(np.int64), write)
        yield from recorder.feed(tid, rb.column(2).to_numpy(), rb.column(3).to_numpy(), rb.column(4).to_numpy(),
                                 rb.column(5).to_numpy(), write, flag)
