"""``tierlab models [--json]``: the shipped model presets and their key dimensions."""

from __future__ import annotations

import json

import click

from emulator.cli.options import json_option
from emulator.present.format import format_number, table


@click.command("models")
@json_option
def command(as_json):
    """List model presets (configs/models) with their dimensions and parameter counts."""
    from traces.spec import human_count, list_presets, load_model

    specs = [load_model(n) for n in list_presets()]
    if as_json:
        click.echo(json.dumps([s.to_dict() for s in specs], indent=1))
        return
    rows = []
    for s in specs:
        experts = f"{s.num_experts_per_tok}/{s.num_experts}" + (f"+{s.num_shared_experts}" if s.num_shared_experts else "") \
            if s.num_experts else "-"
        rows.append([s.name, s.family, human_count(s.param_count()), human_count(s.active_param_count()),
                     s.num_layers, s.hidden_size, s.num_heads,
                     "MLA" if s.attention == "mla" else s.num_kv_heads, experts,
                     s.kv_bytes_per_token("bf16"), s.max_position_embeddings])
    click.echo(table(["model", "family", "params", "active", "layers", "hidden", "heads", "kv heads",
                             "experts", "kv B/token bf16", "max positions"], rows, align="<<>>>>>>>>>",
                     cell=format_number))
