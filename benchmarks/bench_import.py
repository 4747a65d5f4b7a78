"""``tierlab import`` at reading speed: records per second for each text form, against references run here.

The issue-4 stream (``_common.issue_blocks``, 10 M 64-byte lines by default) as 8-byte accesses at
``0x7f0000000 + line * 64``, 30% of them writes (seeded), written as ``din``, ``text``, ``csv`` and
``lackey`` files (and a gzip copy of the din file). Each is imported in this process
(``tierlab.traces.importers.tracer_logs.import_trace``, warm: compiled code loaded; best of ``--repeat``), reporting
wall and CPU seconds and records per second. References in the same run, on the same files:

* ``pyarrow_csv_s``: pyarrow's CSV reader reading the file raw (one string column a line for
  din/text/lackey, the three typed columns for csv): a bound on what any parser reads a file at;
* ``per_record``: the previous importer's ``read_records`` (taken from git, ``OLD_IMPORTER``: a
  Python loop over the lines), timed on the first ``--per-record-lines`` lines, as records per second
  (din, text, csv: the forms it read).

``encodings`` compares the two ways of storing an address trace's lines the format allowed
(measured on the din import's words): plain ``uint64`` words (``line << 1 | is_write``, what is
written) and delta-coded ``int32`` words (``(line - previous line) << 1 | is_write``, decoded by a
compiled prefix sum): bytes on disk (Arrow IPC file, uncompressed and zstd-compressed) and seconds to read the
words back as the int64 array the stream kernels take.

    python benchmarks/bench_import.py [--records N] [--repeat N] [--formats din,text,csv,lackey]
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from _common import REPO, emit, issue_blocks, log, timed_cpu
from tierlab.engine.jit import njit

BASE = 0x7F0000000


def cpu_model() -> dict:
    """``lscpu``'s model name and the cores this process may use."""
    name = None
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        name = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), None)
    except (OSError, subprocess.CalledProcessError):
        pass
    import os
    return {"model_name": name, "cores": len(os.sched_getaffinity(0))}


def records(n: int) -> tuple[np.ndarray, np.ndarray]:
    a = issue_blocks(n) * 64 + BASE
    w = np.random.default_rng(7).random(n) < 0.3
    return a, w


def write_files(tmp: Path, a: np.ndarray, w: np.ndarray, formats) -> dict[str, Path]:
    hexs = np.char.mod("%x", a)
    out = {}
    for f in formats:
        if f == "din":
            body = np.char.add(np.char.add(np.where(w, "1 ", "0 "), hexs), " 8\n")
        elif f == "text":
            body = np.char.add(np.char.add(np.where(w, "W 0x", "R 0x"), hexs), "\n")
        elif f == "csv":
            body = np.char.add(np.char.add(np.char.mod("%d", a), np.where(w, ",8,write\n", ",8,read\n")), "")
        elif f == "lackey":
            body = np.char.add(np.char.add(np.where(w, " S ", " L "), hexs), ",8\n")
        else:
            raise SystemExit(f"unknown format {f}")
        p = tmp / f"t.{f}"
        with open(p, "w") as fh:
            if f == "csv":
                fh.write("address,size,kind\n")
            for lo in range(0, len(body), 1 << 20):
                fh.write("".join(body[lo:lo + (1 << 20)].tolist()))
        out[f] = p
    return out


# the importer before the compiled parsers: its read_records loops over the lines in Python
OLD_IMPORTER = "979ec77:traces/importers/tracer_logs.py"


def per_record(path: Path, fmt: str, lines: int, tmp: Path) -> float | None:
    """The previous importer's ``read_records`` (``git show OLD_IMPORTER``) on the file's first
    ``lines`` lines: records per second (None: no git checkout to take it from; lackey: it had none)."""
    if fmt not in ("din", "text", "csv"):
        return None
    try:
        src = subprocess.run(["git", "show", OLD_IMPORTER], capture_output=True, text=True, check=True,
                             cwd=REPO).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    ns: dict = {"__name__": "old_importers"}
    exec(compile(src, "old_importers.py", "exec"), ns)
    head = tmp / f"head.{fmt}"
    with open(path) as f, open(head, "w") as out:
        for _ in range(lines):
            out.write(f.readline())
    t0 = time.perf_counter()
    a, _, _ = ns["read_records"](head, fmt)
    return len(a) / (time.perf_counter() - t0)


def pyarrow_read(path: Path, fmt: str) -> float:
    t0 = time.perf_counter()
    if fmt == "csv":
        pcsv.read_csv(path)
    else:
        pcsv.read_csv(path, read_options=pcsv.ReadOptions(column_names=["line"]),
                      parse_options=pcsv.ParseOptions(delimiter="\t", quote_char=False))
    return time.perf_counter() - t0


@njit(nogil=True)
def delta_decode(coded, out, start):
    """Words from delta-coded ones (``delta << 1 | is_write``, int32) in one compiled pass; returns
    the last line (the next batch's start)."""
    line = start
    for j in range(len(coded)):
        c = np.int64(coded[j])
        line += c >> 1
        out[j] = (line << 1) | (c & 1)
    return line


def encodings(trace: Path, tmp: Path, repeat: int) -> dict:
    from tierlab.traces.format.reader import open_trace

    words = np.concatenate(list(open_trace(trace).iter_lines()))
    line = words >> 1
    delta = np.diff(line, prepend=0)
    out = {"lines": int(len(words)), "delta_fits_int32": bool(np.abs(delta).max() < 1 << 30)}
    coded = ((delta << 1) | (words & 1)).astype(np.int32)
    for name, col, typ in (("plain_uint64", words.view(np.uint64), pa.uint64()), ("delta_int32", coded, pa.int32())):
        row = {}
        for comp in (None, "zstd"):
            p = tmp / f"{name}-{comp}.arrow"
            t = pa.table({"word": pa.array(col, typ)})
            with pa.OSFile(str(p), "wb") as sink, pa.ipc.new_file(
                    sink, t.schema, options=pa.ipc.IpcWriteOptions(compression=comp)) as w:
                for lo in range(0, len(col), 1 << 22):
                    w.write_table(t.slice(lo, 1 << 22))

            def read():
                with pa.memory_map(str(p)) as src:
                    r = pa.ipc.open_file(src)
                    parts = []
                    buf = np.empty(1 << 22, np.int64)
                    line = 0
                    for i in range(r.num_record_batches):
                        c = r.get_batch(i).column(0).to_numpy()
                        if name == "delta_int32":
                            line = delta_decode(c, buf, line)
                            c = buf[:len(c)]
                        else:
                            c = c.view(np.int64)
                        parts.append(int(np.bitwise_or.reduce(c)))     # every page read, as a replay does
                    return parts
            wall, cpu, _ = timed_cpu(read, repeat=repeat)
            row[comp or "uncompressed"] = {"bytes": p.stat().st_size, "read_s": wall, "read_cpu_s": cpu}
        out[name] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--formats", default="din,text,csv,lackey")
    ap.add_argument("--per-record-lines", type=int, default=500_000)
    args = ap.parse_args()
    from tierlab.traces.importers.tracer_logs import import_trace

    formats = [f.strip() for f in args.formats.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-import-"))
    try:
        a, w = records(args.records)
        t0 = time.perf_counter()
        files = write_files(tmp, a, w, formats)
        log(f"wrote the files in {time.perf_counter() - t0:.1f} s")
        if "din" in files:
            with open(files["din"], "rb") as src, gzip.open(tmp / "t.din.gz", "wb", compresslevel=1) as dst:
                shutil.copyfileobj(src, dst, 1 << 24)
            files["din.gz"] = tmp / "t.din.gz"
        small = tmp / "small.din"
        small.write_text("0 1000 8\n1 2000 8\n")
        import_trace(small, tmp / "warm.trace", force=True)       # compiled code loaded
        runs = []
        for name, path in files.items():
            fmt = name.split(".")[0]
            wall, cpu, s = timed_cpu(import_trace, path, tmp / f"{name}.trace", fmt=fmt, force=True,
                                     repeat=args.repeat)
            row = {"format": name, "file_bytes": path.stat().st_size, "records": s["records"],
                   "lines": s["lines"], "import_s": wall, "import_cpu_s": cpu,
                   "records_per_s": s["records"] / wall, "records_per_cpu_s": s["records"] / cpu}
            if not name.endswith(".gz"):
                row["pyarrow_csv_s"] = min(pyarrow_read(path, fmt) for _ in range(args.repeat))
                row["pyarrow_csv_records_per_s"] = s["records"] / row["pyarrow_csv_s"]
                pr = per_record(path, fmt, min(args.per_record_lines, args.records), tmp)
                row["per_record_records_per_s"] = pr
                row["speedup_over_per_record"] = None if pr is None else row["records_per_s"] / pr
            runs.append(row)
            log(str(row))
        enc = encodings(tmp / "din.trace", tmp, args.repeat) if "din" in files else None
        emit("bench_import", {"cpu": cpu_model(), "records": args.records, "runs": runs, "encodings": enc})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
