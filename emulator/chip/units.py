"""Quantities with units, as written in chip files: parsed strictly, formatted for people.

``parse_quantity(text, kind)`` turns a string such as ``"50 MiB"`` or ``"3.9 pJ/bit"`` into SI base
units. The kinds and what they return:

==================  ======================================  ===============================
kind                accepted forms (examples)               returns
==================  ======================================  ===============================
``size``            ``128 B``, ``50 MiB``, ``1.5 TB``       bytes (exact ``int``)
``bandwidth``       ``3.35 TB/s``, ``900 GB/s``,            bytes per second (``float``)
                    ``100 Gb/s``, ``64 GiB/s``
``energy_per_byte`` ``3.9 pJ/bit``, ``0.5 pJ/B``            joules per byte (``float``)
``energy``          ``0.7 pJ``, ``0.7 pJ/FLOP``, ``1 nJ/op`` joules per operation (``float``)
``rate``            ``989 TFLOP/s``, ``989 TFLOPS``,        operations per second (``float``)
                    ``1979 TOP/s``, ``750 TOPS``
``time``            ``20 us``, ``20 µs``, ``1.5 ms``,       seconds (``float``)
                    ``800 ns``, ``2 s``
``power``           ``700 W``, ``1.2 kW``, ``500 mW``       watts (``float``)
==================  ======================================  ===============================

Size prefixes: decimal ``kB MB GB TB PB`` (powers of 1000) and binary ``KiB MiB GiB TiB PiB``
(powers of 1024); ``KB`` is refused as ambiguous. A size must come out as a whole number of bytes.
``B`` is a byte and ``b``/``bit`` a bit (bit quantities are divided by 8). Energy prefixes: ``f p n
u µ m`` and none; time takes the same small prefixes before ``s``. The number may use a decimal point and an exponent (``1e3 B``); a sign is parsed
so that callers can say "must be positive" rather than "bad unit".
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from tierlab.common.errors import ConfigError

KINDS = ("size", "bandwidth", "energy_per_byte", "energy", "rate", "time", "power")

_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_SMALL = {"": Fraction(1), "m": Fraction(1, 10**3), "u": Fraction(1, 10**6), "µ": Fraction(1, 10**6),
          "n": Fraction(1, 10**9), "p": Fraction(1, 10**12), "f": Fraction(1, 10**15)}

_EXAMPLES = {
    "size": 'a size such as "128 B", "50 MiB" or "64 GB"',
    "bandwidth": 'a bandwidth such as "3.35 TB/s", "900 GB/s" or "100 Gb/s"',
    "energy_per_byte": 'an energy per bit or byte such as "3.9 pJ/bit" or "0.5 pJ/B"',
    "energy": 'an energy per operation such as "0.7 pJ"',
    "rate": 'a rate such as "989 TFLOP/s" or "750 TOPS"',
    "time": 'a time such as "20 us", "1.5 ms" or "800 ns"',
    "power": 'a power such as "700 W" or "1.2 kW"',
}

_NUMBER = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(\S+)\s*$")


def _units(kind: str) -> dict[str, Fraction]:
    """Every accepted unit spelling of ``kind`` and its factor to SI base units."""
    table: dict[str, Fraction] = {}
    if kind == "size":
        for p, f in _DECIMAL.items():
            if p not in ("E",):
                table[f"{p}B"] = Fraction(f)
        for p, f in _BINARY.items():
            table[f"{p}B"] = Fraction(f)
    elif kind == "bandwidth":
        for p, f in _DECIMAL.items():
            if p == "E":
                continue
            table[f"{p}B/s"] = Fraction(f)
            table[f"{p}b/s"] = Fraction(f, 8)
            table[f"{p}bit/s"] = Fraction(f, 8)
        for p, f in _BINARY.items():
            table[f"{p}B/s"] = Fraction(f)
    elif kind == "energy_per_byte":
        for p, f in _SMALL.items():
            table[f"{p}J/B"] = f
            table[f"{p}J/byte"] = f
            table[f"{p}J/b"] = f * 8
            table[f"{p}J/bit"] = f * 8
    elif kind == "energy":
        for p, f in _SMALL.items():
            for suffix in ("", "/FLOP", "/flop", "/op"):
                table[f"{p}J{suffix}"] = f
    elif kind == "rate":
        for p, f in _DECIMAL.items():
            for unit in ("FLOP/s", "FLOPS", "OP/s", "OPS"):
                table[f"{p}{unit}"] = Fraction(f)
    elif kind == "time":
        for p, f in _SMALL.items():
            table[f"{p}s"] = f
    elif kind == "power":
        for p, f in {**_SMALL, "k": Fraction(10**3), "M": Fraction(10**6)}.items():
            table[f"{p}W"] = f
    else:
        raise ValueError(f"unknown quantity kind {kind!r}; expected one of {', '.join(KINDS)}")
    return table


_TABLES = {k: _units(k) for k in KINDS}


def parse_quantity(text, kind: str, *, file=None, field=None) -> float | int:
    """Parse ``text`` (a string with a unit) as a quantity of ``kind``; return SI base units.

    Sizes are returned as exact ``int`` bytes; everything else as ``float``. A string that does not
    match raises :class:`ConfigError` naming ``file`` and ``field`` and the expected form.
    """
    if kind not in _TABLES:
        raise ValueError(f"unknown quantity kind {kind!r}; expected one of {', '.join(KINDS)}")
    expected = _EXAMPLES[kind]
    if isinstance(text, bool) or not isinstance(text, str):
        raise ConfigError(f"expected {expected} (a string with a unit), got {text!r}", file=file, field=field)
    m = _NUMBER.match(text)
    if not m:
        raise ConfigError(f"expected {expected}, got {text!r}", file=file, field=field)
    number, unit = m.group(1), m.group(2)
    factor = _TABLES[kind].get(unit)
    if factor is None:
        hint = ""
        if kind == "size" and unit == "KB":
            hint = " ('KB' is ambiguous: write kB for 1000 B or KiB for 1024 B)"
        elif kind == "size" and unit.endswith("/s"):
            hint = " (that is a bandwidth)"
        raise ConfigError(f"expected {expected}, got {text!r}{hint}", file=file, field=field)
    exponent = number.lower().partition("e")[2]
    if exponent and abs(int(exponent)) > 40:   # also keeps Fraction arithmetic small on hostile input
        raise ConfigError(f"expected a finite {kind.replace('_', ' ')}, got {text!r}", file=file, field=field)
    value = Fraction(number) * factor
    if kind == "size":
        if value.denominator != 1:
            raise ConfigError(f"expected a whole number of bytes, got {text!r}", file=file, field=field)
        return int(value)
    result = float(value)
    if not math.isfinite(result):
        raise ConfigError(f"expected a finite {kind.replace('_', ' ')}, got {text!r}", file=file, field=field)
    return result


def _fmt_number(x: float) -> str:
    """Up to 4 significant digits, no trailing zeros, no exponent for ordinary magnitudes."""
    if x == 0:
        return "0"
    text = f"{x:.4g}"
    if "e" in text:
        return text
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _fmt_scaled(value: float, unit: str, prefixes: list[tuple[str, float]]) -> str:
    """Pick the largest prefix whose scaled magnitude is >= 1 (or the smallest prefix)."""
    mag = abs(value)
    chosen = prefixes[-1]
    for p, f in prefixes:
        if mag >= f * 0.99995:
            chosen = (p, f)
            break
    return f"{_fmt_number(value / chosen[1])} {chosen[0]}{unit}"


_BIG = [("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0)]


def format_size(nbytes: int) -> str:
    """Bytes for people: the shortest exact binary or decimal form (``50 MiB``, ``1.5 TB``), else
    about 4 significant digits in decimal units."""
    n = int(nbytes)
    if n == 0:
        return "0 B"
    exact = []
    for names, base in ((["B", "KiB", "MiB", "GiB", "TiB", "PiB"], 1024), (["B", "kB", "MB", "GB", "TB", "PB"], 1000)):
        k = 0
        while k + 1 < len(names) and abs(n) >= base ** (k + 1):
            k += 1
        text = f"{_fmt_number(n / base**k)} {names[k]}"
        if Fraction(text.split()[0]) * base**k == n:
            exact.append(text)
    if exact:
        return min(exact, key=len)
    return _fmt_scaled(float(n), "B", _BIG)


def format_quantity(value: float | int, kind: str) -> str:
    """Format a quantity in SI base units for human output (the inverse of :func:`parse_quantity`,
    to about 4 significant digits). Energies are always shown in ``pJ`` and energy per byte in
    ``pJ/bit``, the units of the literature."""
    if kind == "size":
        return format_size(value)
    if kind == "bandwidth":
        return _fmt_scaled(float(value), "B/s", _BIG)
    if kind == "rate":
        return _fmt_scaled(float(value), "FLOP/s", _BIG)
    if kind == "energy":
        return f"{_fmt_number(float(value) * 1e12)} pJ"
    if kind == "energy_per_byte":
        return f"{_fmt_number(float(value) * 1e12 / 8)} pJ/bit"
    if kind == "time":
        return _fmt_scaled(float(value), "s", [("", 1.0), ("m", 1e-3), ("µ", 1e-6), ("n", 1e-9), ("p", 1e-12)])
    if kind == "power":
        return _fmt_scaled(float(value), "W", [("k", 1e3), ("", 1.0), ("m", 1e-3)])
    raise ValueError(f"unknown quantity kind {kind!r}; expected one of {', '.join(KINDS)}")
