"""``tierlab trace MODEL -o DIR``: lower a model and a run into a trace directory.

The run options are exposed as one decorator, :data:`run_options`, and :func:`run_config_from_options`
turns their values into a :class:`tierlab.traces.workload.run.RunConfig`, so other commands (``tierlab run``) reuse them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import click

from tierlab.cli.options import force_option, json_option
from tierlab.cli.progress import fraction_bar
from tierlab.traces.model.dtypes import ACTIVATION_DTYPES, KV_DTYPES, WEIGHT_DTYPES
from tierlab.common.errors import UsageError
from tierlab.traces.format.schema import DEFAULT_ALIGNMENT

RUN_OPTION_NAMES = ("prompt", "context", "generate", "batch", "weights", "kv", "activations", "router", "seed",
                    "attention", "tile_m", "tile_n", "attn_tile", "align", "quant_group", "turns", "turn_prompt",
                    "turn_answer", "turn_lengths", "kv_reuse", "kv_offload", "tp", "pp", "pp_layers", "pp_microbatches",
                    "ep", "dp", "collective_buffers")

_SIZE = re.compile(r"^\s*(\d+)\s*(|b|kib|k|mib|m|gib|g)\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}


def parse_size(text: str, field: str) -> int:
    """``65536``, ``64KiB``, ``1MiB`` -> bytes (binary units)."""
    m = _SIZE.match(str(text))
    if not m:
        raise UsageError(f"expected a size in bytes such as 65536 or 64KiB, got {text!r}", field=field)
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


class _LenientInt(click.ParamType):
    """An integer, or the raw text unchanged so that RunConfig reports it in tierlab's one-line form
    (click's own BadParameter would print a multi-line usage message)."""

    name = "integer"

    def convert(self, value, param, ctx):
        try:
            return int(value)
        except (TypeError, ValueError):
            return value


INT = _LenientInt()


def run_options(f):
    """Decorator adding every run option of ``tierlab trace`` to a click command."""
    opts = [
        click.option("--prompt", type=INT, default=0, show_default=True, help="Prompt tokens per sequence, prefilled (traced)."),
        click.option("--context", type=INT, default=0, show_default=True,
                     help="Tokens already in the KV cache per sequence (not traced)."),
        click.option("--generate", type=INT, default=0, show_default=True, help="Decode steps (tokens generated per sequence)."),
        click.option("--batch", type=INT, default=1, show_default=True, help="Sequences processed together."),
        click.option("--weights", default=None,
                     help=f"Weights dtype: {', '.join(WEIGHT_DTYPES)} (default bf16; native for a model released "
                          "in MXFP4, gpt-oss)."),
        click.option("--kv", default="bf16", show_default=True, help=f"KV-cache dtype: {', '.join(KV_DTYPES)}."),
        click.option("--activations", default="bf16", show_default=True,
                     help=f"Activations dtype: {', '.join(ACTIVATION_DTYPES)}."),
        click.option("--router", default="uniform", show_default=True,
                     help="MoE routing: uniform, zipf:S, or table:PATH.arrow (columns step, layer, token, expert)."),
        click.option("--seed", type=INT, default=0, show_default=True, help="Seed of routing and token ids."),
        click.option("--attention", default="flash", show_default=True, help="Attention kernel: flash or naive."),
        click.option("--tile-m", type=INT, default=256, show_default=True, help="Prefill GEMM tile: tokens."),
        click.option("--tile-n", type=INT, default=256, show_default=True, help="Prefill GEMM tile: output features."),
        click.option("--attn-tile", type=INT, default=128, show_default=True, help="Flash attention: queries per tile."),
        click.option("--align", default=str(DEFAULT_ALIGNMENT), show_default=True,
                     help="Tensor address alignment in bytes (power of two; e.g. 64KiB, 2MiB)."),
        click.option("--quant-group", type=INT, default=128, show_default=True,
                     help="Group size of int8/int4 weight scales (elements along the input dimension)."),
        click.option("--turns", type=INT, default=None,
                     help="A conversation of this many turns (with --turn-prompt/--turn-answer), instead of "
                          "--prompt/--generate."),
        click.option("--turn-prompt", type=INT, default=None, help="Conversation: new prompt tokens per turn."),
        click.option("--turn-answer", type=INT, default=None, help="Conversation: answer tokens (decode steps) per turn."),
        click.option("--turn-lengths", default=None,
                     help="Conversation: PROMPT:ANSWER per turn, e.g. 512:128,256:128 (instead of --turns N ...)."),
        click.option("--kv-reuse/--no-kv-reuse", default=True, show_default=True,
                     help="Conversation: keep earlier turns' KV (else each turn re-prefills the whole history)."),
        click.option("--kv-offload", is_flag=True,
                     help="Conversation with reuse: copy the KV to kind 'kv_offload' tensors after each turn and "
                          "back before the next (a placement rule for kind kv_offload decides where it lives)."),
        click.option("--tp", type=INT, default=1, show_default=True,
                     help="Tensor-parallel ranks per pipeline stage (heads, MLP columns and vocabulary split)."),
        click.option("--pp", type=INT, default=1, show_default=True, help="Pipeline stages (layers split)."),
        click.option("--pp-layers", default=None,
                     help="Layers per stage, e.g. 6,18,18,18 (default: as even as possible, the rest on the last stages)."),
        click.option("--pp-microbatches", type=INT, default=1, show_default=True,
                     help="Microbatches each segment is split into (must divide --batch)."),
        click.option("--ep", type=INT, default=1, show_default=True,
                     help="Expert-parallel ranks (MoE models): experts spread over the tp x dp devices of a stage."),
        click.option("--dp", type=INT, default=1, show_default=True,
                     help="Data-parallel replicas, each serving --batch sequences."),
        click.option("--collective-buffers", default="in_place", show_default=True,
                     help="Collective operands: in_place, or staged (copied into and out of a contiguous buffer)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def run_config_from_options(options: dict, spec=None):
    """Build a RunConfig from the values of :data:`run_options` (extra keys are ignored); without
    ``--weights``, the model's default (:func:`tierlab.traces.model.weight_formats.default_weights`)."""
    from tierlab.traces.workload.run import RunConfig, conversation
    from tierlab.traces.model.weight_formats import default_weights

    weights = options.get("weights") or (default_weights(spec) if spec is not None else "bf16")

    turns = conversation(options.get("turns"), options.get("turn_prompt"), options.get("turn_answer"),
                         options.get("turn_lengths"))
    return RunConfig(turns=turns, kv_reuse=options.get("kv_reuse", True), kv_offload=options.get("kv_offload", False),
                     prompt=options["prompt"], context=options["context"], generate=options["generate"],
                     batch=options["batch"], weights=weights, kv=options["kv"],
                     activations=options["activations"], router=options["router"], seed=options["seed"],
                     attention=options["attention"], tile_m=options["tile_m"], tile_n=options["tile_n"],
                     attn_tile=options["attn_tile"], alignment=parse_size(options["align"], "align"),
                     quant_group=options["quant_group"], tp=options.get("tp", 1), pp=options.get("pp", 1),
                     pp_layers=options.get("pp_layers"), pp_microbatches=options.get("pp_microbatches", 1),
                     ep=options.get("ep", 1), dp=options.get("dp", 1),
                     collective_buffers=options.get("collective_buffers", "in_place"))


def trace_unmapped(manifest: dict) -> str:
    """One line naming the operators a capture ran that no tierlab op maps, and the weights no op reads, or ''."""
    cap = manifest.get("capture") or {}
    ops, unread = cap.get("unmapped_ops") or [], cap.get("unread_weights") or []
    parts = []
    if ops:
        named = ", ".join(f"{o['op']} in {o['module']} x{o['count']}" for o in ops[:8])
        more = f" and {len(ops) - 8} more" if len(ops) > 8 else ""
        parts.append(f"{len(ops)} operator(s) ran that tierlab does not map (their bytes are not in the trace): "
                     f"{named}{more}")
    if unread:
        more = f" and {len(unread) - 4} more" if len(unread) > 4 else ""
        parts.append(f"{len(unread)} weight(s) no op reads: {', '.join(unread[:4])}{more}")
    return "capture: " + "; ".join(parts) if parts else ""


@dataclass(frozen=True)
class TracePlan:
    """How MODEL's trace is made: by its hand lowering (``spec``), or by capture (``spec`` None: ``--capture``,
    or a family with no hand lowering, ``why`` saying which) -- ``tierlab trace``, ``run`` and ``compare`` alike."""

    model: str
    spec: object
    run: object
    why: str

    @property
    def captured(self) -> bool:
        return self.spec is None

    @property
    def name(self) -> str:
        if self.spec is not None:
            return self.spec.name
        from tierlab.traces.capture import read_config

        return read_config(self.model)[1]


def plan_trace(model: str, options: dict, *, capture: bool = False) -> TracePlan:
    """Read MODEL and the run options; a family with no hand lowering goes through Transformers
    (docs/capture.md), or, without the capture extra, fails in one line naming it."""
    from tierlab.traces.model.families import UnknownFamily

    why, spec = ("--capture" if capture else ""), None
    if not capture:
        from tierlab.traces.model.spec import load_model

        try:
            spec = load_model(model)
        except UnknownFamily as err:
            from tierlab.traces.capture import without_hand_lowering

            why = without_hand_lowering(err)
    return TracePlan(model, spec, run_config_from_options(options, spec), why)


def write_trace(plan: TracePlan, output, *, force: bool = False, record_routing: bool = False,
                progress: bool = False):
    """Write ``plan``'s trace to ``output`` (a directory; refused if it exists, unless ``force``) and return its path."""
    from tierlab.common.atomic import check_output

    if plan.captured:
        from tierlab.traces.capture import capture_trace, read_config

        if record_routing:
            raise UsageError("not available with --capture (its routing is tierlab's --router, replayable as is)",
                             field="--record-routing")
        config, name, file = read_config(plan.model)
        check_output(output, force=force, directory=True)
        path = capture_trace(config, plan.run, output, name=name, file=file, force=force, why=plan.why)
        from tierlab.traces.format.reader import open_trace

        unmapped = trace_unmapped(open_trace(path).manifest)
        if unmapped:
            click.echo(f"tierlab: warning: {unmapped}", err=True)
        return path
    from tierlab.traces.lowering.generate import generate_trace

    check_output(output, force=force, directory=True)
    if not progress:
        return generate_trace(plan.spec, plan.run, output, force=force, record_routing=record_routing)
    with fraction_bar(unit="seg", desc="trace") as bar:
        return generate_trace(plan.spec, plan.run, output, force=force, progress=bar, record_routing=record_routing)


capture_option = click.option(
    "--capture", is_flag=True,
    help="Build MODEL with Hugging Face Transformers on PyTorch's meta device (no weights), record the run's "
         "operators and lower them (the capture extra; see docs/capture.md). A family with no hand lowering "
         "takes this path by itself.")


@click.command("trace")
@click.argument("model")
@click.option("-o", "--output", required=True, type=click.Path(), help="Trace directory to write (e.g. llama.trace).")
@run_options
@click.option("--record-routing", is_flag=True,
              help="MoE: also write every token's experts to routing.arrow in the trace (replayable with "
                   "--router table:DIR/routing.arrow).")
@capture_option
@force_option
@json_option
def command(model, output, force, as_json, record_routing, capture, **options):
    """Lower MODEL (a preset name, a config.json, or a directory holding one) into a trace."""
    plan = plan_trace(model, options, capture=capture)
    path = write_trace(plan, output, force=force, record_routing=record_routing, progress=True)
    from tierlab.traces.format.reader import open_trace

    trace = open_trace(path)
    info = {"path": str(path), "model": plan.name, "tables": trace.manifest["tables"],
            "bytes_on_disk": sum(f.stat().st_size for f in path.iterdir()),
            "lowering": trace.manifest.get("lowering", {"path": "hand"})}
    if plan.captured:
        info["capture"] = trace.manifest.get("capture")
    from tierlab.api.handover import hand_over

    if hand_over(info, trace=trace):           # the Python API (tierlab.api) takes it instead
        return
    if as_json:
        click.echo(json.dumps(info, indent=1))
    else:
        t = info["tables"]
        click.echo(f"wrote {path}: {t['tensors']} tensors, {t['ops']} ops, {t['accesses']} accesses, "
                   f"{info['bytes_on_disk'] / 1e6:.1f} MB")
