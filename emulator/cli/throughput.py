"""``tierlab throughput MODEL (--chip C | --system S | --chips a,b | --systems a,b) --input ISL --output OSL
[--concurrency 1,2,4|auto] [...]``: the serving curve of continuous batching (docs/serving.md)."""

from __future__ import annotations

import json

import click

from tierlab.common.errors import UsageError
from tierlab.cli.options import force_option, json_option


def _names(text):
    return [x.strip() for x in str(text).split(",") if x.strip()] if text else []


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
@click.option("--input", "isl", type=int, required=True, help="Prompt tokens of each request (ISL).")
@click.option("--output", "osl", type=int, required=True, help="Output tokens of each request (OSL).")
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
@click.option("--plot", "plot_path", type=click.Path(), default=None, help="Draw the curve (PNG, SVG, PDF).")
@click.option("--html", "html_path", type=click.Path(), default=None, help="Write one self-contained HTML page.")
@click.option("-o", "--parquet", "parquet_path", type=click.Path(), default=None,
              help="Write the curve's rows to this Parquet file.")
@force_option
@json_option
def command(model, chip, system, chips, systems, tp, pp, ep, dp, isl, osl, concurrency, weights, kv, activations,
            max_batch_tokens, memory_utilisation, slo_tpot, slo_ttft, collective_algo, workers, plot_path, html_path,
            parquet_path, force, as_json):
    """The serving curve of MODEL: output tokens/s against tokens/s per user, from continuous batching
    whose representative steps are replayed exactly."""
    from tierlab.common.atomic import check_output
    from tierlab.serving.capacity import UTILISATION
    from tierlab.serving.throughput import MAX_BATCH_TOKENS, throughput
    from tierlab.traces.model.spec import load_model

    given = [n for n, v in (("--chip", chip), ("--system", system), ("--chips", chips), ("--systems", systems)) if v]
    if len(given) != 1:
        raise UsageError("give exactly one of --chip, --system, --chips and --systems" if given else
                         "give --chip NAME or --system NAME", field="--chip")
    if parquet_path and not str(parquet_path).endswith(".parquet"):
        raise UsageError(f"expected a .parquet file, got {parquet_path!r}", field="-o")
    for p in (plot_path, html_path, parquet_path):
        if p:
            check_output(p, force=force)
    if plot_path or html_path:
        from tierlab.present.plots import pyplot

        pyplot()       # matplotlib missing fails before the work
    targets = []
    if chip or chips:
        from tierlab.chip.chipfile import load_chip

        targets = [dict(chip=load_chip(n)) for n in (_names(chips) or [chip])]
    else:
        from tierlab.cli.on_system import system_of

        targets = [dict(system=system_of({"system": n, "collective_algo": collective_algo}))
                   for n in (_names(systems) or [system])]
    if not targets:
        raise UsageError("no chip or system named", field="--chips" if chips else "--systems")
    spec = load_model(model)
    kw = dict(isl=isl, osl=osl, concurrency=concurrency, weights=weights, kv=kv, activations=activations,
              max_batch_tokens=MAX_BATCH_TOKENS if max_batch_tokens is None else max_batch_tokens,
              tp=tp, pp=pp, ep=ep, dp=dp, slo_tpot_s=None if slo_tpot is None else slo_tpot / 1e3,
              slo_ttft_s=None if slo_ttft is None else slo_ttft / 1e3,
              utilisation=UTILISATION if memory_utilisation is None else memory_utilisation,
              collective_algo=collective_algo, workers=workers)
    curves = [throughput(spec, **t, **kw) for t in targets]
    from tierlab.present import serving as view

    from tierlab.cli.views import wrote

    if plot_path:
        view.draw(curves, plot_path)
        wrote(plot_path)
    if html_path:
        view.write_html(curves, html_path, force=force)
        wrote(html_path)
    if parquet_path:
        view.write_parquet(curves, parquet_path, force=force)
        wrote(parquet_path)
    from tierlab.api.handover import hand_over

    if hand_over(curves[0] if len(curves) == 1 else {"curves": curves}, curves=curves):   # the Python API takes it
        return
    if as_json:
        click.echo(json.dumps(curves[0] if len(curves) == 1 else {"curves": curves}, indent=2))
    else:
        click.echo("\n\n".join(view.format_text(d) for d in curves))
