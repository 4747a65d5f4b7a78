"""Quantities with units: every accepted form against hand arithmetic, every bad form refused."""

import pytest
from hypothesis import given, strategies as st

from tierlab.chip.units import format_quantity, parse_quantity
from tierlab.common.errors import ConfigError


@pytest.mark.parametrize("text, expected", [
    ("128 B", 128), ("0 B", 0), ("50 MiB", 50 * 2**20), ("1.5 TB", 1_500_000_000_000), ("64 GB", 64 * 10**9),
    ("4 KiB", 4096), ("1.5 KiB", 1536), ("2 kB", 2000), ("1 PiB", 2**50), ("1.5 TiB", 3 * 2**39),
    ("520 MiB", 520 * 1024 * 1024), ("1e3 B", 1000), ("64GB", 64 * 10**9), ("  8 B  ", 8), ("-1 B", -1),
    ("0.5 KiB", 512), ("1 MB", 10**6), ("1 GiB", 2**30), ("1 PB", 10**15),
])
def test_sizes_exact_ints(text, expected):
    v = parse_quantity(text, "size")
    assert v == expected and isinstance(v, int)


@pytest.mark.parametrize("text, expected", [
    ("3.35 TB/s", 3.35e12), ("900 GB/s", 900e9), ("100 Gb/s", 12.5e9), ("100 Gbit/s", 12.5e9),
    ("64 GiB/s", 64 * 2**30), ("1 kB/s", 1e3), ("8 b/s", 1.0), ("512 GB/s", 512e9),
])
def test_bandwidth(text, expected):
    assert parse_quantity(text, "bandwidth") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("text, expected", [
    ("3.9 pJ/bit", 3.9e-12 * 8), ("0.5 pJ/B", 0.5e-12), ("1 nJ/byte", 1e-9), ("2 fJ/b", 16e-15),
    ("0 pJ/bit", 0.0), ("1 J/B", 1.0),
])
def test_energy_per_byte(text, expected):
    assert parse_quantity(text, "energy_per_byte") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("text, expected", [
    ("0.7 pJ", 0.7e-12), ("0.7 pJ/FLOP", 0.7e-12), ("1 nJ/op", 1e-9), ("3 uJ", 3e-6), ("3 µJ", 3e-6), ("2 mJ", 2e-3),
])
def test_energy(text, expected):
    assert parse_quantity(text, "energy") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("text, expected", [
    ("989 TFLOP/s", 989e12), ("989 TFLOPS", 989e12), ("1979 TOP/s", 1979e12), ("750 TOPS", 750e12),
    ("1.2 TFLOPS", 1.2e12), ("2 PFLOP/s", 2e15),
])
def test_rate(text, expected):
    assert parse_quantity(text, "rate") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("text, kind, message", [
    ("50", "size", 'expected a size such as "128 B", "50 MiB" or "64 GB", got \'50\''),
    ("50 MiBs", "size", 'expected a size such as "128 B", "50 MiB" or "64 GB", got \'50 MiBs\''),
    ("50 KB", "size", "expected a size such as \"128 B\", \"50 MiB\" or \"64 GB\", got '50 KB' "
                      "('KB' is ambiguous: write kB for 1000 B or KiB for 1024 B)"),
    ("3 GB/s", "size", 'expected a size such as "128 B", "50 MiB" or "64 GB", got \'3 GB/s\' (that is a bandwidth)'),
    ("0.3 B", "size", "expected a whole number of bytes, got '0.3 B'"),
    ("MiB", "size", 'expected a size such as "128 B", "50 MiB" or "64 GB", got \'MiB\''),
    ("", "size", 'expected a size such as "128 B", "50 MiB" or "64 GB", got \'\''),
    ("3.35 TB", "bandwidth", 'expected a bandwidth such as "3.35 TB/s", "900 GB/s" or "100 Gb/s", got \'3.35 TB\''),
    ("3.9 pJ", "energy_per_byte", 'expected an energy per bit or byte such as "3.9 pJ/bit" or "0.5 pJ/B", got \'3.9 pJ\''),
    ("0.7 pJ/bit", "energy", 'expected an energy per operation such as "0.7 pJ", got \'0.7 pJ/bit\''),
    ("989 TFLOP", "rate", 'expected a rate such as "989 TFLOP/s" or "750 TOPS", got \'989 TFLOP\''),
    ("1e999 TFLOPS", "rate", "expected a finite rate, got '1e999 TFLOPS'"),
    ("1,000 B", "size", 'expected a size such as "128 B", "50 MiB" or "64 GB", got \'1,000 B\''),
])
def test_bad_forms_exact_message(text, kind, message):
    with pytest.raises(ConfigError) as e:
        parse_quantity(text, kind, file="chips/x.toml", field="tier[0].capacity")
    assert str(e.value) == f"chips/x.toml: tier[0].capacity: {message}"


@pytest.mark.parametrize("value", [50, 50.0, True, None, ["50 B"]])
def test_non_strings_refused(value):
    with pytest.raises(ConfigError, match=r"^f: k: expected a size .*\(a string with a unit\), got "):
        parse_quantity(value, "size", file="f", field="k")


def test_unknown_kind_is_a_programming_error():
    with pytest.raises(ValueError):
        parse_quantity("1 B", "volume")


@pytest.mark.parametrize("value, kind, text", [
    (50 * 2**20, "size", "50 MiB"), (1_500_000_000_000, "size", "1.5 TB"), (64 * 10**9, "size", "64 GB"),
    (1536, "size", "1.5 KiB"), (0, "size", "0 B"), (128, "size", "128 B"), (1234567, "size", "1.235 MB"),
    (3.35e12, "bandwidth", "3.35 TB/s"), (12.5e9, "bandwidth", "12.5 GB/s"), (3.9e-12 * 8, "energy_per_byte", "3.9 pJ/bit"),
    (0.7e-12, "energy", "0.7 pJ"), (989e12, "rate", "989 TFLOP/s"),
])
def test_format(value, kind, text):
    assert format_quantity(value, kind) == text


@given(st.integers(min_value=0, max_value=2**60))
def test_size_format_round_trips_within_4_digits(n):
    back = parse_quantity(format_quantity(n, "size"), "size")
    assert abs(back - n) <= max(1, n * 5e-4)


@given(st.floats(min_value=1e-3, max_value=1e18), st.sampled_from(["bandwidth", "rate", "energy_per_byte", "energy"]))
def test_float_format_round_trips_within_4_digits(x, kind):
    if kind in ("energy_per_byte", "energy"):
        x = x * 1e-15
    assert parse_quantity(format_quantity(x, kind), kind) == pytest.approx(x, rel=6e-4)
