"""Every script in examples/ runs as a user runs it (a fresh ``python examples/X.py``, small sizes),
and what it prints is checked against a second path: the CLI's --json, a replay of the same point,
or a closed form."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tierlab
from tierlab.cli import main as cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _script(name: str, *args) -> str:
    r = subprocess.run([sys.executable, str(EXAMPLES / name), *map(str, args)], capture_output=True, text=True,
                       timeout=600, cwd=EXAMPLES.parent)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _load(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"example_{name[:-3]}", EXAMPLES / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_example_is_tested():
    tested = {"compare_chips.py", "what_if_l2.py", "dask_sweep.py", "imported_address_trace.py", "serving_curve.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_compare_chips():
    out = _script("compare_chips.py", "--context", 64, "--generate", 2)
    r = CliRunner().invoke(cli, ["compare", "gpt2", "--chips", "h100,sn40l", "--context", "64", "--generate", "2",
                                 "--json"], catch_exceptions=False)
    d = json.loads(r.stdout)
    for chip in d["chips"]:
        line = next(s for s in out.splitlines() if s.startswith(chip["chip"] + " "))
        assert line.split()[1] == f"{chip['replay']['per_token']['tokens_per_s']:.1f}"
        assert line.split()[-1] == chip["replay"]["per_token"]["bound"]


def test_what_if_l2():
    out = _script("what_if_l2.py", "--context", 64, "--generate", 4, "--sizes", "50 MiB,400 MiB")
    rows = [s.split() for s in out.splitlines() if re.match(r"\s+\d+ MiB", s)]
    small, big = rows
    # closed form: GPT-2's bf16 weights (249 MB) fit a 400 MiB L2, so of 4 decode steps the last 3
    # find every weight there: 3/4 of the weight requests hit, a quarter of the bytes cross L2-HBM
    assert float(big[2].rstrip("%")) == pytest.approx(75.0, abs=1.5)
    assert float(small[2].rstrip("%")) < 2
    assert float(big[3]) == pytest.approx(float(small[3]) / 4, rel=0.03)
    # the small-L2 row is the h100 preset with that capacity, as a chip file would give it
    d = tierlab.run("gpt2", chip=tierlab.load_chip("h100", {"tier.l2.capacity": "50 MiB"}), context=64,
                     generate=4).to_dict()
    assert f"{d['per_token']['tokens_per_s']:.1f}" == small[5]


def test_dask_sweep(tmp_path):
    out = _script("dask_sweep.py", "--workers", 1, "-o", tmp_path / "s.parquet")
    assert out.startswith("8 points (8 computed, 0 already present, 0 failed)")
    rows = pq.read_table(tmp_path / "s.parquet").to_pylist()
    assert len(rows) == 8 and all(r["error"] is None for r in rows)
    # two points replayed again one by one, outside the sweep
    for chip, batch, l2 in (("h100", 1, "25 MiB"), ("a100", 8, "50 MiB")):
        row = next(r for r in rows if (r["chip"], r["batch"], r["tier.l2.capacity"]) == (chip, batch, l2))
        d = tierlab.run("gpt2", chip=tierlab.load_chip(chip, {"tier.l2.capacity": l2}), batch=batch, context=256,
                         generate=2).to_dict()
        assert row["tokens_per_s"] == pytest.approx(d["per_token"]["tokens_per_s"], rel=1e-12)
        assert f"{row['tokens_per_s']:10.1f}" in out
    again = _script("dask_sweep.py", "--workers", 1, "-o", tmp_path / "s.parquet")   # resumed: nothing to do
    assert again.startswith("8 points (0 computed, 8 already present, 0 failed)")


def test_imported_address_trace():
    out = _script("imported_address_trace.py", "--n", 32)
    assert "ijk" in out and "ikj" in out
    # closed form: three 32 x 32 float64 matrices are 384 lines, 6 in each of the L1's 64 sets (8 ways):
    # only the first touch of each line misses, at the L1 and at the L2
    got = _load("imported_address_trace.py").main(32)
    for order, n_records in (("ijk", 2 * 32 ** 3 + 32 ** 2), ("ikj", 3 * 32 ** 3 + 32 ** 2)):
        tiers = got[order]["tiers"]
        assert got[order]["records"] == n_records
        assert tiers["l1"]["misses"] == 384 and tiers["l1"]["hits"] == n_records - 384
        assert tiers["l2"]["misses"] == 384 and tiers["dram"]["bytes_read"] == 384 * 64


def test_serving_curve():
    out = _script("serving_curve.py", "--concurrency", "1,8", "--input", 128, "--output", 16)
    r = CliRunner().invoke(cli, ["throughput", "qwen2-0.5b", "--chips", "h100,a100", "--input", "128", "--output",
                                 "16", "--concurrency", "1,8", "--json"], catch_exceptions=False)
    curves = json.loads(r.stdout)["curves"]
    lines = [s.split() for s in out.splitlines()[2:]]
    assert len(lines) == 4
    for d in curves:
        for p in d["curve"]:
            line = next(s for s in lines if s[0] == d["chip"] and s[1] == str(p["concurrency"]))
            assert line[2] == f"{p['output_tokens_per_s']:.1f}" and line[3] == f"{p['tokens_per_s_per_user']:.1f}"
        one, eight = d["curve"]
        # one request in flight: the system's output is that user's; eight share the steps
        assert one["output_tokens_per_s"] == pytest.approx(one["tokens_per_s_per_user"], rel=0.05)
        assert eight["output_tokens_per_s"] > one["output_tokens_per_s"] and \
            eight["tokens_per_s_per_user"] <= one["tokens_per_s_per_user"]
