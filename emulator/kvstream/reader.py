"""Read a request trace: Mooncake JSONL, Azure CSV, a plain CSV or Parquet, plain or gzip/xz.

Formats (``format=`` or detected from the name, then the content):

``mooncake``
    JSON lines ``{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}``
    (Mooncake FAST'25 ``traces/*.jsonl``); blocks of 512 tokens unless ``block_tokens`` says otherwise.
``azure``
    ``TIMESTAMP,ContextTokens,GeneratedTokens`` (Azure LLM inference trace 2023; timestamps like
    ``2023-11-16 18:15:46.6805900``, CRLF lines). Arrival = seconds since the earliest timestamp.
    No hash ids.
``csv``
    a header ``arrival_s,input_tokens,output_tokens[,session][,hash_ids]``; ``hash_ids`` is one
    field of space-separated integers; an empty ``session`` is -1.
``parquet``
    the same columns, ``hash_ids`` a list column (what :meth:`RequestTrace.to_arrow` writes).

A name ending in ``.gz`` or ``.xz`` (or such content) is decompressed as a stream into memory (no
temporary file). The bulk is parsed by pyarrow (``pyarrow.json`` / ``pyarrow.csv``); only when that
fails does a per-line Python pass run, to name the offending line (or to read what pyarrow could
not, such as ids beyond int64).

Bad input raises :class:`tierlab.common.errors.UsageError`, one line naming the file and the line (``row``
for Parquet): a malformed line, a missing field, a negative or non-integer length, a prompt of no
tokens, a request whose number of hash ids is not ``ceil(input_tokens / block_tokens)``, a file with
no requests. Arrival times going backwards are **sorted, not refused**: the requests are put in
arrival order (a stable sort, so ties keep the file's order) and a one-line ``warnings.warn`` says
how many arrived before an earlier line's request.

Each request keeps its line (``RequestTrace.lines``; a Parquet file's row), through that sort and
any slice, so that what serving refuses later (a request longer than the model's positions, or than
HBM holds) is named the same way: ``FILE: line N: ...``. Counting the lines costs one
``bytes.count`` where no line is blank.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import lzma
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from tierlab.common.errors import UsageError
from tierlab.kvstream.trace import RequestTrace, dense_block_ids

__all__ = ["read_requests", "RequestTrace", "FORMATS"]

FORMATS = ("mooncake", "azure", "csv", "parquet")
DEFAULT_BLOCK_TOKENS = 512
_NL = b"\n"
_MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
_AZURE_FIELDS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_CSV_FIELDS = ("arrival_s", "input_tokens", "output_tokens")
_MOONCAKE_SCHEMA = pa.schema([("timestamp", pa.float64()), ("input_length", pa.int64()),
                              ("output_length", pa.int64()), ("hash_ids", pa.list_(pa.int64()))])


class _Bad(Exception):
    """A bad row found in the columns: (row index, field, message); turned into a line number."""

    def __init__(self, row: int, field: str, message: str):
        super().__init__(message)
        self.row, self.field, self.message = row, field, message


def _fail(path: str, where: str, field: str | None, message: str) -> UsageError:
    return UsageError(f"{field}: {message}" if field else message, file=path, field=where)


# ---------------------------------------------------------------- bytes in -----------------------

def _read_bytes(path: Path) -> bytes:
    """The file's bytes, decompressed (gzip or xz, by name or magic) as a stream."""
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as e:
        raise UsageError(f"cannot read the request trace: {e.strerror}", file=str(path)) from None
    try:
        if path.suffix == ".gz" or magic[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as f:
                return f.read()
        if path.suffix == ".xz" or magic == b"\xfd7zXZ\x00":
            with lzma.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, lzma.LZMAError) as e:
        raise UsageError(f"line 1: cannot decompress: {e}", file=str(path)) from None


def _detect(path: Path, data: bytes) -> str:
    name = path.name.lower()
    for ext in (".gz", ".xz"):
        name = name.removesuffix(ext)
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "mooncake"
    if name.endswith((".parquet", ".pq")) or data[:4] == b"PAR1":
        return "parquet"
    if data.lstrip()[:1] == b"{":
        return "mooncake"
    first = data.lstrip().split(b"\n", 1)[0].decode("utf-8", "replace").strip().lstrip("\ufeff")
    return "azure" if first.split(",")[0].strip() == "TIMESTAMP" else "csv"


def _data_lines(data: bytes, skip_header: bool) -> list[int]:
    """1-based numbers of the non-blank lines holding rows (after the header if ``skip_header``)."""
    lines = [i + 1 for i, line in enumerate(data.split(b"\n")) if line.strip()]
    return lines[1:] if skip_header else lines


def _row_lines(data: bytes, n: int, skip_header: bool) -> np.ndarray | None:
    """The 1-based line of each of the ``n`` rows read from ``data``. Where the file has exactly
    ``n`` (+ a header) lines, no line is blank and row k is on line k (+ 1): one ``bytes.count``,
    no pass in Python; otherwise :func:`_data_lines`. None if neither agrees with ``n``."""
    first = 2 if skip_header else 1
    total = data.count(_NL) + (0 if not data or data.endswith(_NL) else 1)
    if total == n + first - 1:
        return np.arange(first, first + n, dtype=np.int64)
    lines = _data_lines(data, skip_header)
    return np.array(lines, np.int64) if len(lines) == n else None


# ---------------------------------------------------------------- checks shared by every format ---

def _assemble(path: str, fmt: str, arrival, inp, out, session, offsets, raw_ids, block_tokens: int,
              has_ids: bool, lines: np.ndarray | None = None) -> RequestTrace:
    """Check the columns (raising :class:`_Bad` at the first bad row) and build the trace; ``lines``:
    each row's line (or Parquet row) number, kept for the errors of serving."""
    n = arrival.shape[0]
    if n == 0:
        raise _Bad(0, "", "no requests")
    bad = np.flatnonzero(~np.isfinite(arrival))
    if bad.size:
        raise _Bad(int(bad[0]), "arrival", "not a finite time")
    for name, col, least in (("input tokens", inp, 1), ("output tokens", out, 0)):
        bad = np.flatnonzero(col < least)
        if bad.size:
            raise _Bad(int(bad[0]), name, f"{int(col[bad[0]])}; expected a whole number >= {least}")
    if has_ids:
        want = -(-inp // block_tokens)
        got = np.diff(offsets)
        bad = np.flatnonzero(got != want)
        if bad.size:
            i = int(bad[0])
            raise _Bad(i, "hash_ids", f"{int(got[i])} ids for {int(inp[i])} input tokens; expected "
                       f"ceil({int(inp[i])}/{block_tokens}) = {int(want[i])} at {block_tokens} tokens per block")
    else:
        offsets = np.zeros(n + 1, np.int64)
        raw_ids = np.zeros(0, np.int64)
    blocks, n_unique = dense_block_ids(raw_ids)
    trace = RequestTrace(np.ascontiguousarray(arrival, np.float64), np.ascontiguousarray(inp, np.int64),
                         np.ascontiguousarray(out, np.int64), np.ascontiguousarray(session, np.int64),
                         np.ascontiguousarray(offsets, np.int64), blocks, int(block_tokens), n_unique,
                         path, fmt, lines)
    back = int(np.count_nonzero(arrival[1:] < np.maximum.accumulate(arrival)[:-1]))
    if back:
        warnings.warn(f"{path}: {back} of {n} requests arrive before an earlier line's request; "
                      "sorted by arrival time (stable)", stacklevel=3)
        trace = trace.reordered(np.argsort(arrival, kind="stable"))
    return trace


# ---------------------------------------------------------------- Mooncake JSONL -----------------

def _mooncake_fast(data: bytes):
    table = pajson.read_json(io.BytesIO(data), parse_options=pajson.ParseOptions(
        explicit_schema=_MOONCAKE_SCHEMA, unexpected_field_behavior="ignore"))
    for name in _MOONCAKE_FIELDS:
        col = table.column(name)
        if col.null_count:
            raise _Bad(int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0]), name, "missing")
    ids = table.column("hash_ids").combine_chunks()
    offsets = ids.offsets.to_numpy().astype(np.int64)
    raw = ids.values.to_numpy()[offsets[0]:offsets[-1]] if len(ids) else np.zeros(0, np.int64)
    return (table.column("timestamp").to_numpy() / 1000.0, table.column("input_length").to_numpy(),
            table.column("output_length").to_numpy(), offsets - offsets[0], raw)


def _whole(v, line: int, field: str, path: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise _fail(path, f"line {line}", field, f"{v!r}; expected a whole number")
    return int(v)


def _mooncake_slow(data: bytes, path: str):
    """The per-line pass: raises at the first bad line, else returns the columns."""
    ts, inp, out, offsets, raw = [], [], [], [0], []
    for line_no, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        where = f"line {line_no}"
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise _fail(path, where, None, f"malformed JSON ({e.msg if hasattr(e, 'msg') else e})") from None
        if not isinstance(rec, dict):
            raise _fail(path, where, None, "expected a JSON object")
        for name in _MOONCAKE_FIELDS:
            if rec.get(name) is None:
                raise _fail(path, where, name, "missing")
        t = rec["timestamp"]
        if isinstance(t, bool) or not isinstance(t, (int, float)):
            raise _fail(path, where, "timestamp", f"{t!r}; expected milliseconds")
        ids = rec["hash_ids"]
        if not isinstance(ids, list):
            raise _fail(path, where, "hash_ids", "expected a list of integers")
        ts.append(float(t))
        inp.append(_whole(rec["input_length"], line_no, "input_length", path))
        out.append(_whole(rec["output_length"], line_no, "output_length", path))
        for h in ids:
            if isinstance(h, bool) or not isinstance(h, int):
                raise _fail(path, where, "hash_ids", f"{h!r}; expected integers")
        raw.extend(ids)
        offsets.append(len(raw))
    return (np.array(ts, np.float64) / 1000.0, np.array(inp, np.int64), np.array(out, np.int64),
            np.array(offsets, np.int64), _raw_ids(raw))


def _raw_ids(raw: list[int]) -> np.ndarray:
    """Python ints as int64 ids; ids beyond int64 are first renumbered by a dict."""
    try:
        return np.array(raw, np.int64)
    except OverflowError:
        seen: dict[int, int] = {}
        return np.array([seen.setdefault(h, len(seen)) for h in raw], np.int64)


# ---------------------------------------------------------------- CSV (Azure and plain) ----------

def _csv_fast(data: bytes, fmt: str):
    opts = pacsv.ConvertOptions(strings_can_be_null=True)
    if fmt == "azure":
        opts.column_types = {"TIMESTAMP": pa.timestamp("ns"), "ContextTokens": pa.int64(), "GeneratedTokens": pa.int64()}
    else:
        opts.column_types = {"arrival_s": pa.float64(), "input_tokens": pa.int64(), "output_tokens": pa.int64(),
                             "session": pa.int64(), "hash_ids": pa.string()}
    table = pacsv.read_csv(io.BytesIO(data), convert_options=opts)
    return _columns(table, fmt)


def _columns(table: pa.Table, fmt: str):
    """(arrival, input, output, session, offsets, raw ids, has ids) from a table of ``fmt``'s columns."""
    names = _AZURE_FIELDS if fmt == "azure" else _CSV_FIELDS
    missing = [c for c in names if c not in table.column_names]
    if missing:
        raise _Bad(-1, missing[0], f"no such column (the header must name {', '.join(names)})")
    for name in names:
        col = table.column(name)
        if col.null_count:
            raise _Bad(int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0]), name, "missing")
    n = table.num_rows
    if fmt == "azure":
        t = table.column("TIMESTAMP").cast(pa.int64()).to_numpy()
        arrival = (t - (t.min() if n else 0)) / 1e9
        return arrival, table.column("ContextTokens").to_numpy(), table.column("GeneratedTokens").to_numpy(), \
            np.full(n, -1, np.int64), None, None, False
    session = np.full(n, -1, np.int64)
    if "session" in table.column_names:
        session = table.column("session").cast(pa.int64()).fill_null(-1).to_numpy()
    has_ids = "hash_ids" in table.column_names
    offsets = raw = None
    if has_ids:
        col = table.column("hash_ids").combine_chunks()
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            text = pc.utf8_trim_whitespace(col)
            text = pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)
            col = pc.split_pattern_regex(text, r"\s+")
            values = col.flatten().cast(pa.int64())           # a non-integer id: ArrowInvalid, then the line pass
        else:
            values = col.flatten().cast(pa.int64())
        lengths = pc.list_value_length(col).fill_null(0).to_numpy()
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        raw = values.to_numpy()
    arrival = table.column("arrival_s").cast(pa.float64()).to_numpy()
    return arrival, table.column("input_tokens").cast(pa.int64()).to_numpy(), \
        table.column("output_tokens").cast(pa.int64()).to_numpy(), session, offsets, raw, has_ids


def _csv_slow(data: bytes, path: str, fmt: str):
    """The per-line pass over a CSV: raises at the first bad line, else returns the columns."""
    text = data.decode("utf-8", "replace").lstrip("\ufeff")
    rows = [(i, line) for i, line in enumerate(text.split("\n"), 1) if line.strip()]
    if not rows:
        raise _fail(path, "line 1", None, "no header")
    header = [h.strip() for h in next(csv.reader([rows[0][1]]))]
    names = _AZURE_FIELDS if fmt == "azure" else _CSV_FIELDS
    for name in names:
        if name not in header:
            raise _fail(path, f"line {rows[0][0]}", name, f"no such column (the header must name {', '.join(names)})")
    col = {h: k for k, h in enumerate(header)}
    arrival, inp, out, session, offsets, raw = [], [], [], [], [0], []
    for line_no, line in rows[1:]:
        where = f"line {line_no}"
        fields = next(csv.reader([line.rstrip("\r")]))
        if len(fields) != len(header):
            raise _fail(path, where, None, f"{len(fields)} fields; the header has {len(header)}")
        get = {h: fields[k].strip() for h, k in col.items()}
        for name in names:
            if get[name] == "":
                raise _fail(path, where, name, "missing")
        try:
            if fmt == "azure":
                arrival.append(np.datetime64(get["TIMESTAMP"].replace(" ", "T")[:29], "ns").astype(np.int64) / 1e9)
            else:
                arrival.append(float(get["arrival_s"]))
        except ValueError:
            raise _fail(path, where, names[0], f"{get[names[0]]!r}; expected a time") from None
        for name, dest in ((names[1], inp), (names[2], out)):
            try:
                dest.append(int(get[name]))
            except ValueError:
                raise _fail(path, where, name, f"{get[name]!r}; expected a whole number") from None
        if fmt != "azure":
            s = get.get("session", "")
            try:
                session.append(int(s) if s else -1)
                raw.extend(int(h) for h in get.get("hash_ids", "").split())
            except ValueError:
                raise _fail(path, where, "session/hash_ids", "expected whole numbers") from None
            offsets.append(len(raw))
    arr = np.array(arrival, np.float64)
    if fmt == "azure":
        arr = arr - (arr.min() if arr.size else 0.0)
        session = [-1] * len(inp)
    has_ids = fmt != "azure" and "hash_ids" in col
    return arr, np.array(inp, np.int64), np.array(out, np.int64), np.array(session, np.int64), \
        np.array(offsets, np.int64), _raw_ids(raw), has_ids


# ---------------------------------------------------------------- public ---------------------------

def read_requests(path, *, block_tokens: int | None = None, format: str | None = None) -> RequestTrace:
    """Read a request trace (see the module docstring for the formats and the checks).

    Parameters
    ----------
    path : str or Path
        The trace; ``.gz`` / ``.xz`` are decompressed as a stream.
    block_tokens : int, optional
        Tokens per hash-id block (default 512, Mooncake's).
    format : {"mooncake", "azure", "csv", "parquet"}, optional
        Detected from the name (``.jsonl``, ``.csv``, ``.parquet``) and content when not given.

    Returns
    -------
    RequestTrace
        The requests in arrival order, block ids renumbered densely.

    Raises
    ------
    UsageError
        One line ``FILE: line N: FIELD: what was expected`` for any bad input.
    """
    p = Path(path)
    src = str(path)
    bt = DEFAULT_BLOCK_TOKENS if block_tokens is None else block_tokens
    if isinstance(bt, bool) or not isinstance(bt, (int, np.integer)) or bt < 1:
        raise UsageError(f"block tokens must be a whole number >= 1, got {block_tokens!r}", field="block_tokens")
    if format is not None and format not in FORMATS:
        raise UsageError(f"unknown request-trace format {format!r}; expected one of {', '.join(FORMATS)}",
                         file=src, field="format")
    data = _read_bytes(p)
    fmt = format or _detect(p, data)
    try:
        try:
            if fmt == "mooncake":
                cols = _mooncake_fast(data)
                cols = (*cols[:3], np.full(cols[0].shape[0], -1, np.int64), *cols[3:], True)
            elif fmt == "parquet":
                try:
                    table = pq.read_table(io.BytesIO(data))
                except pa.ArrowException as e:
                    raise _fail(src, "row 1", None, f"not a readable Parquet file ({str(e).splitlines()[0]})") from None
                cols = _columns(table, "csv")
            else:
                cols = _csv_fast(data, fmt)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            if fmt == "parquet":
                raise _fail(src, "row 1", None, "expected numbers in arrival_s, input_tokens, output_tokens and "
                            "session, and a list of integers in hash_ids") from None
            if fmt == "mooncake":
                cols = _mooncake_slow(data, src)
                cols = (*cols[:3], np.full(cols[0].shape[0], -1, np.int64), *cols[3:], True)
            else:
                cols = _csv_slow(data, src, fmt)
        arrival, inp, out, session, offsets, raw, has_ids = cols
        n = arrival.shape[0]
        lines = np.arange(1, n + 1, dtype=np.int64) if fmt == "parquet" else \
            _row_lines(data, n, skip_header=fmt != "mooncake") if n else None
        return _assemble(src, fmt, arrival, inp, out, session, offsets, raw, int(bt), has_ids, lines)
    except _Bad as bad:
        if fmt == "parquet":
            where = f"row {bad.row + 1}" if bad.row >= 0 else "row 1"
        else:
            lines = _data_lines(data, skip_header=fmt != "mooncake")
            if bad.row < 0:
                where = "line 1"
            elif bad.row < len(lines):
                where = f"line {lines[bad.row]}"
            else:                                          # no requests: the line after the last
                where = f"line {data.count(_NL) + 1}"
        raise _fail(src, where, bad.field or None, bad.message) from None
