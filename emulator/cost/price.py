"""Prices: the optional ``[price]`` table of chip and system files, and US dollars per million tokens.

A ``[price]`` table (chip files and system files alike)::

    [price]
    per_hour = "2.99 USD/h"     # a string: a number, then exactly "USD/h" (rental price of the whole
                                #   chip, or of the whole system); a bare number is refused
    source = "https://..."      # required with per_hour: where the figure comes from
    date = "2026-05-01"         # required with per_hour: the date of the figure, YYYY-MM-DD

The table is read by :func:`tierlab.chip.chipfile.price_from_table` (chips and systems are data:
their files are read in the chip room). :func:`usd_per_mtok` turns a price per hour and a
throughput into dollars per million tokens.
"""

from __future__ import annotations

from tierlab.chip.chipfile import PRICE_KEYS, parse_per_hour, price_from_table  # noqa: F401 - re-exported


def usd_per_mtok(price_per_hour: float, tokens_per_s: float, *, utilisation: float = 1.0,
                 energy_j_per_token: float | None = None, usd_per_kwh: float | None = None) -> tuple[float, str]:
    """US dollars per million tokens and a note of the assumptions.

    ``price_per_hour / 3600 / (tokens_per_s * utilisation) * 1e6``, plus, when ``usd_per_kwh`` is
    given, the energy ``energy_j_per_token / 3.6e6 * usd_per_kwh * 1e6`` (for a rented machine whose
    price already includes power, leave ``usd_per_kwh`` out).
    """
    if price_per_hour < 0:
        raise ValueError(f"price_per_hour must not be negative, got {price_per_hour}")
    if tokens_per_s <= 0:
        raise ValueError(f"tokens_per_s must be positive, got {tokens_per_s}")
    if not 0 < utilisation <= 1:
        raise ValueError(f"utilisation must be in (0, 1], got {utilisation}")
    usd = price_per_hour / 3600.0 / (tokens_per_s * utilisation) * 1e6
    note = (f"{price_per_hour:g} USD/h over {tokens_per_s:g} tokens/s at utilisation {utilisation:g} "
            "(the hardware is paid for all the time, busy a fraction utilisation of it at the modelled rate)")
    if usd_per_kwh is not None:
        if energy_j_per_token is None:
            raise ValueError("usd_per_kwh needs energy_j_per_token")
        if usd_per_kwh < 0:
            raise ValueError(f"usd_per_kwh must not be negative, got {usd_per_kwh}")
        usd += energy_j_per_token / 3.6e6 * usd_per_kwh * 1e6
        note += f"; plus modelled energy {energy_j_per_token:g} J/token at {usd_per_kwh:g} USD/kWh"
    else:
        note += "; energy not charged separately"
    return usd, note
