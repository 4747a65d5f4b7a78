"""Write the golden traces of every trace-format version and form the reader accepts (tests/data/golden).

Run once from the repository root: ``python tests/data/golden/make_goldens.py``. The goldens are
committed; ``tests/traces/test_golden_versions.py`` opens each with the current reader and checks it
against expected values written there by hand. Regenerate only when a golden is added: rewriting one
with a newer tierlab would hide the very break the golden is there to catch. README.md beside this
file lists the goldens and how each was made.

Versions 1 and 2 (the IPC stream form) and version 4 (64-bit address words, no ``word_bits``) are no
longer written by tierlab. Their generated goldens are written by the tierlab that last wrote them,
taken from this repository's history (:func:`at_commit`: ``git archive`` of the commit before the
version changed, run with this Python): version 2 by ``V2_COMMIT``, version 4 by ``V4_COMMIT``. The
synthetic ones are written with pyarrow alone from the spec, as tests/data/make_golden.py wrote
golden-v1-synthetic. A version-3 table in the stream form and a version-4 descriptor trace were never
written by any tierlab, but the reader takes them (docs/trace-format.md): they are the version-3
synthetic trace rewritten as tests/traces/test_trace_forms.py ``_as_stream_form`` does, and with
only its manifest's version changed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
DATA = HERE.parent
sys.path.insert(0, str(DATA))

from tierlab.traces.format import schema as fmt  # noqa: E402

import make_golden  # noqa: E402   (the version-1 synthetic tables: SYN_TENSORS, SYN_OPS, SYN_ACCESSES)

# ---- a two-device trace written by hand (versions 2 and 3) --------------------------------------
# Each device its own address space (both start at 0); ops of the two devices interleave at collectives.
SYN2_TENSORS = [  # id, name, kind, layer, expert, dtype, address, nbytes, device
    (0, "w", "weight", 0, -1, "bf16", 0, 8192, 0),
    (1, "x", "activation", -1, -1, "bf16", 65536, 512, 0),
    (2, "w", "weight", 0, -1, "bf16", 0, 8192, 1),
    (3, "x", "activation", -1, -1, "bf16", 65536, 512, 1),
    (4, "kv", "kv", 0, -1, "bf16", 131072, 2048, 1),
]
SYN2_OPS = [  # id, name, kind, layer, phase, step, tokens, flops, expert, pim, device, collective
    (0, "proj", "linear", 0, "decode", 0, 1, 8192, -1, True, 0, -1),
    (1, "proj", "linear", 0, "decode", 0, 1, 8192, -1, True, 1, -1),
    (2, "proj.all_reduce", "all_reduce", 0, "decode", 0, 1, 0, -1, False, 0, 0),
    (3, "proj.all_reduce", "all_reduce", 0, "decode", 0, 1, 0, -1, False, 1, 0),
    (4, "attn", "attention", 0, "decode", 0, 1, 512, -1, True, 1, -1),
    (5, "dispatch.all_to_all", "all_to_all", 0, "decode", 0, 1, 0, -1, False, 0, 1),
    (6, "dispatch.all_to_all", "all_to_all", 0, "decode", 0, 1, 0, -1, False, 1, 1),
    (7, "pp.send", "send_recv", -1, "decode", 0, 1, 0, -1, False, 1, 2),
    (8, "pp.recv", "send_recv", -1, "decode", 0, 1, 0, -1, False, 0, 2),
]
SYN2_COLLECTIVES = [  # id, kind, ranks, size_bytes, send_bytes, phase, step, layer
    (0, "all_reduce", [0, 1], 512, [], "decode", 0, 0),
    (1, "all_to_all", [0, 1], 384, [128, 256, 192, 64], "decode", 0, 0),
    (2, "send_recv", [1, 0], 256, [], "decode", 0, -1),
]
SYN2_ACCESSES = [  # op, tensor, offset, nbytes, count, stride, write
    (0, 0, 0, 8192, 1, 0, False),
    (0, 1, 0, 128, 1, 0, True),
    (1, 2, 0, 4096, 2, 4096, False),
    (1, 3, 0, 128, 1, 0, True),
    (2, 1, 0, 512, 1, 0, False),
    (2, 1, 0, 512, 1, 0, True),
    (3, 3, 0, 512, 1, 0, False),
    (3, 3, 0, 512, 1, 0, True),
    (4, 4, 0, 512, 4, 512, False),
    (4, 3, 256, 64, 1, 0, True),
    (5, 1, 0, 384, 1, 0, False),
    (5, 1, 128, 384, 1, 0, True),
    (6, 3, 0, 256, 1, 0, False),
    (6, 3, 256, 256, 1, 0, True),
    (7, 3, 0, 256, 1, 0, False),
    (8, 1, 256, 256, 1, 0, True),
]

# ---- address traces (versions 4 and 5) ------------------------------------------------------------
# Dinero IV records (label: 0 read, 1 write; hex address; size): two 1 GiB regions, in first-seen
# order 0x40000000.. (tensor 0) and 0x200000000.. (tensor 1); three accesses straddle two 64-byte lines.
DIN_RECORDS = [
    (0, 0x7F000000, 8),
    (0, 0x7F000040, 8),
    (1, 0x7F00003C, 8),      # straddles the first two lines (a write)
    (0, 0x7F000000, 4),
    (0, 0x200000010, 16),
    (1, 0x200000010, 16),
    (0, 0x7F000080, 64),
    (0, 0x7F0000F8, 16),     # straddles
    (0, 0x200000040, 8),
    (0, 0x7F000000, 8),
    (1, 0x7F000100, 8),
    (0, 0x20000007C, 8),     # straddles
]
# Three regions (0, 1 and 2 GiB from 0x0, 0x40000000, 0x80000000) at 1-byte lines: the third
# region's lines are 2**31 and up, so their words (line << 1 | is_write) need 64 bits.
DIN_WIDE_RECORDS = [
    (0, 0x10, 2),
    (1, 0x40000020, 1),
    (0, 0x80000004, 2),
    (1, 0x80000004, 1),
    (0, 0x10, 1),
]


def _table(rows, schema: pa.Schema, strings: str) -> pa.Table:
    """The rows as a table of ``schema``, strings ``plain``, ``large`` or ``dictionary``-encoded."""
    arrays, fields = [], []
    for f, col in zip(schema, zip(*rows)):
        a = pa.array(list(col), type=f.type)
        if pa.types.is_string(f.type) and strings == "dictionary":
            a = a.dictionary_encode()
        elif pa.types.is_string(f.type) and strings == "large":
            a = a.cast(pa.large_string())
        arrays.append(a)
        fields.append(pa.field(f.name, a.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _write_ipc(path: Path, table: pa.Table, form: str, batch_rows: int) -> None:
    with pa.OSFile(str(path), "wb") as sink:
        w = pa.ipc.new_stream(sink, table.schema) if form == "stream" else pa.ipc.new_file(sink, table.schema)
        with w:
            for b in table.to_batches(max_chunksize=batch_rows):
                w.write_batch(b)


def _fresh(out: Path) -> Path:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    return out


def write_by_hand(out: Path, version: int, form: str, strings: str, devices: int) -> None:
    """A synthetic trace written with pyarrow alone (model and run null), several record batches per table."""
    _fresh(out)
    if devices == 1:
        layout = fmt.TABLES
        rows = {"tensors": make_golden.SYN_TENSORS, "ops": make_golden.SYN_OPS, "accesses": make_golden.SYN_ACCESSES}
    else:
        layout = fmt.TABLES_V2
        rows = {"tensors": SYN2_TENSORS, "ops": SYN2_OPS, "accesses": SYN2_ACCESSES,
                "collectives": SYN2_COLLECTIVES}
    for name, (file, schema) in layout.items():
        _write_ipc(out / file, _table(rows[name], schema, strings), form, batch_rows=3)
    manifest = {"format": "tierlab-trace", "version": version,
                **({"devices": devices} if version > 1 else {}),
                "generator": "hand-written (pyarrow)", "model": None, "run": None,
                "tables": {name: len(r) for name, r in rows.items()}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def write_by_writer(out: Path, devices: int) -> None:
    """The same synthetic content written by tierlab's TraceWriter (format version 3, the file form)."""
    from tierlab.traces.format.writer import TraceWriter

    if out.exists():
        shutil.rmtree(out)
    with TraceWriter(out, batch_rows=2, devices=devices) as w:
        if devices == 1:
            for _, name, kind, layer, expert, dtype, address, nbytes in make_golden.SYN_TENSORS:
                w.add_tensor(name, kind, nbytes, dtype, layer, expert)
            for _, name, kind, layer, phase, step, tokens, flops, expert, pim in make_golden.SYN_OPS:
                w.add_op(name, kind, layer, phase, step, tokens, flops, expert, pim)
            accesses = make_golden.SYN_ACCESSES
        else:
            for _, name, kind, layer, expert, dtype, address, nbytes, device in SYN2_TENSORS:
                w.add_tensor(name, kind, nbytes, dtype, layer, expert, device=device)
            for cid, kind, ranks, size, send, phase, step, layer in SYN2_COLLECTIVES:
                w.add_collective(kind, ranks, size, phase, step, layer, send_bytes=send or None)
            for _, name, kind, layer, phase, step, tokens, flops, expert, pim, device, coll in SYN2_OPS:
                w.add_op(name, kind, layer, phase, step, tokens, flops, expert, pim, device=device, collective=coll)
            accesses = SYN2_ACCESSES
        for op, tensor, offset, nbytes, count, stride, write in accesses:
            w.add_access(op, tensor, offset, nbytes, count, stride, write)


def as_stream_form(src: Path, dst: Path) -> Path:
    """``src`` (a version-3 trace) with every table in the IPC stream form, as
    tests/traces/test_trace_forms.py ``_as_stream_form`` rewrites one (batches of 5 rows), its
    manifest unchanged: a version-3 trace in the stream form, which the reader takes."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    for f in sorted(dst.glob("*.arrow")):
        with pa.OSFile(str(f)) as m:
            table = pa.ipc.open_file(m).read_all()
        _write_ipc(f, table, "stream", batch_rows=5)
        assert f.read_bytes()[:4] == b"\xff\xff\xff\xff"
    return dst


def with_version(src: Path, dst: Path, version: int) -> Path:
    """``src`` with only the manifest's version changed (the tables as they are)."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    m = json.loads((dst / fmt.MANIFEST).read_text())
    (dst / fmt.MANIFEST).write_text(json.dumps({**m, "version": version}, indent=1) + "\n")
    return dst


def write_tiny_tp2(out: Path) -> None:
    """tiny-llama over two tensor-parallel devices (prompt 4, generate 2, batch 2, alignment 4 KiB:
    the run of golden-v1-tiny-llama.trace, with --tp 2), written by tierlab (version 3)."""
    from tierlab.traces.lowering.generate import generate_trace
    from tierlab.traces.model.spec import load_model
    from tierlab.traces.workload.run import RunConfig

    run = RunConfig(**make_golden.TINY_RUN, tp=2)
    generate_trace(load_model(DATA / "models" / "tiny-llama.json"), run, out, force=True)


def write_din(path: Path, records) -> Path:
    path.write_text("".join(f"{label} {address:x} {size}\n" for label, address, size in records))
    return path


# the last commits writing version 2 (d1a8279 made version 3) and version 4 (fb720d8 made version 5)
V2_COMMIT = "d1a8279^"
V4_COMMIT = "fb720d8^"


def at_commit(commit: str, code: str, tmp: Path) -> None:
    """Run ``code`` with this Python on the repository's tree at ``commit`` (its own top-level packages
    ``traces``, ``common``, ``emulator`` first on the path, which this tierlab's ``tierlab`` does not shadow)."""
    tree = tmp / f"tree-{commit.replace('^', '-parent')}"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(DATA.parent.parent), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp, env=env)


def write_v2_tiny_tp2(out: Path, tmp: Path) -> None:
    """tiny-llama over two tensor-parallel devices (the run of golden-v1-tiny-llama with --tp 2), as the
    last tierlab writing version 2 wrote it (the IPC stream form)."""
    if out.exists():
        shutil.rmtree(out)
    at_commit(V2_COMMIT, "from traces.lower import generate_trace; from traces.run import RunConfig; "
                         "from traces.spec import load_model; "
                         f"generate_trace(load_model({str(DATA / 'models' / 'tiny-llama.json')!r}), "
                         f"RunConfig(**{make_golden.TINY_RUN!r}, tp=2), {str(out)!r})", tmp)


def write_v4_addresses(din: Path, out: Path, tmp: Path) -> None:
    """The address trace of ``din`` (--straddle once) as the last tierlab writing version 4 wrote it."""
    if out.exists():
        shutil.rmtree(out)
    at_commit(V4_COMMIT, "from traces.importers import import_trace; "
                         f"import_trace({str(din)!r}, {str(out)!r}, straddle='once')", tmp)


def main() -> None:
    from tierlab.traces.importers.tracer_logs import import_trace

    # descriptor traces, one device
    write_by_hand(HERE / "v1-file-synthetic.trace", 1, "file", "large", 1)
    write_by_writer(HERE / "v3-synthetic.trace", 1)
    as_stream_form(HERE / "v3-synthetic.trace", HERE / "v3-stream-synthetic.trace")
    with_version(HERE / "v3-synthetic.trace", HERE / "v4-descriptors-synthetic.trace", 4)
    # descriptor traces, two devices
    write_by_hand(HERE / "v2-stream-synthetic2.trace", 2, "stream", "dictionary", 2)
    write_by_hand(HERE / "v2-file-synthetic2.trace", 2, "file", "plain", 2)
    write_by_writer(HERE / "v3-synthetic2.trace", 2)
    write_tiny_tp2(HERE / "v3-tiny-llama-tp2.trace")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_v2_tiny_tp2(HERE / "v2-stream-tiny-llama-tp2.trace", tmp)
        # address traces: the din files are written to the temporary folder (a manifest keeps only the name)
        din = write_din(tmp / "golden.din", DIN_RECORDS)
        import_trace(din, HERE / "v5-addresses.trace", straddle="both", force=True)
        write_v4_addresses(din, HERE / "v4-addresses.trace", tmp)
        wide = write_din(tmp / "wide.din", DIN_WIDE_RECORDS)
        import_trace(wide, HERE / "v5-addresses-64.trace", line=1, force=True)
    print("wrote the golden traces in", HERE)


if __name__ == "__main__":
    main()
