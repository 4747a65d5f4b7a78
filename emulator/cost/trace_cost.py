"""The cost of a replayed trace: :func:`cost_of` runs :func:`emulator.cost.model.cost` on a
:class:`emulator.pipeline.TraceReplay` (its per-op counts, the trace's FLOPs and manifest, and the
flush counts when the replay flushed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from emulator.cost.model import Cost, cost

if TYPE_CHECKING:                                   # only for the annotation: the pipeline sits above cost
    from emulator.pipeline import TraceReplay


def cost_of(tr: TraceReplay) -> Cost:
    """Energy and latency per op of the replay ``tr``."""
    r = tr.result
    flops = tr.trace.ops.column("flops").to_numpy().astype(np.float64)
    return cost(tr.chip, r.per_op, r.block_bytes, flops, tr.trace.manifest,
                r.flush if tr.options.flush else None)
