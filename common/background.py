"""One worker thread for work beside the caller's, kept for the process: the checks of an address
trace's words while the kernel replays them, and the release of those words after.

Starting a thread per replay cost 0.2 ms each on a 2-vCPU guest (two a replay: a tenth of the
fixed work of ``tierlab replay`` on an address trace); this worker starts once. Its jobs run in
the order submitted. After a fork the child starts a worker of its own (the parent's thread is not
in it)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def submit(fn, *args) -> Future:
    """Run ``fn(*args)`` on the worker thread (after the jobs submitted before it)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(1, thread_name_prefix="tierlab-background")
        return _pool.submit(fn, *args)


def _forget() -> None:
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)
