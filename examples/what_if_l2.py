"""What if the H100's L2 were larger? One trace of GPT-2 decode, replayed on the h100 preset with its
L2 capacity overridden (as ``tierlab sweep --override tier.l2.capacity=...`` does).

    python examples/what_if_l2.py [--model gpt2] [--sizes "50 MiB,200 MiB,400 MiB"] [--context 256] [--generate 4]

A decode step streams every weight once, so an L2 smaller than the weights finds almost none of
them again; once the weights (GPT-2 in bf16: 249 MB) fit, the steps after the first find them in
the L2 and the bytes over the L2-HBM link fall to the KV and activations.
"""

from __future__ import annotations

import argparse

import tierlab


def main(model: str = "gpt2", sizes: tuple[str, ...] = ("50 MiB", "200 MiB", "400 MiB"), context: int = 256,
         generate: int = 4) -> list[dict]:
    trace = tierlab.trace(model, context=context, generate=generate)     # traced once, replayed per size
    out = []
    print(f"{model}, context {context}, {generate} decode steps on h100 with another L2 capacity:")
    print(f"{'L2':>9} {'L2 hit rate':>11} {'L2-HBM bytes/token':>19} {'tokens/s':>10}  bound")
    for size in sizes:
        chip = tierlab.load_chip("h100", {"tier.l2.capacity": size})
        d = tierlab.replay(trace, chip=chip).to_dict()
        l2 = next(t for t in d["tiers"] if t["name"] == "l2")
        pt = d["per_token"]
        row = {"l2": size, "l2_hit_rate": l2["hit_rate"], "l2_hbm_bytes_per_token": pt["bytes_by_link"]["l2-hbm"],
               "tokens_per_s": pt["tokens_per_s"], "bound": pt["bound"]}
        out.append(row)
        print(f"{size:>9} {row['l2_hit_rate']:11.1%} {row['l2_hbm_bytes_per_token'] / 1e6:16.1f} MB "
              f"{row['tokens_per_s']:10.1f}  {row['bound']}")
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--sizes", default="50 MiB,200 MiB,400 MiB")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--generate", type=int, default=4)
    a = ap.parse_args()
    main(a.model, tuple(s.strip() for s in a.sizes.split(",")), a.context, a.generate)
