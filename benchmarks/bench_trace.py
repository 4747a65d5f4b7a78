"""Time trace generation: Llama-3.1-70B, prompt 8192, 256 decode steps, batch 8 (bf16).

Prints JSON: seconds, bytes on disk, row counts. Target (2-core machine): under 30 s and 200 MB.
Usage: ``python benchmarks/bench_trace.py [--model NAME] [--prompt N] [--generate N] [--batch N] [--keep DIR]``
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.format.reader import open_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--prompt", type=int, default=8192)
    ap.add_argument("--generate", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--keep", help="keep the trace at this path")
    args = ap.parse_args()
    spec = load_model(args.model)
    run = RunConfig(prompt=args.prompt, generate=args.generate, batch=args.batch)
    tmp = Path(tempfile.mkdtemp(prefix="bench-trace-"))
    out = Path(args.keep) if args.keep else tmp / "bench.trace"
    try:
        t0 = time.perf_counter()
        generate_trace(spec, run, out, force=True)
        seconds = time.perf_counter() - t0
        disk = sum(f.stat().st_size for f in out.iterdir())
        t1 = time.perf_counter()
        trace = open_trace(out)
        rows = sum(b.num_rows for b in trace.iter_accesses())
        read_s = time.perf_counter() - t1
        print(json.dumps({
            "benchmark": "trace_generation", "model": args.model, "prompt": args.prompt,
            "generate": args.generate, "batch": args.batch, "seconds": round(seconds, 3),
            "bytes_on_disk": disk, "validate_read_seconds": round(read_s, 3),
            "tables": trace.manifest["tables"], "target_seconds": 30, "target_bytes": 200_000_000,
            "machine": platform.machine(), "python": platform.python_version(),
        }, indent=1))
        if rows != trace.n_accesses:
            raise SystemExit("access row count mismatch")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
