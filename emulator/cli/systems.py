"""``tierlab systems [NAME|FILE] [--json]``: the system presets, one line each, or one system in detail."""

from __future__ import annotations

import json

import click

from tierlab.cli.options import json_option
from tierlab.present.systems import format_system, format_system_list, system_to_dict
from tierlab.system.systemfile import list_presets, load_system


@click.command("systems")
@click.argument("name", required=False)
@json_option
def command(name: str | None, as_json: bool) -> None:
    """List the system presets, or show one system (a preset NAME or a .toml FILE)."""
    if name is None:
        systems = [load_system(p) for p in list_presets()]
        if as_json:
            click.echo(json.dumps([system_to_dict(s) for s in systems], indent=2))
            return
        click.echo(format_system_list(systems))
        return
    system = load_system(name)
    if as_json:
        click.echo(json.dumps(system_to_dict(system), indent=2))
    else:
        click.echo(format_system(system))
