"""Request traces and the prefix hit curve: load times and the one-pass LRU curve's time.

Loads a Mooncake trace (the published ``conversation_trace.jsonl``, 12,031 requests; shipped xz-compressed in
benchmarks/data/mooncake/) and a 10^5-
request JSONL made from it (the trace repeated with timestamps shifted by an hour and ids shifted
past the previous copy's), then times the hit curve (24 default capacities) under LRU (one pass),
FIFO and OPT (one replay per capacity). Times are the best of ``--repeat`` runs after one warm-up
(the first run also loads Numba's cached code).

    python benchmarks/bench_kvstream.py [--trace FILE] [--requests 100000] [--repeat 5] [--serve]

``--serve`` also times ``tierlab requests``' work on the whole trace: Llama-3.1-70B on dgx-h100 at TP8 with a
1 TB host tier (the step surface's replays included, in this process; issue 41's target is 60 s on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import lzma
import tempfile
import time
from pathlib import Path

from _common import emit, log, timed_cpu

from tierlab.kvstream.hitcurve import hit_curve
from tierlab.kvstream.reader import read_requests


def repeated_jsonl(src: Path, dest: Path, n: int) -> None:
    """``n`` requests of ``src`` repeated, each copy an hour later with ids past the last copy's."""
    text = lzma.open(src, "rt").read() if src.suffix == ".xz" else src.read_text()
    recs = [json.loads(line) for line in text.splitlines() if line.strip()]
    span = 1 + max(h for r in recs for h in r["hash_ids"])
    with open(dest, "w") as f:
        for i in range(n):
            r, k = recs[i % len(recs)], i // len(recs)
            f.write(json.dumps({"timestamp": r["timestamp"] + k * 3_600_000, "input_length": r["input_length"],
                                "output_length": r["output_length"],
                                "hash_ids": [h + k * span for h in r["hash_ids"]]}) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path,
                    default=Path(__file__).resolve().parent / "data" / "mooncake" / "conversation_trace.jsonl.xz")
    ap.add_argument("--serve", action="store_true", help="also time serving the trace (70B, dgx-h100 TP8, 1 TB DRAM)")
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    out: dict = {}
    t0 = time.perf_counter()
    trace = read_requests(args.trace)
    out["load_first_call_s"] = time.perf_counter() - t0
    wall, cpu, trace = timed_cpu(read_requests, args.trace, repeat=args.repeat)
    out["load"] = {"requests": len(trace), "wall_s": wall, "cpu_s": cpu}
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.jsonl"
        repeated_jsonl(args.trace, big, args.requests)
        read_requests(big)
        wall, cpu, bt = timed_cpu(read_requests, big, repeat=args.repeat)
        out["load_big"] = {"requests": len(bt), "bytes": big.stat().st_size, "wall_s": wall, "cpu_s": cpu}
    for policy in ("lru", "fifo", "opt"):
        hit_curve(trace, policy=policy)
        wall, cpu, curve = timed_cpu(hit_curve, trace, policy=policy, repeat=args.repeat)
        d = curve.to_dict()
        out[f"curve_{policy}"] = {"points": len(d["curve"]), "wall_s": wall, "cpu_s": cpu,
                                  "max_hit_ratio_tokens": d["max_hit_ratio_tokens"]}
        log(policy, f"{wall:.3f} s")
    if args.serve:
        from tierlab.kvstream.server import serve_requests
        from tierlab.system.systemfile import load_system
        from tierlab.traces.model.spec import load_model

        t0, c0 = time.perf_counter(), time.process_time()
        r = serve_requests(trace, load_model("llama-3.1-70b"), system=load_system("dgx-h100"), tp=8,
                           kv_tiers={"dram": "1TB"})
        out["serve_70b_dgx_h100_tp8_dram_1tb"] = {
            "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "steps": r.summary["steps"],
            "surface_replays": r.summary["step_surface"]["replays"], "hit_ratio_total": r.summary["hit_ratio"]["total"],
            "target_s": 60.0}
        log("serve", f"{out['serve_70b_dgx_h100_tp8_dram_1tb']['wall_s']:.1f} s")
    emit("bench_kvstream", out, argv)


if __name__ == "__main__":
    main()
