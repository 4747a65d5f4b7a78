"""``tierlab requests REQUESTS --model M (--chip C | --system S [--tp/--pp/--ep/--dp N]) [--kv-tier NAME=CAP ...]``:
a request stream served through a tiered KV cache (docs/requests.md). Parse, call
:func:`tierlab.kvstream.server.serve_requests`, print."""

from __future__ import annotations

import json

import click

from tierlab.cli.options import force_option, json_option

# CLI flag of each library parameter a UsageError may name (the one edge where the two meet)
FLAGS = {"kv_tiers": "--kv-tier", "router": "--router", "dp": "--dp", "tp": "--tp", "rate_scale": "--rate-scale",
         "max_batch_tokens": "--max-batch-tokens", "block_tokens": "--block-tokens", "slo_ttft_s": "--slo-ttft",
         "slo_tpot_s": "--slo-tpot", "write_policy": "--write-policy", "chip": "--chip", "trace": "REQUESTS",
         "prefill_instances": "--prefill-instances", "decode_instances": "--decode-instances"}


@click.command("requests")
@click.argument("requests_path", metavar="REQUESTS", type=click.Path())
@click.option("--model", required=True, help="Model preset or config.json.")
@click.option("--chip", default=None, help="Chip preset or .toml file (one chip serves the model).")
@click.option("--system", default=None, help="System preset or .toml file (with --tp/--pp/--ep/--dp).")
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel ranks per replica.")
@click.option("--pp", type=int, default=1, show_default=True, help="Pipeline stages per replica.")
@click.option("--ep", type=int, default=1, show_default=True, help="Expert-parallel ranks per replica.")
@click.option("--dp", type=int, default=1, show_default=True, help="Replicas, each with its own HBM cache.")
@click.option("--prefill-instances", type=int, default=None,
              help="Disaggregated: replicas that prefill (with their own prefix caches); needs --decode-instances.")
@click.option("--decode-instances", type=int, default=None,
              help="Disaggregated: replicas that decode; each request's KV moves to one over the system's links.")
@click.option("--router", default="round-robin", show_default=True,
              help="Which replica a request goes to: round-robin, least-loaded, prefix or ttft (Mooncake's shortest "
                   "estimated queue + prefill; prefix and ttft need --dp).")
@click.option("--kv-tier", "kv_tier", multiple=True, metavar="NAME=CAPACITY",
              help="A KV tier below HBM: dram, ssd or remote, e.g. dram=1TB (repeatable; overrides the file's size).")
@click.option("--write-policy", default="write-back", show_default=True,
              help="write-back (an evicted block moves down) or write-through (written down when made).")
@click.option("--no-overlap", is_flag=True, help="Load a cached prefix before the prefill, not layer by layer with it.")
@click.option("--block-tokens", type=int, default=None, help="Tokens per KV block (default: the trace's, 512 "
              "for Mooncake files).")
@click.option("--rate-scale", type=float, default=1.0, show_default=True, help="Arrival rate multiplier.")
@click.option("--head", type=click.IntRange(min=1), default=None, help="Serve only the first N requests.")
@click.option("--weights", default="bf16", show_default=True, help="Weights dtype.")
@click.option("--kv", default="bf16", show_default=True, help="KV-cache dtype.")
@click.option("--activations", default="bf16", show_default=True, help="Activations dtype.")
@click.option("--max-batch-tokens", type=int, default=8192, show_default=True, help="Tokens a step may process.")
@click.option("--slo-ttft", type=float, default=None, help="Time to first token limit, ms.")
@click.option("--slo-tpot", type=float, default=None, help="Time per output token limit, ms.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Processes replaying the step surface.")
@click.option("--plot", "plot_path", type=click.Path(), default=None,
              help="Draw the TTFT distribution with and without the tiers, and the hit curve (PNG, SVG, PDF).")
@click.option("--html", "html_path", type=click.Path(), default=None, metavar="FILE.html",
              help="Write a self-contained HTML report: the configuration, the summary, the TTFT and TPOT "
                   "distributions (with and without the tiers) and the hit curve (needs the plot extra).")
@click.option("-o", "--parquet", "parquet_path", type=click.Path(), default=None,
              help="Write one row per request to this Parquet file.")
@force_option
@json_option
def command(requests_path, model, chip, system, tp, pp, ep, dp, prefill_instances, decode_instances, router, kv_tier, write_policy, no_overlap,
            block_tokens, rate_scale, head, weights, kv, activations, max_batch_tokens, slo_ttft, slo_tpot, workers,
            plot_path, html_path, parquet_path, force, as_json):
    """Serve the request stream REQUESTS (Mooncake JSONL, Azure CSV, CSV or Parquet; gzip/xz) open loop:
    continuous batching admits each request within the KV left in HBM, finds its cached prefix in the
    highest tier holding it and loads it, or recomputes it where that is faster."""
    from tierlab.common.atomic import check_output
    from tierlab.common.errors import UsageError
    from tierlab.kvstream.reader import read_requests
    from tierlab.kvstream.server import serve_requests
    from tierlab.kvstream.tiers import parse_kv_tier
    from tierlab.present import requests as view
    from tierlab.traces.model.spec import load_model

    if bool(chip) == bool(system):
        raise UsageError("give exactly one of --chip and --system", field="--chip")
    if parquet_path and not str(parquet_path).endswith(".parquet"):
        raise UsageError(f"expected a .parquet file, got {parquet_path!r}", field="-o")
    for p in (plot_path, html_path, parquet_path):
        if p:
            check_output(p, force=force)
    if plot_path or html_path:       # matplotlib missing fails before the work
        from tierlab.present.plots import pyplot

        try:
            pyplot()
        except UsageError:
            if not html_path:
                raise
            raise UsageError("the report's figures need matplotlib: pip install 'tierlab[plot]'",
                             field="--html") from None
    tiers = {}
    for text in kv_tier:
        try:
            name, cap = parse_kv_tier(text)
        except UsageError as err:
            raise UsageError(err.message, field="--kv-tier") from None
        tiers[name] = cap
    trace = read_requests(requests_path, block_tokens=block_tokens)
    if head:
        trace = trace.head(head)
    target = {}
    if chip:
        from tierlab.chip.chipfile import load_chip

        target["chip"] = load_chip(chip)
    else:
        from tierlab.api.settings import Collectives, Execution
        from tierlab.api.targets import load_target_system

        target["system"] = load_target_system(system, Collectives(), Execution())
    spec = load_model(model)
    kw = dict(tp=tp, pp=pp, ep=ep, dp=dp, router=router, write_policy=write_policy, overlap_load=not no_overlap,
              rate_scale=rate_scale, max_batch_tokens=max_batch_tokens, weights=weights, kv=kv,
              activations=activations, slo_ttft_s=None if slo_ttft is None else slo_ttft / 1e3,
              slo_tpot_s=None if slo_tpot is None else slo_tpot / 1e3, workers=workers,
              prefill_instances=prefill_instances, decode_instances=decode_instances)
    try:
        res = serve_requests(trace, spec, **target, kv_tiers=tiers or None, **kw)
        base = None
        if (plot_path or html_path) and tiers:       # the same stream with HBM alone, for the pictures
            base = serve_requests(trace, spec, **target, kv_tiers=None, **kw)
    except UsageError as err:
        if err.field == "trace":          # a request the model cannot serve: name the file it came from
            raise UsageError(err.message, file=requests_path) from None
        if err.field in FLAGS:
            raise UsageError(err.message, field=FLAGS[err.field]) from None
        raise
    if parquet_path:
        res.to_parquet(parquet_path)
        click.echo(f"wrote {parquet_path}", err=True)
    if plot_path or html_path:
        from tierlab.kvstream.hitcurve import hit_curve

        curve = hit_curve(trace).to_dict() if trace.has_hash_ids else None
        if plot_path:
            view.draw(res, base, curve, plot_path, force=force)
            click.echo(f"wrote {plot_path}", err=True)
        if html_path:
            view.write_html_report(res, base, curve, trace, html_path, force=force)
            click.echo(f"wrote {html_path}", err=True)
    click.echo(json.dumps(res.summary, indent=2) if as_json else view.format_text(res.summary))
