"""Trace format v1: writer/reader round trip, golden files, and every way a trace can be wrong."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tierlab.traces.format import schema as fmt
from tierlab.common.errors import TraceError, UsageError
from tierlab.traces.format.reader import open_trace
from tierlab.traces.format.writer import TraceWriter

DATA = Path(__file__).parents[1] / "data"
sys.path.insert(0, str(DATA))
import make_golden  # noqa: E402


def small(path, **kw):
    """A hand-made trace through the writer: 2 tensors, 3 ops, 4 accesses."""
    with TraceWriter(path, batch_rows=2, **kw) as w:
        a = w.add_tensor("w", "weight", 100_000, "bf16", layer=0)
        b = w.add_tensor("x", "activation", 300, "bf16")
        o0 = w.add_op("l", "linear", 0, "prefill", -1, 4, 1000)
        w.add_access(o0, a, 0, 100, count=10, stride=1000)
        w.add_access(o0, b, 0, 300, is_write=True)
        o1 = w.add_op("l", "linear", 0, "decode", 0, 1, 10, pim_eligible=True)
        w.add_op("n", "norm", 0, "decode", 0, 1, 5, expert=3)
        w.add_accesses([o1, 2], [a, b], [99_000, 0], [1000, 300], count=[1, 1], is_write=[False, True])
    return open_trace(path)


def test_round_trip(tmp_path):
    t = small(tmp_path / "s.trace")
    assert t.manifest["format"] == "tierlab-trace" and t.manifest["version"] == 3 and t.manifest["devices"] == 1
    for file in (fmt.TENSORS_FILE, fmt.OPS_FILE, fmt.ACCESSES_FILE):    # version 3: the IPC file form
        assert (tmp_path / "s.trace" / file).read_bytes()[:6] == b"ARROW1"
    assert t.manifest["tables"] == {"tensors": 2, "ops": 3, "accesses": 4}
    assert t.manifest["model"] is None and t.manifest["run"] is None
    assert t.tensors.column("address").to_pylist() == [0, 2 * fmt.DEFAULT_ALIGNMENT]
    assert t.ops.column("pim_eligible").to_pylist() == [False, True, False]
    assert t.ops.column("expert").to_pylist() == [-1, -1, 3]
    rows = pa.Table.from_batches(list(t.iter_accesses())).to_pydict()
    assert rows["offset"] == [0, 0, 99_000, 0] and rows["count"] == [10, 1, 1, 1]
    assert rows["is_write"] == [False, True, False, True]
    assert oct((tmp_path / "s.trace").stat().st_mode & 0o777) != oct(0o700)


def test_index_keys_are_their_own_kind_and_older_traces_read(tmp_path):
    """A sparse-attention indexer's cached keys (DeepSeek-V3.2) are kind kv_index: the summary counts them in
    the KV cache's bytes and their traffic apart, the engine breaks them out. A trace from before the kind,
    holding them as kv, reads as it did; a kind this tierlab does not know counts as other."""
    from tierlab.engine.geometry import KINDS, kind_index
    from tierlab.traces.format.summary import summarize

    for kind in ("kv_index", "kv"):
        with TraceWriter(tmp_path / f"{kind}.trace") as w:
            k = w.add_tensor("layers.0.kv.k", "kv", 1000, "bf16", layer=0)
            x = w.add_tensor("layers.0.kv.index", kind, 500, "bf16", layer=0)
            op = w.add_op("index_scores", "attention", 0, "decode", 0, 1, 10)
            w.add_accesses([op, op], [k, x], [0, 0], [1000, 500])
        s = summarize(open_trace(tmp_path / f"{kind}.trace"))
        assert s["kv_bytes"] == 1500
        assert s["bytes"]["decode"]["kv"]["read"] == (1000 if kind == "kv_index" else 1500)
        assert s["bytes"]["decode"].get("kv_index", {}).get("read", 0) == (500 if kind == "kv_index" else 0)
    assert kind_index(["kv_index", "kv", "no-such-kind"]).tolist() == [KINDS.index(k) for k in ("kv_index", "kv",
                                                                                                 "other")]


def test_alignment_recorded_and_applied(tmp_path):
    t = small(tmp_path / "s.trace", alignment=1 << 20, run={"note": "x"})
    assert t.tensors.column("address").to_pylist() == [0, 1 << 20]
    assert t.manifest["run"]["alignment"] == 1 << 20 == t.alignment
    with pytest.raises(UsageError, match="power of two"):
        TraceWriter(tmp_path / "x", alignment=1000)


def test_batches_bounded_and_complete(tmp_path):
    t = small(tmp_path / "s.trace")
    for n in (1, 3, 100):
        batches = list(t.iter_accesses(batch_rows=n))
        assert all(b.num_rows <= n for b in batches)
        assert sum(b.num_rows for b in batches) == 4


def test_writer_error_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with TraceWriter(tmp_path / "s.trace") as w:
            w.add_tensor("w", "weight", 10, "bf16")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", [
    dict(offset=95, nbytes=10),                  # past the end
    dict(offset=0, nbytes=10, count=3, stride=50),
    dict(offset=0, nbytes=0),
    dict(offset=0, nbytes=1, count=0),
])
def test_writer_refuses_access_outside_tensor(tmp_path, bad):
    with pytest.raises(TraceError):
        with TraceWriter(tmp_path / "s.trace") as w:
            t = w.add_tensor("w", "weight", 100, "bf16")
            o = w.add_op("l", "linear", 0, "decode", 0, 1, 1)
            w.add_access(o, t, **bad)
    assert list(tmp_path.iterdir()) == []


def test_writer_refuses_out_of_order_ops(tmp_path):
    with pytest.raises(TraceError, match="op order"):
        with TraceWriter(tmp_path / "s.trace") as w:
            t = w.add_tensor("w", "weight", 100, "bf16")
            w.add_op("a", "linear", 0, "decode", 0, 1, 1)
            o1 = w.add_op("b", "linear", 0, "decode", 0, 1, 1)
            w.add_access(o1, t, 0, 1)
            w.add_access(0, t, 0, 1)


def test_golden_synthetic_is_valid():
    t = open_trace(DATA / "golden-v1-synthetic.trace")
    assert t.manifest["model"] is None
    assert t.tensors.schema.equals(fmt.TENSORS_SCHEMA)       # dictionary strings decoded
    assert t.tensors.column("kind").to_pylist() == ["weight", "kv", "activation"]
    rows = pa.Table.from_batches(list(t.iter_accesses())).to_pylist()
    assert [tuple(r.values()) for r in rows] == make_golden.SYN_ACCESSES


def test_golden_tiny_llama_reproduced(tmp_path):
    golden = open_trace(DATA / "golden-v1-tiny-llama.trace")
    make_golden.write_tiny(tmp_path / "now.trace")
    now = open_trace(tmp_path / "now.trace")
    assert golden.tensors.equals(now.tensors) and golden.ops.equals(now.ops)
    assert pa.Table.from_batches(list(golden.iter_accesses())).equals(pa.Table.from_batches(list(now.iter_accesses())))
    assert golden.manifest["run"] == now.manifest["run"]


# ---- corrupt traces ------------------------------------------------------------------------------

@pytest.fixture
def copy(tmp_path):
    dst = tmp_path / "g.trace"
    shutil.copytree(DATA / "golden-v1-synthetic.trace", dst)
    return dst


def _manifest(p, **changes):
    m = json.loads((p / "manifest.json").read_text())
    m.update(changes)
    (p / "manifest.json").write_text(json.dumps(m))


def _rewrite(p, table, transform):
    file, schema = fmt.TABLES[table]
    with pa.OSFile(str(p / file), "rb") as src:
        t = pa.ipc.open_stream(src).read_all()
    t = transform(t)
    with pa.OSFile(str(p / file), "wb") as sink, pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)


def _drain(p):
    return sum(b.num_rows for b in open_trace(p).iter_accesses())


@pytest.mark.parametrize("version,match", [(6, "newer than this tierlab reads"), (0, "unknown trace format version 0"),
                                           ("1", "not an integer")])
def test_version_refused(copy, version, match):
    _manifest(copy, version=version)
    with pytest.raises(TraceError, match=match) as e:
        open_trace(copy)
    assert e.value.field == "version" and "manifest.json" in str(e.value)


def test_wrong_format_name(copy):
    _manifest(copy, format="other")
    with pytest.raises(TraceError, match="format"):
        open_trace(copy)


def test_no_manifest_is_not_a_trace(copy):
    (copy / "manifest.json").unlink()
    with pytest.raises(TraceError, match="not a complete trace"):
        open_trace(copy)


def test_missing_table_file(copy):
    (copy / "ops.arrow").unlink()
    with pytest.raises(TraceError, match="missing table file") as e:
        open_trace(copy)
    assert "ops.arrow" in str(e.value)


def test_truncated_accesses(copy):
    f = copy / "accesses.arrow"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError) as e:
        _drain(copy)
    assert "accesses.arrow" in str(e.value)


def test_truncated_tensors(copy):
    f = copy / "tensors.arrow"
    f.write_bytes(f.read_bytes()[:100])
    with pytest.raises(TraceError, match="truncated or corrupt"):
        open_trace(copy)


def test_row_count_mismatch(copy):
    _manifest(copy, tables={"tensors": 3, "ops": 3, "accesses": 9})
    with pytest.raises(TraceError, match="holds 7 access rows, the manifest says 9"):
        _drain(copy)
    _manifest(copy, tables={"tensors": 4, "ops": 3, "accesses": 7})
    with pytest.raises(TraceError, match="holds 3 rows"):
        open_trace(copy)


def test_schema_mismatch(copy):
    _rewrite(copy, "tensors", lambda t: t.set_column(0, "tensor_id", t.column(0).cast(pa.int64())))
    with pytest.raises(TraceError, match="expected uint32") as e:
        open_trace(copy)
    assert e.value.field == "tensor_id"


def test_missing_column(copy):
    _rewrite(copy, "ops", lambda t: t.drop_columns(["pim_eligible"]))
    with pytest.raises(TraceError, match="missing columns"):
        open_trace(copy)


def _set(t, name, values):
    i = t.schema.get_field_index(name)
    return t.set_column(i, name, pa.array(values, type=t.schema.field(name).type))


@pytest.mark.parametrize("column,values,match", [
    ("offset", [0, 0, 0, 0, 192, 0, 300], "outside tensor 2"),
    ("stride", [0, 64, 1024, 4096, 0, 4096, 0], "outside tensor 1"),
    ("stride", [0, 64, 1024, 2048, 0, 2**63, 0], "outside tensor 0"),     # would wrap around in uint64
    ("op_id", [0, 0, 0, 1, 2, 1, 2], "op ids decrease"),
    ("op_id", [0, 0, 0, 1, 1, 2, 5], "does not exist"),
    ("tensor_id", [0, 2, 1, 1, 2, 0, 9], "tensor id 9 does not exist"),
    ("count", [1, 4, 4, 0, 1, 2, 1], "count below 1"),
    ("nbytes", [8192, 64, 1024, 1024, 0, 4096, 32], "nbytes below 1"),
])
def test_bad_access_rows(copy, column, values, match):
    _rewrite(copy, "accesses", lambda t: _set(t, column, values))
    with pytest.raises(TraceError, match=match):
        _drain(copy)


def test_op_ids_must_be_in_order(copy):
    _rewrite(copy, "ops", lambda t: _set(t, "op_id", [0, 2, 1]))
    with pytest.raises(TraceError, match="0..n-1"):
        open_trace(copy)


def test_overlapping_or_misaligned_tensors(copy):
    _rewrite(copy, "tensors", lambda t: _set(t, "address", [0, 4096, 131072]))
    with pytest.raises(TraceError, match="overlap"):
        open_trace(copy)
    _manifest(copy, alignment=65536)
    with pytest.raises(TraceError, match="not a multiple of the alignment"):
        open_trace(copy)


def test_arrays_helpers():
    t = open_trace(DATA / "golden-v1-synthetic.trace")
    ta, oa = t.tensor_arrays(), t.op_arrays()
    assert list(ta["nbytes"]) == [8192, 4096, 256] and ta["nbytes"].dtype == np.uint64
    assert list(oa["phase"]) == ["prefill", "decode", "decode"]


# ---- the reader's checks against a plain-Python twin ----------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_row = st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 300), st.integers(0, 120),
                 st.integers(0, 4), st.integers(0, 200), st.booleans())


def _reference_ok(sizes, n_ops, rows):
    last = 0
    for op, t, off, nb, cnt, stride, _ in rows:
        if op < last or op >= n_ops or t >= len(sizes) or cnt < 1 or nb < 1:
            return False
        if off + (cnt - 1) * stride + nb > sizes[t]:
            return False
        last = op
    return True


@given(st.lists(st.integers(1, 400), min_size=1, max_size=3), st.integers(1, 3), st.lists(_row, max_size=12),
       st.integers(1, 5), st.booleans())
@settings(max_examples=150, deadline=None)
def test_reader_accepts_exactly_what_the_spec_allows(tmp_path_factory, sizes, n_ops, rows, batch, file_form):
    p = tmp_path_factory.mktemp("h") / "h.trace"
    p.mkdir()
    tables = {
        "tensors": [(i, f"t{i}", "weight", -1, -1, "bf16", i * 512, n) for i, n in enumerate(sizes)],
        "ops": [(i, "op", "linear", 0, "decode", 0, 1, 1, -1, False) for i in range(n_ops)],
        "accesses": rows,
    }
    for name, data in tables.items():
        file, schema = fmt.TABLES[name]
        cols = list(zip(*data)) if data else [[] for _ in schema]
        t = pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(cols, schema)], schema=schema)
        new = pa.ipc.new_file if file_form else pa.ipc.new_stream     # the reader takes either form
        with pa.OSFile(str(p / file), "wb") as sink, new(sink, schema) as w:
            for b in t.to_batches(max_chunksize=batch):
                w.write_batch(b)
    (p / "manifest.json").write_text(json.dumps({"format": "tierlab-trace", "version": 1, "model": None, "run": None,
                                                 "tables": {k: len(v) for k, v in tables.items()}}))
    if _reference_ok(sizes, n_ops, rows):
        got = [tuple(r.values()) for b in open_trace(p).iter_accesses(batch_rows=3) for r in b.to_pylist()]
        assert got == rows
    else:
        with pytest.raises(TraceError):
            _drain(p)
