"""Trace format v3 (the Arrow IPC file form): old stream-form traces still read and replay the same,
non-Arrow files are named, the file form survives damage, zero-copy columns, polars and DuckDB."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tierlab.common.errors import TraceError
from tierlab.cli import main
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.pipeline.system_replay import replay_system
from tierlab.traces.format import schema as fmt
from tierlab.traces.format.reader import open_trace
from tierlab.traces.format.writer import TraceWriter

DATA = Path(__file__).parents[1] / "data"
TINY = DATA / "models" / "tiny-llama.json"


def _tiny(tmp: Path, name="t.trace", **run) -> Path:
    from tierlab.traces.lowering.generate import generate_trace
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model

    return generate_trace(load_model(str(TINY)), RunConfig(**{"prompt": 4, "generate": 2, "batch": 2, **run}),
                          tmp / name)


def _as_stream_form(src: Path, dst: Path, version: int) -> Path:
    """``src`` (a v3 trace) rewritten as the older version: every table in the IPC stream form,
    as tierlab 2 wrote it; a version-1 manifest names no devices."""
    shutil.copytree(src, dst)
    for f in dst.glob("*.arrow"):
        with pa.OSFile(str(f)) as m:          # a copy: the file is rewritten in place below
            table = pa.ipc.open_file(m).read_all()
        with pa.OSFile(str(f), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            for b in table.to_batches(max_chunksize=5):
                w.write_batch(b)
        assert f.read_bytes()[:4] == b"\xff\xff\xff\xff"
    m = json.loads((dst / fmt.MANIFEST).read_text())
    m["version"] = version
    if version == 1:
        del m["devices"]
    (dst / fmt.MANIFEST).write_text(json.dumps(m))
    return dst


def _rows(trace) -> pa.Table:
    return pa.Table.from_batches(list(trace.iter_accesses()))


def test_v1_stream_form_reads_and_replays_as_v3(tmp_path):
    new = _tiny(tmp_path)
    assert all((new / f).read_bytes()[:6] == b"ARROW1" for f in (fmt.TENSORS_FILE, fmt.OPS_FILE, fmt.ACCESSES_FILE))
    old = _as_stream_form(new, tmp_path / "v1.trace", 1)
    a, b = open_trace(new), open_trace(old)
    assert (a.version, b.version) == (3, 1)
    assert a.tensors.equals(b.tensors) and a.ops.equals(b.ops) and _rows(a).equals(_rows(b))
    for chip in ("h100", "sn40l"):
        ra, rb = replay_trace(a, chip).result, replay_trace(b, chip).result
        assert np.array_equal(ra.per_op, rb.per_op) and ra.per_op.sum() > 0


def test_v2_stream_form_reads_and_replays_as_v3(tmp_path):
    new = _tiny(tmp_path, tp=2)
    old = _as_stream_form(new, tmp_path / "v2.trace", 2)
    a, b = open_trace(new), open_trace(old)
    assert (a.version, b.version, a.n_devices, b.n_devices) == (3, 2, 2, 2)
    assert a.collectives.equals(b.collectives) and _rows(a).equals(_rows(b))
    ra, rb = replay_system(a, "dgx-h100"), replay_system(b, "dgx-h100")
    ca = [d.result.per_op for d in ra.devices]
    cb = [d.result.per_op for d in rb.devices]
    assert len(ca) == 2 and all(np.array_equal(x, y) for x, y in zip(ca, cb))


def test_one_device_v3_keeps_v1_tables(tmp_path):
    t = open_trace(_tiny(tmp_path))
    assert t.tensors.schema.equals(fmt.TENSORS_SCHEMA) and t.ops.schema.equals(fmt.OPS_SCHEMA)
    assert not (t.path / fmt.COLLECTIVES_FILE).exists() and t.manifest["devices"] == 1


@pytest.mark.parametrize("content, says", [
    (b"PAR1\x00\x00\x00\x00PAR1", "is a Parquet file, not an Arrow IPC table (file or stream form)"),
    (b"\x93NUMPY\x01\x00", "is a numpy .npy array, not an Arrow IPC table (file or stream form)"),
    (b"hello, world\n", "is not Arrow IPC (starts with b'hello, w'; expected b'ARROW1' or b'\\xff\\xff\\xff\\xff')"),
])
def test_non_arrow_table_is_named(tmp_path, content, says):
    p = shutil.copytree(DATA / "golden-v1-synthetic.trace", tmp_path / "g.trace")
    (p / fmt.ACCESSES_FILE).write_bytes(content)
    with pytest.raises(TraceError) as e:
        for _ in open_trace(p).iter_accesses():
            pass
    assert str(e.value) == f"{p / fmt.ACCESSES_FILE}: {says}"


def test_file_form_damage_is_a_trace_error(tmp_path):
    """A cut at every 4th byte and a 0xFF byte at every 7th of each file-form table: it reads
    whole or it is one TraceError (never a crash, never a wrong row count)."""
    src = tmp_path / "s.trace"
    with TraceWriter(src, batch_rows=2) as w:
        a = w.add_tensor("w", "weight", 100_000, "bf16")
        b = w.add_tensor("x", "activation", 300, "bf16")
        o = w.add_op("l", "linear", 0, "decode", 0, 1, 10)
        for k in range(5):
            w.add_access(o, a, 1000 * k, 100, count=3, stride=200)
        w.add_access(o, b, 0, 300, is_write=True)
    for file in (fmt.TENSORS_FILE, fmt.OPS_FILE, fmt.ACCESSES_FILE):
        blob = (src / file).read_bytes()
        damaged = [blob[:i] for i in range(0, len(blob), 4)]
        damaged += [blob[:i] + b"\xff" + blob[i + 1:] for i in range(0, len(blob), 7)]
        outcomes = set()
        for k, d in enumerate(damaged):
            p = tmp_path / f"d{k}.trace"
            shutil.copytree(src, p)
            (p / file).write_bytes(d)
            try:
                t = open_trace(p)
                n = sum(x.num_rows for x in t.iter_accesses(batch_rows=2))
                assert n == t.n_accesses == 6
                outcomes.add("read")
            except TraceError as err:
                assert "\n" not in str(err) and str(p / file) in str(err)
                outcomes.add("error")
            shutil.rmtree(p)
        assert "error" in outcomes       # the damage was seen


def test_access_columns_zero_copy_and_batches_exact(tmp_path):
    n = 10_000
    with TraceWriter(tmp_path / "z.trace") as w:
        x = w.add_tensor("x", "weight", 64 * n, "bf16")
        o = w.add_op("l", "linear", 0, "decode", 0, 1, 1)
        w.add_accesses(np.full(n, o), np.full(n, x), np.arange(n) * 64, np.full(n, 64))
    t = open_trace(tmp_path / "z.trace")
    cols = t.access_columns()
    assert cols["offset"].tolist() == (np.arange(n) * 64).tolist() and cols["nbytes"].dtype == np.uint64
    for name in ("op_id", "tensor_id", "offset", "nbytes", "count", "stride"):
        assert not cols[name].flags.writeable and not cols[name].flags.owndata    # views of the map
    for rows in (1000, 3000, 1 << 20):
        sizes = [b.num_rows for b in t.iter_accesses(rows)]
        assert sizes == [rows] * (n // rows) + ([n % rows] if n % rows else [])
        assert np.array_equal(np.concatenate([b.column(2).to_numpy() for b in t.iter_accesses(rows)]),
                              cols["offset"])
    # several stored batches: the re-cut batches are the same rows, exactly batch_rows each
    small = open_trace(DATA / "golden-v1-synthetic.trace")
    assert [b.num_rows for b in small.iter_accesses(2)] == [2, 2, 2, 1]
    assert _rows(small).column("offset").to_numpy().tolist() == small.access_columns()["offset"].tolist()


def test_polars_and_duckdb_open_a_fresh_trace(tmp_path):
    import duckdb
    import polars as pl

    p = _tiny(tmp_path)
    t = open_trace(p)
    acc = pl.read_ipc(p / fmt.ACCESSES_FILE)
    assert acc.height == t.n_accesses and acc["nbytes"].sum() == int(t.access_columns()["nbytes"].sum())
    assert pl.read_ipc(p / fmt.TENSORS_FILE)["name"].to_list() == t.tensors.column("name").to_pylist()
    r = CliRunner().invoke(main, ["export", str(p), "--format", "parquet", "-o", str(tmp_path / "pq")])
    assert r.exit_code == 0, r.output
    assert sorted(f.name for f in (tmp_path / "pq").iterdir()) == ["accesses.parquet", "ops.parquet", "tensors.parquet"]
    con = duckdb.connect()
    got = con.execute(f"select count(*), sum(nbytes * count) from '{tmp_path}/pq/accesses.parquet'").fetchone()
    cols = t.access_columns()
    assert got == (t.n_accesses, int((cols["nbytes"] * cols["count"]).sum()))
    by_kind = dict(con.execute(f"select t.kind, sum(a.nbytes * a.count) from '{tmp_path}/pq/accesses.parquet' a "
                               f"join '{tmp_path}/pq/tensors.parquet' t using (tensor_id) group by 1").fetchall())
    assert sum(by_kind.values()) == got[1] and by_kind["weight"] > 0
    # DuckDB from Python also scans the Arrow table pyarrow reads from the memory map
    con.register("acc", pa.ipc.open_file(pa.memory_map(str(p / fmt.ACCESSES_FILE))).read_all())
    assert con.execute("select count(*), sum(nbytes * count) from acc").fetchone() == got
    meta = pq.read_schema(tmp_path / "pq" / "ops.parquet").metadata
    assert json.loads(meta[b"tierlab_manifest"]) == t.manifest
    # one table to one file
    r = CliRunner().invoke(main, ["export", str(p), "--format", "parquet", "--table", "ops", "-o",
                                  str(tmp_path / "ops.parquet")])
    assert r.exit_code == 0 and pq.read_table(tmp_path / "ops.parquet").num_rows == t.n_ops
