"""Shared pieces of the benchmark scripts: the issue-4 trace, the machine description, JSON output.

Each benchmark is a script printing one JSON object on stdout (progress, if any, on stderr).
Figures are measured in the run that prints them; nothing here asserts a time.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:                      # run as a script from anywhere
    sys.path.insert(0, str(REPO))

LINE_BYTES = 64
SEED = 20240604
ISSUE_LINES = 10_000_000


def issue_blocks(lines: int = ISSUE_LINES, *, seed: int = SEED, run_lines: int = 250,
                 region_bytes: int = 64 << 20, hot_bytes: int = 512 << 10) -> np.ndarray:
    """The issue-4 stream as 64-byte line numbers (int64): loads alternating a 250-line sequential
    run (a sweep over a 64 MiB region, continuing where the last run stopped, wrapping) with 250
    random lines of a 512 KiB hot set placed just after the region. Fixed seed: same stream every run.
    """
    rng = np.random.default_rng(seed)
    region_lines = region_bytes // LINE_BYTES
    hot_lines = hot_bytes // LINE_BYTES
    rounds = -(-lines // (2 * run_lines))
    seq = (np.arange(rounds * run_lines, dtype=np.int64) % region_lines).reshape(rounds, run_lines)
    hot = region_lines + rng.integers(0, hot_lines, size=(rounds, run_lines), dtype=np.int64)
    return np.concatenate([seq, hot], axis=1).reshape(-1)[:lines]


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numba

    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "numba": numba.__version__, "numpy": np.__version__, "platform": platform.platform(),
            "numba_target": numba_target(),
            "load_average": os.getloadavg()}   # other work on the machine inflates wall times


def numba_target() -> dict:
    """What Numba compiles for: the CPU name and whether AVX-512 / AVX2 are on (``NUMBA_CPU_NAME``
    alone keeps the host's features: only ``NUMBA_CPU_FEATURES`` changes the instruction set)."""
    import llvmlite.binding as ll
    from numba.core import config

    from tierlab.engine.simd_tables import target_features

    name = config.CPU_NAME or ll.get_host_cpu_name()
    on = target_features()
    return {"cpu_name": name, "avx512f": "avx512f" in on, "avx2": "avx2" in on,
            "features_from": "NUMBA_CPU_FEATURES" if config.CPU_FEATURES is not None else "host"}


def timed(fn, *args, repeat: int = 1, **kwargs):
    """(best wall seconds over ``repeat`` runs, last result)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        best = min(best, time.perf_counter() - t0)
    return best, out


def timed_cpu(fn, *args, repeat: int = 1, **kwargs):
    """(best wall seconds, best CPU seconds of this process, last result) over ``repeat`` runs.

    CPU time is the fairer figure for single-threaded work on a machine shared with other jobs.
    """
    best_wall, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn(*args, **kwargs)
        best_wall = min(best_wall, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best_wall, best_cpu, out


def emit(name: str, result: dict, argv=None) -> None:
    doc = {"benchmark": name, "command": " ".join(["python", f"benchmarks/{name}.py", *(argv or sys.argv[1:])]),
           "machine": machine(), **result}
    print(json.dumps(doc, indent=2))


def log(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)
