"""A design-space sweep on Dask's embedded local cluster: GPT-2 on two chips, two batch sizes and two
L2 capacities (8 points), one trace per batch size, a row per point.

    python examples/dask_sweep.py [--workers 2] [-o sweep.parquet]

The same as ``tierlab sweep --model gpt2 --chip h100,a100 --batch 1,8 --context 256 --generate 2
--override 'tier.l2.capacity=25 MiB,50 MiB' -o sweep.parquet``. Without ``-o`` the rows live in a
temporary file; with it, a rerun resumes the file and computes only new points.
"""

from __future__ import annotations

import argparse

import tierlab

GRID = {"model": ["gpt2"], "chip": ["h100", "a100"], "batch": [1, 8], "context": 256, "generate": 2,
        "overrides": {"tier.l2.capacity": ["25 MiB", "50 MiB"]}}


def main(workers: int = 2, output: str | None = None, scheduler: str | None = None):
    s = tierlab.sweep(GRID, scheduler=scheduler, workers=workers, output=output)
    d = s.to_dict()
    print(f"{d['points']} points ({d['computed']} computed, {d['present']} already present, {d['failed']} failed)")
    print(f"{'chip':6} {'batch':>5} {'L2':>7} {'tokens/s':>10} {'J/token':>9}  bound")
    for r in sorted(s.to_arrow().to_pylist(), key=lambda r: (r["chip"], r["batch"], r["tier.l2.capacity"])):
        print(f"{r['chip']:6} {r['batch']:5d} {r['tier.l2.capacity']:>7} {r['tokens_per_s']:10.1f} "
              f"{r['energy_j_per_token']:9.4f}  {r['bound']}")
    return s


if __name__ == "__main__":      # required: the cluster's worker processes import this file again
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("-o", "--output", default=None)
    ap.add_argument("--scheduler", default=None, help="a running Dask scheduler, tcp://HOST:PORT")
    a = ap.parse_args()
    main(a.workers, a.output, a.scheduler)
