"""Request traces and the prefix hit curve: load times and the one-pass LRU curve's time.

Loads a Mooncake trace (the published ``conversation_trace.jsonl``, 12,031 requests) and a 10^5-
request JSONL made from it (the trace repeated with timestamps shifted by an hour and ids shifted
past the previous copy's), then times the hit curve (24 default capacities) under LRU (one pass),
FIFO and OPT (one replay per capacity). Times are the best of ``--repeat`` runs after one warm-up
(the first run also loads Numba's cached code).

    python benchmarks/bench_tierlab.kvstream.py --trace conversation_trace.jsonl [--requests 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _common import emit, log, timed_cpu

from tierlab.kvstream.hitcurve import hit_curve
from tierlab.kvstream.reader import read_requests


def repeated_jsonl(src: Path, dest: Path, n: int) -> None:
    """``n`` requests of ``src`` repeated, each copy an hour later with ids past the last copy's."""
    recs = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    span = 1 + max(h for r in recs for h in r["hash_ids"])
    with open(dest, "w") as f:
        for i in range(n):
            r, k = recs[i % len(recs)], i // len(recs)
            f.write(json.dumps({"timestamp": r["timestamp"] + k * 3_600_000, "input_length": r["input_length"],
                                "output_length": r["output_length"],
                                "hash_ids": [h + k * span for h in r["hash_ids"]]}) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True, type=Path)
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
    emit("bench_kvstream", out, argv)


if __name__ == "__main__":
    main()
