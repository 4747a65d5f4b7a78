"""``per_token.steady_tokens_per_s`` of a system: continuous decoding, the step's microbatches
cycling through the pipeline. Checked against the devices' own figures in the same ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.analysis.system_result import steady_rate
from tierlab.cli import main

TINY = str(Path(__file__).resolve().parents[1] / "data" / "models" / "tiny-llama.json")


def run(*args) -> dict:
    r = CliRunner().invoke(main, ["run", TINY, "--system", "dgx-h100", "--context", "16", "--generate", "1",
                                  "--json", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("args", [("--tp", "2"), ("--pp", "2", "--batch", "2")])
def test_one_microbatch_is_the_one_batch_rate(args):
    """One microbatch: its next token waits for its last to leave the last stage."""
    pt = run(*args)["per_token"]
    assert pt["steady_tokens_per_s"] == pytest.approx(pt["tokens_per_s"], rel=1e-12)


def test_microbatches_as_many_as_stages_are_bounded_by_the_busiest_device():
    """PP=2, two microbatches, one decode step: each device works its ops' latencies plus the two
    send/recvs between the stages; the rate is the tokens of a step over that work. A device's
    ``latency_s`` also holds the memory time of its send/recv buffers, which the collectives' span
    covers (max of network and memory time): so the sum is the work from above, within 0.1 %."""
    d = run("--pp", "2", "--batch", "2", "--pp-microbatches", "2")
    pt = d["per_token"]
    (sr,) = [c for c in d["collectives"] if c["kind"] == "send_recv"]
    assert sr["count"] == 2 and all(c["kind"] == "send_recv" for c in d["collectives"])
    busiest = max(dev["latency_s"] for dev in d["devices"]) + sr["time_s"]
    assert pt["tokens_per_step"] / busiest <= pt["steady_tokens_per_s"]
    assert pt["steady_tokens_per_s"] == pytest.approx(pt["tokens_per_step"] / busiest, rel=1e-3)
    assert pt["tokens_per_s"] < pt["steady_tokens_per_s"]        # no fill and drain


def test_steady_rate_closed_form():
    """Balanced stages of time t: a step of m microbatches through p stages lasts (p + m - 1) t; a
    device works m t; a round lasts max(m, p) t."""
    t = 0.01
    for p in (1, 2, 4, 16):
        for m in (1, 2, 4, 16, 32):
            got = steady_rate(64, (p + m - 1) * t, m * t, m)
            assert got == pytest.approx(64 / (max(m, p) * t), rel=1e-12), (p, m)
