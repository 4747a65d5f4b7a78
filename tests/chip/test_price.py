"""Prices: the [price] table of chip and system files, usd_per_mtok against arithmetic, sweep columns,
the Pareto front."""

from __future__ import annotations

import math
import tomllib

import pytest

from tierlab.common.errors import ConfigError
from tierlab.common.paths import configs_dir
from tierlab.chip.chipfile import chip_from_dict, load_chip, read_chip_toml
from tierlab.cost.price import parse_per_hour, usd_per_mtok
from tierlab.system.systemfile import load_system, system_from_dict

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


# ---- sweep columns ------------------------------------------------------------------------------

from pathlib import Path  # noqa: E402

from tierlab.design_space.grid import grid_from_dict  # noqa: E402
from tierlab.design_space.point import run_group  # noqa: E402

TINY = str(Path(__file__).resolve().parents[1] / "data" / "models" / "tiny-llama.json")
AXES = {"model": [TINY], "chip": ["h100", "a100"], "batch": [1, 2], "context": [16], "generate": [1]}


def test_cost_options_at_default_keep_point_hashes():
    plain = grid_from_dict(dict(AXES)).points()
    g = grid_from_dict(dict(AXES))
    g.economics = {"price_per_hour": None, "usd_per_kwh": None, "utilisation": 1.0}
    assert [p.hash for p in g.points()] == [p.hash for p in plain]
    for econ in ({"price_per_hour": 2.0}, {"utilisation": 0.5}, {"usd_per_kwh": 0.1}):
        g.economics = econ
        changed = [p.hash for p in g.points()]
        assert not set(changed) & {p.hash for p in plain}, econ
    g.economics = {"price_per_hour": 2.0}
    h2 = {p.hash for p in g.points()}
    g.economics = {"price_per_hour": 3.0}
    assert not h2 & {p.hash for p in g.points()}


def test_rows_carry_price_and_usd_per_mtok():
    g = grid_from_dict(dict(AXES))
    g.economics = {"utilisation": 0.5}
    rows = run_group(g.points()[:2], [])           # h100 and a100 at batch 1: one trace
    for r in rows:
        assert r["error"] is None and r["tokens_per_s"] > 0 and r["devices"] == 1
        own = load_chip(r["chip"]).price
        assert r["price_per_hour"] == own.usd_per_hour and own.date in r["price_source"]
        assert r["utilisation"] == 0.5 and r["usd_per_kwh"] is None
        assert r["usd_per_mtok"] == pytest.approx(own.usd_per_hour / 3600 / (r["tokens_per_s"] * 0.5) * 1e6)
    g.economics = {"price_per_hour": 10.0, "usd_per_kwh": 0.2}
    (r,) = run_group(g.points()[:1], [])
    assert r["price_per_hour"] == 10.0 and r["price_source"] == "--price" and r["utilisation"] == 1.0
    assert r["usd_per_mtok"] == pytest.approx(10.0 / 3600 / r["tokens_per_s"] * 1e6
                                              + r["energy_j_per_token"] / 3.6e6 * 0.2 * 1e6)


def test_no_price_gives_null():
    assert load_chip("gh200").price is None
    g = grid_from_dict({**AXES, "chip": ["gh200"], "batch": [1]})
    (r,) = run_group(g.points(), [])
    assert r["error"] is None and r["tokens_per_s"] > 0
    assert r["price_per_hour"] is None and r["usd_per_mtok"] is None and r["utilisation"] == 1.0


# ---- Pareto front and plot ----------------------------------------------------------------------

from tierlab.present.plots import pareto_front, pareto_points  # noqa: E402


def test_pareto_front_hand_made():
    pts = [(1, 10), (2, 8), (2, 5), (3, 8), (4, 2), (0.5, 9), (4, 2), (5, 1), (3, 3)]
    # (2,8) dominated by (3,8); (2,5), (3,3), (0.5,9) dominated; one of the two (4,2) kept
    assert pareto_front(pts) == [0, 3, 4, 7]
    assert pareto_front([]) == [] and pareto_front([(1, 1)]) == [0]
    assert pareto_front([(1, 1), (1, 1)]) == [0]


def test_pareto_points_of_rows():
    rows = [{"chip": "h100", "system": None, "batch": 4, "devices": 1, "tokens_per_s": 400.0, "error": None},
            {"chip": None, "system": "dgx-h100", "batch": 2, "devices": 8, "tokens_per_s": 800.0, "error": None},
            {"chip": "a100", "system": None, "batch": 1, "devices": 1, "tokens_per_s": None, "error": "x"}]
    assert pareto_points(rows) == [("h100", 100.0, 400.0), ("dgx-h100", 400.0, 100.0)]


def test_cli_sweep_price_and_pareto_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from click.testing import CliRunner

    from tierlab.cli import main
    from tierlab.design_space.store import read_rows

    out, png = tmp_path / "s.parquet", tmp_path / "p.png"
    r = CliRunner().invoke(main, ["sweep", "--model", TINY, "--chip", "h100,a100", "--batch", "1,2", "--context", "16",
                                  "--generate", "1", "--price", "2.5", "--utilisation", "0.8", "--workers", "1",
                                  "-o", str(out), "--plot", str(png)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = read_rows(out)
    assert len(rows) == 4 and all(x["price_per_hour"] == 2.5 and x["utilisation"] == 0.8 for x in rows)
    assert all(x["usd_per_mtok"] == pytest.approx(2.5 / 3600 / (x["tokens_per_s"] * 0.8) * 1e6) for x in rows)


def test_cli_plot_without_matplotlib_is_one_line(tmp_path, monkeypatch):
    import builtins

    from click.testing import CliRunner

    from tierlab.cli import main

    real = builtins.__import__

    def no_mpl(name, *a, **k):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    r = CliRunner().invoke(main, ["sweep", "--model", TINY, "--chip", "h100", "--generate", "1",
                                  "-o", str(tmp_path / "s.parquet"), "--plot", str(tmp_path / "p.png")])
    assert r.exit_code != 0 and "tierlab[plot]" in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "s.parquet").exists()


def test_grid_file_cost_table(tmp_path):
    """A grid file's [cost] table sets the sweep's price, energy price and utilisation; the options
    win where given; a bad key or value is one line naming it."""
    from click.testing import CliRunner

    from tierlab.common.errors import UsageError
    from tierlab.cli import main
    from tierlab.design_space.grid import economics_from_table, load_grid

    f = tmp_path / "g.toml"
    f.write_text('model = ["qwen2-0.5b"]\nchip = ["h100"]\ngenerate = [1]\n'
                 '[cost]\nprice_per_hour = 10.0\nutilisation = 0.5\n')
    g = load_grid(f)
    assert g.economics == {"price_per_hour": 10.0, "utilisation": 0.5}
    (pt,) = g.points()
    assert pt.economics == {"price_per_hour": 10.0, "utilisation": 0.5}
    assert economics_from_table({}) == {}
    for table, match in (({"price": 3}, "did you mean 'price_per_hour'"), ({"utilisation": 2}, r"in \(0, 1\]"),
                         ({"usd_per_kwh": "cheap"}, "expected a number")):
        with pytest.raises(UsageError, match=match):
            economics_from_table(table)
    bad = tmp_path / "bad.toml"
    bad.write_text('model = ["qwen2-0.5b"]\nchip = ["h100"]\n[cost]\nprise_per_hour = 3.0\n')
    r = CliRunner().invoke(main, ["sweep", str(bad), "-o", str(tmp_path / "o.parquet")])
    assert r.exit_code == 2 and "cost.prise_per_hour: unknown key; did you mean 'price_per_hour'?" in r.output
    assert not (tmp_path / "o.parquet").exists()
