"""Request traces as input: formats, compression, dense ids, and one line per bad input."""

from __future__ import annotations

import gzip
import lzma
import warnings

import numpy as np
import pyarrow.parquet as pq
import pytest

from tierlab.common.errors import UsageError
from tierlab.kvstream.reader import read_requests
from kvstream_reference import random_requests, write_csv

MOONCAKE = (
    '{"timestamp": 0, "input_length": 1000, "output_length": 50, "hash_ids": [0, 1]}\n'
    '{"timestamp": 27, "input_length": 1600, "output_length": 10, "hash_ids": [0, 1, 46, 47]}\n'
    '\n'
    '{"timestamp": 30, "input_length": 512, "output_length": 0, "hash_ids": [46]}\n'
)
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44\r\n"
         "2023-11-16 18:15:50.9951690,396,109\r\n2023-11-16 18:16:46.6805901,4808,10")


def _same(a, b):
    for f in ("arrival_s", "input_tokens", "output_tokens", "session", "block_offsets", "blocks"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert a.n_unique_blocks == b.n_unique_blocks and a.block_tokens == b.block_tokens


def test_mooncake_sample(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text(MOONCAKE)
    t = read_requests(p)
    assert len(t) == 3 and t.format == "mooncake" and t.block_tokens == 512
    assert t.arrival_s.tolist() == [0.0, 0.027, 0.030]
    assert t.input_tokens.tolist() == [1000, 1600, 512] and t.output_tokens.tolist() == [50, 10, 0]
    assert t.block_offsets.tolist() == [0, 2, 6, 7] and t.blocks.tolist() == [0, 1, 0, 1, 2, 3, 2]
    assert t.n_unique_blocks == 4 and t.session.tolist() == [-1, -1, -1]
    assert t.head(2).blocks.tolist() == [0, 1, 0, 1, 2, 3] and len(t.slice(1)) == 2
    assert t.slice(2).blocks.tolist() == [0] and t.slice(2).n_unique_blocks == 1
    assert np.allclose(t.scaled(2.0).arrival_s, t.arrival_s / 2)


def test_azure_sample(tmp_path):
    p = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    p.write_bytes(AZURE.encode())
    t = read_requests(p)
    assert t.format == "azure" and not t.has_hash_ids and len(t) == 3
    assert t.arrival_s[0] == 0.0 and abs(t.arrival_s[1] - 4.314579) < 1e-9
    assert abs(t.arrival_s[2] - 60.0000001) < 1e-9             # the 7th fractional digit is kept
    assert t.input_tokens.tolist() == [374, 396, 4808] and t.output_tokens.tolist() == [44, 109, 10]
    assert t.block_offsets.tolist() == [0, 0, 0, 0]


def test_plain_csv_and_parquet_round_trip(tmp_path):
    reqs, inps, bt = random_requests(7, n=40)
    p = write_csv(tmp_path / "r.csv", reqs, inps, sessions=[i % 3 if i % 4 else "" for i in range(40)])
    t = read_requests(p, block_tokens=bt)
    assert t.format == "csv" and t.session[:5].tolist() == [-1, 1, 2, 0, -1]
    raw = [b for r in reqs for b in r]
    first = {}
    for b in raw:
        first.setdefault(b, len(first))
    assert t.blocks.tolist() == [first[b] for b in raw]     # dense, by first appearance
    q = tmp_path / "r.parquet"
    pq.write_table(t.to_arrow(), q)
    _same(read_requests(q, block_tokens=bt), t)
    (tmp_path / "plain.csv").write_text("arrival_s,input_tokens,output_tokens\n0.5,10,2\n1.5,20,3\n")
    t2 = read_requests(tmp_path / "plain.csv")
    assert not t2.has_hash_ids and t2.input_tokens.tolist() == [10, 20]


def test_large_and_negative_ids_are_renumbered(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("arrival_s,input_tokens,output_tokens,hash_ids\n0,20,1,9223372036854775807 -5\n"
                 "1,30,1,9223372036854775807 -5 -7\n")
    t = read_requests(p, block_tokens=10)
    assert t.blocks.tolist() == [0, 1, 0, 1, 2] and t.n_unique_blocks == 3
    q = tmp_path / "big.jsonl"                                # beyond int64: the line pass renumbers
    q.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [18446744073709551615]}\n'
                 '{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [18446744073709551615]}\n')
    assert read_requests(q, block_tokens=8).blocks.tolist() == [0, 0]


@pytest.mark.parametrize("ext,opener", [(".gz", gzip.open), (".xz", lzma.open)])
def test_compressed_equals_plain(tmp_path, ext, opener):
    for name, text in (("m.jsonl", MOONCAKE), ("a.csv", AZURE)):
        plain = tmp_path / name
        plain.write_text(text)
        packed = tmp_path / (name + ext)
        with opener(packed, "wb") as f:
            f.write(text.encode())
        _same(read_requests(packed), read_requests(plain))


def test_backwards_arrivals_are_sorted_with_a_warning(tmp_path):
    reqs = [[1], [2], [1, 3], [4]]
    p = write_csv(tmp_path / "r.csv", reqs, [5, 5, 20, 5], arrivals=[3.0, 1.0, 1.0, 0.5])
    with pytest.warns(UserWarning, match=r"3 of 4 requests arrive before an earlier line's request; sorted") as w:
        t = read_requests(p, block_tokens=16)
    assert len(w) == 1 and "\n" not in str(w[0].message)
    assert t.arrival_s.tolist() == [0.5, 1.0, 1.0, 3.0]
    assert t.input_tokens.tolist() == [5, 5, 20, 5]                  # stable: line 3 before line 4
    assert t.block_offsets.tolist() == [0, 1, 2, 4, 5] and t.blocks.tolist() == [0, 1, 2, 3, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_requests(write_csv(tmp_path / "ok.csv", reqs, [5, 5, 20, 5]), block_tokens=16)


BAD = [
    ("m.jsonl", MOONCAKE.replace('"output_length": 10,', '"output_length": 10'), "line 2", "malformed JSON"),
    ("m.jsonl", MOONCAKE.replace('"output_length": 0, ', ''), "line 4", "output_length: missing"),
    ("m.jsonl", MOONCAKE.replace('"input_length": 1600', '"input_length": -1600'), "line 2", "input tokens: -1600"),
    ("m.jsonl", MOONCAKE.replace('"input_length": 1600', '"input_length": 1600.5'), "line 2", "input_length: 1600.5"),
    ("m.jsonl", MOONCAKE.replace('"input_length": 512', '"input_length": 513'), "line 4",
     "hash_ids: 1 ids for 513 input tokens; expected ceil(513/512) = 2"),
    ("m.jsonl", MOONCAKE.replace('[0, 1, 46, 47]', '[0, 1, 46]'), "line 2", "hash_ids: 3 ids"),
    ("m.jsonl", MOONCAKE.replace('[46]', '["x"]'), "line 4", "hash_ids"),
    ("m.jsonl", MOONCAKE + "[1, 2]\n", "line 5", "expected a JSON object"),
    ("m.jsonl", "\n\n", "line 3", "no requests"),
    ("a.csv", AZURE.replace(",396,", ",x,"), "line 3", "ContextTokens"),
    ("a.csv", AZURE.replace(",396,", ",-396,"), "line 3", "input tokens: -396"),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n", "line 2", "no requests"),
    ("a.csv", AZURE.replace("109", ""), "line 3", "GeneratedTokens: missing"),
    ("p.csv", "arrival_s,input_tokens,output_tokens,hash_ids\n0,10,1,1\n1,20,1,1 2 x\n", "line 3", "hash_ids"),
    ("p.csv", "arrival_s,input_tokens,output_tokens,hash_ids\n0,10,1,1\n\n1,20,1,1\n", "line 4",
     "hash_ids: 1 ids for 20 input tokens"),
    ("p.csv", "arrival_s,input_tokens,output_tokens\n0,10,1\n1,20\n", "line 3", "fields"),
    ("p.csv", "arrival_s,input_tokens\n0,10\n", "line 1", "output_tokens: no such column"),
]


@pytest.mark.parametrize("name,text,where,what", BAD)
def test_bad_input_is_one_line_naming_file_and_line(tmp_path, name, text, where, what):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(UsageError) as e:
        read_requests(p, block_tokens=16 if name == "p.csv" else None)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{p}: {where}: "), msg
    assert what in msg, msg


def test_bad_arguments(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text(MOONCAKE)
    with pytest.raises(UsageError, match="block tokens"):
        read_requests(p, block_tokens=0)
    with pytest.raises(UsageError, match="unknown request-trace format"):
        read_requests(p, format="sharegpt")
    with pytest.raises(UsageError, match="cannot read"):
        read_requests(tmp_path / "none.jsonl")


def test_each_request_keeps_its_line(tmp_path):
    """Lines are kept through blank lines, the sort of backwards arrivals and a slice; a Parquet file's
    rows are numbered; a file without blank lines is numbered by one count (row k on line k)."""
    p = tmp_path / "m.jsonl"
    p.write_text(MOONCAKE)                                          # line 3 blank
    assert read_requests(p).lines.tolist() == [1, 2, 4]
    back = MOONCAKE.replace('"timestamp": 27', '"timestamp": 40')   # line 2 now arrives after line 4
    p.write_text(back)
    with pytest.warns(UserWarning):
        t = read_requests(p)
    assert t.lines.tolist() == [1, 4, 2] and t.input_tokens.tolist() == [1000, 512, 1600]
    assert t.slice(1).lines.tolist() == [4, 2] and t.head(1).lines.tolist() == [1]
    assert t.where(2) == "line 2"
    p.write_text(MOONCAKE.replace("\n\n", "\n"))
    assert read_requests(p).lines.tolist() == [1, 2, 3]
    a = tmp_path / "a.csv"
    a.write_text(AZURE)                                              # a header, CRLF, no final newline
    assert read_requests(a).lines.tolist() == [2, 3, 4]
    c = write_csv(tmp_path / "r.csv", [[1], [2], [1, 3]], [5, 5, 20])
    t = read_requests(c, block_tokens=16)
    assert t.lines.tolist() == [2, 3, 4]
    pq.write_table(t.to_arrow(), tmp_path / "r.parquet")
    t = read_requests(tmp_path / "r.parquet", block_tokens=16)
    assert t.lines.tolist() == [1, 2, 3] and t.where(1) == "row 2"
    err = t.request_error(1, "too long")
    assert str(err) == f"{tmp_path / 'r.parquet'}: row 2: too long"
