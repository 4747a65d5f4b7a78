"""``tierlab chips [NAME] [--json]``: the chip presets, one line each, or one hierarchy as tables."""

from __future__ import annotations

import json

import click

from tierlab.chip.chipfile import list_presets, load_chip
from tierlab.cli.options import json_option
from tierlab.present.chips import chip_to_dict, format_chip, format_chip_list


@click.command("chips")
@click.argument("name", required=False)
@json_option
def command(name: str | None, as_json: bool) -> None:
    """List the chip presets, or show one hierarchy (a preset NAME or a .toml file)."""
    if name is None:
        chips = [load_chip(p) for p in list_presets()]
        if as_json:
            click.echo(json.dumps([chip_to_dict(c) for c in chips], indent=2))
            return
        click.echo(format_chip_list(chips))
        return
    chip = load_chip(name)
    if as_json:
        click.echo(json.dumps(chip_to_dict(chip), indent=2))
    else:
        click.echo(format_chip(chip))
