"""Nothing half-written, nothing lost: interrupted runs leave no valid-looking output; --force.

* SIGKILL: ``tierlab trace`` runs in a subprocess and is killed at each of the writer's interrupt
  points (:mod:`tierlab.traces.format.writer`: ``TIERLAB_TEST_PAUSE_AT`` makes it stop there and wait, so the
  signal lands at that point however busy the machine is) and once during start-up. What is left
  must not read as a trace: nothing at the final path, and the temporary sibling (``.tmp-NAME-*``)
  refused by ``open_trace`` unless its manifest was already complete (a kill between the manifest
  and the rename). A rerun without ``--force`` then succeeds and writes the same bytes as an
  uninterrupted run.
* SIGINT (Ctrl-C): exit status 130, the one line ``tierlab: interrupted``, no traceback, and the
  temporary directory removed; SIGTERM the same with 143 and ``tierlab: terminated``; at every
  interrupt point.
* Every command that writes refuses to replace an existing output without ``--force`` (the
  catalogue in test_bad_inputs.py checks the messages) and, with it, replaces it completely.

No check depends on timing: the test waits (without a deadline that load could miss, but the
writer's own bounded pause) until the child has reached the point, then signals it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.common.errors import TraceError
from tierlab.traces.format.reader import open_trace
from tierlab.traces.format.writer import PAUSE_AT, PAUSE_FILE, PAUSE_S

DATA = Path(__file__).parents[1] / "data"
MODEL = str(DATA / "models" / "tiny-mixtral.json")
TRACE_ARGS = [MODEL, "--prompt", "192", "--generate", "192", "--batch", "8", "--router", "zipf:1.1", "--seed", "7"]
EXE = Path(sys.executable).parent / "tierlab"
# the writer's interrupt points: tables open, mid-generation (early and late ops), tables closed
# without a manifest, and the manifest written but not renamed
POINTS = ["start", "op:0", "op:5000", "closed", "manifest"]

pytestmark = pytest.mark.skipif(not EXE.exists(), reason="tierlab console script not installed beside python")


def _start(out: Path, pause_at: str | None = None) -> subprocess.Popen:
    """``tierlab trace`` in a subprocess that handles Ctrl-C as a terminal's foreground job does,
    stopping at the writer's interrupt point ``pause_at`` (if given) until signalled.

    A job started in the background by a shell (``cmd &``, as CI runners and scripts may) has SIGINT
    ignored, and a child inherits that: its Python would never see the Ctrl-C this file sends. So
    the child starts with SIGINT at its default disposition (set here around the spawn)."""
    env = {k: v for k, v in os.environ.items() if k not in (PAUSE_AT, PAUSE_FILE)}
    if pause_at is not None:
        env[PAUSE_AT] = pause_at
        env[PAUSE_FILE] = str(out.parent / f"paused-{out.name}")
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        return subprocess.Popen([str(EXE), "trace", *TRACE_ARGS, "-o", str(out)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wait_for_pause(proc: subprocess.Popen, out: Path) -> None:
    """Block until the child stands at its interrupt point. The child gives up waiting after the
    writer's PAUSE_S, so this cannot hang; what it waits for does not depend on the machine's load."""
    marker = out.parent / f"paused-{out.name}"
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"tierlab trace ended without reaching its interrupt point: {proc.stderr.read()}")
        time.sleep(0.005)


def _temporaries(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".tmp-{out.name}-*"))


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run: its files."""
    out = tmp_path_factory.mktemp("ref") / "t.trace"
    proc = _start(out)
    proc.wait(timeout=2 * PAUSE_S)
    assert proc.returncode == 0, proc.stderr.read()
    assert open_trace(out).n_ops > 5000        # so op:5000 is mid-generation
    return _files(out)


def test_sigkill_at_each_point_leaves_nothing_valid_and_rerun_succeeds(tmp_path, reference):
    reruns = []
    for k, point in enumerate([None, *POINTS]):
        d = tmp_path / f"k{k}"
        d.mkdir()
        out = d / "t.trace"
        proc = _start(out, point)
        if point is None:       # during start-up: wherever it lands, nothing valid may be left
            time.sleep(0.05)
        else:
            _wait_for_pause(proc, out)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=2 * PAUSE_S)
        if point is None and out.exists():     # a start-up kill that came after the rename
            assert _files(out) == reference and _temporaries(out) == []
            continue
        assert not out.exists(), point
        with pytest.raises(TraceError):
            open_trace(out)
        tmps = _temporaries(out)
        if point is not None:
            assert len(tmps) == 1, (point, tmps)
        for tmp in tmps:
            if point == "manifest":             # killed between the manifest and the rename
                assert (tmp / "manifest.json").exists()
                continue
            with pytest.raises(TraceError):
                open_trace(tmp)
        reruns.append(out)
    assert len(reruns) >= len(POINTS)
    # a rerun (no --force needed: nothing is at the final path) gives the uninterrupted bytes;
    # the reruns are independent, so they run side by side
    procs = [_start(out) for out in reruns]
    for out, proc in zip(reruns, procs):
        _, stderr = proc.communicate(timeout=2 * PAUSE_S)
        assert proc.returncode == 0, stderr
        assert _files(out) == reference


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("sig,code,line", [(signal.SIGINT, 130, "tierlab: interrupted"),
                                           (signal.SIGTERM, 143, "tierlab: terminated")], ids=["ctrl-c", "sigterm"])
def test_interrupt_stops_cleanly_and_removes_temporaries(tmp_path, sig, code, line, point):
    out = tmp_path / "t.trace"
    proc = _start(out, point)
    _wait_for_pause(proc, out)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=2 * PAUSE_S)
    assert "Traceback" not in stderr
    assert proc.returncode == code, stderr
    assert stderr == line + "\n"
    assert stdout == ""
    assert _temporaries(out) == [], "temporary files were left behind"
    assert not out.exists()


# ---- --force replaces an existing output completely, for every command that writes ---------------


def _run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r


def test_force_replaces_every_kind_of_output(tmp_path):
    trace = tmp_path / "t.trace"
    trace.mkdir()
    (trace / "stale").write_text("old")
    _run("trace", DATA / "models" / "tiny-llama.json", "-o", trace, "--generate", "2", "--force")
    assert not (trace / "stale").exists() and open_trace(trace).n_ops > 0

    parquet = tmp_path / "r.parquet"
    parquet.write_text("old")
    _run("replay", trace, "--chip", "h100", "-o", parquet, "--force")
    import pyarrow.parquet as pq

    assert pq.read_table(parquet).num_rows == open_trace(trace).n_ops

    plot = tmp_path / "p.png"
    plot.write_text("old")
    _run("mrc", trace, "--chip", "h100", "--tier", "l2", "--plot", plot, "--force")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    kept = tmp_path / "k.trace"
    kept.mkdir()
    (kept / "stale").write_text("old")
    r = _run("run", DATA / "models" / "tiny-llama.json", "--generate", "2", "--chip", "h100",
             "--keep-trace", kept, "--force", "--json")
    assert not (kept / "stale").exists() and open_trace(kept).n_ops > 0
    assert json.loads(r.stdout)["chip"]
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert leftovers == []
