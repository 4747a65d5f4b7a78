"""A trace replayed on a system of many chips: each device's slice on its chip, the whole way.

:func:`replay_system` opens what it is given (a trace path, a system name or file), cuts each
device's **slice** (:mod:`tierlab.pipeline.system_slices`: a one-chip trace) and replays it with
:func:`tierlab.pipeline.chip_replay.replay_trace` on ``system.chip`` (placement, PIM plan and the engine's
door exactly as for one chip). Costing the collectives and the critical path is
:mod:`tierlab.cost.system_cost`.

Three speed-ups, none changing a count. **Identical slices are replayed once**
(:func:`tierlab.pipeline.system_slices.slice_classes`, or by digest for traces too long to hold): one device
per class, the others sharing its counts (``dedupe=False`` replays every device). **Twins replay
beside their base**: a distinct slice with the same tensor and op tables as the most common one
differs from it in a few ops' accesses only (the rank holding a token's embedding row reads it), and
is replayed only where it differs (:func:`tierlab.engine.door.replay_twins`). **The other distinct
slices replay on threads** (``threads``, default ``os.cpu_count()``): the engine's kernels release
the GIL.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.engine.door import replay_twins
from tierlab.engine.options import ReplayOptions
from tierlab.pipeline.chip_replay import TraceReplay, naming_the_tensor_table, placed, replay_trace
from tierlab.system.model import System
from tierlab.system.systemfile import load_system
from tierlab.pipeline.system_slices import (DeviceRows, SliceTrace, held_streams, hold_stream, same_tables,
                                    slice_classes, slice_digests, slices, tables_of)
from tierlab.traces.format.reader import Trace, open_trace

DEVICE_FIELD = "system or tp"


@dataclass
class SystemReplay:
    """A trace replayed on a system: one :class:`~tierlab.pipeline.chip_replay.TraceReplay` per device (its
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
    #: ``twin_of[r]``: the device whose replay device ``r``'s was replayed beside, only where their
    #: slices differ (:mod:`tierlab.engine.twins`)
    twin_of: dict[int, int] = field(default_factory=dict)

    @property
    def distinct_slices(self) -> int:
        """How many slice replays were run (devices with identical slices share one)."""
        return len(set(self.replayed_as)) if self.replayed_as else len(self.devices)


def check_fits(trace: Trace, system: System) -> None:
    """A trace needing more devices than the system has chips is a UsageError."""
    if trace.n_devices > system.n_chips:
        raise UsageError(f"the trace needs {trace.n_devices} devices; {system.name} has {system.n_chips} chips",
                         field=DEVICE_FIELD)


HOLD_ROWS = 1 << 22    # traces of at most this many access rows (~170 MB) keep the slices' batches in memory


def _twin_group(sls: list[Trace], streams: list[tuple | None], reps: list[int], weight: dict[int, int]
                ) -> tuple[int, list[int]]:
    """The base (the slice most devices share) and the other distinct slices held in memory with
    the same tensor and op tables: they differ from the base only in some ops' accesses."""
    held = [r for r in reps if streams[r] is not None]
    if len(held) < 2:
        return -1, []
    base = max(held, key=lambda r: (weight[r], -r))
    tables = tables_of(sls[base])
    return base, [r for r in held if r != base and same_tables(tables, tables_of(sls[r]))]


def _run_twins(sls, streams, base, twins, system: System, options: ReplayOptions, extra_rules, weight,
               counted, done: dict) -> set[int]:
    """Replay ``base`` and its ``twins`` together (:func:`tierlab.engine.door.replay_twins`) into
    ``done``. Returns the twins whose rows the progress has counted though they are not in ``done``
    (the engine could not follow them): their own replays count none. Nothing is done where a PIM
    plan (made from the accesses) may differ between slices, or the kernel's state cannot fork."""
    p = placed(sls[base], system.chip, options, extra_rules)
    if p.pim is not None:
        return set()

    def stream(r):
        return streams[r] + (np.zeros(len(streams[r][0]), np.int64),)
    prog = counted(weight[base] + sum(weight[r] for r in twins))   # the base's rows, for each device
    with naming_the_tensor_table(sls[base]):
        results = replay_twins(system.chip.tiers, tensor_address=p.address, tensor_nbytes=p.nbytes,
                               tensor_home=p.home, tensor_kind=p.kinds, base=stream(base),
                               twins=[stream(r) for r in twins], n_ops=sls[base].n_ops,
                               lent_bytes=p.placement.lent_bytes, options=options, progress=prog, pim=False)
    if results is None:
        return set()
    lost = set()
    for r, res in zip([base] + twins, results):
        if res is None:
            lost.add(r)
            continue
        done[r] = TraceReplay(chip=p.chip, trace=sls[r], placement=p.placement, options=options, result=res)
        more = len(streams[r][0]) - len(streams[base][0])
        if prog is not None and more > 0:
            counted(weight[r])(more)
    return lost


def _run_jobs(jobs: list[Callable[[], None]], limit: int) -> int:
    """Run ``jobs`` on at most ``limit`` threads (one: in order, here); returns the threads used."""
    n = max(1, min(limit, len(jobs)))
    if n == 1:
        for job in jobs:
            job()
    else:
        with ThreadPoolExecutor(n, thread_name_prefix="tierlab-slice") as pool:
            for f in [pool.submit(job) for job in jobs]:
                f.result()
    return n if jobs else 0


def replay_system(trace, system: System | str, options: ReplayOptions = ReplayOptions(), *,
                  extra_rules=(), collective_algo: str = "auto",
                  progress: Callable[[int], None] | None = None, dedupe: bool = True,
                  threads: int | None = None) -> SystemReplay:
    """Replay every device's slice of ``trace`` (a path or an opened Trace) on ``system``'s chip.

    Each slice is placed, PIM-planned and replayed by :func:`tierlab.pipeline.chip_replay.replay_trace`, so a
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
    n = trace.n_devices
    streams: list[tuple | None] = [None] * n
    if dedupe and n > 1 and trace.n_accesses <= HOLD_ROWS:
        # compared exactly; the slices replayed read their accesses from memory. The slices' tables
        # are cut on a second thread meanwhile (both mostly outside the GIL)
        rows = DeviceRows.of(trace)
        if threads == 1:
            sls, streams = slices(trace, rows), held_streams(trace, rows.ids(), options.batch_rows)
        else:
            with ThreadPoolExecutor(1, thread_name_prefix="tierlab-slices") as pool:
                cut = pool.submit(slices, trace, rows)
                streams = held_streams(trace, rows.ids(), options.batch_rows)
                sls = cut.result()
        replayed_as = slice_classes(sls, streams)
    elif dedupe and n > 1:                  # streamed from the file: classes by digest
        sls = slices(trace)
        digests = slice_digests(trace, sls, options.batch_rows)
        first: dict[bytes, int] = {}
        replayed_as = [d if g is None else first.setdefault(g, d) for d, g in enumerate(digests)]
    else:
        sls = slices(trace)
        replayed_as = list(range(n))
    reps = sorted(set(replayed_as))
    weight = {r: replayed_as.count(r) for r in reps}
    lock = threading.Lock()

    def counted(k: int):
        if progress is None:
            return None

        def prog(m: int) -> None:
            with lock:
                progress(m * k)
        return prog

    def run(r: int, counts: bool = True) -> TraceReplay:
        if streams[r] is not None:        # its accesses from memory, not the file again
            hold_stream(sls[r], streams[r], options.batch_rows)
        return replay_trace(sls[r], system.chip, options, extra_rules=extra_rules,
                            progress=counted(weight[r]) if counts else None)

    done: dict[int, TraceReplay] = {}
    lost: set[int] = set()
    base, twins = _twin_group(sls, streams, reps, weight)
    together = {base, *twins} if twins else set()
    jobs: list[Callable[[], None]] = []
    if twins:
        jobs.append(lambda: lost.update(_run_twins(sls, streams, base, twins, system, options, extra_rules,
                                                   weight, counted, done)))
    jobs += [(lambda r=r: done.__setitem__(r, run(r))) for r in reps if r not in together]
    limit = threads if threads is not None else (os.cpu_count() or 1)
    n_threads = _run_jobs(jobs, limit)
    # twins the engine could not follow (its kernel does not fork, or a PIM plan): on their own
    left = [r for r in reps if r not in done]
    n_threads = max(n_threads, _run_jobs([(lambda r=r: done.__setitem__(r, run(r, counts=r not in lost)))
                                          for r in left], limit))
    for sl in sls:            # later readers stream from the file again: the memory is not kept
        if isinstance(sl, SliceTrace):
            sl._held = None
    devices = [done[r] if r == d else dataclasses.replace(done[r], trace=sls[d])
               for d, r in enumerate(replayed_as)]
    op_ids = [sl.op_ids if isinstance(sl, SliceTrace) else np.arange(trace.n_ops) for sl in sls]
    return SystemReplay(system=system, trace=trace, options=options, devices=devices, op_ids=op_ids,
                        collective_algo=collective_algo, replayed_as=replayed_as, threads=n_threads,
                        twin_of={r: base for r in twins if done[r].result.meta.get("twin")})
