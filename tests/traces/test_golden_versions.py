"""Golden traces of every trace-format version and form the reader accepts (tests/data/golden, made once
by tests/data/golden/make_goldens.py; README.md there says how each was made).

Each golden is opened with the current reader and checked against values written here by hand from
the spec (docs/trace-format.md) and the goldens' inputs: row counts, exact columns, and a replay on a
tiny chip whose counts are worked out below (for the generated tiny-llama traces, against a plain
Python count of the blocks their accesses touch). A reader change that breaks an old version or form
fails here. The goldens are never rewritten by a test.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tierlab.chip.chipfile import load_chip
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.pipeline.system_replay import replay_system
from tierlab.system.systemfile import load_system
from tierlab.traces.format import schema as fmt
from tierlab.traces.format.reader import open_trace

DATA = Path(__file__).parents[1] / "data"
GOLDEN = DATA / "golden"

FILE, STREAM = b"ARROW1", b"\xff\xff\xff\xff"

# name -> (manifest version, kind, form of its tables, devices)
GOLDENS = {
    "../golden-v1-synthetic.trace": (1, "descriptors", STREAM, 1),
    "../golden-v1-tiny-llama.trace": (1, "descriptors", STREAM, 1),
    "v1-file-synthetic.trace": (1, "descriptors", FILE, 1),
    "v2-stream-synthetic2.trace": (2, "descriptors", STREAM, 2),
    "v2-file-synthetic2.trace": (2, "descriptors", FILE, 2),
    "v2-stream-tiny-llama-tp2.trace": (2, "descriptors", STREAM, 2),
    "v3-synthetic.trace": (3, "descriptors", FILE, 1),
    "v3-stream-synthetic.trace": (3, "descriptors", STREAM, 1),
    "v3-synthetic2.trace": (3, "descriptors", FILE, 2),
    "v3-tiny-llama-tp2.trace": (3, "descriptors", FILE, 2),
    "v4-descriptors-synthetic.trace": (4, "descriptors", FILE, 1),
    "v4-addresses.trace": (4, "addresses", FILE, 1),
    "v5-addresses.trace": (5, "addresses", FILE, 1),
    "v5-addresses-64.trace": (5, "addresses", FILE, 1),
}


def chip_toml(tmp_path: Path, cache: str, block: str):
    """A cache tier ``c`` (fully associative LRU) over a memory tier ``m`` that homes every tensor."""
    p = tmp_path / "tiny.toml"
    p.write_text(f'name = "tiny"\n[compute]\nflops = {{ bf16 = "1 TFLOP/s" }}\nenergy = {{ bf16 = "1 pJ" }}\n'
                 f'[[tier]]\nname = "c"\ncapacity = "{cache}"\nblock = "{block}"\nmanaged = "cache"\n'
                 'bandwidth = "1 TB/s"\nread_energy = "1 pJ/bit"\nwrite_energy = "1 pJ/bit"\n'
                 f'[[tier]]\nname = "m"\ncapacity = "1 GiB"\nblock = "{block}"\nmanaged = "memory"\n'
                 'bandwidth = "100 GB/s"\nread_energy = "1 pJ/bit"\nwrite_energy = "1 pJ/bit"\n'
                 '[[link]]\nfrom = "c"\nto = "m"\nbandwidth = "100 GB/s"\nenergy = "1 pJ/bit"\n')
    return load_chip(str(p))


def hits_misses(result, tier="c"):
    t = result.tier(tier)
    return t["hits"], t["misses"]


def rows(trace) -> list[tuple]:
    return [tuple(r.values()) for r in pa.Table.from_batches(list(trace.iter_accesses())).to_pylist()]


# ---- every version and form ------------------------------------------------------------------------

def test_a_golden_for_every_version_the_reader_accepts():
    """Every version the reader accepts has a golden (a new version needs one here), each in the
    stream and the file form for versions 1-3, and each golden is what its name says."""
    assert {v for v, _, _, _ in GOLDENS.values()} == set(fmt.READ_VERSIONS) == {1, 2, 3, 4, 5}
    for v in (1, 2, 3):
        assert {form for vv, kind, form, _ in GOLDENS.values() if vv == v} == {FILE, STREAM}
    assert {(v, kind) for v, kind, _, _ in GOLDENS.values() if v >= 4} == {(4, "descriptors"), (4, "addresses"),
                                                                             (5, "addresses")}
    assert sorted(p.name for p in GOLDEN.glob("*.trace")) == sorted(n for n in GOLDENS if "/" not in n)
    for name, (version, kind, form, devices) in GOLDENS.items():
        p = GOLDEN / name
        m = json.loads((p / "manifest.json").read_text())
        assert (m["format"], m["version"], m.get("kind", "descriptors")) == ("tierlab-trace", version, kind), name
        assert ("devices" in m) == (version > 1), name              # version 1 names no devices
        tables = sorted(f.name for f in p.glob("*.arrow"))
        assert tables and all((p / f).read_bytes()[:len(form)] == form for f in tables), name
        assert sum(f.stat().st_size for f in p.iterdir()) < 80_000, name     # small
        t = open_trace(p)
        assert (t.version, t.kind, t.n_devices) == (version, kind, devices), name
        assert sum(b.num_rows for b in t.iter_accesses()) == t.n_accesses, name


# ---- one device, written by hand / by the writer: the same content in every version and form ------

ONE_DEVICE = ["../golden-v1-synthetic.trace", "v1-file-synthetic.trace", "v3-synthetic.trace",
              "v3-stream-synthetic.trace", "v4-descriptors-synthetic.trace"]


@pytest.mark.parametrize("name", ONE_DEVICE)
def test_one_device_synthetic(name, tmp_path):
    t = open_trace(GOLDEN / name)
    assert t.tensors.schema.equals(fmt.TENSORS_SCHEMA) and t.ops.schema.equals(fmt.OPS_SCHEMA)  # strings decoded
    assert t.collectives.num_rows == 0 and t.manifest["model"] is None and t.manifest["run"] is None
    assert t.manifest["tables"] == {"tensors": 3, "ops": 3, "accesses": 7}
    tens = t.tensors.to_pydict()
    assert tens["name"] == ["w0", "kv0", "x"] and tens["kind"] == ["weight", "kv", "activation"]
    assert tens["address"] == [0, 65536, 131072] and tens["nbytes"] == [8192, 4096, 256]
    assert tens["layer"] == [0, 0, -1] and tens["dtype"] == ["bf16"] * 3
    ops = t.ops.to_pydict()
    assert ops["name"] == ["proj", "attn", "proj"] and ops["kind"] == ["linear", "attention", "linear"]
    assert ops["phase"] == ["prefill", "decode", "decode"] and ops["step"] == [-1, 0, 0]
    assert ops["tokens"] == [4, 1, 1] and ops["flops"] == [16384, 512, 8192]
    assert ops["pim_eligible"] == [False, True, True]
    assert rows(t) == [(0, 0, 0, 8192, 1, 0, False), (0, 2, 0, 64, 4, 64, False), (0, 1, 0, 1024, 4, 1024, True),
                       (1, 1, 0, 1024, 2, 2048, False), (1, 2, 192, 64, 1, 0, True),
                       (2, 0, 0, 4096, 2, 4096, False), (2, 2, 0, 32, 1, 0, True)]
    # 64-byte blocks in a cache holding all of them: op 0 misses every block it touches (w0's 128,
    # x's 4, kv0's 64 written); op 1 re-reads 32 of kv0's and writes x's last; op 2 re-reads all of
    # w0's 128 and writes x's first
    r = replay_trace(t, chip_toml(tmp_path, "16 KiB", "64 B")).result
    assert hits_misses(r) == (33 + 129, 196)
    per_op = r.per_op[:, r.tier_names.index("c")]
    assert [(int(o[0]), int(o[1])) for o in per_op] == [(0, 196), (33, 0), (129, 0)]


# ---- two devices: versions 2 (both forms) and 3 ------------------------------------------------------

TWO_DEVICES = ["v2-stream-synthetic2.trace", "v2-file-synthetic2.trace", "v3-synthetic2.trace"]


@pytest.mark.parametrize("name", TWO_DEVICES)
def test_two_device_synthetic(name, tmp_path):
    t = open_trace(GOLDEN / name)
    assert t.tensors.schema.equals(fmt.TENSORS_SCHEMA_V2) and t.ops.schema.equals(fmt.OPS_SCHEMA_V2)
    assert t.manifest["tables"] == {"tensors": 5, "ops": 9, "accesses": 16, "collectives": 3}
    tens = t.tensors.to_pydict()
    assert tens["name"] == ["w", "x", "w", "x", "kv"] and tens["device"] == [0, 0, 1, 1, 1]
    assert tens["address"] == [0, 65536, 0, 65536, 131072]          # each device its own address space
    assert tens["nbytes"] == [8192, 512, 8192, 512, 2048]
    ops = t.ops.to_pydict()
    assert ops["device"] == [0, 1, 0, 1, 1, 0, 1, 1, 0] and ops["collective"] == [-1, -1, 0, 0, -1, 1, 1, 2, 2]
    assert ops["kind"] == ["linear", "linear", "all_reduce", "all_reduce", "attention", "all_to_all", "all_to_all",
                           "send_recv", "send_recv"]
    assert ops["flops"] == [8192, 8192, 0, 0, 512, 0, 0, 0, 0]
    c = t.collectives.to_pydict()
    assert c["kind"] == ["all_reduce", "all_to_all", "send_recv"] and c["ranks"] == [[0, 1], [0, 1], [1, 0]]
    assert c["size_bytes"] == [512, 384, 256] and c["send_bytes"] == [[], [128, 256, 192, 64], []]
    assert c["phase"] == ["decode"] * 3 and c["step"] == [0, 0, 0] and c["layer"] == [0, 0, -1]
    r = rows(t)
    assert len(r) == 16 and r[0] == (0, 0, 0, 8192, 1, 0, False) and r[8] == (4, 4, 0, 512, 4, 512, False)
    assert r[-1] == (8, 1, 256, 256, 1, 0, True)
    # each device replays its own slice; a cache holding all its blocks (64 B) misses each block once:
    # device 0 touches w (128 blocks) and x (8), hitting x's first two (written by proj) in the
    # all-reduce's read, then every later touch of x (8 + 6 + 6 + 4); device 1 also kv (32), and x's
    # later touches (8 + 1 + 4 + 4 + 4)
    system = dataclasses.replace(load_system("dgx-h100"), chip=chip_toml(tmp_path, "16 KiB", "64 B"))
    sr = replay_system(t, system)
    assert [hits_misses(d.result) for d in sr.devices] == [(2 + 24, 136), (2 + 21, 168)]


# ---- a generated two-device trace: version 2 as tierlab 2 wrote it, version 3 as tierlab writes it ---

TINY_TP2 = ["v2-stream-tiny-llama-tp2.trace", "v3-tiny-llama-tp2.trace"]
HIDDEN, INTER, VOCAB, LAYERS, HEAD_DIM = 64, 128, 256, 2, 16       # tests/data/models/tiny-llama.json
BATCH, PROMPT, GENERATE, BF16 = 2, 4, 2, 2                          # make_golden.TINY_RUN, --tp 2


@pytest.mark.parametrize("name", TINY_TP2)
def test_tiny_llama_tp2(name):
    t = open_trace(GOLDEN / name)
    assert t.manifest["tables"] == {"tensors": 76, "ops": 234, "accesses": 718, "collectives": 18}
    assert t.manifest["run"]["tp"] == 2 and t.manifest["shard"]["devices"] == 2 and t.manifest["alignment"] == 4096
    tens = t.tensors.to_pydict()
    dev = np.array(tens["device"])
    assert (dev == 0).sum() == (dev == 1).sum() == 38
    # per device: its half of every matrix (q, k, v, o column/row split; gate, up, down; embedding and
    # LM head by vocabulary), every norm whole; K and V of its one KV head for batch x (prompt + generate)
    q, kv = HIDDEN * HIDDEN, HIDDEN * 2 * HEAD_DIM
    matrices = LAYERS * (q + kv + kv + q + 3 * HIDDEN * INTER) + 2 * VOCAB * HIDDEN
    norms = (2 * LAYERS + 1) * HIDDEN
    for d in (0, 1):
        mine = dev == d
        by_kind = {k: sum(n for n, kk, m in zip(tens["nbytes"], tens["kind"], mine) if kk == k and m)
                   for k in ("weight", "kv")}
        assert by_kind == {"weight": (matrices // 2 + norms) * BF16,
                           "kv": LAYERS * 2 * BATCH * (PROMPT + GENERATE) * HEAD_DIM * BF16}
    names = [n for n, d in zip(tens["name"], tens["device"]) if d == 1]
    assert names[:3] == ["embed_tokens", "layers.0.input_layernorm", "layers.0.self_attn.q_proj"]
    assert "layers.1.kv.v" in names and "lm_head" in names
    ops = t.ops.to_pydict()
    assert ops["device"].count(0) == ops["device"].count(1) == 117
    # per segment (the prefill, two decode steps): an all-reduce after the embedding and after each
    # layer's o_proj and MLP, an all-gather of the LM head's logits; one op per device for each
    c = t.collectives.to_pydict()
    assert c["kind"] == (["all_reduce"] * 5 + ["all_gather"]) * 3 and c["ranks"] == [[0, 1]] * 18
    assert c["step"] == [-1] * 6 + [0] * 6 + [1] * 6
    tokens = [BATCH * PROMPT] * 5 + [BATCH] * 5 + [BATCH] * 5
    assert [s for s, k in zip(c["size_bytes"], c["kind"]) if k == "all_reduce"] == [n * HIDDEN * BF16 for n in tokens]
    assert [s for s, k in zip(c["size_bytes"], c["kind"]) if k == "all_gather"] == [BATCH * VOCAB * BF16] * 3
    coll = np.array(ops["collective"])
    part = np.flatnonzero(coll >= 0)
    assert sorted(coll[part].tolist()) == sorted(list(range(18)) * 2)
    assert [ops["kind"][i] for i in part] == [c["kind"][coll[i]] for i in part]
    assert sorted(ops["device"][i] for i in part) == [0] * 18 + [1] * 18 and sum(ops["flops"][i] for i in part) == 0


def test_tiny_llama_tp2_version_2_holds_version_3s_tables():
    """tierlab 2 (version 2, streams) and today's writer (version 3, files) wrote the same tables."""
    a, b = (open_trace(GOLDEN / n) for n in TINY_TP2)
    assert a.tensors.equals(b.tensors) and a.ops.equals(b.ops) and a.collectives.equals(b.collectives)
    assert rows(a) == rows(b)


def _blocks(trace, device: int, block: int) -> tuple[int, int]:
    """(block requests, distinct blocks) of one device's accesses, by plain Python."""
    addr = trace.tensors.column("address").to_pylist()
    dev = trace.tensors.column("device").to_pylist()
    requests, seen = 0, set()
    for op, tid, off, nb, count, stride, _ in rows(trace):
        if dev[tid] != device:
            continue
        for k in range(count):
            lo = addr[tid] + off + k * stride
            blocks = range(lo // block, (lo + nb - 1) // block + 1)
            requests += len(blocks)
            seen.update(blocks)
    return requests, len(seen)


@pytest.mark.parametrize("name", TINY_TP2)
def test_tiny_llama_tp2_replays(name, tmp_path):
    """Each device on a cache holding every block it touches: a miss per distinct block, a hit for
    every other block request."""
    t = open_trace(GOLDEN / name)
    system = dataclasses.replace(load_system("dgx-h100"), chip=chip_toml(tmp_path, "512 KiB", "64 B"))
    sr = replay_system(t, system, dedupe=False)
    for d, dr in enumerate(sr.devices):
        requests, distinct = _blocks(t, d, 64)
        assert hits_misses(dr.result) == (requests - distinct, distinct)
        # every weight but the embedding (read at its tokens' rows) is read whole: 1418 blocks a device
        assert requests > distinct >= (107136 - 16384) // 64 == 1418


# ---- address traces: versions 4 (64-bit words, straddles once) and 5 (32-bit and 64-bit words) -------

T0 = 0x3F000000      # tensor 0: region 0x40000000.. (first seen), its lines from 0x7F000000 (a 1 MiB boundary)
T1 = 1 << 30         # tensor 1: region 0x200000000.., from its start
# make_goldens.DIN_RECORDS line by line (64-byte lines): (tensor, offset, is_write); accesses 2, 7 and
# 11 straddle two lines, so rows 3, 9 and 14 continue the row before
LINES = [(0, 0, False), (0, 64, False), (0, 0, True), (0, 64, True), (0, 0, False), (1, 0, False), (1, 0, True),
         (0, 128, False), (0, 192, False), (0, 256, False), (1, 64, False), (0, 0, False), (0, 256, True),
         (1, 64, False), (1, 128, False)]


@pytest.mark.parametrize("name, version, straddle", [("v5-addresses.trace", 5, "both"),
                                                     ("v4-addresses.trace", 4, "once")])
def test_address_trace(name, version, straddle, tmp_path):
    t = open_trace(GOLDEN / name)
    assert (t.kind, t.version, t.line_bytes, t.straddle, t.n_lines) == ("addresses", version, 64, straddle, 15)
    assert t.word_bits == (32 if version == 5 else 64)
    m = t.manifest
    assert m["tables"] == {"tensors": 2, "ops": 1, "lines": 15, "straddles": 3}
    assert ("word_bits" in m["lines"]) == (version == 5) and m["imported"]["records"] == 12
    tens = t.tensors.to_pydict()
    assert tens["name"] == ["region_0x40000000", "region_0x200000000"] and tens["kind"] == ["other", "other"]
    assert tens["address"] == [T0, T1] and tens["nbytes"] == [0x140, 0xC0]
    assert t.ops.to_pydict()["name"] == ["imported"]
    words = np.concatenate(list(t.iter_lines()))
    assert words.dtype == (np.uint32 if version == 5 else np.int64)
    base = [T0, T1]
    assert words.tolist() == [((base[k] + off) >> 6) << 1 | w for k, off, w in LINES]
    assert t.straddle_rows().tolist() == [3, 9, 14]
    c = t.access_columns()
    assert list(zip(c["tensor_id"].tolist(), c["offset"].tolist(), c["is_write"].tolist())) == LINES
    assert set(c["nbytes"].tolist()) == {64} and set(c["count"].tolist()) == {1}
    # a two-line LRU cache over the lines A0 A1 A0 A1 A0 B0 B0 A2 A3 A4 B1 A0 A4 B1 B2: hits at rows
    # 2, 3, 4 and 6, every other row misses (the counters count lines either way); counted once
    # (version 4's "once", cachegrind's rule), the straddling pairs (2, 3), (8, 9) and (13, 14) count
    # one hit, one miss and one miss: 12 accesses
    r = replay_trace(t, chip_toml(tmp_path, "128 B", "64 B")).result
    assert hits_misses(r) == (4, 11)
    once = r.meta["kernel"].get("straddle_once")
    if straddle == "both":
        assert once is None
    else:
        assert (once["hits"], once["misses"], once["accesses"], once["continuation_lines"]) == (3, 9, 12, 3)


def test_address_trace_64_bit_words(tmp_path):
    """Version 5 with 64-bit words: 1-byte lines in three regions, the third at 2**31 and up."""
    t = open_trace(GOLDEN / "v5-addresses-64.trace")
    assert (t.version, t.word_bits, t.line_bytes, t.n_lines) == (5, 64, 1, 7)
    tens = t.tensors.to_pydict()
    assert tens["address"] == [0, 1 << 30, 2 << 30] and tens["nbytes"] == [0x12, 0x21, 6]
    words = np.concatenate(list(t.iter_lines()))
    assert words.dtype == np.int64
    assert words.tolist() == [0x10 << 1, 0x11 << 1, ((1 << 30) + 0x20) << 1 | 1, ((2 << 30) + 4) << 1,
                              ((2 << 30) + 5) << 1, ((2 << 30) + 4) << 1 | 1, 0x10 << 1]
    assert words.max() >= 1 << 32 and t.straddle_rows().tolist() == [1, 4]
    c = t.access_columns()
    assert c["tensor_id"].tolist() == [0, 0, 1, 2, 2, 2, 0] and c["offset"].tolist() == [16, 17, 32, 4, 5, 4, 16]
    # two 1-byte lines, LRU: a b c d e d a -> only the second d hits
    r = replay_trace(t, chip_toml(tmp_path, "2 B", "1 B")).result
    assert hits_misses(r) == (1, 6)
