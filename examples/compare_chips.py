"""Two chips, one trace: GPT-2 decode on an H100-like GPU and a SambaNova SN40L-like socket.

    python examples/compare_chips.py [--model gpt2] [--chips h100,sn40l] [--context 512] [--generate 4]

The same as ``tierlab compare gpt2 --chips h100,sn40l --context 512 --generate 4``; the rows are
``tierlab compare --csv``'s, one per chip.
"""

from __future__ import annotations

import argparse

import tierlab


def main(model: str = "gpt2", chips: tuple[str, ...] = ("h100", "sn40l"), context: int = 512, generate: int = 4):
    c = tierlab.compare(model, chips=list(chips), context=context, generate=generate)
    print(f"{model}, context {context}, {generate} decode steps, per decode token:")
    print(f"{'chip':8} {'tokens/s':>10} {'latency':>10} {'energy':>9} {'tokens/J':>9}  bound")
    for r in c.to_arrow().to_pylist():
        if not r["fits"]:
            print(f"{r['chip']:8} does not fit: {r['reason']}")
            continue
        print(f"{r['chip']:8} {r['tokens/s']:10.1f} {r['latency/token'] * 1e6:8.1f} us {r['energy/token total'] * 1e3:6.2f} mJ"
              f" {r['tokens/J']:9.1f}  {r['bound']}")
    return c


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--chips", default="h100,sn40l")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--generate", type=int, default=4)
    a = ap.parse_args()
    main(a.model, tuple(a.chips.split(",")), a.context, a.generate)
