"""``per_token.steady_tokens_per_s`` of a system: the pipeline kept full (``pp`` batches in flight),
bounded by its busiest device. Checked against the devices' own figures in the same ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from emulator.cli import main

TINY = str(Path(__file__).resolve().parent / "data" / "models" / "tiny-llama.json")


def run(*args) -> dict:
    r = CliRunner().invoke(main, ["run", TINY, "--system", "dgx-h100", "--context", "16", "--generate", "1",
                                  "--json", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_one_stage_without_waits_is_the_one_batch_rate():
    d = run("--tp", "2")
    pt = d["per_token"]
    assert pt["steady_tokens_per_s"] == pytest.approx(pt["tokens_per_s"], rel=1e-12)


def test_two_stages_are_bounded_by_the_busiest_device():
    """PP=2, one decode step: each device works its ops' latencies plus the one send/recv between the
    stages; the steady rate is the tokens of a step over the busier device's work. A device's
    ``latency_s`` also holds the memory time of its send/recv buffers, which the collective's span
    covers (max of network and memory time): so the sum is the work from above, and the rate is
    at least tokens over it, and within 0.1 % (the buffers are small)."""
    d = run("--pp", "2", "--batch", "2")
    pt = d["per_token"]
    (sr,) = [c for c in d["collectives"] if c["kind"] == "send_recv"]
    assert sr["count"] == 1 and all(c["kind"] == "send_recv" for c in d["collectives"])
    busiest = max(dev["latency_s"] for dev in d["devices"]) + sr["time_s"]
    assert pt["tokens_per_step"] / busiest <= pt["steady_tokens_per_s"]
    assert pt["steady_tokens_per_s"] == pytest.approx(pt["tokens_per_step"] / busiest, rel=1e-3)
    # the two stages work in turn for one batch: the steady rate is above the one-batch rate, and at
    # most pp times it
    assert pt["tokens_per_s"] < pt["steady_tokens_per_s"] <= 2 * pt["tokens_per_s"] * (1 + 1e-12)
