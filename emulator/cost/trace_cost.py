"""The cost of a replayed trace: :func:`cost_of` runs :func:`tierlab.cost.model.cost` on a
:class:`tierlab.pipeline.chip_replay.TraceReplay` (its per-op counts, the trace's FLOPs and manifest, and the
flush counts when the replay flushed), and organises its ops into kernels on the chip
(:mod:`tierlab.cost.organisation`: the calibrated latency beside the roofline)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tierlab.cost.model import Cost, cost
from tierlab.cost.gemv import gemv_fractions
from tierlab.cost.organisation import organise

if TYPE_CHECKING:                                   # only for the annotation: the pipeline sits above cost
    from tierlab.pipeline.chip_replay import TraceReplay


def cost_of(tr: TraceReplay, *, organised: bool = True) -> Cost:
    """Energy and latency per op of the replay ``tr``; ``organised=False`` leaves out its organisation
    into kernels (``Cost.organisation`` None: two passes over the accesses that a system's calibration,
    which organises every device again, never reads)."""
    r = tr.result
    ops = tr.trace.ops
    flops = ops.column("flops").to_numpy().astype(np.float64)
    cst = cost(tr.chip, r.per_op, r.block_bytes, flops, tr.trace.manifest,
               r.flush if tr.options.flush else None)
    if not organised:
        return cst

    def tensors():
        for b in tr.trace.iter_accesses():
            yield (b.column("op_id").to_numpy(), b.column("tensor_id").to_numpy(),
                   b.column("is_write").to_numpy(zero_copy_only=False))

    cst.organisation = organise(tr.chip, cst.resources, cst.time_s, ops.column("layer").to_numpy(),
                                np.asarray(ops.column("phase").to_pylist(), dtype=object),
                                ops.column("step").to_numpy(), tensors, gemv=gemv_fractions(tr.chip, tr.trace))
    return cst
