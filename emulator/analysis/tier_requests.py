"""The requests that reach one tier of a chip when a trace replays on it, in order.

Placement, the PIM plan and the engine's geometry are those :func:`tierlab.pipeline.chip_replay.replay_trace`
uses, so the stream is the one the replay counts: its length is the tier's ``hits + misses +
bypasses + writethroughs`` (:mod:`tierlab.engine.requests`). For ``tierlab export --format
ramulator|dramsim3``.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.chip.chipfile import load_chip
from tierlab.chip.hierarchy import Chip
from tierlab.engine.door import prepare
from tierlab.engine.options import ReplayOptions
from tierlab.engine.requests import RequestRecorder
from tierlab.pipeline.chip_replay import access_batches, naming_the_tensor_table, placed
from tierlab.traces.format.reader import Trace, open_trace


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
        raise UsageError(f"unknown tier {tier_name!r}; chip {chip.name} has {', '.join(names)}", field="tier")
    if trace.n_devices > 1:
        raise UsageError(f"the trace has {trace.n_devices} devices; requests are exported for a one-device "
                         "trace on one chip", file=str(trace.path))
    target = names.index(tier_name)
    p = placed(trace, chip, options, extra_rules)
    with naming_the_tensor_table(trace):     # its addresses may not suit this chip
        geo, tensors = prepare(chip.tiers, p.address, p.nbytes, p.home, p.kinds, p.placement.lent_bytes, options)
    recorder = RequestRecorder(geo, tensors, target, options, chunk=chunk)
    for _op, tid, offset, nbytes, count, stride, write, flag in access_batches(trace, p.pim, options.batch_rows, p.held):
        yield from recorder.feed(tid, offset, nbytes, count, stride, write, flag)
