"""A serving curve's steps, replayed the old way and the new, and where a step's time goes.

``tierlab throughput``'s representative steps were each lowered into a trace directory, replayed and
costed, and then the whole ``--json`` dict of ``tierlab run`` was built to read three figures of
its ``per_token``. Now the figures are read from the replay and its cost
(:mod:`tierlab.analysis.figures`). This script runs the same curve both ways in one process (the old
way by a StepReplayer whose ``cost`` builds the dict, as the replayer did before issue 40), checks
that the two give the same curve, and prints one JSON object:

* ``old`` / ``new``: the curve's wall and CPU seconds (the best of ``--repeat`` runs each, the two
  ways alternating) and its replays (fresh replayers, the compiled kernels warmed first);
  ``speedup``: old wall / new wall (``speedup_cpu`` the same of CPU); ``same_curve``: the two dicts
  are equal;
* ``phases``: over the curve's representative steps, the seconds of each phase of a step: lowering
  (which writes the trace directory); ``files`` and ``memory``: the trace's tables written to files
  and read back through a memory map, and the same bytes into and out of memory buffers (the
  difference is what holding the trace in memory instead of a directory would save); opening;
  replaying; ``figures_new``: costing and the figures, the new way; ``whole_dict_old``: costing and
  the whole dict, the old way; and the steps' trace bytes.

    python benchmarks/bench_serving_memory.py [--model llama-3.1-70b] [--system dgx-h100] [--tp 8]
        [--chip h100] [--concurrency 1,2,4,...] [--repeat N] [--no-phases]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from _common import emit, log, timed_cpu
from bench_throughput import POINTS


def json_replayer_class():
    """A StepReplayer costing each step the old way: the whole ``--json`` dict, then its per_token."""
    from tierlab.serving.replay import StepReplayer, step_cost
    from tierlab.traces.lowering.serving_step import lower_step

    class JsonStepReplayer(StepReplayer):
        def cost(self, step):
            hit = self.cache.get(step)
            if hit is None:
                with tempfile.TemporaryDirectory(prefix="tierlab-bench-") as tmp:
                    trace = lower_step(self.spec, self.run, step, Path(tmp) / "step.trace")
                    self.replays += 1
                    hit = self.cache[step] = step_cost(whole_dict(self, trace)["per_token"])
            return hit

    return JsonStepReplayer


def whole_dict(rep, trace) -> dict:
    """``tierlab run --json``'s dict of a step's trace on the replayer's chip or system."""
    if rep.system is None:
        from tierlab.analysis.result import to_json
        from tierlab.cost.trace_cost import cost_of
        from tierlab.pipeline.chip_replay import replay_trace

        tr = replay_trace(trace, rep.chip, rep.options)
        return to_json(tr, cost_of(tr))
    from tierlab.analysis.system_result import to_json
    from tierlab.cost.system_cost import cost_system
    from tierlab.pipeline.system_replay import replay_system

    sr = replay_system(trace, rep.system, rep.options, collective_algo=rep.collective_algo)
    return to_json(sr, cost_system(sr))


def io_seconds(trace: Path, scratch: Path) -> tuple[float, float, int]:
    """(seconds to write the trace's tables to files and read them back through a memory map, as the
    writer and reader do; the same into and out of memory buffers; their bytes): the difference is
    what a trace held in memory instead of a directory would save."""
    import pyarrow as pa

    blobs = {p.name: p.read_bytes() for p in trace.iterdir()}
    out = scratch / "copy"
    t0 = time.perf_counter()
    out.mkdir()
    for name, b in blobs.items():
        with pa.OSFile(str(out / name), "wb") as f:
            f.write(b)
    n = 0
    for name in blobs:
        with pa.memory_map(str(out / name), "r") as f:
            n += len(f.read_buffer().to_pybytes())
    shutil.rmtree(out)
    t1 = time.perf_counter()
    held = []
    for b in blobs.values():
        sink = pa.BufferOutputStream()
        sink.write(b)
        held.append(sink.getvalue())
    m = sum(len(pa.BufferReader(h).read_buffer().to_pybytes()) for h in held)
    t2 = time.perf_counter()
    assert m == n
    return t1 - t0, t2 - t1, n


def phases(rep, steps) -> dict:
    """Seconds of each phase over ``steps`` (see the module docstring), and their trace bytes."""
    from tierlab.analysis import figures
    from tierlab.traces.format.reader import open_trace
    from tierlab.traces.lowering.serving_step import lower_step

    acc = dict.fromkeys(("lower", "files", "memory", "open", "replay", "figures_new", "whole_dict_old"), 0.0)
    nbytes = 0
    for k, step in enumerate(steps):
        with tempfile.TemporaryDirectory(prefix="tierlab-bench-") as tmp:
            t0 = time.perf_counter()
            path = lower_step(rep.spec, rep.run, step, Path(tmp) / "step.trace")
            lower = time.perf_counter() - t0
            files, memory, n = io_seconds(path, Path(tmp))
            nbytes += n
            t = [time.perf_counter()]
            trace = open_trace(path)
            t.append(time.perf_counter())
            if rep.system is None:
                from tierlab.analysis.result import to_json
                from tierlab.cost.trace_cost import cost_of
                from tierlab.pipeline.chip_replay import replay_trace

                r = replay_trace(trace, rep.chip, rep.options)
                t.append(time.perf_counter())
                figures.chip_per_token(r, cost_of(r))
                t.append(time.perf_counter())
                to_json(r, cost_of(r))
            else:
                from tierlab.analysis.system_result import to_json
                from tierlab.cost.system_cost import cost_system
                from tierlab.pipeline.system_replay import replay_system

                r = replay_system(trace, rep.system, rep.options, collective_algo=rep.collective_algo)
                t.append(time.perf_counter())
                figures.system_per_token(r, figures.system_cost(r))
                t.append(time.perf_counter())
                to_json(r, cost_system(r))
            t.append(time.perf_counter())
        opened, replayed, new, old = (b - a for a, b in zip(t, t[1:]))
        for key, v in (("lower", lower), ("files", files), ("memory", memory), ("open", opened),
                       ("replay", replayed), ("figures_new", new), ("whole_dict_old", old)):
            acc[key] += v
        log(f"  step {k + 1}/{len(steps)}: {step.tokens} tokens, lower {lower:.2f} s, replay {replayed:.2f} s, "
            f"figures {new:.2f} s (the dict: {old:.2f} s)")
    return {"steps": len(steps), "trace_bytes": nbytes, "seconds": acc}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--system", default="dgx-h100")
    ap.add_argument("--chip", help="a chip instead of --system (then --tp 1)")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--input", type=int, default=1000)
    ap.add_argument("--output", type=int, default=1000)
    ap.add_argument("--concurrency", default=POINTS)
    ap.add_argument("--repeat", type=int, default=1, help="curves each way, alternating (best of)")
    ap.add_argument("--no-phases", action="store_true", help="skip the per-phase pass over the steps")
    args = ap.parse_args(argv)

    from tierlab.chip.chipfile import load_chip
    from tierlab.serving.replay import StepReplayer
    from tierlab.serving.throughput import throughput
    from tierlab.system.systemfile import load_system
    from tierlab.traces.lowering.serving_step import MixedStep
    from tierlab.traces.model.spec import load_model
    from tierlab.traces.workload.run import RunConfig

    spec = load_model(args.model)
    tp = 1 if args.chip else args.tp
    where = {"chip": load_chip(args.chip)} if args.chip else {"system": load_system(args.system)}
    run = RunConfig(generate=1, tp=tp)
    kinds = {"old": json_replayer_class(), "new": StepReplayer}
    log("warming the compiled kernels")
    for cls in kinds.values():
        with cls(spec, run, **where) as warm:
            warm.cost(MixedStep(decode=[16] * 2))
    out, curves, reps = {}, {}, {}
    order = [name for i in range(args.repeat) for name in (list(kinds) if i % 2 == 0 else list(kinds)[::-1])]
    for name in order:
        log(f"the curve, the {name} way")
        if name in reps:
            reps[name].close()
        reps[name] = kinds[name](spec, run, **where)
        wall, cpu, curves[name] = timed_cpu(throughput, spec, **where, isl=args.input, osl=args.output,
                                            concurrency=args.concurrency, tp=tp, replayer=reps[name], workers=1)
        best = out.setdefault(name, {"curve_wall_s": wall, "curve_cpu_s": cpu, "replays": reps[name].replays,
                                     "walls_s": []})
        best["walls_s"].append(wall)
        best["curve_wall_s"], best["curve_cpu_s"] = min(best["curve_wall_s"], wall), min(best["curve_cpu_s"], cpu)
    result = {
        "model": args.model, "target": args.chip or args.system, "tp": tp, "input": args.input,
        "output": args.output, "points": len(curves["new"]["curve"]), **out,
        "speedup": out["old"]["curve_wall_s"] / out["new"]["curve_wall_s"],
        "speedup_cpu": out["old"]["curve_cpu_s"] / out["new"]["curve_cpu_s"],
        "same_curve": curves["old"] == curves["new"],
        "max_output_tokens_per_s": curves["new"]["max_output_tokens_per_s"],
        "tmpdir": tempfile.gettempdir(), "tmpdir_fs": fs_of(tempfile.gettempdir()),
    }
    if not args.no_phases:
        log("the phases of each representative step")
        result["phases"] = phases(reps["new"], list(reps["new"].cache))
    for rep in reps.values():
        rep.close()
    emit("bench_serving_memory", result)


def fs_of(path: str) -> str | None:
    """The file system type holding ``path`` (Linux /proc/mounts), or None."""
    try:
        best = ("", None)
        for line in Path("/proc/mounts").read_text().splitlines():
            _, mnt, kind, *_ = line.split()
            if os.path.realpath(path).startswith(mnt) and len(mnt) > len(best[0]):
                best = (mnt, kind)
        return best[1]
    except OSError:
        return None


if __name__ == "__main__":
    main()
