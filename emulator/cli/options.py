"""Options shared by several commands, as decorators."""

from __future__ import annotations

import click

from tierlab.engine.dispatch import KERNEL_NAMES

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
force_option = click.option("--force", is_flag=True, help="Replace an existing output.")
place_option = click.option(
    "--place", "place", multiple=True, metavar="TIER[:COND,...]",
    help="Placement rule tried before the chip's own (repeatable): TIER then kind=K, name=GLOB, "
         "layers=A-B, spill; e.g. --place ddr:kind=kv_offload or --place sram:kind=kv,spill.")

kernel_option = click.option(
    "--kernel", type=click.Choice(["auto", *KERNEL_NAMES]), default="auto", show_default=True,
    help="Which kernel counts (identical counts): auto takes the fastest that serves the replay; "
         "the one that ran, and why, is provenance.kernel in --json.")


def placement_rules(texts) -> tuple:
    """The ``--place`` rules as PlacementRule objects (checked against the chip by placement)."""
    from tierlab.chip.placement import parse_rule

    return tuple(parse_rule(t) for t in texts or ())
