"""The trace path end to end: ``tierlab replay TRACE --chip FILE`` against pycachesim, same addresses.

The issue-4 stream (``_common.issue_blocks``: 10 M loads of 64-byte lines) written as an address
trace (``--kind addresses``, the default: format version 5, one 32-bit word a load, what ``tierlab
import`` writes) or as a descriptor trace (``--kind descriptors``: one row per load, one tensor,
one op, ``nbytes`` 64, ``count`` 1), replayed by ``tierlab replay
TRACE --chip FILE --json`` in a subprocess (read, check, replay, cost, report) on 1-, 2- and
3-level LRU and FIFO hierarchies (L1 32 KiB 8-way, L2 1 MiB 16-way, L3 8 MiB 16-way, 64 B lines,
over a memory tier that homes the tensor). Process start-up is measured apart: the same command on
a trace of one row (same chip, so the same kernels are loaded). ``replay_s`` = end-to-end seconds
less that start-up (``replay_s_unreliable`` when the start-up measured longer than the whole run:
the other cores' load decided). pycachesim replays the same addresses in the same run (its C ``iterload``;
the list conversion it needs is timed separately), and its per-level misses must equal the
replay's. ``ratio_warm_cli`` (the headline): the same command through the CLI's entry point in one
process, after it ran once on the one-row trace (start-up excluded by running it, not by
subtracting a second process's: start-up, ~1 s, is ten to thirty times the replay), in turns with
pycachesim in that process (best of each; ``ratio_warm_cli_paired``: each turn's ratio, sorted). Timings are the best of
``--repeat`` runs (the machine may be shared). An in-process
split (read and check the trace alone; the whole replay in process) says where the time goes, and
``ratio_in_process_cpu`` is pycachesim's CPU seconds over the in-process replay's.

    python benchmarks/bench_trace_path.py [--lines N] [--levels 1,2,3] [--policies lru,fifo]
                                          [--repeat N] [--keep DIR] [--threads N]
                                          [--kind addresses|descriptors]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import LINE_BYTES, REPO, emit, issue_blocks, log, timed, timed_cpu
from bench_import import cpu_model
from bench_replay import GEOMETRY, pycachesim_replay

CHIP_HEAD = """\
name = "bench-{levels}-{policy}"
description = "bench_trace_path: {levels} cache level(s) over a memory"
[compute]
flops = {{ bf16 = "1 TFLOP/s" }}
energy = {{ bf16 = "1 pJ" }}
"""
CACHE = """\
[[tier]]
name = "{name}"
capacity = "{kib} KiB"
block = "64 B"
ways = {ways}
policy = "{policy}"
managed = "cache"
bandwidth = "1 TB/s"
read_energy = "0.1 pJ/bit"
write_energy = "0.1 pJ/bit"
"""
MEMORY = """\
[[tier]]
name = "mem"
capacity = "64 GiB"
block = "64 B"
managed = "memory"
bandwidth = "100 GB/s"
read_energy = "10 pJ/bit"
write_energy = "10 pJ/bit"
"""
LINK = """\
[[link]]
from = "{a}"
to = "{b}"
bandwidth = "100 GB/s"
energy = "1 pJ/bit"
"""


def chip_toml(levels: int, policy: str) -> str:
    """A chip file: ``levels`` caches of :data:`bench_replay.GEOMETRY` over one memory tier."""
    names = [g[0] for g in GEOMETRY[:levels]] + ["mem"]
    text = CHIP_HEAD.format(levels=levels, policy=policy)
    text += "".join(CACHE.format(name=n, kib=c >> 10, ways=w, policy=policy) for n, c, w in GEOMETRY[:levels])
    text += MEMORY + "".join(LINK.format(a=a, b=b) for a, b in zip(names, names[1:]))
    return text


def write_trace(path: Path, blocks: np.ndarray) -> None:
    """``blocks`` (64-byte line numbers) as a v1 trace: one tensor covering them, one op, one row
    per load (offset = line * 64, 64 bytes, count 1)."""
    from tierlab.traces.format.writer import TraceWriter

    with TraceWriter(path, force=True, alignment=LINE_BYTES, batch_rows=1 << 20) as w:
        tid = w.add_tensor("lines", "weight", (int(blocks.max()) + 1) * LINE_BYTES, "bf16")
        op = w.add_op("loads", "matmul", 0, "decode", 0, 1, 0)
        step = 1 << 20
        for lo in range(0, len(blocks), step):
            b = blocks[lo:lo + step]
            w.add_accesses(np.full(len(b), op), np.full(len(b), tid), b * LINE_BYTES,
                           np.full(len(b), LINE_BYTES))


def write_address_trace(path: Path, blocks: np.ndarray) -> None:
    """``blocks`` (64-byte line numbers, below 2**30 bytes) as an address trace (format version 5, 32-bit words):
    one word ``line << 1`` a load, one region tensor (what ``tierlab import`` writes)."""
    from tierlab.traces.format.addresses import AddressTraceWriter

    n = len(blocks)
    with AddressTraceWriter(path, line_bytes=LINE_BYTES, force=True,
                            extra={"imported": {"records": n, "reads": n, "writes": 0}}) as w:
        step = 1 << 22
        for lo in range(0, n, step):
            w.add(blocks[lo:lo + step] << 1)
        w.regions([0], [(int(blocks.max()) + 1) * LINE_BYTES])


def tierlab_replay(trace: Path, chip: Path, repeat: int, threads: int = 1) -> tuple[float, float, dict]:
    """(best wall seconds, best CPU seconds (user + system) of ``tierlab replay TRACE --chip CHIP
    --json`` in a fresh process, its JSON). CPU time is the fairer figure on a shared machine."""
    exe = Path(sys.executable).with_name("tierlab")
    cmd = [str(exe) if exe.exists() else (shutil.which("tierlab") or "tierlab"), "replay", str(trace),
           "--chip", str(chip), "--json", "--threads", str(threads)]
    best, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeat):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True,
                              env=dict(os.environ, TIERLAB_DEBUG="0"))
        best = min(best, time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        best_cpu = min(best_cpu, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        out = json.loads(proc.stdout)
    return best, best_cpu, out


WARM_CLI = """\
import contextlib, io, json, sys, time
sys.path.insert(0, "benchmarks")
import numpy as np
from bench_replay import pycachesim_replay
from tierlab.cli import main
one, trace, chip, repeat, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
levels, policy, lines = int(sys.argv[6]), sys.argv[7], sys.argv[8]

def run(t):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main.main(["replay", t, "--chip", chip, "--json", "--threads", threads], standalone_mode=False)
        except SystemExit as e:
            if e.code:
                raise
    return out.getvalue()

addrs = (np.load(lines) * 64).tolist()
run(one)                                    # start-up: imports and the kernels' compiled code
rows = []
for _ in range(repeat):                     # in turns, so that a slow spell of the host slows both
    t0, c0 = time.perf_counter(), time.process_time()
    text = run(trace)
    t1, c1 = time.perf_counter(), time.process_time()
    misses = pycachesim_replay(addrs, levels, policy)
    rows.append((t1 - t0, c1 - c0, time.perf_counter() - t1, time.process_time() - c1))
w, c, pw, pc = (min(r[k] for r in rows) for k in range(4))
print(json.dumps({"wall_s": w, "cpu_s": c, "pycachesim_s": pw, "pycachesim_cpu_s": pc,
                  "paired_ratios": sorted(r[2] / r[0] for r in rows),
                  "tiers": json.loads(text)["tiers"], "pycachesim_misses": misses}))
"""


def warm_cli(one: Path, trace: Path, chip: Path, repeat: int, threads: int, levels: int, policy: str,
             lines: Path) -> dict:
    """``tierlab replay TRACE --chip CHIP --json`` run through the CLI's own entry point in one
    process, after the same command on the one-row trace (start-up excluded: imports, the kernels'
    compiled code, the first file reads), in turns with pycachesim on the same addresses (``lines``:
    a .npy of the line numbers): best wall and CPU seconds of each over ``repeat`` turns, each
    turn's ratio, the tiers printed and pycachesim's misses. Parsing, reading and checking,
    placement, the replay, the cost model and the JSON report are all in the CLI's time."""
    proc = subprocess.run([sys.executable, "-c", WARM_CLI, str(one), str(trace), str(chip), str(repeat), str(threads),
                           str(levels), policy, str(lines)],
                          cwd=REPO, check=True, capture_output=True, text=True, env=dict(os.environ, TIERLAB_DEBUG="0"))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def in_process(trace: Path, chip: Path, repeat: int) -> dict:
    """Where the time goes, in this process (warm; CPU seconds, best of ``repeat``): reading and
    checking the trace alone, and the whole replay (read, check, place, replay) through
    ``tierlab.pipeline.chip_replay.replay_trace``; ``engine_cpu_s`` is the difference."""
    from tierlab.pipeline.chip_replay import replay_trace
    from tierlab.traces.format.reader import open_trace

    def read():
        t = open_trace(trace)
        if t.kind == "addresses":
            return sum(len(w) for w in t.iter_lines())
        return sum(b.num_rows for b in t.iter_accesses())

    replay_trace(trace, str(chip))
    _, c_read, _ = timed_cpu(read, repeat=repeat)
    _, c_replay, tr = timed_cpu(replay_trace, trace, str(chip), repeat=repeat)
    return {"read_check_cpu_s": c_read, "pipeline_cpu_s": c_replay, "engine_cpu_s": c_replay - c_read,
            "kernel": tr.result.meta["kernel"]["name"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=10_000_000, help="rows (loads) in the trace (default 10 M)")
    ap.add_argument("--levels", default="1,2,3", help="hierarchy depths (default 1,2,3)")
    ap.add_argument("--policies", default="lru,fifo", help="policies (default lru,fifo)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N of each timing (default 3)")
    ap.add_argument("--keep", help="write the traces and chip files here and keep them")
    ap.add_argument("--threads", type=int, default=1,
                    help="tierlab replay --threads N (default 1; 2: half of the sets on each of two threads)")
    ap.add_argument("--kind", choices=["addresses", "descriptors"], default="addresses",
                    help="the trace's kind: an address trace (format 4, what tierlab import writes; default) or "
                         "descriptors (format 3, one row per load)")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    policies = [p.strip() for p in args.policies.split(",")]

    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-trace-path-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        blocks = issue_blocks(args.lines)
        writer = write_address_trace if args.kind == "addresses" else write_trace
        t_write, _ = timed(writer, tmp / "issue.trace", blocks)
        writer(tmp / "one.trace", blocks[:1])
        np.save(tmp / "lines.npy", blocks)
        addrs = blocks * LINE_BYTES
        t_list, addr_list = timed(lambda: addrs.tolist())
        disk = sum(f.stat().st_size for f in (tmp / "issue.trace").iterdir())
        runs = []
        for policy in policies:
            for lv in levels:
                chip = tmp / f"chip-{lv}-{policy}.toml"
                chip.write_text(chip_toml(lv, policy))
                tierlab_replay(tmp / "one.trace", chip, 1, args.threads)                  # warm the cache
                t_start, c_start, _ = tierlab_replay(tmp / "one.trace", chip, args.repeat, args.threads)
                t_e2e, c_e2e, d = tierlab_replay(tmp / "issue.trace", chip, args.repeat, args.threads)
                tl_misses = [int(t["misses"]) for t in d["tiers"][:lv]]
                t_pc, c_pc, pc_misses = timed_cpu(pycachesim_replay, addr_list, lv, policy, repeat=args.repeat)
                replay_s = max(t_e2e - t_start, 1e-9)
                replay_cpu = max(c_e2e - c_start, 1e-9)
                row = {"levels": lv, "policy": policy, "end_to_end_s": t_e2e, "startup_s": t_start,
                       "replay_s": replay_s, "rows_per_s": len(blocks) / replay_s,
                       "end_to_end_cpu_s": c_e2e, "startup_cpu_s": c_start, "replay_cpu_s": replay_cpu,
                       "kernel": d["provenance"]["kernel"]["name"],
                       "pycachesim_s": t_pc, "pycachesim_cpu_s": c_pc, "ratio": t_pc / replay_s,
                       "ratio_cpu": c_pc / replay_cpu, "ratio_with_startup": t_pc / t_e2e,
                       "tierlab_misses": tl_misses, "pycachesim_misses": pc_misses,
                       "counts_equal": tl_misses == pc_misses,
                       # start-up measured longer than the whole run: the other cores' load decided
                       "replay_s_unreliable": t_e2e <= t_start,
                       "in_process": in_process(tmp / "issue.trace", chip, args.repeat)}
                # the replay in this process (no start-up to subtract): steadier on a loaded host
                row["ratio_in_process_cpu"] = c_pc / row["in_process"]["pipeline_cpu_s"]
                warm = warm_cli(tmp / "one.trace", tmp / "issue.trace", chip, args.repeat, args.threads, lv, policy,
                                tmp / "lines.npy")
                row["warm_cli_s"], row["warm_cli_cpu_s"] = warm["wall_s"], warm["cpu_s"]
                row["warm_pycachesim_s"], row["warm_pycachesim_cpu_s"] = warm["pycachesim_s"], warm["pycachesim_cpu_s"]
                row["ratio_warm_cli"] = warm["pycachesim_s"] / warm["wall_s"]
                row["ratio_warm_cli_cpu"] = warm["pycachesim_cpu_s"] / warm["cpu_s"]
                row["ratio_warm_cli_paired"] = warm["paired_ratios"]
                row["counts_equal"] = row["counts_equal"] and warm["pycachesim_misses"] == pc_misses and \
                    [int(t["misses"]) for t in warm["tiers"][:lv]] == pc_misses
                runs.append(row)
                log(json.dumps(row))
        emit("bench_trace_path", {"kind": args.kind, "cpu_model": cpu_model(), "lines": len(blocks),
                                  "threads": args.threads,
                                  "line_bytes": LINE_BYTES,
                                  "trace_bytes_on_disk": disk, "trace_write_s": t_write,
                                  "pycachesim_list_conversion_s": t_list,
                                  "hierarchy": [{"name": n, "capacity_bytes": c, "ways": w} for n, c, w in GEOMETRY],
                                  "runs": runs})
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
