"""The ``tierlab`` console script (``tierlab.cli.script``) ends without the interpreter's teardown,
and nothing is lost by it: every byte written to stdout and stderr arrives (also through a pipe),
the exit status is the command's, and exit handlers still run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PY = [sys.executable, "-c"]
# the exit handler's line stays in stdout's buffer (a pipe: block-buffered) unless the exit flushes it
RUN = ("import atexit, sys; from tierlab.cli import script; "
       "atexit.register(lambda: print('exit handler ran')); "
       "sys.argv = ['tierlab'] + sys.argv[1:]; script()")


# stdout block-buffered, as for a user (not PYTHONUNBUFFERED, which a CI shell may set)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def tierlab(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*PY, RUN, *args], capture_output=True, text=True, timeout=300, env=ENV)


def test_output_through_a_pipe_arrives_whole_and_exit_handlers_run():
    r = tierlab("chips", "--json")
    assert r.returncode == 0, r.stderr
    doc, last = r.stdout.rstrip("\n").rsplit("\n", 1)
    assert len(json.loads(doc)) >= 9              # the whole JSON document
    assert last == "exit handler ran"


@pytest.mark.parametrize("args, code", [(("replay", "no-such.trace", "--chip", "h100"), 2),
                                        (("no-such-command",), 2), (("--version",), 0)])
def test_the_exit_status_is_the_commands(args, code):
    r = tierlab(*args)
    assert r.returncode == code, (r.stdout, r.stderr)
    if code:
        assert "tierlab: error:" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout.rstrip("\n").endswith("exit handler ran")


def test_a_bug_still_shows_its_traceback():
    code = ("import sys, tierlab.cli as c; c.main = lambda: 1 / 0; sys.argv = ['tierlab']; c.script()")
    r = subprocess.run([*PY, code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "ZeroDivisionError" in r.stderr and "Traceback" in r.stderr


def test_the_collector_runs_late_once_then_at_pythons_thresholds():
    import gc

    from tierlab.cli import START_GC_THRESHOLD, _collect_late_at_start

    default, callbacks = gc.get_threshold(), list(gc.callbacks)
    try:
        _collect_late_at_start()
        assert gc.get_threshold() == (START_GC_THRESHOLD, *default[1:])
        gc.collect(0)
        assert gc.get_threshold() == default
        gc.set_threshold(1234)
        gc.collect(0)                          # idle after the first collection: a later setting stands
        assert gc.get_threshold()[0] == 1234
    finally:
        gc.set_threshold(*default)
        gc.callbacks[:] = callbacks
