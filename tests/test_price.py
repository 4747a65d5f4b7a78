"""Prices: the [price] table of chip and system files, usd_per_mtok against arithmetic, sweep columns,
the Pareto front."""

from __future__ import annotations

import math
import tomllib

import pytest

from common.errors import ConfigError
from common.paths import configs_dir
from emulator.chip.chipfile import chip_from_dict, load_chip, read_chip_toml
from emulator.cost.price import parse_per_hour, usd_per_mtok
from emulator.system.systemfile import load_system, system_from_dict

PRICE = {"per_hour": "2.99 USD/h", "source": "https://example.com/prices", "date": "2026-05-01"}


def chip_with(price):
    d, _, _ = read_chip_toml("h100")
    d.pop("price", None)
    if price is not None:
        d["price"] = price
    return chip_from_dict(d, file="x.toml")


def system_with(price):
    d = tomllib.loads((configs_dir("systems") / "dgx-h100.toml").read_text())
    d.pop("price", None)
    if price is not None:
        d["price"] = price
    return system_from_dict(d, file="s.toml")


def test_usd_per_mtok_is_the_arithmetic():
    usd, note = usd_per_mtok(3.6, 1000.0)
    assert usd == pytest.approx(3.6 / 3600 / 1000 * 1e6) == pytest.approx(1.0)
    assert "utilisation 1" in note and "energy not charged" in note
    usd, _ = usd_per_mtok(2.99, 250.0, utilisation=0.5)
    assert usd == pytest.approx(2.99 / 3600 / (250 * 0.5) * 1e6)
    usd, note = usd_per_mtok(2.99, 250.0, utilisation=0.5, energy_j_per_token=0.36, usd_per_kwh=0.1)
    assert usd == pytest.approx(2.99 / 3600 / 125 * 1e6 + 0.36 / 3.6e6 * 0.1 * 1e6)
    assert "0.1 USD/kWh" in note
    for bad in ({"utilisation": 0}, {"utilisation": 1.5}, {"usd_per_kwh": 0.1}):
        with pytest.raises(ValueError):
            usd_per_mtok(1.0, 1.0, **bad)
    with pytest.raises(ValueError):
        usd_per_mtok(1.0, 0.0)


def test_per_hour_strict_form():
    assert parse_per_hour("2.99 USD/h") == 2.99 and parse_per_hour("24USD/h") == 24.0
    for bad in (2.99, "2.99", "2.99 EUR/h", "2.99 USD/hour", "-1 USD/h", "0 USD/h", "USD/h"):
        with pytest.raises(ValueError):
            parse_per_hour(bad)


def test_chip_price_table():
    c = chip_with(PRICE)
    assert c.price.usd_per_hour == 2.99 and c.price.date == "2026-05-01" and "example" in c.price.source
    assert chip_with(None).price is None


@pytest.mark.parametrize("make", [chip_with, system_with])
@pytest.mark.parametrize("price,field,words", [
    ({**PRICE, "per_huor": "1 USD/h"}, "price.per_huor", "did you mean 'per_hour'"),
    ({"per_hour": "1 USD/h", "date": "2026-01-01"}, "price.source", "missing required key"),
    ({"per_hour": "1 USD/h", "source": "x"}, "price.date", "missing required key"),
    ({**PRICE, "per_hour": 2.99}, "price.per_hour", "USD/h"),
    ({**PRICE, "date": "May 2026"}, "price.date", "YYYY-MM-DD"),
    ({**PRICE, "date": "2026-13-01"}, "price.date", "YYYY-MM-DD"),
    ({**PRICE, "source": ""}, "price.source", "non-empty"),
    ("3 USD/h", "price", "expected a table"),
])
def test_bad_price_tables(make, price, field, words):
    with pytest.raises(ConfigError) as e:
        make(price)
    msg = str(e.value)
    assert f": {field}:" in msg and words in msg and "\n" not in msg


def test_presets_have_sourced_prices():
    for name in ("h100", "a100", "h200"):
        p = load_chip(name).price
        assert p and p.usd_per_hour > 0 and p.source and len(p.date) == 10
    for name in ("dgx-h100", "dgx-h100-x2", "hgx-h200", "sn40l-16"):
        s = load_system(name)
        assert s.price and s.price.source and len(s.price.date) == 10
    assert load_system("dgx-h100").price.usd_per_hour == pytest.approx(8 * load_chip("h100").price.usd_per_hour)
    assert "estimate" in load_system("sn40l-16").price.source
    assert math.isclose(load_system("hgx-h200").price.usd_per_hour, 8 * load_chip("h200").price.usd_per_hour)
