"""``tierlab run`` reports the tracing's progress (issue 42): the trace bar of ``tierlab trace``,
fed after each segment; the bar draws only on a terminal, so here it is replaced by a recorder. The
output is the same as without it."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from click.testing import CliRunner

from tierlab.cli import main

TINY = str(Path(__file__).parents[1] / "data" / "models" / "tiny-llama.json")
ARGS = ["run", TINY, "--chip", "h100", "--prompt", "4", "--generate", "3", "--json"]


def test_run_feeds_the_trace_bar_each_segment(monkeypatch):
    import tierlab.present.progress as progress

    plain = CliRunner().invoke(main, ARGS)
    assert plain.exit_code == 0, plain.output
    calls = []

    @contextlib.contextmanager
    def recorder(*, unit, desc, enabled=True):
        assert desc == "trace" and enabled
        yield lambda done, total: calls.append((done, total))

    monkeypatch.setattr(progress, "fraction_bar", recorder)
    res = CliRunner().invoke(main, ARGS)
    assert res.exit_code == 0, res.output
    assert calls and calls[-1][0] == calls[-1][1] == len(calls) >= 2     # prefill, then each decode step
    assert [d for d, _ in calls] == list(range(1, len(calls) + 1))
    a, b = json.loads(res.output), json.loads(plain.output)
    a["provenance"].pop("trace"), b["provenance"].pop("trace")                # each run's temporary directory
    assert a == b
