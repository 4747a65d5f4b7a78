"""The project's one set of formatters for people, and its one aligned text table.

* :func:`format_bytes` -- a byte count in binary units to two decimals (``55.92 GiB``, ``512 B``);
* :func:`format_si` -- a quantity with an SI prefix to ``digits`` significant digits (``144 mJ``);
* :func:`format_size` / :func:`format_quantity` -- the exact forms chip files use (``50 MiB``,
  ``3.35 TB/s``); they live in :mod:`tierlab.chip.units` next to the parser (the chip files' own
  messages use them) and are re-exported here;
* :func:`format_number` -- a table cell: ints with thousands separators, floats to 3 digits;
* :func:`table` -- an aligned text table.
"""

from __future__ import annotations

from typing import Callable, Sequence

from tierlab.chip.units import format_quantity, format_size

__all__ = ["format_bytes", "format_si", "format_size", "format_quantity", "format_number", "format_percent",
           "numeric_align", "table"]

_SI_PREFIXES = ((1e-12, "p"), (1e-9, "n"), (1e-6, "µ"), (1e-3, "m"), (1, ""), (1e3, "k"), (1e6, "M"), (1e9, "G"))


def format_bytes(n: float) -> str:
    """Bytes in binary units: whole bytes below 1 KiB, else two decimals (``55.92 GiB``), up to TiB."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n}"


def format_si(x: float, unit: str, digits: int = 3) -> str:
    """``x`` (SI base units) with the prefix from pico to giga that keeps it below 1000 (``144 mJ``),
    to ``digits`` significant digits."""
    if x == 0:
        return f"0 {unit}"
    for p, s in _SI_PREFIXES:
        if abs(x) < p * 1000:
            return f"{x / p:.{digits}g} {s}{unit}"
    return f"{x:.{digits}g} {unit}"


def format_percent(x: float | None, decimals: int = 2) -> str:
    """A share as a percentage (``12.50%``); ``-`` for None."""
    return "-" if x is None else f"{100 * x:.{decimals}f}%"


def format_number(v) -> str:
    """A table cell: ``-`` for None, ints with thousands separators, floats to 3 significant digits."""
    if isinstance(v, bool) or v is None:
        return "-" if v is None else str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.3g}"
    return str(v)


def numeric_align(rows: Sequence[Sequence], n_cols: int) -> str:
    """One ``>`` per column whose first-row value is a number, ``<`` otherwise."""
    return "".join(">" if rows and isinstance(rows[0][i], (int, float)) else "<" for i in range(n_cols))


def table(headers: Sequence, rows: Sequence[Sequence], title: str | None = None, *, align: str | None = None,
          rule: bool = True, cell: Callable[[object], str] = str) -> str:
    """An aligned text table: ``title`` lines (if any), the header, a rule of dashes under it (unless
    ``rule`` is false), then one line per row; trailing spaces are dropped.

    ``align``: one ``<`` (left) or ``>`` (right) per column; by default the first column is
    left-aligned and the rest right-aligned. ``cell`` turns a row value into text (headers use str).
    """
    cells = [[str(c) for c in headers]] + [[cell(c) for c in r] for r in rows]
    n = len(headers)
    if align is None:
        align = "<" + ">" * (n - 1)
    widths = [max(len(r[j]) for r in cells) for j in range(n)]
    lines = [title] if title else []
    for k, r in enumerate(cells):
        lines.append("  ".join(c.ljust(widths[j]) if align[j] == "<" else c.rjust(widths[j])
                               for j, c in enumerate(r)).rstrip())
        if k == 0 and rule:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
