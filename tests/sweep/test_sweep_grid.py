"""A sweep grid's optional axes and what-if keys: columns, hashes, and the files they edit."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tierlab.common.errors import UsageError
from tierlab.design_space.grid import grid_from_dict
from tierlab.design_space.overrides import apply_chip_overrides, apply_system_overrides, build_system
from tierlab.design_space.point import run_config

TINY = str(Path(__file__).resolve().parents[1] / "data" / "models" / "tiny-llama.json")


def test_optional_axes_are_columns_only_when_named_and_keep_old_hashes():
    plain = grid_from_dict({"model": TINY, "system": ["dgx-h100"], "pp": [2], "batch": [4]})
    assert "pp_microbatches" not in plain.columns
    (p,) = plain.points()
    # the hash of a point is the sha256 of its parameters' JSON, as before optional axes existed
    want = {"model": TINY, "chip": None, "system": "dgx-h100", "batch": 4, "context": 0, "prompt": 0,
            "generate": 0, "weights": "bf16", "kv": "bf16", "tp": 1, "pp": 2, "ep": 1, "dp": 1, "overrides": {}}
    assert p.hash == hashlib.sha256(json.dumps(want, sort_keys=True).encode()).hexdigest()
    g = grid_from_dict({"model": TINY, "system": ["dgx-h100"], "pp": [2], "batch": [4], "generate": 1, "pp_microbatches": [1, 2],
                        "activations": ["bf16", "fp8"]})
    assert g.columns[-2:] == ["pp_microbatches", "activations"] and g.size() == 4
    rc = [run_config(q) for q in g.points()]
    assert sorted((r.pp_microbatches, r.activations) for r in rc) == [(1, "bf16"), (1, "fp8"), (2, "bf16"), (2, "fp8")]


def test_chip_keys_reach_nested_tables():
    d = {"name": "c", "compute": {"flops": {"bf16": "1 TFLOP/s"}},
         "tier": [{"name": "l2", "capacity": "1 MiB"}, {"name": "hbm", "capacity": "1 GB"}],
         "link": [{"from": "l2", "to": "hbm", "bandwidth": "1 TB/s"}]}
    out = apply_chip_overrides(d, {"tier.hbm.pim.flops": "2 TFLOP/s", "compute.flops.fp8": "4 TFLOP/s",
                                   "link.l2-hbm.bandwidth": "2 TB/s", "compute.achievable": 0.5})
    assert out["tier"][1]["pim"] == {"flops": "2 TFLOP/s"}
    assert out["compute"] == {"flops": {"bf16": "1 TFLOP/s", "fp8": "4 TFLOP/s"}, "achievable": 0.5}
    assert out["link"][0]["bandwidth"] == "2 TB/s"
    assert d["link"][0]["bandwidth"] == "1 TB/s"          # a copy: the file's dict is untouched
    with pytest.raises(UsageError, match=r"overrides.tier.l2.pim.flopz: unknown pim key 'flopz'"):
        apply_chip_overrides(d, {"tier.l2.pim.flopz": 1})


def test_system_keys_and_the_chip_of_a_system():
    s = build_system("dgx-h100-x2", {"scale_out.bandwidth": "800 Gb/s", "chips": 24,
                                     "chip.tier.hbm.capacity": "40 GB"})
    assert s.n_chips == 24 and s.scale_out.bandwidth_bytes_per_s == pytest.approx(100e9)
    assert [t.capacity_bytes for t in s.chip.tiers if t.name == "hbm"] == [40e9]
    with pytest.raises(UsageError, match="expected chips alone"):
        apply_system_overrides({"name": "x", "chips": 8}, {"chips.count": 3})
