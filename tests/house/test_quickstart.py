"""The README's quick start works as written: its first command, run under a terminal.

The command is read from the README (the first command line of the ``sh`` block under
"## Quick start") and run exactly as written with ``bash -c`` in the repository root, its
stdin, stdout and stderr on a pseudo-terminal, so progress bars draw as they do for a user. It
does ``pip install -e .`` (which needs the network for pip's build requirements) and then a
``tierlab run``. The whole output is kept in ``tests/artifacts/quickstart.log``.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACT = ROOT / "tests" / "artifacts" / "quickstart.log"
TIMEOUT_S = 600      # generous: a cold machine compiles the engine and may fetch setuptools


def quickstart_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Quick start\s*$(.*?)(?=^## )", text, re.M | re.S)
    assert section, "README.md has no '## Quick start' section"
    block = re.search(r"^```sh\s*\n(.*?)^```", section.group(1), re.M | re.S)
    assert block, "README.md's quick start has no ```sh block"
    lines = [ln.strip() for ln in block.group(1).splitlines()]
    commands = [ln for ln in lines if ln and not ln.startswith("#")]
    assert commands, "README.md's quick-start block holds no command"
    return commands[0]


def run_in_pty(command: str, cwd: Path, timeout_s: float) -> tuple[int | None, bytes, float]:
    """Run ``bash -c command`` with a pseudo-terminal as stdin, stdout and stderr; return
    (exit status, or None on timeout; everything it wrote; seconds taken)."""
    master, slave = os.openpty()
    env = dict(os.environ)
    # ``pip`` and ``tierlab`` of the interpreter running the tests, even from an unactivated venv
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("TERM", "xterm")
    t0 = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, stdin=slave, stdout=slave, stderr=slave,
                            env=env, start_new_session=True, close_fds=True)
    os.close(slave)
    out = bytearray()
    status = None
    try:
        while True:
            left = timeout_s - (time.monotonic() - t0)
            if left <= 0:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            ready, _, _ = select.select([master], [], [], min(left, 1.0))
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:          # EIO: every holder of the slave has closed it
                    chunk = b""
                if not chunk:
                    status = proc.wait()
                    break
                out += chunk
            elif proc.poll() is not None:
                # exited; drain what is left (a grandchild may still hold the slave: do not wait on it)
                while select.select([master], [], [], 0.2)[0]:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    out += chunk
                status = proc.returncode
                break
    finally:
        os.close(master)
    return status, bytes(out), time.monotonic() - t0


def test_readme_quickstart_first_command():
    import fcntl

    command = quickstart_command()
    assert command.startswith("pip install -e . && tierlab run "), f"unexpected quick-start command: {command}"
    # two test runs at once in one environment (issue 16's check on a busy machine) would both
    # reinstall tierlab into it, and one pip removes the script the other is replacing: take turns
    with open(Path(sys.prefix) / ".tierlab-quickstart.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        status, out, took = run_in_pty(command, ROOT, TIMEOUT_S)
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_bytes(f"$ {command}\n".encode() + out
                         + f"\n[exit status {status}, {took:.1f} s]\n".encode())
    text = out.decode("utf-8", "replace")
    tail = "\n".join(text.splitlines()[-30:])
    assert status is not None, f"timed out after {TIMEOUT_S} s: {command}\n(output in {ARTIFACT})\n{tail}"
    assert status == 0, f"exit status {status}: {command}\n(output in {ARTIFACT})\n{tail}"
    assert "Traceback" not in text, f"a traceback in the output of: {command}\n(output in {ARTIFACT})\n{tail}"
