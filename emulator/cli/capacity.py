"""``tierlab capacity MODEL (--chip NAME | --memory SIZE)``: how long a context (or how large a batch) fits."""

from __future__ import annotations

import json

import click

from tierlab.cli.options import json_option
from tierlab.present.capacity import format_plan
from tierlab.traces.model.dtypes import ACTIVATION_DTYPES, KV_DTYPES, WEIGHT_DTYPES
from tierlab.common.errors import UsageError


def _int(value, name):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UsageError(f"expected a positive integer, got {value!r}", field=name) from None


@click.command("capacity")
@click.argument("model")
@click.option("--chip", "chip_name", help="Budget: the chip's memory and scratchpad tiers (a preset or FILE.toml).")
@click.option("--tier", "tiers", multiple=True, help="With --chip: only this tier (repeatable).")
@click.option("--memory", help="Budget: a size, e.g. 24GB or 16GiB.")
@click.option("--weights", default=None, help=f"Weights dtype: {', '.join(WEIGHT_DTYPES)} (default bf16; native "
              "for a model released in MXFP4, gpt-oss).")
@click.option("--kv", default="bf16", show_default=True, help=f"KV-cache dtype: {', '.join(KV_DTYPES)}.")
@click.option("--activations", default="bf16", show_default=True,
              help=f"Activations dtype: {', '.join(ACTIVATION_DTYPES)}.")
@click.option("--batch", default="1", show_default=True, help="Sequences sharing the budget.")
@click.option("--context", default=None, help="Tokens per sequence: report the largest batch that fits instead.")
@click.option("--chunk", default="1", show_default=True,
              help="Tokens per sequence in one step (workspace): 1 for decode, more for a prefill chunk.")
@click.option("--quant-group", default="128", show_default=True, help="Group size of int8/int4 weight scales.")
@click.option("--reserve", default=None, help="Memory the runtime keeps (CUDA context, workspace, fragmentation), "
              "e.g. 0.5GiB; default: the chip's [reserve], none with --memory.")
@json_option
def command(model, chip_name, tiers, memory, weights, kv, activations, batch, context, chunk, quant_group, reserve,
            as_json):
    """The longest context whose weights + KV + activation workspace fit a chip's memory or a budget;
    with --context, the largest batch. The model's own position limit is stated separately."""
    from tierlab.analysis.capacity import Budget, capacity
    from tierlab.traces.model.spec import load_model

    if (chip_name is None) == (memory is None):
        raise UsageError("give exactly one of --chip NAME or --memory SIZE", field="--chip")
    if tiers and chip_name is None:
        raise UsageError("--tier needs --chip", field="--tier")
    from tierlab.chip.units import parse_quantity

    spec = load_model(model)
    held = None if reserve is None else int(parse_quantity(reserve, "size", field="--reserve"))
    if held is not None and held < 0:
        raise UsageError(f"the reserve must not be negative, got {reserve!r}", field="--reserve")
    if chip_name is not None:
        from tierlab.chip.chipfile import load_chip

        budget = Budget.of_chip(load_chip(chip_name), tiers, reserve=held)
    else:
        budget = Budget.of_size(parse_quantity(memory, "size", field="--memory"), reserve=held or 0)
    if weights is None:
        from tierlab.traces.model.weight_formats import default_weights

        weights = default_weights(spec)
    plan = capacity(spec, budget, weights=weights, kv=kv, activations=activations, batch=_int(batch, "--batch"),
                    context=None if context is None else _int(context, "--context"), chunk=_int(chunk, "--chunk"),
                    quant_group=_int(quant_group, "--quant-group"))
    d = plan.to_dict()
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    click.echo(format_plan(d))
