"""``tierlab replay TRACE --system NAME``: a trace written by ``tierlab trace --tp ...`` replays on a
system exactly as ``tierlab run MODEL --system NAME`` with the same options does (a second path to
the same result: the trace is written once and read back, instead of traced in the run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.cli import main

TINY = str(Path(__file__).resolve().parents[1] / "data" / "models" / "tiny-llama.json")


@pytest.mark.parametrize("par", [("--tp", "2"), ("--pp", "2", "--batch", "2", "--pp-microbatches", "2")])
def test_replay_of_a_written_trace_equals_run(tmp_path, par):
    run_args = ["--context", "16", "--generate", "2", *par]
    t = tmp_path / "t.trace"
    r = CliRunner().invoke(main, ["trace", TINY, "-o", str(t), *run_args], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    a = CliRunner().invoke(main, ["replay", str(t), "--system", "dgx-h100", "--json"], catch_exceptions=False)
    b = CliRunner().invoke(main, ["run", TINY, "--system", "dgx-h100", "--json", *run_args], catch_exceptions=False)
    assert a.exit_code == 0 and b.exit_code == 0, (a.stderr, b.stderr)
    da, db = json.loads(a.stdout), json.loads(b.stdout)
    for key in ("per_token", "devices", "network", "collectives", "coordination", "energy_j", "latency_s"):
        assert da[key] == db[key], key
