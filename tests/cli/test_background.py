"""The process's background worker (common/background.py): jobs in order, one thread, and a
worker of its own in a forked child."""

import os
import threading

import pytest

from tierlab.common import background


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


def test_release_mapped_lets_go_of_the_views_on_the_worker(tmp_path):
    """release_mapped empties the caller's list at once and drops the last references (and with
    them the mapping) on the worker: the views are gone once a job submitted after it has run."""
    import gc
    import weakref

    import numpy as np
    import pyarrow as pa

    from tierlab.traces.format.ipc import IpcTable, release_mapped

    path = tmp_path / "w.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, pa.schema([("word", pa.uint64())])) as w:
        for k in range(3):
            w.write_batch(pa.record_batch([pa.array(np.arange(k, 100_000 + k, dtype=np.uint64))], names=["word"]))
    src = IpcTable(path, "file", advise=False)
    views = [b.column(0).to_numpy() for b in src.batches()]
    src.close()
    assert [int(v[1]) for v in views] == [1, 2, 3]
    refs = [weakref.ref(v) for v in views]
    release_mapped(views)
    assert views == []
    background.submit(lambda: None).result(timeout=30)
    gc.collect()
    assert all(r() is None for r in refs)
