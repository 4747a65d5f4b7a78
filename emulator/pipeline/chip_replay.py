"""A trace replayed on a chip, the whole way: chip -> placement -> PIM plan -> the engine's door.

:func:`replay_trace` opens what it is given (a trace path, a chip name or file), places every
tensor (:func:`tierlab.chip.placement.place`), decides which ops run in memory
(:func:`tierlab.pipeline.pim_plan.plan_for_trace`) and streams the trace's access batches through
:func:`tierlab.engine.door.replay_arrays`. What it returns, :class:`TraceReplay`, is what costing
(:mod:`tierlab.cost`) and presentation (:mod:`tierlab.present`) take.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tierlab.common.errors import TraceError
from tierlab.chip.chipfile import load_chip
from tierlab.chip.hierarchy import Chip
from tierlab.chip.placement import place
from tierlab.pipeline.pim_plan import pim_tiers, plan_for_trace
from tierlab.engine.counters import ReplayResult
from tierlab.engine.door import replay_arrays
from tierlab.engine.lines import of_trace
from tierlab.engine.geometry import kind_index
from tierlab.engine.options import ReplayOptions
from tierlab.traces.format.reader import Trace, open_trace


@dataclass
class TraceReplay:
    """A trace replayed on a chip: the counts plus what is needed to cost and report them."""

    chip: Chip
    trace: Trace
    placement: object      # tierlab.chip.placement.Placement
    options: ReplayOptions
    result: ReplayResult
    pim: object = None     # tierlab.pipeline.pim_plan.PimPlan: where each op ran (None: no op ran in memory)


@dataclass
class Placed:
    """A trace on a chip before its replay: both opened, every tensor placed, the PIM plan made, and
    the tensor table's columns as the engine takes them."""

    trace: Trace
    chip: Chip
    placement: object      # tierlab.chip.placement.Placement
    pim: object            # tierlab.pipeline.pim_plan.PimPlan or None
    address: np.ndarray
    nbytes: np.ndarray
    kinds: np.ndarray
    home: np.ndarray
    held: list | None = None   # the checked access batches, when read once for the plan and the replay


# A chip with PIM units reads a trace twice: once for the plan, once for the replay. A trace of at
# most this many access rows (~10 MB of batches: zero-copy slices of its memory map) is read and
# checked once, its batches held for both.
HOLD_ROWS = 1 << 18


def placed(trace, chip: Chip | str, options: ReplayOptions, extra_rules=()) -> Placed:
    """Open ``trace`` and ``chip`` if given by name, place the tensors and plan PIM (what
    :func:`replay_trace` and :func:`tierlab.analysis.tier_requests.tier_requests` both start from)."""
    if not isinstance(trace, Trace):
        trace = open_trace(trace)
    if not isinstance(chip, Chip):
        chip = load_chip(chip)
    placement = place(chip, trace.tensors, extra_rules, align_bytes=trace.alignment or 1)
    t = trace.tensors
    home = np.asarray(placement.home, np.int64)
    held = None
    if options.pim and pim_tiers(chip) and trace.n_accesses <= HOLD_ROWS:
        held = list(trace.iter_accesses(options.batch_rows))
    return Placed(trace=trace, chip=chip, placement=placement,
                  pim=plan_for_trace(chip, trace, home, enabled=options.pim, batch_rows=options.batch_rows,
                                     held=held),
                  address=t.column("address").to_numpy().astype(np.int64),
                  nbytes=t.column("nbytes").to_numpy().astype(np.int64),
                  kinds=kind_index(t.column("kind").to_pylist()), home=home, held=held)


def access_batches(trace: Trace, pim, batch_rows: int, held: list | None = None):
    """The trace's access batches as the door takes them: the seven columns as read (uint32/uint64,
    zero-copy: the door takes any integer type, and the stream kernels expand them without a copy to
    int64 first) and each row's PIM flag (all 0 without a plan). ``held``: the batches, already read
    and checked (:attr:`Placed.held`)."""
    for rb in (trace.iter_accesses(batch_rows) if held is None else held):
        op, tid = rb.column(0).to_numpy(), rb.column(1).to_numpy()
        write = rb.column(6).to_numpy(zero_copy_only=False)
        flag = np.zeros(len(op), np.int64) if pim is None else pim.flags(op, tid, write)
        yield (op, tid, rb.column(2).to_numpy(), rb.column(3).to_numpy(), rb.column(4).to_numpy(),
               rb.column(5).to_numpy(), write, flag)


@contextlib.contextmanager
def naming_the_tensor_table(trace: Trace):
    """A TraceError from the engine that names no file is about the tensor table (its addresses do
    not suit the chip): it names that file."""
    try:
        yield
    except TraceError as err:
        if err.file is None:
            err.file = str(trace.path / "tensors.arrow")
        raise


def replay_trace(trace, chip: Chip | str, options: ReplayOptions = ReplayOptions(), *,
                 extra_rules=(), progress: Callable[[int], None] | None = None) -> TraceReplay:
    """Replay a trace (a path or an opened :class:`tierlab.traces.format.reader.Trace`) on a chip (object or name).

    Placement is computed here; a model that does not fit raises CapacityError, a trace aligned
    below a tier's block raises TraceError. ``progress(n)``, if given, is called with the number of
    access descriptors of each batch replayed (the CLI draws a bar with it).
    """
    p = placed(trace, chip, options, extra_rules)
    trace, chip, pim = p.trace, p.chip, p.pim

    with naming_the_tensor_table(trace):
        result = replay_arrays(chip.tiers, tensor_address=p.address, tensor_nbytes=p.nbytes,
                               tensor_home=p.home, tensor_kind=p.kinds,
                               batches=lambda: access_batches(trace, pim, options.batch_rows, p.held),
                               n_ops=trace.n_ops, lent_bytes=p.placement.lent_bytes, options=options,
                               progress=progress, pim=pim is not None,
                               lines=of_trace(trace) if trace.kind == "addresses" and pim is None else None)
    return TraceReplay(chip=chip, trace=trace, placement=p.placement, options=options, result=result, pim=pim)
