"""Nothing half-written, nothing lost: interrupted runs leave no valid-looking output; --force.

* SIGKILL: ``tierlab trace`` runs in a subprocess and is killed at seeded random points while it
  writes (and once during start-up). What is left must not read as a trace: nothing at the final
  path, and any temporary sibling (``.tmp-NAME-*``) refused by ``open_trace`` unless its manifest
  was already complete (a kill between the manifest and the rename). A rerun without ``--force``
  then succeeds and writes the same bytes as an uninterrupted run.
* SIGINT (Ctrl-C): exit status 130, the one line ``tierlab: interrupted``, no traceback, and the
  temporary directory removed; SIGTERM the same with 143 and ``tierlab: terminated``.
* Every command that writes refuses to replace an existing output without ``--force`` (the
  catalogue in test_bad_inputs.py checks the messages) and, with it, replaces it completely.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from emulator.cli import main
from common.errors import TraceError
from traces.reader import open_trace

DATA = Path(__file__).parent / "data"
MODEL = str(DATA / "models" / "tiny-mixtral.json")
TRACE_ARGS = [MODEL, "--prompt", "192", "--generate", "192", "--batch", "8", "--router", "zipf:1.1", "--seed", "7"]
EXE = Path(sys.executable).parent / "tierlab"
# a busy machine (the test process not scheduled while the child writes) can let a signal sent "at
# once" arrive after the write: the checks that one landed mid-write retry this many times
RETRIES = 8

pytestmark = pytest.mark.skipif(not EXE.exists(), reason="tierlab console script not installed beside python")


def _start(out: Path) -> subprocess.Popen:
    """``tierlab trace`` in a subprocess that handles Ctrl-C as a terminal's foreground job does.

    A job started in the background by a shell (``cmd &``, as CI runners and scripts may) has SIGINT
    ignored, and a child inherits that: its Python would never see the Ctrl-C this file sends. So
    the child starts with SIGINT at its default disposition (set here around the spawn)."""
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        return subprocess.Popen([str(EXE), "trace", *TRACE_ARGS, "-o", str(out)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _temporaries(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".tmp-{out.name}-*"))


def _wait_for_temporary(proc: subprocess.Popen, out: Path, timeout_s: float = 60.0) -> float:
    """Block until the writer's temporary directory exists (or the process ends); return the time."""
    t0 = time.monotonic()
    while proc.poll() is None and not _temporaries(out):
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError("tierlab trace never started writing")
        time.sleep(0.002)
    return time.monotonic()


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run: its files, and how long it spent writing (seconds)."""
    out = tmp_path_factory.mktemp("ref") / "t.trace"
    proc = _start(out)
    t_write = _wait_for_temporary(proc, out)
    proc.wait(timeout=120)
    window = time.monotonic() - t_write
    assert proc.returncode == 0, proc.stderr
    open_trace(out)
    return _files(out), window


def test_sigkill_at_random_points_leaves_nothing_valid_and_rerun_succeeds(tmp_path, reference):
    ref_files, window = reference
    rng = random.Random(6)
    # one kill during start-up, one the moment the temporary appears (mid-write however busy the
    # machine is: the window measured by the reference run may not hold on a loaded machine), the
    # others at random points of the writing window (which, as measured, also covers reading the
    # finished trace back for the summary line)
    delays = [None, 0.0] + sorted(rng.uniform(0.02, 0.5) * window for _ in range(4))
    mid_write = 0
    reruns = []
    k = -1
    while k + 1 < len(delays):
        k += 1
        delay = delays[k]
        if k == len(delays) - 1 and mid_write == 0 and len(delays) < 6 + RETRIES:
            delays.append(0.0)      # a loaded machine let every kill miss the write: once more, at once
        d = tmp_path / f"k{k}"
        d.mkdir()
        out = d / "t.trace"
        proc = _start(out)
        if delay is None:
            time.sleep(0.05)
        else:
            t_write = _wait_for_temporary(proc, out)
            time.sleep(max(0.0, delay - (time.monotonic() - t_write)))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        if out.exists():       # killed after the rename (or finished): the trace must be complete
            assert _files(out) == ref_files
            assert _temporaries(out) == []
            continue
        with pytest.raises(TraceError):
            open_trace(out)
        for tmp in _temporaries(out):
            mid_write += 1
            if (tmp / "manifest.json").exists():    # killed between the manifest and the rename
                continue
            with pytest.raises(TraceError):
                open_trace(tmp)
        reruns.append(out)
    assert mid_write >= 1, "no kill landed while the trace was being written"
    # a rerun (no --force needed: nothing is at the final path) gives the uninterrupted bytes;
    # the reruns are independent, so they run side by side
    procs = [_start(out) for out in reruns]
    for out, proc in zip(reruns, procs):
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        assert _files(out) == ref_files


@pytest.mark.parametrize("sig,code,line", [(signal.SIGINT, 130, "tierlab: interrupted"),
                                           (signal.SIGTERM, 143, "tierlab: terminated")], ids=["ctrl-c", "sigterm"])
def test_interrupt_stops_cleanly_and_removes_temporaries(tmp_path, reference, sig, code, line):
    ref_files, window = reference
    interrupted = 0
    # the first signal goes the moment the temporary appears, so one lands mid-write however busy
    # the machine is; the others at points of the window the reference run measured
    fractions = [0.0, 0.05, 0.3]
    k = -1
    while k + 1 < len(fractions):
        k += 1
        fraction = fractions[k]
        if k == len(fractions) - 1 and interrupted == 0 and len(fractions) < 3 + RETRIES:
            fractions.append(0.0)   # a loaded machine let every signal miss the write: once more, at once
        out = tmp_path / f"c{k}" / "t.trace"
        out.parent.mkdir()
        proc = _start(out)
        t_write = _wait_for_temporary(proc, out)
        time.sleep(max(0.0, fraction * window - (time.monotonic() - t_write)))
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
        assert "Traceback" not in stderr
        assert _temporaries(out) == [], "temporary files were left behind"
        if out.exists():      # the signal came after the trace was complete and in place
            assert _files(out) == ref_files
            continue
        interrupted += 1
        assert proc.returncode == code, stderr
        assert stderr == line + "\n"
        assert stdout == ""
    assert interrupted >= 1, "no signal landed while the trace was being written"


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
