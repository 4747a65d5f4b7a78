"""Model-scale replay speed: Llama-3.1-8B decode on the h100 preset at its real block size.

Generates ``llama-3.1-8b --context 1024 --generate 8`` (bf16) into a temporary directory, replays it
on ``h100`` and reports: simulated bytes per host second (bytes requested at tier 0, and bytes on
each link), host time per decode token (the replay's host time split over decode steps in
proportion to their tier-0 requests, so trace reading and setup are spread evenly) against the
chip's own time per token from the same result (the cost model's per-token latency). The first
replay in the process also loads the compiled engine from Numba's cache and is reported apart
(``first_replay_s``); the rates use the best of ``--repeat`` replays after it. The engine without
set groups (lazy stacks of runs, ``set_groups=False``) is timed in the same run as the reference,
and its counts compared.

    python benchmarks/bench_model.py [--model NAME] [--chip NAME] [--context N] [--generate N]
                                     [--prompt N] [--batch N] [--repeat N]

``--presets``: every chip preset instead, each model of ``--models`` (default Llama-3.1-8B,
Mixtral-8x7B, Llama-3.1-70B) on every preset that holds it (a CapacityError is reported as
``holds: false``), decode only (``--context``, ``--generate``), one trace per model replayed on
each chip: the first replay apart, the best of ``--repeat``, host against chip time per decode
token, the kernel the dispatch chose, the counts of the first and best replays compared; no
reference engine. One JSON row per (model, chip) under ``rows``, plus which presets miss.

    python benchmarks/bench_model.py --presets [--models a,b] [--context N] [--generate N] [--repeat N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import emit, log

from tierlab.engine.counters import BYPASSES, HITS, MISSES


def chip_seconds_per_token(tr, ops) -> tuple[dict, str]:
    """The chip's own time per decode step: the cost model's per-op roofline latency summed over
    each step's ops (what ``tierlab replay --json`` reports as ``per_token.latency_s``)."""
    from tierlab.cost.model import per_step
    from tierlab.present.report import cost_of

    cst = cost_of(tr)
    steps = per_step(cst, ops["step"], ops["phase"])
    return ({str(s): float(cst.latency_s[ids].sum()) for s, ids in steps.items()},
            "tierlab.cost.model: per op max(compute, tier and link bytes / bandwidth), summed per step")


def host_and_chip_per_token(tr, trace, t_replay: float) -> tuple[float | None, float | None]:
    """Host seconds per decode token (the replay's time split over decode steps by tier-0 requests)
    and the chip's seconds per decode token (the cost model's), means over the decode steps."""
    res = tr.result
    ops = trace.op_arrays()
    requests = res.per_op[:, 0, HITS] + res.per_op[:, 0, MISSES] + res.per_op[:, 0, BYPASSES]
    steps = np.where(np.asarray(ops["phase"] == "decode"), np.asarray(ops["step"], np.int64), -1)
    total = max(int(requests.sum()), 1)
    host = [t_replay * float(requests[steps == s].sum()) / total for s in np.unique(steps[steps >= 0])]
    chip = list(chip_seconds_per_token(tr, ops)[0].values())
    return (float(np.mean(host)) if host else None), (float(np.mean(chip)) if chip else None)


def presets(args) -> None:
    """Every model of ``--models`` on every chip preset that holds it (see the module doc)."""
    from tierlab.common.errors import CapacityError
    from tierlab.chip.chipfile import list_presets
    from tierlab.pipeline.chip_replay import replay_trace
    from tierlab.traces.lowering.generate import generate_trace
    from tierlab.traces.format.reader import open_trace
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model

    rows = []
    with tempfile.TemporaryDirectory(prefix="tierlab-bench-") as tmp:
        for model in args.models.split(","):
            path = generate_trace(load_model(model), RunConfig(context=args.context, generate=args.generate),
                                  Path(tmp) / f"{model}.trace")
            trace = open_trace(path)
            for chip in list_presets():
                row = {"model": model, "chip": chip}
                try:
                    t0 = time.perf_counter()
                    first = replay_trace(trace, chip)
                    row["first_replay_s"] = time.perf_counter() - t0
                except CapacityError as err:
                    rows.append({**row, "holds": False, "why": str(err)[:200]})
                    log(f"{model} on {chip}: does not hold it")
                    continue
                best, t_replay = first, float("inf")
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    tr = replay_trace(trace, chip)
                    if time.perf_counter() - t0 < t_replay:
                        t_replay, best = time.perf_counter() - t0, tr
                host, chip_s = host_and_chip_per_token(best, trace, t_replay)
                res = best.result
                row.update({
                    "holds": True, "replay_s": t_replay, "host_s_per_decode_token": host,
                    "chip_s_per_decode_token": chip_s,
                    "host_over_chip": host / chip_s if host and chip_s else None,
                    "kernel": res.meta["kernel"]["name"], "tier0_block_bytes": int(res.block_bytes[0]),
                    "counts_equal": bool(np.array_equal(res.per_op, first.result.per_op)
                                         and np.array_equal(res.flush, first.result.flush)),
                })
                rows.append(row)
                log(f"{model} on {chip}: host {host * 1e3:.2f} ms vs chip {chip_s * 1e3:.2f} ms per token "
                    f"({row['kernel']})")
    held = [r for r in rows if r["holds"]]
    emit("bench_model", {"mode": "presets",
        "context": args.context, "generate": args.generate, "repeat": args.repeat, "rows": rows,
        "faster_than_chip": [f"{r['model']} on {r['chip']}" for r in held if (r["host_over_chip"] or 9) < 1],
        "slower_than_chip": [f"{r['model']} on {r['chip']}" for r in held if (r["host_over_chip"] or 9) >= 1],
        "not_held": [f"{r['model']} on {r['chip']}" for r in rows if not r["holds"]],
        "counts_equal": all(r["counts_equal"] for r in held),
    })


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--chip", default="h100")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--generate", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=0, help="tokens prefilled before decoding (default 0)")
    ap.add_argument("--batch", type=int, default=1, help="sequences per step (default 1)")
    ap.add_argument("--repeat", type=int, default=10,
                    help="replays timed after the first (best kept; default 10: the first few after the first "
                         "are slower, while the allocator settles)")
    ap.add_argument("--presets", action="store_true", help="every chip preset, every model of --models")
    ap.add_argument("--models", default="llama-3.1-8b,mixtral-8x7b,llama-3.1-70b")
    args = ap.parse_args()
    if args.presets:
        presets(args)
        return

    from tierlab.engine.options import ReplayOptions

    from tierlab.pipeline.chip_replay import replay_trace
    from tierlab.traces.lowering.generate import generate_trace
    from tierlab.traces.format.reader import open_trace
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model

    with tempfile.TemporaryDirectory(prefix="tierlab-bench-") as tmp:
        t0 = time.perf_counter()
        path = generate_trace(load_model(args.model), RunConfig(context=args.context, generate=args.generate,
                                                                     prompt=args.prompt, batch=args.batch),
                              Path(tmp) / "model.trace")
        t_trace = time.perf_counter() - t0
        log(f"trace written in {t_trace:.1f} s; replaying")
        trace = open_trace(path)
        # the first replay in a process also loads the compiled engine from Numba's cache (about
        # 0.5 s): it is reported apart, the replay rate is the best of the next runs
        t0 = time.perf_counter()
        tr = replay_trace(trace, args.chip)
        t_first = time.perf_counter() - t0
        t_replay = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            tr = replay_trace(trace, args.chip)
            t_replay = min(t_replay, time.perf_counter() - t0)
        # the reference in the same run: the engine without set groups (lazy stacks of runs)
        ref_opts = ReplayOptions(set_groups=False)
        replay_trace(trace, args.chip, ref_opts)
        t_ref = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            ref = replay_trace(trace, args.chip, ref_opts)
            t_ref = min(t_ref, time.perf_counter() - t0)
        ops = trace.op_arrays()

    res = tr.result
    block0 = int(res.block_bytes[0])
    requests = res.per_op[:, 0, HITS] + res.per_op[:, 0, MISSES] + res.per_op[:, 0, BYPASSES]
    decode = np.asarray(ops["phase"] == "decode")
    steps = np.where(decode, np.asarray(ops["step"], np.int64), -1)
    total_req = int(requests.sum())
    host_per_step = {str(int(s)): t_replay * float(requests[steps == s].sum()) / max(total_req, 1)
                     for s in np.unique(steps[steps >= 0])}
    chip_per_step, chip_source = chip_seconds_per_token(tr, ops)
    host_mean = float(np.mean(list(host_per_step.values()))) if host_per_step else None
    chip_mean = float(np.mean(list(chip_per_step.values()))) if chip_per_step else None
    links = res.links
    emit("bench_model", {
        "model": args.model, "chip": args.chip, "context": args.context, "generate": args.generate,
        "prompt": args.prompt, "batch": args.batch,
        "trace_s": t_trace, "replay_s": t_replay, "first_replay_s": t_first,
        "tier0_block_bytes": block0, "tier0_requests": total_req,
        "simulated_bytes": total_req * block0,
        "simulated_bytes_per_host_s": total_req * block0 / t_replay,
        "blocks_per_host_s": total_req / t_replay,
        "link_bytes_per_host_s": {f"{l.upper}->{l.lower}": float(links[i].sum() / t_replay)
                                  for i, l in enumerate(tr.chip.links)},
        "host_s_per_decode_token": host_mean, "chip_s_per_decode_token": chip_mean,
        "host_over_chip": (host_mean / chip_mean) if host_mean and chip_mean else None,
        "chip_time_source": chip_source,
        "host_s_by_step": host_per_step, "chip_s_by_step": chip_per_step,
        "engine": "set groups" if "set_groups_max" in res.meta else "walk with lazy stacks",
        "set_groups_max": res.meta.get("set_groups_max"),
        "reference": {
            "engine": "walk with lazy stacks (set_groups=False)",
            "replay_s": t_ref,
            "host_s_per_decode_token": host_mean * t_ref / t_replay if host_mean else None,
            "speedup": t_ref / t_replay,
            "counts_equal": bool(np.array_equal(res.per_op, ref.result.per_op)
                                 and np.array_equal(res.flush, ref.result.flush)),
        },
    })


if __name__ == "__main__":
    main()
