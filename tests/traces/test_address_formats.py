"""The forms memory tracers write, imported as address traces: each against a plain-Python reading.

Fixtures are made here, small: a Lackey log (with Valgrind's ``==PID==`` lines, ``I`` records and
``M`` records), a drcachesim view listing (headers, markers, separators, ``ifetch``/``read``/
``write``), ChampSim ``input_instr`` records (64 bytes each; also xz-compressed), and gzip/xz
copies of text forms, read as streams. The imported lines (their words ``line << 1 | is_write``) and
the ``--json`` counts must be what a line-by-line reading in Python gives.
"""

from __future__ import annotations

import gzip
import json
import lzma

import numpy as np
import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.traces.importers import tracer_logs as importers
from tierlab.traces.importers.tracer_logs import CHAMPSIM_RECORD, import_trace
from tierlab.traces.format.reader import open_trace


def _words(trace) -> list[tuple[int, int]]:
    t = open_trace(trace)
    w = np.concatenate(list(t.iter_lines())) if t.n_lines else np.zeros(0, np.int64)
    return [(int(x) >> 1, int(x) & 1) for x in w]


def _expected(records, line=64):
    """(line, is_write) per line touched, regions mapped in first-seen order (as the importer)."""
    regions: list[int] = []
    out = []
    for a, size, w in records:
        for ln in range(a // line, (a + size - 1) // line + 1):
            r = (ln * line) >> 30
            if r not in regions:
                regions.append(r)
            out.append((((regions.index(r) << 30) | ((ln * line) & ((1 << 30) - 1))) // line, int(w)))
    return out


LACKEY = """==4242== Lackey, an example Valgrind tool
==4242== Command: ./prog
==4242==
SB 0401ab70
I  0401ab70,3
 S 1fff000778,8
I  0401ab73,5
 L 04222cf0,8
 M 0421d3c8,4
 L 0421d3fe,4
--4242-- a warning
 S 1fff00077c,16
==4242== Counted 1 call to main()
"""
LACKEY_DATA = [(0x1fff000778, 8, 1), (0x04222cf0, 8, 0), (0x0421d3c8, 4, 0), (0x0421d3c8, 4, 1),
               (0x0421d3fe, 4, 0), (0x1fff00077c, 16, 1)]


def test_lackey_data_only_by_default(tmp_path):
    (tmp_path / "p.lackey").write_text(LACKEY)
    s = import_trace(tmp_path / "p.lackey", tmp_path / "p.trace")
    assert _words(tmp_path / "p.trace") == _expected(LACKEY_DATA)
    # M is one record, a load then a store; 0x421d3fe + 4 and 0x1fff00077c + 16 straddle two lines
    assert (s["records"], s["accesses"], s["reads"], s["writes"], s["straddles"], s["lines"]) == (5, 6, 3, 3, 2, 8)
    assert s["instruction_fetches"] == 0 and s["format"] == "lackey"


def test_lackey_with_instructions(tmp_path):
    (tmp_path / "p.lackey").write_text(LACKEY)
    s = import_trace(tmp_path / "p.lackey", tmp_path / "p.trace", instructions=True)
    recs = [(0x0401ab70, 3, 0), LACKEY_DATA[0], (0x0401ab73, 5, 0), *LACKEY_DATA[1:]]
    assert _words(tmp_path / "p.trace") == _expected(recs)
    assert s["instruction_fetches"] == 2 and s["reads"] == 5


DRCACHESIM = """Output format:
<--record#-> <--instr#->: <---tid---> <record details>
------------------------------------------------------------
           1           0:     2765542 <marker: version 5>
           2           0:     2765542 <marker: cache line size 64>
       47444       37769:     2765543 ifetch       6 byte(s) @ 0x0000000000404a78 0f 84 5b 01 00 00    jz     $0x404bd9
       47446       37770:     2765543 read         8 byte(s) @ 0x00007fdf64e2adc8 by PC 0x0000000000404a7e
------------------------------------------------------------
       47452       37774:     2765542 <marker: timestamp 13334804716609227>
       47455       37775:     2765542 write        8 byte(s) @ 0x00007ffd90c1393c by PC 0x000000000040257d
       47456       37775:     2765542 prefetcht0   1 byte(s) @ 0x0000000000500000 by PC 0x000000000040257e
View tool results:
              38 : total instructions
"""


def test_drcachesim_view(tmp_path):
    (tmp_path / "v.view").write_text(DRCACHESIM)
    s = import_trace(tmp_path / "v.view", tmp_path / "v.trace")
    data = [(0x7fdf64e2adc8, 8, 0), (0x7ffd90c1393c, 8, 1), (0x500000, 1, 0)]
    assert _words(tmp_path / "v.trace") == _expected(data)
    assert (s["records"], s["writes"], s["straddles"]) == (3, 1, 1)
    s = import_trace(tmp_path / "v.view", tmp_path / "i.trace", instructions=True)
    assert _words(tmp_path / "i.trace") == _expected([(0x404a78, 6, 0), *data])


def _champsim(rng, n):
    rec = np.zeros(n, CHAMPSIM_RECORD)
    rec["ip"] = 0x400000 + 4 * np.arange(n)
    src = rng.integers(1 << 12, 1 << 40, (n, 4)) * (rng.random((n, 4)) < 0.4)
    dst = rng.integers(1 << 12, 1 << 40, (n, 2)) * (rng.random((n, 2)) < 0.3)
    rec["src_mem"], rec["dst_mem"] = src, dst
    recs = []
    for i in range(n):        # per instruction: its loads, then its stores
        recs += [(int(a), 1, 0) for a in src[i] if a] + [(int(a), 1, 1) for a in dst[i] if a]
    return rec, recs


@pytest.mark.parametrize("xz", [False, True])
def test_champsim_records(tmp_path, xz):
    rec, recs = _champsim(np.random.default_rng(3), 500)
    assert CHAMPSIM_RECORD.itemsize == 64 and rec.tobytes()[:8] == (0x400000).to_bytes(8, "little")
    p = tmp_path / ("t.champsimtrace.xz" if xz else "t.champsim")
    p.write_bytes(lzma.compress(rec.tobytes()) if xz else rec.tobytes())
    s = import_trace(p, tmp_path / "c.trace")
    assert _words(tmp_path / "c.trace") == _expected(recs)
    assert s["records"] == len(recs) and s["compression"] == ("xz" if xz else None)


def test_champsim_truncated_record(tmp_path):
    rec, _ = _champsim(np.random.default_rng(4), 10)
    (tmp_path / "t.champsim").write_bytes(rec.tobytes()[:-10])
    with pytest.raises(Exception, match="ends inside record 9 \\(54 of its 64 bytes\\)"):
        import_trace(tmp_path / "t.champsim", tmp_path / "c.trace")
    assert not (tmp_path / "c.trace").exists()


@pytest.mark.parametrize("comp", ["gzip", "xz"])
def test_compressed_streams_read_across_chunks(tmp_path, monkeypatch, comp):
    """Small chunks: every record and the carried partial lines survive the chunk boundaries."""
    monkeypatch.setattr(importers, "CHUNK_BYTES", 1 << 10)
    rng = np.random.default_rng(5)
    recs = [(int(a), int(s), int(w)) for a, s, w in zip(rng.integers(0, 1 << 34, 3000), rng.integers(1, 100, 3000),
                                                         rng.random(3000) < 0.4)]
    body = "".join(f"{w} {a:x} {s}\n" for a, s, w in recs).encode()
    p = tmp_path / f"t.din.{'gz' if comp == 'gzip' else 'xz'}"
    p.write_bytes(gzip.compress(body) if comp == "gzip" else lzma.compress(body))
    s = import_trace(p, tmp_path / "t.trace")
    assert _words(tmp_path / "t.trace") == _expected(recs)
    assert s["compression"] == comp and s["records"] == 3000


def test_text_forms_across_chunks(tmp_path, monkeypatch):
    """text and csv, with comments, blank lines, CRLF, a header, kinds before and after."""
    monkeypatch.setattr(importers, "CHUNK_BYTES", 1 << 9)
    rng = np.random.default_rng(6)
    recs = [(int(a), int(s), int(w)) for a, s, w in zip(rng.integers(0, 1 << 33, 800), rng.integers(1, 70, 800),
                                                         rng.random(800) < 0.5)]
    lines = [("W" if w else "R") + f" {a:#x}" if i % 2 else f"{a},{'st' if w else 'ld'}" for i, (a, _, w) in enumerate(recs)]
    (tmp_path / "t.txt").write_text("# head\n\n" + "\r\n".join(lines) + "\r\n")
    import_trace(tmp_path / "t.txt", tmp_path / "t.trace")
    assert _words(tmp_path / "t.trace") == _expected([(a, 1, w) for a, _, w in recs])
    csv = "address, size, kind\n" + "".join(f"{a}, {s}, {'write' if w else 'read'}\n" if i % 3 else f"{a:#x},{s}\n"
                                            for i, (a, s, w) in enumerate(recs))
    (tmp_path / "t.csv").write_text(csv)
    import_trace(tmp_path / "t.csv", tmp_path / "c.trace")
    assert _words(tmp_path / "c.trace") == _expected([(a, s, w if i % 3 else 0) for i, (a, s, w) in enumerate(recs)])


def test_halves_parsed_on_two_threads_keep_order(tmp_path):
    """A file large enough to be split between the two parser threads: order and line numbers kept."""
    n = 40000
    body = "".join(f"{i % 2} {i * 64:x} 8\n" for i in range(n))
    (tmp_path / "t.din").write_text(body + "0 zz 8\n")
    with pytest.raises(Exception, match=f"line {n + 1}: cannot parse '0 zz 8'"):
        import_trace(tmp_path / "t.din", tmp_path / "t.trace")
    (tmp_path / "t.din").write_text(body)
    import_trace(tmp_path / "t.din", tmp_path / "t.trace")
    assert _words(tmp_path / "t.trace") == [(i, i % 2) for i in range(n)]


def test_import_json_keys(tmp_path):
    (tmp_path / "p.lackey").write_text(LACKEY)
    r = CliRunner().invoke(main, ["import", str(tmp_path / "p.lackey"), "-o", str(tmp_path / "p.trace"),
                                  "--straddle", "once", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert {"records", "lines", "reads", "writes", "straddles", "straddle", "descriptors", "tensors", "line",
            "format", "trace", "compression", "instruction_fetches", "word_bits"} <= set(s)
    assert s["straddle"] == "once" and open_trace(tmp_path / "p.trace").straddle == "once"
    assert s["word_bits"] == open_trace(tmp_path / "p.trace").word_bits == 32
    t = open_trace(tmp_path / "p.trace")
    assert t.straddle_rows().tolist() == [5, 7]      # the second lines of the two straddling accesses


def test_many_regions(tmp_path, monkeypatch):
    """Addresses over thousands of 1 GiB regions (a hash of them, not a scan): first-seen order kept;
    more than the importer holds is refused."""
    rng = np.random.default_rng(8)
    recs = [(int(r) << 30 | int(o), 1, 0) for r, o in zip(rng.integers(0, 3000, 20000), rng.integers(0, 1 << 30, 20000))]
    (tmp_path / "t.txt").write_text("".join(f"{a:#x}\n" for a, _, _ in recs))
    s = import_trace(tmp_path / "t.txt", tmp_path / "t.trace", line=8)
    assert _words(tmp_path / "t.trace") == _expected(recs, line=8)
    assert s["tensors"] == len({a >> 30 for a, _, _ in recs})
    monkeypatch.setattr(importers, "MAX_REGIONS", 64)
    with pytest.raises(Exception, match="reach more than 64 regions of 1 GiB"):
        import_trace(tmp_path / "t.txt", tmp_path / "u.trace", line=8)
    assert not (tmp_path / "u.trace").exists()
