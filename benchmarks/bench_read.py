"""Reading and checking the issue-4 trace: the reader of this checkout against the one before
format v3 (``git show d996a9e:traces/format/reader.py``, same run), on the same accesses.

The trace: 10 M single-line rows (``_common.issue_blocks``, one 64-byte load each) written by the
TraceWriter (v3, the IPC file form) and the same tables rewritten in the stream form (v1), so both
readers can be timed on the form they read. Timed: ``open_trace`` plus iterating
``iter_accesses()`` (1 M-row batches) to the end — every check the reader makes — and
:meth:`Trace.access_columns` (whole columns). Best of ``--repeat``; page cache warm (one untimed pass).

    python benchmarks/bench_read.py [--lines N] [--repeat N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

from _common import REPO, emit, issue_blocks, log, timed

BEFORE = "d996a9e"      # the last commit whose reader read only the stream form


def old_reader(tmp: Path):
    src = subprocess.run(["git", "-C", str(REPO), "show", f"{BEFORE}:traces/format/reader.py"], check=True,
                         capture_output=True, text=True).stdout
    path = tmp / "reader_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("reader_before", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_traces(tmp: Path, lines: int) -> tuple[Path, Path]:
    from tierlab.traces.format.writer import TraceWriter

    b = issue_blocks(lines)
    new = tmp / "v3.trace"
    with TraceWriter(new) as w:
        w.add_tensor("mem", "weight", int(b.max() + 1) * 64, "bf16")
        w.add_op("op", "other", -1, "decode", 0, 1, 0)
        w.add_accesses(np.zeros(lines, np.uint32), np.zeros(lines, np.uint32), b.astype(np.uint64) * 64,
                       np.full(lines, 64, np.uint64))
    old = tmp / "v1.trace"
    shutil.copytree(new, old)
    for f in old.glob("*.arrow"):
        with pa.OSFile(str(f)) as src:
            table = pa.ipc.open_file(src).read_all()
        with pa.OSFile(str(f), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            for rb in table.to_batches(max_chunksize=1 << 16):     # as the writer streamed them
                w.write_batch(rb)
    m = json.loads((old / "manifest.json").read_text())
    m["version"] = 1
    del m["devices"]
    (old / "manifest.json").write_text(json.dumps(m))
    return new, old


def read_all(open_trace, path) -> int:
    t = open_trace(path)
    return sum(b.num_rows for b in t.iter_accesses())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from tierlab.traces.format.reader import open_trace

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        log(f"writing {args.lines} rows")
        new, old = write_traces(tmp, args.lines)
        before = old_reader(tmp)
        rows = {}
        for path in (new, old):
            rows[path.name] = read_all(open_trace, path)          # warm the page cache
        read_all(before.open_trace, old)
        t_before, n_before = timed(read_all, before.open_trace, old, repeat=args.repeat)
        t_stream, n_stream = timed(read_all, open_trace, old, repeat=args.repeat)
        t_file, n_file = timed(read_all, open_trace, new, repeat=args.repeat)
        t_cols, cols = timed(lambda: open_trace(new).access_columns(), repeat=args.repeat)
        assert n_before == n_stream == n_file == len(cols["offset"]) == args.lines
        emit("bench_read", {
            "rows": args.lines,
            "bytes_accesses_file": (new / "accesses.arrow").stat().st_size,
            "before_reader_stream_form_s": round(t_before, 4),
            "reader_stream_form_s": round(t_stream, 4),
            "reader_file_form_s": round(t_file, 4),
            "access_columns_file_form_s": round(t_cols, 4),
            "speedup_file_form_vs_before": round(t_before / t_file, 2),
            "rows_per_s_file_form": round(args.lines / t_file),
            "note": "open_trace + iter_accesses() to the end (every check); best of --repeat, page cache warm",
        })


if __name__ == "__main__":
    main()
