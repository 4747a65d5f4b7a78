"""Sweeps: one block stream (or one trace) replayed against several hierarchies at once, on all cores.

Hierarchies are independent, so each replay runs whole on one worker and the results are exactly
those of replaying one after the other (tested). Two backends:

* ``thread``: a thread per worker calling the engine directly; it scales only when the engine's
  compiled kernel releases the GIL (``nogil``), which :func:`engine_releases_gil` reports.
* ``process``: worker processes (``fork`` where available: they inherit the compiled engine; else
  ``spawn``, loading it from the Numba cache). A block stream is shared with them through
  ``multiprocessing.shared_memory`` (not copied per task); a trace is opened by each worker by path.

``backend="auto"`` takes threads when the engine releases the GIL, else processes. With one
worker (or one hierarchy) everything runs in the calling process.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import get_all_start_methods, get_context, shared_memory
from typing import Sequence

import numpy as np

from tierlab.chip.hierarchy import Chip, Tier
from tierlab.engine import walk
from tierlab.engine.door import replay_blocks
from tierlab.engine.options import ReplayOptions
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.common.errors import UsageError

BACKENDS = ("auto", "thread", "process")


def engine_releases_gil() -> bool:
    """True if the engine's batch kernel is compiled with ``nogil`` (threads then run in parallel)."""
    return bool(getattr(walk.replay_batch, "targetoptions", {}).get("nogil", False))


def _workers(workers: int | None, n_tasks: int) -> int:
    if workers is not None and workers < 1:
        raise UsageError(f"workers must be at least 1, got {workers}", field="workers")
    return max(1, min(n_tasks, workers or os.cpu_count() or 1))


def _backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}", field="backend")
    if backend == "auto":
        return "thread" if engine_releases_gil() else "process"
    return backend


# --- process workers: the stream lives in shared memory, attached once per worker ---------------

_SHARED: dict = {}


def _context():
    return get_context("fork" if "fork" in get_all_start_methods() else "spawn")


def _attach(name: str, n: int) -> None:
    shm = shared_memory.SharedMemory(name=name)
    _SHARED["shm"] = shm                            # keep the mapping alive for the worker's life
    _SHARED["addresses"] = np.ndarray((n,), np.int64, buffer=shm.buf, offset=0)
    _SHARED["is_write"] = np.ndarray((n,), np.bool_, buffer=shm.buf, offset=8 * n)


def _replay_shared(tiers, options):
    return replay_blocks(_SHARED["addresses"], _SHARED["is_write"], tiers=tiers, options=options)


def _replay_trace_task(path, chip, options):
    r = replay_trace(path, chip, options)
    return r.placement, r.result


def sweep_blocks(addresses, hierarchies: Sequence[Sequence[Tier]], is_write=None, *,
                 options: ReplayOptions = ReplayOptions(), workers: int | None = None,
                 backend: str = "auto") -> list:
    """:func:`tierlab.engine.door.replay_blocks` of one address stream on each hierarchy, in parallel.

    Returns the :class:`~tierlab.engine.counters.ReplayResult` of each hierarchy, in the order given.
    """
    a = np.ascontiguousarray(addresses, np.int64)
    w = np.zeros(a.shape, np.bool_) if is_write is None else np.ascontiguousarray(is_write, np.bool_)
    if w.shape != a.shape:
        raise UsageError("is_write must have one flag per address", field="is_write")
    hierarchies = [tuple(h) for h in hierarchies]
    n_workers = _workers(workers, len(hierarchies))
    if n_workers == 1:
        return [replay_blocks(a, w, tiers=h, options=options) for h in hierarchies]
    if _backend(backend) == "thread":
        with ThreadPoolExecutor(n_workers) as pool:
            return list(pool.map(lambda h: replay_blocks(a, w, tiers=h, options=options), hierarchies))
    n = a.shape[0]
    shm = shared_memory.SharedMemory(create=True, size=max(1, 9 * n))
    try:
        np.ndarray((n,), np.int64, buffer=shm.buf, offset=0)[:] = a
        np.ndarray((n,), np.bool_, buffer=shm.buf, offset=8 * n)[:] = w
        with ProcessPoolExecutor(n_workers, mp_context=_context(),
                                 initializer=_attach, initargs=(shm.name, n)) as pool:
            return list(pool.map(_replay_shared, hierarchies, [options] * len(hierarchies)))
    finally:
        shm.close()
        shm.unlink()


def sweep_trace(trace_path, chips: Sequence[Chip | str], *, options: ReplayOptions = ReplayOptions(),
                workers: int | None = None, backend: str = "auto") -> list:
    """:func:`tierlab.engine.door.replay_trace` of one trace on each chip, in parallel.

    Returns ``(placement, ReplayResult)`` per chip, in the order given (workers reopen the trace
    by path, so only the path and the chip travel to them).
    """
    chips = list(chips)
    n_workers = _workers(workers, len(chips))
    path = os.fspath(trace_path)
    if n_workers == 1:
        return [_replay_trace_task(path, c, options) for c in chips]
    if _backend(backend) == "thread":
        with ThreadPoolExecutor(n_workers) as pool:
            return list(pool.map(lambda c: _replay_trace_task(path, c, options), chips))
    with ProcessPoolExecutor(n_workers, mp_context=_context()) as pool:
        return list(pool.map(_replay_trace_task, [path] * len(chips), chips, [options] * len(chips)))
