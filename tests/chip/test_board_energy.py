"""Board energy (issue 39): dynamic energy plus the chip's static power over the modelled time; a chip
without ``[power]`` reports the dynamic energy only, with one note."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tierlab.common.errors import ConfigError
from tierlab.chip.chipfile import chip_from_dict
from tierlab.chip.units import parse_quantity
from tierlab.cost.model import NoPowerWarning, cost, per_token


def _chip(power=None):
    d = {"name": "toy", "compute": {"flops": {"bf16": "100 TFLOP/s"}, "energy": {"bf16": "1 pJ"}},
         "tier": [{"name": "mem", "capacity": "1 GiB", "block": "64 B", "managed": "memory",
                   "bandwidth": "1 TB/s", "read_energy": "1 pJ/B", "write_energy": "1 pJ/B"}]}
    if power is not None:
        d["power"] = power
    return chip_from_dict(d)


def _per_token(chip, batch=4):
    # two decode steps of one op each: 1e6 bytes read (1 us at 1 TB/s, 1 uJ) and 1e6 FLOPs (1 uJ)
    per_op = np.zeros((2, 1, 16), np.int64)
    from tierlab.engine.counters import BYTES_READ
    per_op[:, 0, BYTES_READ] = 10**6
    cst = cost(chip, per_op, np.array([64]), np.array([1e6, 1e6]))
    return per_token(cst, per_op, np.array([64]), np.array([0, 1]), np.array(["decode", "decode"], dtype=object),
                     batch, [])


def test_watts_parse():
    assert parse_quantity("700 W", "power") == 700.0
    assert parse_quantity("1.2 kW", "power") == 1200.0


def test_board_energy_is_dynamic_plus_static_times_time():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pt = _per_token(_chip({"idle": "50 W", "tdp": "300 W", "static": "100 W"}))
    step_s = 1e6 / 1e12                       # the memory binds: 1 us a step (roofline: no [execution])
    dynamic = (1e6 * 1e-12 + 1e6 * 1e-12) / 4  # per token of a batch of 4
    assert pt["j_per_token_dynamic"] == pytest.approx(dynamic)
    assert pt["energy_j"] == pytest.approx(dynamic)           # the old key keeps its meaning
    assert pt["j_per_token"] == pytest.approx(dynamic + 100.0 * step_s / 4)
    assert pt["energy_board_j"] == pt["j_per_token"]
    assert pt["static_power_w"] == 100.0


def test_static_defaults_to_idle():
    pt = _per_token(_chip({"idle": "50 W", "tdp": "300 W"}))
    assert pt["static_power_w"] == 50.0


def test_no_power_section_is_dynamic_only_with_one_note():
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        pt = _per_token(_chip())
    notes = [w for w in said if issubclass(w.category, NoPowerWarning)]
    assert len(notes) == 1 and "no [power] section" in str(notes[0].message)
    assert pt["j_per_token"] == pt["j_per_token_dynamic"] == pt["energy_j"]
    assert pt["energy_board_basis"] == "dynamic only"


@pytest.mark.parametrize("power, field", [({"idle": "-1 W", "tdp": "300 W"}, "power.idle"),
                                          ({"idle": "5", "tdp": "300 W"}, "power.idle"),
                                          ({"idle": "5 W", "tdp": "0 W"}, "power.tdp"),
                                          ({"idle": "5 W", "tdp": "300 W", "statik": "1 W"}, "power.statik")])
def test_bad_power_is_one_line_naming_the_key(power, field):
    with pytest.raises(ConfigError) as err:
        _chip(power)
    assert field in str(err.value) and "\n" not in str(err.value)
