"""System replay speed: a sharded decode (default Llama-3.1-70B, TP=8) replayed on a system of many chips.

Generates ``MODEL --context N --generate N --tp N`` (bf16, batch 1) into a temporary directory once,
then times :func:`tierlab.pipeline.system_replay.replay_system` on ``--system``: the first replay in the
process (it also loads the compiled engine from Numba's cache) is reported apart
(``first_replay_s``); ``replay_s`` is the best of the ``--repeat`` replays after it. Each device's
slice replay (``tierlab.pipeline.chip_replay.replay_trace``, called by ``replay_system``) is timed inside those
same calls (``per_device_replay_s``, from the best replay). Costing the result (``to_json``: the
devices' costs, the collectives on the network and the critical path) is timed apart (``cost_s``).
``replay_cpu_s``: the process's CPU time in the best replay (all threads; on a shared machine the
wall time can be far above it), and ``host_cpu_s_per_decode_token`` split as the wall time is.

Reported against the system's own time: host seconds per decode token (the replay's host time
split over decode steps in proportion to the devices' tier-0 requests, then divided by the tokens
of a step, dp x batch) over the system's modelled seconds per decode token (``per_token.latency_s``
/ ``tokens_per_step`` of ``tierlab run --system --json``): ``host_over_system``; over the calibrated
seconds per token (``per_token.latency_calibrated_s``, tierlab's prediction of what the system takes):
``host_over_system_calibrated``. The counts' check:
every device's counters (``per_op`` and ``flush``) identical between the first replay and every
repeat, and between those and the baseline.

``replay_system`` replays one device per class of identical slices (``distinct_slices`` of the
``n_devices``); a distinct slice that differs from the most common one in a few ops only is its
**twin** and replays beside it, only where it differs (``twins``: per twin its base device, the
windows of ops it replayed on its own, and whether it joined the base again;
:mod:`tierlab.engine.twins`). The other distinct slices replay on ``--threads`` host threads
(default all cores; ``threads``: the threads used, one per job at most); the same trace is
also replayed the old way, every device's slice one after another on one thread (``dedupe=False,
threads=1``, best of ``--repeat``): ``baseline_replay_s`` and ``host_over_system_baseline``.
``per_device_replay_s`` has one entry per distinct slice replayed on its own (not the twins nor
their base); with threads they overlap, so ``replay_overhead_s`` (the replay's time outside them)
can be negative.

    python benchmarks/bench_system.py [--model NAME] [--system NAME] [--tp N] [--context N]
                                      [--generate N] [--repeat N] [--threads N] [--no-dedupe]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import emit, log

from tierlab.engine.counters import BYPASSES, HITS, MISSES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--system", default="dgx-h100")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--generate", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3, help="replays timed after the first (best kept; default 3)")
    ap.add_argument("--threads", type=int, default=None, help="host threads (default: all cores)")
    ap.add_argument("--no-dedupe", action="store_true", help="replay every device's slice, identical or not")
    args = ap.parse_args()
    kw = {"dedupe": not args.no_dedupe, "threads": args.threads}

    import tierlab.pipeline.system_replay as sp
    from tierlab.analysis.system_result import to_json
    from tierlab.traces.lowering.generate import generate_trace
    from tierlab.traces.format.reader import open_trace
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model

    # each device's slice replay timed inside replay_system's own calls
    calls: list[float] = []
    inner = sp.replay_trace

    def timed_replay_trace(*a, **kw):
        t0 = time.perf_counter()
        out = inner(*a, **kw)
        calls.append(time.perf_counter() - t0)
        return out

    sp.replay_trace = timed_replay_trace

    with tempfile.TemporaryDirectory(prefix="tierlab-bench-") as tmp:
        run = RunConfig(context=args.context, generate=args.generate, tp=args.tp)
        t0 = time.perf_counter()
        path = generate_trace(load_model(args.model), run, Path(tmp) / "model.trace")
        t_trace = time.perf_counter() - t0
        log(f"trace written in {t_trace:.1f} s; replaying on {args.system}")
        trace = open_trace(path)

        calls.clear()
        t0 = time.perf_counter()
        first = sp.replay_system(trace, args.system, **kw)
        t_first = time.perf_counter() - t0
        first_per_device = list(calls)
        log(f"first replay {t_first:.1f} s")

        t_replay, best_per_device, sr, counts_equal = float("inf"), None, first, True
        for i in range(args.repeat):
            calls.clear()
            c0 = time.process_time()
            t0 = time.perf_counter()
            sr = sp.replay_system(trace, args.system, **kw)
            t = time.perf_counter() - t0
            log(f"replay {i + 1}/{args.repeat}: {t:.3f} s")
            if t < t_replay:
                t_replay, best_per_device, cpu_replay = t, list(calls), time.process_time() - c0
            counts_equal &= len(sr.devices) == len(first.devices) and all(
                np.array_equal(a.result.per_op, b.result.per_op) and np.array_equal(a.result.flush, b.result.flush)
                for a, b in zip(first.devices, sr.devices))

        # the baseline: every device's slice, one after another on one thread
        t_base = float("inf")
        for i in range(args.repeat):
            t0 = time.perf_counter()
            base = sp.replay_system(trace, args.system, dedupe=False, threads=1)
            t_base = min(t_base, time.perf_counter() - t0)
            counts_equal &= len(base.devices) == len(sr.devices) and all(
                np.array_equal(a.result.per_op, b.result.per_op) and np.array_equal(a.result.flush, b.result.flush)
                for a, b in zip(base.devices, sr.devices))
        log(f"baseline (every slice, one thread): {t_base:.3f} s")

        t0 = time.perf_counter()
        d = to_json(sr)
        t_cost = time.perf_counter() - t0

        # host time per decode step: the replay's time split by the devices' tier-0 requests
        ops = trace.ops
        phase = np.asarray(ops.column("phase").to_pylist(), dtype=object)
        step = ops.column("step").to_numpy()
        req_by_step: dict[int, float] = {}
        total_req = 0
        for dev, g in zip(sr.devices, sr.op_ids):
            r = dev.result.per_op
            req = r[:, 0, HITS] + r[:, 0, MISSES] + r[:, 0, BYPASSES]
            total_req += int(req.sum())
            dec = phase[g] == "decode"
            for s in np.unique(step[g][dec]):
                req_by_step[int(s)] = req_by_step.get(int(s), 0.0) + float(req[dec & (step[g] == s)].sum())
        n_devices = trace.n_devices

    pt = d["per_token"]
    tokens = pt["tokens_per_step"]
    host_by_step = {str(s): t_replay * v / max(total_req, 1) for s, v in sorted(req_by_step.items())}
    host_step = float(np.mean(list(host_by_step.values())))
    host_token = host_step / tokens
    system_token = pt["latency_s"] / tokens
    emit("bench_system", {
        "model": args.model, "system": args.system, "chip": d["chip"], "context": args.context,
        "generate": args.generate, "batch": 1, "parallelism": d["parallelism"], "n_devices": n_devices,
        "trace_s": t_trace, "first_replay_s": t_first, "replay_s": t_replay, "cost_s": t_cost,
        "repeat": args.repeat,
        "dedupe": not args.no_dedupe, "distinct_slices": sr.distinct_slices, "threads": sr.threads,
        "replayed_as": sr.replayed_as, "host_cores": os.cpu_count(),
        "twins": {str(r): {"base": b, **sr.devices[r].result.meta["twin"]} for r, b in sorted(sr.twin_of.items())},
        "baseline_replay_s": t_base, "speedup_over_baseline": t_base / t_replay,
        "replay_cpu_s": cpu_replay,
        "host_cpu_s_per_decode_token": host_token * cpu_replay / t_replay,   # CPU of all threads, split as the time
        "per_device_replay_s": best_per_device,
        "per_device_replay_s_first": first_per_device,
        "per_device_replay_s_mean": float(np.mean(best_per_device)) if best_per_device else None,
        "replay_overhead_s": t_replay - float(sum(best_per_device)),
        "tier0_requests": total_req,
        "host_s_per_decode_step": host_step,
        "host_s_per_decode_token": host_token,
        "host_s_per_decode_token_per_device": host_token / n_devices,
        "system_s_per_decode_token": system_token,
        "host_over_system": host_token / system_token,
        "host_over_system_baseline": host_token * t_base / t_replay / system_token,
        "host_over_system_with_cost": (host_token + t_cost / max(len(host_by_step), 1) / tokens) / system_token,
        "system_time_source": "to_json(sr)['per_token']['latency_s'] / tokens_per_step: a decode step's "
                              "critical path over devices (tierlab.cost.system_cost)",
        # the calibrated latency (issue 22): tierlab's prediction of the system's own time per token
        "system_s_per_decode_token_calibrated": pt["latency_calibrated_s"] / tokens,
        "host_over_system_calibrated": host_token / (pt["latency_calibrated_s"] / tokens),
        "system_tokens_per_s": pt["tokens_per_s"], "system_bound": pt["bound"],
        "system_tokens_per_s_calibrated": pt["tokens_per_s_calibrated"],
        "collective_time_share": d["coordination"].get("collective_time_share"),
        "host_s_by_step": host_by_step,
        "counts_equal_across_repeats": bool(counts_equal),
        "counts_check": "every device's per_op and flush counters of the first replay equal those of each "
                        "repeat and of the baseline (dedupe=False, threads=1)",
    })


if __name__ == "__main__":
    main()
