"""The process's background worker (common/background.py): jobs in order, one thread, and a
worker of its own in a forked child."""

import os
import threading

import pytest

from common import background


def test_jobs_run_in_order_on_one_other_thread():
    seen = []
    futures = [background.submit(lambda k=k: seen.append((k, threading.get_ident()))) for k in range(50)]
    for f in futures:
        f.result(timeout=30)
    assert [k for k, _ in seen] == list(range(50))
    assert len({t for _, t in seen}) == 1 and seen[0][1] != threading.get_ident()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_gets_a_worker_of_its_own():
    background.submit(lambda: None).result(timeout=30)     # the parent's worker exists
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                            # the child: a job must run, not hang
        try:
            ok = background.submit(lambda: 41 + 1).result(timeout=10) == 42
        except BaseException:
            ok = False
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    assert got == b"1"
