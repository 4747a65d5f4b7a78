"""The serving curve's host time: ``tierlab throughput`` for Llama-3.1-70B TP=8 on dgx-h100, 12 points.

Prints one JSON object: the wall and CPU seconds of the whole curve (scheduling, representative
steps, their lowering and system replays), the replays it took, and, as the reference in the same
run, the wall seconds of one ``tierlab run``-equivalent decode step (a batch of 64 at the mean
context) lowered and replayed the same way, so a slower or busier machine shows in both. Target
(issue 23): the 12-point curve in at most 30 s on 2 cores.

    python benchmarks/bench_throughput.py [--model llama-3.1-70b] [--system dgx-h100] [--tp 8]
"""

from __future__ import annotations

import argparse
import resource
import time

from _common import emit, log, timed_cpu

POINTS = "1,2,4,8,16,32,64,128,256,384,512,640"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--system", default="dgx-h100")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--input", type=int, default=1000)
    ap.add_argument("--output", type=int, default=1000)
    ap.add_argument("--concurrency", default=POINTS)
    ap.add_argument("--workers", type=int, default=1, help="replay processes (throughput --workers)")
    args = ap.parse_args(argv)

    from tierlab.serving.replay import StepReplayer
    from tierlab.serving.throughput import throughput
    from tierlab.system.systemfile import load_system
    from tierlab.traces.lowering.serving_step import MixedStep
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model

    spec, system = load_model(args.model), load_system(args.system)
    log("warming the compiled kernels")
    with StepReplayer(spec, RunConfig(generate=1, tp=args.tp), system=system) as warm:
        warm.cost(MixedStep(decode=[16] * 2))
        t0 = time.perf_counter()
        warm.cost(MixedStep(decode=[args.input + args.output // 2] * 64))
        ref = time.perf_counter() - t0
    log("the curve")
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, cpu, d = timed_cpu(throughput, spec, system=system, isl=args.input, osl=args.output,
                             concurrency=args.concurrency, tp=args.tp, workers=args.workers)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = (after.ru_utime + after.ru_stime) - (kids.ru_utime + kids.ru_stime)
    emit("bench_throughput", {
        "model": args.model, "system": args.system, "tp": args.tp, "input": args.input, "output": args.output,
        "points": len(d["curve"]), "workers": args.workers, "curve_wall_s": wall,
        "curve_cpu_s": cpu + child_cpu, "curve_cpu_s_workers": child_cpu,
        "replays": d["provenance"]["representative_steps"]["replays"],
        "reference_step_wall_s": ref, "curve_over_reference": wall / ref,
        "target_wall_s": 30.0, "max_output_tokens_per_s": d["max_output_tokens_per_s"],
        "max_concurrency": d["max_concurrency"],
        "curve": [{k: p[k] for k in ("concurrency", "output_tokens_per_s", "tokens_per_s_per_user")}
                  for p in d["curve"]],
    })


if __name__ == "__main__":
    main()
