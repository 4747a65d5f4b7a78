"""Trace generation of every model family, against Llama-3.1-8B (the reference) in the same run.

Per preset: reading its config.json (spec and weight list), and lowering a decode-heavy run
(``--context 1024`` or the model's positions less 4, ``--generate 4``, batch 1, the preset's default weights) into a trace; best of
``--repeat`` wall and CPU seconds, tensors, ops and accesses, and the ratio of CPU seconds to the
reference's. Prints JSON.
Usage: ``python benchmarks/bench_families.py [--repeat N] [--models a,b,...]``
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from _common import emit, log, timed_cpu

from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import list_presets, load_model
from tierlab.traces.model.weight_formats import default_weights

REFERENCE = "llama-3.1-8b"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--models", help="comma-separated presets (default: every preset)")
    args = ap.parse_args()
    names = args.models.split(",") if args.models else list_presets()
    names = [REFERENCE] + [n for n in names if n != REFERENCE]
    tmp = Path(tempfile.mkdtemp(prefix="bench-families-"))
    rows = {}
    try:
        for name in names:
            log(name)
            load_s = timed_cpu(load_model, name, repeat=args.repeat)[1]
            spec = load_model(name)
            run = RunConfig(context=min(1024, spec.max_position_embeddings - 4), generate=4,
                            weights=default_weights(spec))      # GPT-2 holds 1,024 positions
            wall, cpu, path = timed_cpu(generate_trace, spec, run, tmp / "t.trace", force=True, repeat=args.repeat)
            from tierlab.traces.format.reader import open_trace

            t = open_trace(path).manifest["tables"]
            rows[name] = {"family": spec.family, "weights": run.weights, "load_cpu_s": round(load_s, 4),
                          "trace_wall_s": round(wall, 4), "trace_cpu_s": round(cpu, 4), "tensors": t["tensors"],
                          "ops": t["ops"], "accesses": t["accesses"]}
        ref = rows[REFERENCE]["trace_cpu_s"]
        for r in rows.values():
            r["cpu_vs_reference"] = round(r["trace_cpu_s"] / ref, 2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    emit("bench_families", {"reference": REFERENCE, "run": "context 1024, generate 4, batch 1", "models": rows})


if __name__ == "__main__":
    main()
