"""Reproducible: the same inputs give bit-identical results, and results say where they came from.

* Traces: the same model, run and seed give byte-identical files (routers included: uniform, zipf,
  and a recorded routing table replayed); another seed gives other accesses (so the check can fail).
* Replays: the same trace and chip give identical JSON and Parquet bytes, seeded random replacement
  included, in this process and in a fresh one with another hash seed; another policy seed gives
  other counts.
* Provenance: replay's JSON carries the tierlab version, the trace format version, the chip file's
  sha256 (checked against hashlib on the file), the trace's run parameters and every option.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.engine.options import ReplayOptions
from tierlab.traces.format import schema as fmt

DATA = Path(__file__).parents[1] / "data"
MIXTRAL = str(DATA / "models" / "tiny-mixtral.json")
EXE = Path(sys.executable).parent / "tierlab"

# Two tiers whose caches both replace at random, so the policy seed matters.
RANDOM_CHIP = """\
name = "random-toy"
[compute]
flops = { bf16 = "100 TFLOP/s" }
energy = { bf16 = "0.5 pJ" }
[[tier]]
name = "sram"
capacity = "64 KiB"
block = "128 B"
ways = 4
policy = "random"
managed = "cache"
bandwidth = "10 TB/s"
read_energy = "0.2 pJ/bit"
write_energy = "0.2 pJ/bit"
[[tier]]
name = "l3"
capacity = "512 KiB"
block = "1 KiB"
ways = 8
policy = "random"
managed = "cache"
bandwidth = "5 TB/s"
read_energy = "1 pJ/bit"
write_energy = "1 pJ/bit"
[[tier]]
name = "hbm"
capacity = "16 GiB"
block = "64 KiB"
managed = "memory"
bandwidth = "1 TB/s"
read_energy = "3 pJ/bit"
write_energy = "3 pJ/bit"
[[link]]
from = "sram"
to = "l3"
bandwidth = "2 TB/s"
energy = "0.3 pJ/bit"
[[link]]
from = "l3"
to = "hbm"
bandwidth = "1 TB/s"
energy = "1 pJ/bit"
"""


def cli(*args) -> str:
    r = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.stdout


def files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def trace(out: Path, *extra) -> Path:
    cli("trace", MIXTRAL, "-o", out, "--prompt", 12, "--generate", 5, "--batch", 3, *extra)
    return out


@pytest.mark.parametrize("router", ["uniform", "zipf:1.3"])
def test_same_seed_same_trace_bytes(tmp_path, router):
    a = files(trace(tmp_path / "a.trace", "--router", router, "--seed", 11))
    b = files(trace(tmp_path / "b.trace", "--router", router, "--seed", 11))
    assert a == b
    c = files(trace(tmp_path / "c.trace", "--router", router, "--seed", 12))
    assert c[fmt.ACCESSES_FILE] != a[fmt.ACCESSES_FILE], "the seed does not reach the router"
    assert c[fmt.TENSORS_FILE] == a[fmt.TENSORS_FILE]   # the model's tensors do not depend on routing


def test_recorded_routing_replays_to_the_same_accesses(tmp_path):
    """A routing log recorded by one run, fed back as the router, reproduces that run's accesses
    (same seed: the seed also draws the token ids the embedding reads)."""
    rec = trace(tmp_path / "rec.trace", "--router", "zipf:1.1", "--seed", 5, "--record-routing")
    again = trace(tmp_path / "again.trace", "--router", f"table:{rec / 'routing.arrow'}", "--seed", 5)
    a, b = files(rec), files(again)
    for name in (fmt.TENSORS_FILE, fmt.OPS_FILE, fmt.ACCESSES_FILE):
        assert a[name] == b[name], name


@pytest.fixture(scope="module")
def replay_inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay")
    (d / "chip.toml").write_text(RANDOM_CHIP)
    return trace(d / "t.trace", "--router", "zipf:1.2", "--seed", 3), d / "chip.toml"


def test_replay_json_and_parquet_are_bit_identical(tmp_path, replay_inputs):
    t, chip = replay_inputs
    outs = []
    for k in range(2):
        out = tmp_path / f"r{k}.parquet"
        text = cli("replay", t, "--chip", chip, "--policy-seed", 9, "--flush", "--json", "-o", out)
        outs.append((text, out.read_bytes()))
    assert outs[0] == outs[1]
    other = json.loads(cli("replay", t, "--chip", chip, "--policy-seed", 10, "--json"))
    first = json.loads(outs[0][0])
    assert [x["misses"] for x in other["tiers"]] != [x["misses"] for x in first["tiers"]], \
        "the policy seed does not reach the random replacement"


@pytest.mark.skipif(not EXE.exists(), reason="tierlab console script not installed beside python")
def test_replay_json_identical_in_a_fresh_process_with_another_hash_seed(replay_inputs):
    t, chip = replay_inputs
    here = cli("replay", t, "--chip", chip, "--policy-seed", 9, "--json")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    r = subprocess.run([str(EXE), "replay", str(t), "--chip", str(chip), "--policy-seed", "9", "--json"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == here


def test_provenance(replay_inputs):
    t, chip = replay_inputs
    d = json.loads(cli("replay", t, "--chip", chip, "--policy-seed", 9, "--json"))
    p = d["provenance"]
    assert p["tierlab"] == version("tierlab")
    # a one-device trace is written as format v1 (v2 adds devices and collectives)
    assert p["trace_format"] == fmt.FORMAT_VERSION == json.loads((t / fmt.MANIFEST).read_text())["version"]
    assert p["chip_sha256"] == hashlib.sha256(chip.read_bytes()).hexdigest()
    assert p["trace_manifest_sha256"] == hashlib.sha256((t / fmt.MANIFEST).read_bytes()).hexdigest()
    assert p["trace_run"]["seed"] == 3 and p["trace_run"]["router"] == "zipf:1.2"
    assert set(p["options"]) == set(ReplayOptions().to_dict())
    assert p["options"]["seed"] == 9
    # a chip preset is hashed too: its file's bytes
    d = json.loads(cli("replay", t, "--chip", "h100", "--json"))
    from tierlab.common.paths import configs_dir

    assert d["provenance"]["chip_sha256"] == hashlib.sha256((configs_dir("chips") / "h100.toml").read_bytes()).hexdigest()
