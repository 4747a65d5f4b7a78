"""A tier's exact miss-ratio curve from a trace (:func:`tierlab.mrc`, ``tierlab mrc TRACE --tier``):
LRU at every capacity in one pass, and OPT where the stream fits in memory. The work is
:func:`tierlab.analysis.tier_mrc.tier_mrc`, which says which stream the tier sees and what each row means."""

from __future__ import annotations

import os  # noqa: F401  (annotations)
from typing import TYPE_CHECKING, Sequence

from tierlab.api.settings import check_value
from tierlab.common.errors import UsageError

if TYPE_CHECKING:
    from tierlab.api.results import CurveOfTier
    from tierlab.chip.hierarchy import Chip

OPT_LIMIT_BLOCKS = 1 << 24      # tierlab.analysis.tier_mrc.DEFAULT_OPT_LIMIT_BLOCKS (a test holds them equal)


def sizes_of(v, name: str = "sizes") -> list[int]:
    """Capacities: a comma-separated text of sizes with units (``1MiB,2MiB``) or a list of bytes."""
    from tierlab.chip.units import parse_quantity

    if v is None:
        return []
    if isinstance(v, str):
        return [int(parse_quantity(s.strip(), "size", field=name)) for s in v.split(",") if s.strip()]
    if isinstance(v, (list, tuple)):
        return [check_value(name, "int", x) if not isinstance(x, str) else int(parse_quantity(x, "size", field=name))
                for x in v]
    raise UsageError(f"expected sizes such as '1MiB,2MiB' or a list of bytes, got {v!r}", field=name)


def mrc(trace: str | os.PathLike[str], tier: str, chip: str | Chip = "h100", *, sizes: str | Sequence[int] | None = None,
        max_ways: int | None = None, opt: bool | None = None, opt_limit: int = OPT_LIMIT_BLOCKS,
        plot: str | None = None, force: bool = False, progress: bool = True) -> CurveOfTier:
    """Exact LRU (and OPT) miss-ratio curve of one tier of a chip, every capacity in one pass.

    Parameters
    ----------
    trace : str or path
        A trace directory (or a :func:`tierlab.trace` result).
    tier : str
        The tier of the chip to study (``l2``, ``sram``, ...).
    chip : str or Chip, default "h100"
        A chip preset, a chip ``.toml`` or a loaded chip.
    sizes : str or list of int, optional
        Capacities for the table, e.g. ``"1MiB,2MiB,4MiB"`` (default: around the tier's).
    max_ways : int, optional
        Deepest way count of the per-set curve (set-associative tiers; default twice the tier's ways).
    opt : bool, optional
        Compute the OPT curve (default: when the stream fits ``opt_limit``).
    opt_limit : int, default 2**24
        Longest block stream OPT may hold in memory (blocks).
    plot : str, optional
        Write the curve as an image (png/svg/pdf; needs matplotlib).
    force : bool, default False
        Replace an existing ``plot``.
    progress : bool, default True
        Draw a progress bar on a terminal's stderr.

    Returns
    -------
    CurveOfTier
        ``to_dict()`` is ``tierlab mrc --json``; ``to_arrow()`` one row per capacity.
    """
    from tierlab.analysis.tier_mrc import tier_mrc
    from tierlab.api.results import CurveOfTier
    from tierlab.chip.chipfile import load_chip
    from tierlab.chip.hierarchy import Chip
    from tierlab.common.atomic import check_output
    from tierlab.present.progress import counting_bar
    from tierlab.traces.format.reader import open_trace

    path = check_value("trace", "text", trace)
    tier = check_value("tier", "text", tier)
    if max_ways is not None and not 1 <= check_value("max_ways", "int", max_ways) <= 4096:
        raise UsageError(f"expected 1 to 4096 ways, got {max_ways}", field="max_ways")
    if check_value("opt_limit", "int", opt_limit) < 1:
        raise UsageError(f"expected at least 1 block, got {opt_limit}", field="opt_limit")
    check_value("opt", "bool", opt, nullable=True)
    if plot:
        from tierlab.present.views import need_matplotlib

        check_output(check_value("plot", "text", plot), force=force)
        need_matplotlib("plot")      # no matplotlib: say so before the work
    c = chip if isinstance(chip, Chip) else load_chip(check_value("chip", "text", chip))
    tr = open_trace(path)
    with counting_bar(tr.n_accesses, unit="row", desc=f"mrc {tier}", enabled=progress) as bar:
        result, curves = tier_mrc(tr, c, tier, sizes=sizes_of(sizes), max_ways=max_ways, opt=opt,
                                  opt_limit_blocks=opt_limit, progress=bar)
    written = []
    if plot:
        from tierlab.present.plots import plot_mrc

        plot_mrc(result, curves, plot, force=force)
        written.append(plot)
    return CurveOfTier(result, curves, written)
