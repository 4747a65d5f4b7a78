"""``tierlab throughput MODEL (--chip C | --system S | --chips a,b | --systems a,b) --input ISL --output OSL
[--concurrency 1,2,4|auto] [...]``: the serving curve of continuous batching (:func:`tierlab.throughput`;
docs/serving.md)."""

from __future__ import annotations

import click

from tierlab.cli.params import force_option, json_option


@click.command("throughput")
@click.argument("model")
@click.option("--chip", default=None, help="Chip preset or .toml file (one chip serves the model).")
@click.option("--system", default=None, help="System preset or .toml file (with --tp/--pp/--ep/--dp).")
@click.option("--chips", default=None, help="Chips to overlay, separated by commas.")
@click.option("--systems", default=None, help="Systems to overlay, separated by commas.")
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel ranks.")
@click.option("--pp", type=int, default=1, show_default=True, help="Pipeline stages.")
@click.option("--ep", type=int, default=1, show_default=True, help="Expert-parallel ranks.")
@click.option("--dp", type=int, default=1, show_default=True, help="Data-parallel replicas (share the concurrency).")
@click.option("--input", "input", type=int, required=True, help="Prompt tokens of each request (ISL).")
@click.option("--output", "output", type=int, required=True, help="Output tokens of each request (OSL).")
@click.option("--concurrency", default="auto", show_default=True,
              help="Requests in flight, e.g. 1,8,64, or auto (powers of two up to the KV limit, and the limit).")
@click.option("--weights", default="bf16", show_default=True, help="Weights dtype.")
@click.option("--kv", default="bf16", show_default=True, help="KV-cache dtype.")
@click.option("--activations", default="bf16", show_default=True,
              help="Activations dtype (fp8: FP8 GEMMs, as TensorRT-LLM's FP8 recipe).")
@click.option("--max-batch-tokens", type=int, default=None,
              help="Tokens a step may process (chunked prefill's budget). [default: 8192]")
@click.option("--memory-utilisation", type=float, default=None,
              help="Share of the memory tier the engine takes (vLLM's gpu_memory_utilization). [default: 0.9]")
@click.option("--slo-tpot", type=float, default=None, help="Time per output token limit, ms.")
@click.option("--slo-ttft", type=float, default=None, help="Time to first token limit, ms.")
@click.option("--collective-algo", default="auto", show_default=True, help="Collective algorithm (systems).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes replaying the representative steps (default 1; identical figures with more).")
@click.option("--plot", type=click.Path(), default=None, help="Draw the curve (PNG, SVG, PDF).")
@click.option("--html", type=click.Path(), default=None, help="Write one self-contained HTML page.")
@click.option("-o", "--parquet", type=click.Path(), default=None, help="Write the curve's rows to this Parquet file.")
@force_option
@json_option
def command(model, as_json, **kw):
    """The serving curve of MODEL: output tokens/s against tokens/s per user, from continuous batching
    whose representative steps are replayed exactly."""
    from tierlab.api.serving_curve import throughput
    from tierlab.cli.views import show

    show(throughput(model, **kw), as_json)
