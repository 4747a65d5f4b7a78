"""docs/requests.md's worked case: Mooncake's conversation trace served by Llama-3.1-70B on dgx-h100 (TP8) with
HBM alone, then with 1 TB of host DRAM, then with DRAM and 30 TB of NVMe; TTFT and cost side by side.

    python benchmarks/requests_worked_case.py [--rate-scale 0.3] [--plot docs/requests-mooncake-70b.png] [--json]

Prints a markdown table (or JSON) and draws the TTFT distributions and the stream's hit curve. The figures are
the model's: the same on every machine."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import tierlab

TRACE = Path(__file__).resolve().parent / "data" / "mooncake" / "conversation_trace.jsonl.xz"
CASES = (("HBM alone", None), ("+ 1 TB DRAM", {"dram": "1TB"}), ("+ 1 TB DRAM + 30 TB NVMe", {"dram": "1TB", "ssd": "30TB"}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate-scale", type=float, default=0.3)
    ap.add_argument("--plot", default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    trace = tierlab.read_requests(TRACE)
    from tierlab.traces.model.spec import load_model

    spec = load_model("llama-3.1-70b")
    system = tierlab.load_system("dgx-h100")
    out = []
    for label, tiers in CASES:
        r = tierlab.serve_requests(trace, spec, system=system, tp=8, kv_tiers=tiers, rate_scale=a.rate_scale)
        out.append((label, r))
    rows = []
    for label, r in out:
        s = r.summary
        rows.append({"case": label, "hit_ratio": s["hit_ratio"], "ttft_p50_s": s["ttft_s"]["p50"],
                     "ttft_p90_s": s["ttft_s"]["p90"], "ttft_p99_s": s["ttft_s"]["p99"], "tpot_p50_s": s["tpot_s"]["p50"],
                     "output_tokens_per_s_per_chip": s["output_tokens_per_s_per_chip"],
                     "usd_per_mtok": s["usd_per_mtok"], "j_per_output_token": s["energy"]["j_per_output_token"],
                     "bytes_moved_per_output_token": s["bytes_moved_per_output_token"]})
    if a.json:
        print(json.dumps(rows, indent=2))
    else:
        print("| case | prompt tokens from a cache (hbm / dram / ssd) | TTFT p50 / p90 / p99 (s) | TPOT p50 (ms) | "
              "out tok/s per chip | $/Mtok | J per output token |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            h = r["hit_ratio"]
            hits = " / ".join(f"{h.get(t, 0.0):.1%}" for t in ("hbm", "dram", "ssd")) + f" = **{h['total']:.1%}**"
            print(f"| {r['case']} | {hits} | {r['ttft_p50_s']:.2f} / {r['ttft_p90_s']:.2f} / {r['ttft_p99_s']:.2f} | "
                  f"{r['tpot_p50_s'] * 1e3:.1f} | {r['output_tokens_per_s_per_chip']:.1f} | {r['usd_per_mtok']:.2f} | "
                  f"{r['j_per_output_token']:.2f} |")
    if a.plot:
        from tierlab.present.requests import draw_runs

        kv = out[0][1].summary["kv_bytes_per_token"]
        draw_runs([(r, label) for label, r in out], tierlab.hit_curve(trace).to_dict(), a.plot,
                  title=f"Llama-3.1-70B, dgx-h100 TP8, Mooncake conversation x{a.rate_scale:g}",
                  marks=[(1e12 / kv, "1 TB DRAM"), (31e12 / kv, "+ 30 TB NVMe")])
        print(f"wrote {a.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
