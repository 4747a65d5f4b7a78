"""``tierlab info TRACE [--json]``: what a trace holds (rows, parameters, FLOPs, bytes by phase/kind/step)."""

from __future__ import annotations

import json

import click

from tierlab.cli.options import json_option
from tierlab.present.format import format_number, numeric_align, table


@click.command("info")
@click.argument("trace", type=click.Path())
@click.option("--steps", "max_steps", type=int, default=20, show_default=True,
              help="Decode steps shown in the per-step table (all in --json).")
@json_option
def command(trace, max_steps, as_json):
    """Summarise TRACE: tables, parameters, FLOPs, bytes read/written by phase and tensor kind, per step."""
    from tierlab.traces.format.reader import open_trace
    from tierlab.traces.format.summary import summarize

    s = summarize(open_trace(trace))
    if as_json:
        click.echo(json.dumps(s, indent=1))
        return
    run = s["run"] or {}
    click.echo(f"trace {s['path']}  model {s['model'] or '(synthetic)'}")
    if run:
        keys = ("prompt", "context", "generate", "batch", "weights", "kv", "activations", "router", "attention")
        if run.get("turns"):  # a conversation: its turns replace prompt/generate
            keys = ("context", "batch", "weights", "kv", "activations", "router", "attention")
        keys += ("tp", "pp", "ep", "dp", "pp_layers", "pp_microbatches")   # present when sharded
        click.echo("run   " + "  ".join(f"{k}={run[k]}" for k in keys if k in run))
        if run.get("turns"):
            turns = ",".join(f"{p}:{a}" for p, a in run["turns"])
            click.echo(f"conversation  {len(run['turns'])} turns (prompt:answer) {turns}  "
                       f"kv_reuse={run.get('kv_reuse')}  kv_offload={run.get('kv_offload')}")
    click.echo("")
    rows = [[k, v] for k, v in s["tables"].items()]
    click.echo(table(["table", "rows"], rows, align=numeric_align(rows, 2), cell=format_number))
    click.echo("")
    click.echo(table(["quantity", "value"], [
        ["params", s["params"]], ["weight bytes", s["weight_bytes"]], ["kv-cache bytes", s["kv_bytes"]],
        ["decode steps", s["decode_steps"]]] + [[f"flops ({k})", v] for k, v in s["flops"].items()],
        align="<>", cell=format_number))
    rows = []
    for phase, kinds in s["bytes"].items():
        for kind, rw in kinds.items():
            rows.append([phase, kind, rw["read"], rw["write"]])
    click.echo("")
    click.echo(table(["phase", "kind", "bytes read", "bytes written"], rows, align="<<>>", cell=format_number))
    if len(s.get("devices") or ()) > 1:
        kinds = sorted({k for d in s["devices"] for k in d["tensor_bytes"]})
        headers = ["device", "ops", "collective ops", "flops"] + [f"{k} bytes" for k in kinds]
        rows = [[d["device"], d["ops"], d["collective_ops"], d["flops"]] + [d["tensor_bytes"].get(k, 0) for k in kinds]
                for d in s["devices"]]
        click.echo("")
        click.echo(table(headers, rows, align=numeric_align(rows, len(headers)), cell=format_number))
        rows = [[k, v["count"], v["bytes"]] for k, v in sorted(s["collectives"].items())]
        if rows:
            click.echo("")
            click.echo(table(["collective", "count", "bytes"], rows, align="<>>", cell=format_number))
    if s["steps"]:
        kinds = sorted({k for st in s["steps"] for k in st["bytes"]})
        headers = ["step", "ops", "flops"] + [f"{k} read" for k in kinds] + [f"{k} written" for k in kinds]
        rows = [[st["step"], st["ops"], st["flops"]] + [st["bytes"][k]["read"] for k in kinds] +
                [st["bytes"][k]["write"] for k in kinds] for st in s["steps"][:max_steps]]
        click.echo("")
        click.echo(table(headers, rows, align=numeric_align(rows, len(headers)), cell=format_number))
        if len(s["steps"]) > max_steps:
            click.echo(f"... {len(s['steps']) - max_steps} more steps (--steps N or --json)")
