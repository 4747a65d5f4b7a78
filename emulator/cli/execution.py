"""``--fusion``, ``--overlap``, ``--kernel-overhead`` and ``--achievable/--no-achievable``: the
calibrated latency's settings (:mod:`tierlab.cost.organisation`), each overriding the chip file's
``[execution]`` and ``achievable`` keys where given. They change only the calibrated figures
(``per_token.latency_calibrated_s`` and its neighbours), never the counts, energy or roofline."""

from __future__ import annotations

import click

from tierlab.chip.hierarchy import FUSIONS, OVERLAPS

KEYS = ("fusion", "overlap", "kernel_overhead", "achievable")


def execution_options(f):
    """Decorator adding the calibrated latency's options to a click command."""
    opts = [
        click.option("--fusion", type=click.Choice(FUSIONS), default=None,
                     help="Kernels for the calibrated latency: none (one per op) or layer (one per decoder "
                          "layer and step); default the chip file's [execution] fusion (none if absent)."),
        click.option("--overlap", type=click.Choice(OVERLAPS), default=None,
                     help="Run consecutive kernels that share no written tensor concurrently (independent) "
                          "or not (none); default the chip file's (none)."),
        click.option("--kernel-overhead", default=None, metavar="TIME",
                     help='Fixed time per kernel (launch + synchronisation), e.g. "1.3 us"; default the chip '
                          'file\'s [execution] kernel_overhead ("0 s" if absent).'),
        click.option("--achievable/--no-achievable", default=True, show_default=True,
                     help="Divide resources' times by the chip file's achievable fractions of peak "
                          "(--no-achievable: peak rates)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def execution_from(kw: dict) -> dict:
    """Take the options of :func:`execution_options` out of ``kw`` (a command's keyword arguments)."""
    return {k: kw.pop(k, None) for k in KEYS}


def apply_execution(chip, ex: dict):
    """``chip`` with the given settings (``ex`` from :func:`execution_from`) in place of its own."""
    from tierlab.chip.units import parse_quantity
    from tierlab.cost.organisation import with_execution

    overhead = ex.get("kernel_overhead")
    if overhead is not None:
        overhead = parse_quantity(overhead, "time", field="--kernel-overhead")
        if overhead < 0:
            from tierlab.common.errors import UsageError

            raise UsageError(f"must not be negative, got {ex['kernel_overhead']!r}", field="--kernel-overhead")
    return with_execution(chip, fusion=ex.get("fusion"), overlap=ex.get("overlap"), kernel_overhead_s=overhead,
                          achievable=ex.get("achievable") is not False)
