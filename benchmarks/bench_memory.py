"""Flat memory: peak RSS replaying a trace of 1x and of 10x the length (target: ratio <= 1.2).

Writes the issue-4 stream as traces of ``--lines`` and 10x ``--lines`` 64-byte loads (each
250-line sequential run one descriptor, each random hot-set line one descriptor, one op per 1000
descriptors so per-op results grow with the trace as in real runs), then replays each in a fresh
subprocess on a 2-level cache chip (L1 32 KiB 8-way, L2 1 MiB 16-way, 64 B lines, over a memory
tier) and reads its peak RSS (``resource.getrusage(...).ru_maxrss``). The RSS after imports and
JIT loading (before the replay) is reported too, so the replay's own share is visible. With
``--mrc`` the same is measured for the one-pass miss-ratio curve of L2.

    python benchmarks/bench_memory.py [--lines N] [--mrc]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from _common import LINE_BYTES, REPO, SEED, emit, log

CHIP = """
name = "bench-2level"
description = "bench_memory: the issue-4 hierarchy (all figures made up for the benchmark)"
[compute]
flops = { bf16 = "1 TFLOP/s" }
energy = { bf16 = "1 pJ" }
[[tier]]
name = "l1"
capacity = "32 KiB"
block = "64 B"
ways = 8
policy = "lru"
managed = "cache"
bandwidth = "1 TB/s"
read_energy = "0.1 pJ/bit"
write_energy = "0.1 pJ/bit"
[[tier]]
name = "l2"
capacity = "1 MiB"
block = "64 B"
ways = 16
policy = "lru"
managed = "cache"
bandwidth = "500 GB/s"
read_energy = "0.2 pJ/bit"
write_energy = "0.2 pJ/bit"
[[tier]]
name = "dram"
capacity = "1 GiB"
block = "64 B"
managed = "memory"
bandwidth = "100 GB/s"
read_energy = "10 pJ/bit"
write_energy = "10 pJ/bit"
[[link]]
from = "l1"
to = "l2"
bandwidth = "1 TB/s"
energy = "0.1 pJ/bit"
[[link]]
from = "l2"
to = "dram"
bandwidth = "100 GB/s"
energy = "1 pJ/bit"
"""

_PROBE = """
import json, resource, sys, time
import numpy as np
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.chip.chipfile import load_chip
from tierlab.traces.format.reader import open_trace
what, path, chip = sys.argv[1], sys.argv[2], load_chip(sys.argv[3])
small = sys.argv[4]
if what == "replay":
    replay_trace(small, chip)                     # load the JIT before measuring the baseline
else:
    from tierlab.analysis.tier_mrc import tier_mrc
    tier_mrc(open_trace(small), chip, "l2", opt=False)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
if what == "replay":
    r = replay_trace(path, chip).result
    n = r.n_blocks
else:
    r, _ = tier_mrc(open_trace(path), chip, "l2", opt=False)
    n = r["accesses"]
dt = time.perf_counter() - t0
print(json.dumps({"baseline_kib": base, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "seconds": dt, "blocks": int(n)}))
"""


def write_trace(path: Path, lines: int, run_lines: int = 250) -> int:
    """The issue-4 stream as descriptors: a run is one descriptor, a random line is one. Returns rows.

    A run starting near the end of the 64 MiB region is kept whole (the region tensor is one run
    longer) rather than split at the wrap as :func:`_common.issue_blocks` does.
    """
    from tierlab.traces.format.writer import TraceWriter

    rng = np.random.default_rng(SEED)
    region = 64 << 20
    hot_lines = (512 << 10) // LINE_BYTES
    rounds = -(-lines // (2 * run_lines))
    rows = 0
    with TraceWriter(path, alignment=64 << 10) as w:
        seq = w.add_tensor("region", "weight", region + run_lines * LINE_BYTES, "bf16")
        hot = w.add_tensor("hot", "kv", 512 << 10, "bf16")
        per_op = 1000 // (run_lines + 1) + 1                       # rounds per op: ~1000 descriptors
        for first in range(0, rounds, per_op):
            op = w.add_op(f"op{first}", "linear", 0, "decode", 0, 1, 0)
            k = min(per_op, rounds - first)
            starts = ((first + np.arange(k, dtype=np.int64)) * run_lines * LINE_BYTES) % region
            hot_off = rng.integers(0, hot_lines, size=(k, run_lines), dtype=np.int64) * LINE_BYTES
            n = k * (run_lines + 1)
            tid = np.empty((k, run_lines + 1), np.int64)
            off = np.empty((k, run_lines + 1), np.int64)
            nb = np.full((k, run_lines + 1), LINE_BYTES, np.int64)
            tid[:, 0], off[:, 0], nb[:, 0] = seq, starts, run_lines * LINE_BYTES
            tid[:, 1:], off[:, 1:] = hot, hot_off
            w.add_accesses(np.full(n, op, np.int64), tid.reshape(-1), off.reshape(-1), nb.reshape(-1))
            rows += n
    return rows


def measure(what: str, trace: Path, chip: Path, small: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, what, str(trace), str(chip), str(small)],
                         cwd=REPO, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000, help="loads in the 1x trace (default 1 M)")
    ap.add_argument("--mrc", action="store_true", help="also measure tierlab mrc's one-pass curve")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tierlab-mem-") as tmp:
        tmp = Path(tmp)
        chip = tmp / "bench-2level.toml"
        chip.write_text(CHIP)
        small = tmp / "small.trace"
        write_trace(small, 2000)
        traces = {}
        for factor in (1, 10):
            p = tmp / f"x{factor}.trace"
            rows = write_trace(p, factor * args.lines)
            traces[factor] = (p, rows, sum(f.stat().st_size for f in p.iterdir()))
            log(f"{factor}x: {rows} descriptors")
        out = {"lines_1x": args.lines, "target_ratio": 1.2}
        for what in ("replay", "mrc") if args.mrc else ("replay",):
            res = {}
            for factor, (p, rows, size) in traces.items():
                res[f"{factor}x"] = {"descriptors": rows, "trace_bytes": size, **measure(what, p, chip, small)}
                log(what, factor, res[f"{factor}x"])
            res["peak_ratio"] = res["10x"]["peak_kib"] / res["1x"]["peak_kib"]
            res["replay_share_ratio"] = ((res["10x"]["peak_kib"] - res["10x"]["baseline_kib"]) /
                                         max(1, res["1x"]["peak_kib"] - res["1x"]["baseline_kib"]))
            out[what] = res
    emit("bench_memory", out)


if __name__ == "__main__":
    main()
