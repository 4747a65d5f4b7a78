"""A serving curve: continuous batching of Qwen2-0.5B requests (512 prompt tokens, 128 generated) on an
H100-like and an A100-like chip, output tokens/s against tokens/s each user sees, as concurrency grows.

    python examples/serving_curve.py [--model qwen2-0.5b] [--chips h100,a100] [--concurrency 1,8,64,256]

The same as ``tierlab throughput qwen2-0.5b --chips h100,a100 --input 512 --output 128 --concurrency
1,8,64,256`` (``docs/serving.md``: representative steps of a vLLM-style scheduler replayed exactly,
the calibrated latency); the rows are ``tierlab throughput -o FILE.parquet``'s.
"""

from __future__ import annotations

import argparse

import tierlab


def main(model: str = "qwen2-0.5b", chips: tuple[str, ...] = ("h100", "a100"), concurrency: tuple[int, ...] = (1, 8, 64, 256),
         input_tokens: int = 512, output_tokens: int = 128):
    c = tierlab.throughput(model, chips=list(chips), input=input_tokens, output=output_tokens,
                            concurrency=list(concurrency))
    print(f"{model}, {input_tokens} prompt + {output_tokens} output tokens per request:")
    print(f"{'chip':6} {'requests':>8} {'output tok/s':>12} {'tok/s per user':>14} {'TTFT':>9} {'TPOT':>9}")
    for r in c.to_arrow().to_pylist():
        print(f"{r['chip']:6} {r['concurrency']:8d} {r['output_tokens_per_s']:12.1f} {r['tokens_per_s_per_user']:14.1f} "
              f"{r['ttft_s'] * 1e3:6.2f} ms {r['tpot_s'] * 1e3:6.3f} ms")
    return c


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2-0.5b")
    ap.add_argument("--chips", default="h100,a100")
    ap.add_argument("--concurrency", default="1,8,64,256")
    ap.add_argument("--input", type=int, default=512)
    ap.add_argument("--output", type=int, default=128)
    a = ap.parse_args()
    main(a.model, tuple(a.chips.split(",")), tuple(int(x) for x in a.concurrency.split(",")), a.input, a.output)
