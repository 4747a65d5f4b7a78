"""Trace format v2: devices and collectives written and read back; a one-device trace is still v1;
the reader refuses a malformed v2 trace with one line naming the file and field."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tierlab.common.errors import TraceError
from tierlab.traces.format import schema as fmt
from tierlab.traces.format.reader import open_trace
from tierlab.traces.format.writer import TraceWriter


def _two_device_trace(path):
    with TraceWriter(path, run={"tp": 2}, alignment=4096, devices=2) as w:
        w0 = w.add_tensor("w", "weight", 10_000, "bf16", layer=0, device=0)
        w1 = w.add_tensor("w", "weight", 10_000, "bf16", layer=0, device=1)
        a0 = w.add_tensor("act", "activation", 512, "bf16", device=0)
        a1 = w.add_tensor("act", "activation", 512, "bf16", device=1)
        for d, (wt, act) in enumerate(((w0, a0), (w1, a1))):
            op = w.add_op("proj", "linear", 0, "decode", 0, 1, 100, device=d)
            w.add_access(op, wt, 0, 10_000)
            w.add_access(op, act, 0, 512, is_write=True)
        ar = w.add_collective("all_reduce", [0, 1], 512, "decode", 0, layer=0)
        for d, act in ((0, a0), (1, a1)):
            op = w.add_op("all_reduce", "all_reduce", 0, "decode", 0, 1, 0, device=d, collective=ar)
            w.add_access(op, act, 0, 512)
            w.add_access(op, act, 0, 512, is_write=True)
        w.add_collective("all_to_all", [1, 0], 96, "decode", 0, send_bytes=[[0, 40], [56, 0]])
        w.add_collective("send_recv", [0, 1], 512, "decode", 0)
    return path


def test_devices_and_collectives_round_trip(tmp_path):
    t = open_trace(_two_device_trace(tmp_path / "t.trace"))
    assert t.version == 3 and t.n_devices == 2 and t.manifest["devices"] == 2
    assert t.tensor_device.tolist() == [0, 1, 0, 1]
    assert t.op_device.tolist() == [0, 1, 0, 1]
    assert t.op_collective.tolist() == [-1, -1, 0, 0]
    # each device its own address space, from 0
    addr = t.tensors.column("address").to_pylist()
    assert addr == [0, 0, 12288, 12288]
    c = t.collectives.to_pylist()
    assert [r["kind"] for r in c] == ["all_reduce", "all_to_all", "send_recv"]
    assert c[0]["ranks"] == [0, 1] and c[0]["size_bytes"] == 512 and c[0]["send_bytes"] == []
    assert c[1]["ranks"] == [1, 0] and c[1]["send_bytes"] == [0, 40, 56, 0]
    assert sum(b.num_rows for b in t.iter_accesses()) == 8
    assert t.manifest["tables"] == {"tensors": 4, "ops": 4, "accesses": 8, "collectives": 3}


def test_one_device_is_still_version_1(tmp_path):
    with TraceWriter(tmp_path / "one.trace", run=None) as w:
        x = w.add_tensor("x", "activation", 64, "bf16")
        w.add_access(w.add_op("op", "other", -1, "decode", 0, 1, 0), x, 0, 64)
        with pytest.raises(TraceError, match="a one-device trace has no collectives"):
            w.add_collective("all_reduce", [0, 1], 64, "decode", 0)
        with pytest.raises(TraceError, match="device 1 outside the trace's 1 device"):
            w.add_tensor("y", "activation", 64, "bf16", device=1)
    t = open_trace(tmp_path / "one.trace")
    # version 3 keeps version 1's tables for one device: no device columns, no collectives file
    assert t.version == 3 and t.manifest["devices"] == 1 and not (tmp_path / "one.trace" / fmt.COLLECTIVES_FILE).exists()
    assert t.tensors.schema.equals(fmt.TENSORS_SCHEMA) and t.ops.schema.equals(fmt.OPS_SCHEMA)
    assert t.n_devices == 1 and t.tensor_device.tolist() == [0] and t.op_collective.tolist() == [-1]
    assert t.collectives.num_rows == 0


@pytest.mark.parametrize("call, match", [
    (lambda w: w.add_collective("broadcast", [0, 1], 8, "decode", 0), "collective kind 'broadcast'"),
    (lambda w: w.add_collective("all_reduce", [0, 0], 8, "decode", 0), "expected two or more distinct devices"),
    (lambda w: w.add_collective("send_recv", [0, 1, 2], 8, "decode", 0), "expected two distinct devices"),
    (lambda w: w.add_collective("all_reduce", [0, 3], 8, "decode", 0), "device 3 outside"),
    (lambda w: w.add_collective("all_reduce", [0, 1], 8, "decode", 0, send_bytes=[1, 2, 3, 4]), "send_bytes"),
    (lambda w: w.add_collective("all_to_all", [0, 1], 8, "decode", 0, send_bytes=[1, 2, 3]), "send_bytes"),
    (lambda w: w.add_op("x", "other", -1, "decode", 0, 1, 0, device=1, collective=0), "not declared"),
])
def test_writer_refuses_malformed_collectives(tmp_path, call, match):
    with pytest.raises(TraceError, match=match):
        with TraceWriter(tmp_path / "bad.trace", run=None, devices=3) as w:
            call(w)
    assert not (tmp_path / "bad.trace").exists()


def _rewrite(path, file, schema, edit):
    with pa.OSFile(str(path / file), "rb") as src:
        table = pa.ipc.open_file(src).read_all()          # version 3: the IPC file form
    table = edit(table)
    with pa.OSFile(str(path / file), "wb") as sink, pa.ipc.new_file(sink, schema) as out:
        out.write_table(table)


def _set(table, name, values):
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


@pytest.mark.parametrize("file, schema, edit, field, match", [
    (fmt.TENSORS_FILE, fmt.TENSORS_SCHEMA_V2, lambda t: _set(t, "device", [0, 2, 0, 1]), "device",
     "device 2 outside the trace's 2 devices"),
    (fmt.OPS_FILE, fmt.OPS_SCHEMA_V2, lambda t: _set(t, "collective", [-1, -1, 0, 5]), "collective",
     "names collective 5, which is not declared"),
    (fmt.COLLECTIVES_FILE, fmt.COLLECTIVES_SCHEMA, lambda t: _set(t, "kind", ["all_reduce", "gossip", "send_recv"]),
     "kind", "kind 'gossip'"),
    (fmt.COLLECTIVES_FILE, fmt.COLLECTIVES_SCHEMA, lambda t: _set(t, "ranks", [[0, 1], [1, 1], [0, 1]]),
     "ranks", "are not distinct devices"),
    (fmt.TENSORS_FILE, fmt.TENSORS_SCHEMA_V2, lambda t: _set(t, "device", [0, 0, 0, 0]), "address",
     "overlap"),
])
def test_reader_refuses_malformed_v2(tmp_path, file, schema, edit, field, match):
    p = _two_device_trace(tmp_path / "t.trace")
    _rewrite(p, file, schema, edit)
    with pytest.raises(TraceError, match=match) as e:
        open_trace(p)
    assert e.value.field == field and "\n" not in str(e.value)


def test_v2_manifest_needs_devices(tmp_path):
    p = _two_device_trace(tmp_path / "t.trace")
    m = json.loads((p / fmt.MANIFEST).read_text())
    del m["devices"]
    (p / fmt.MANIFEST).write_text(json.dumps(m))
    with pytest.raises(TraceError, match="devices is None") as e:
        open_trace(p)
    assert e.value.field == "devices"
