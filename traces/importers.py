"""Address traces in the common forms, into a tierlab trace (``tierlab import``).

Forms (``--format``, else from the extension):

* ``npy`` (``.npy``): a 1-d integer array of byte addresses, each a load of one byte (its line).
* ``text`` (``.txt``, ``.trace``, ``.addr``): one address per line (``0x`` hex or decimal), optionally
  with a kind token before or after it: ``R``/``W``, ``L``/``S``, ``LD``/``ST``, ``READ``/``WRITE``.
* ``din`` (``.din``): Dinero IV's format, ``label address [size]`` with the address in hex (``0x``
  optional); labels 0 read, 1 write, 2 instruction fetch (a read); 3 (escape) and 4 (flush) are refused.
* ``csv`` (``.csv``): ``address,size,kind`` (kind ``R``/``W`` or ``read``/``write``, size optional),
  an optional header line.

Blank lines and lines starting with ``#`` are skipped. Every record touches the ``--line``-byte
lines covering ``[address, address + size)``; consecutive records of the same kind whose lines
continue each other are coalesced into one descriptor (a chunk of whole lines), so a replay on a
chip whose first tier has ``--line``-byte blocks requests exactly the lines the records touch, in
order. Addresses keep their value modulo 2**30: each 1 GiB region holding any address becomes one
tensor (``kind`` "other") at a multiple of 2**30, so set indices of any cache of up to 1 GiB per way
(sets x block) are those of the original addresses.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from common.errors import TraceError, UsageError

FORMATS = ("npy", "text", "din", "csv")
EXTENSIONS = {".npy": "npy", ".txt": "text", ".trace": "text", ".addr": "text", ".din": "din", ".csv": "csv"}
REGION_SHIFT = 30
KIND_TOKENS = {"r": False, "w": True, "l": False, "s": True, "ld": False, "st": True, "read": False,
               "write": True, "load": False, "store": True}
DIN_LABELS = {0: False, 1: True, 2: False}


def format_of(path: Path, given: str | None) -> str:
    if given is not None:
        return given
    fmt = EXTENSIONS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(f"cannot tell the format from the extension {path.suffix or '(none)'!r}; pass "
                         f"--format {'|'.join(FORMATS)}", file=str(path), field="--format")
    return fmt


def _int(tok: str, base: int) -> int:
    t = tok.strip()
    if t[:2].lower() == "0x":
        return int(t[2:], 16)
    return int(t, base)


def read_records(path: str | os.PathLike, fmt: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(address, size, is_write)`` arrays (int64, int64, bool) of the file's records."""
    p = Path(path)
    if not p.is_file():
        raise UsageError("no such file" if not p.exists() else "not a file", file=str(p))
    fmt = format_of(p, fmt)
    if fmt == "npy":
        try:
            a = np.load(p, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            raise TraceError(f"not a readable .npy array: {' '.join(str(err).split())}", file=str(p)) from None
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
            raise TraceError(f"expected a 1-d integer array of addresses, got {a.ndim}-d {a.dtype}", file=str(p))
        if len(a) and int(a.min()) < 0:
            raise TraceError(f"address {int(a.min())} is negative", file=str(p))
        return a.astype(np.int64), np.ones(len(a), np.int64), np.zeros(len(a), bool)
    addrs, sizes, writes = [], [], []
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise TraceError(f"not a readable text file: {err}", file=str(p)) from None
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            a, size, w = _parse(fmt, s, n)
        except (ValueError, IndexError, KeyError):
            raise TraceError(f"line {n}: cannot parse {s[:60]!r} as {_EXPECTED[fmt]}", file=str(p)) from None
        if a is None:           # a CSV header
            continue
        if a < 0 or size < 1:
            raise TraceError(f"line {n}: address {a} and size {size}: expected an address >= 0 and a size >= 1",
                             file=str(p))
        addrs.append(a)
        sizes.append(size)
        writes.append(w)
    return np.array(addrs, np.int64), np.array(sizes, np.int64), np.array(writes, bool)


_EXPECTED = {"text": "an address with an optional R/W", "din": "'label address [size]' (label 0, 1 or 2)",
             "csv": "'address,size,read|write'"}


def _parse(fmt: str, s: str, n: int):
    if fmt == "din":
        tok = s.split()
        if len(tok) not in (2, 3):
            raise ValueError
        label = int(tok[0])
        if label not in DIN_LABELS:
            raise ValueError
        return int(tok[1][2:] if tok[1][:2].lower() == "0x" else tok[1], 16), _int(tok[2], 10) if len(tok) == 3 else 1, \
            DIN_LABELS[label]
    if fmt == "csv":
        tok = [t.strip() for t in s.split(",")]
        if len(tok) not in (1, 2, 3):
            raise ValueError
        try:
            a = _int(tok[0], 10)
        except ValueError:
            if n == 1 or all(t.isidentifier() for t in tok):
                return None, 0, False        # a header
            raise
        size = _int(tok[1], 10) if len(tok) > 1 and tok[1] else 1
        w = KIND_TOKENS[tok[2].lower()] if len(tok) > 2 and tok[2] else False
        return a, size, w
    tok = s.replace(",", " ").split()
    if len(tok) == 1:
        return _int(tok[0], 10), 1, False
    if len(tok) == 2:
        if tok[0].lower() in KIND_TOKENS:
            return _int(tok[1], 10), 1, KIND_TOKENS[tok[0].lower()]
        return _int(tok[0], 10), 1, KIND_TOKENS[tok[1].lower()]
    raise ValueError


def coalesce(address: np.ndarray, size: np.ndarray, is_write: np.ndarray, line: int):
    """Descriptors ``(first_line, n_lines, is_write)`` of runs of consecutive same-kind records
    whose lines continue each other, never crossing a 2**30-byte region."""
    if line < 1 or line & (line - 1):
        raise UsageError(f"line must be a power of two number of bytes, got {line}", field="--line")
    first = address // line
    last = (address + size - 1) // line
    per = (1 << REGION_SHIFT) // line if line <= 1 << REGION_SHIFT else 1
    # a record crossing a region boundary is cut in two at it
    if len(size) and int(size.max()) > 1 << REGION_SHIFT:
        raise UsageError(f"a record of {int(size.max())} bytes is larger than the 1 GiB region", field="size")
    cross = np.flatnonzero(first // per != last // per)
    if len(cross):
        cut = (last[cross] // per) * per
        first = np.insert(first, cross + 1, cut)
        last = np.insert(last, cross + 1, last[cross])
        last[cross + np.arange(len(cross))] = cut - 1     # each earlier insertion shifts by one
        is_write = np.insert(is_write, cross + 1, is_write[cross])
    n = len(first)
    if n == 0:
        return first, first, is_write
    brk = np.ones(n, bool)
    brk[1:] = (first[1:] != last[:-1] + 1) | (is_write[1:] != is_write[:-1]) | (first[1:] // per != last[:-1] // per)
    starts = np.flatnonzero(brk)
    ends = np.append(starts[1:], n) - 1
    return first[starts], last[ends] - first[starts] + 1, is_write[starts]


def import_trace(path, out, *, fmt: str | None = None, line: int = 64, force: bool = False) -> dict:
    """Write the address trace at ``path`` as a trace directory ``out``; return a summary."""
    from traces.writer import TraceWriter

    src = Path(path)
    fmt = format_of(src, fmt)
    address, size, is_write = read_records(src, fmt)
    if line > 1 << REGION_SHIFT:
        raise UsageError(f"line {line} B is larger than the 1 GiB region", field="--line")
    first, n_lines, write = coalesce(address, size, is_write, line)
    per = (1 << REGION_SHIFT) // line
    region = first // per
    regions, tensor_of = np.unique(region, return_inverse=True)
    with TraceWriter(out, force=force, alignment=1 << REGION_SHIFT,
                     run=None, extra={"imported": {"file": src.name, "format": fmt, "line": line,
                                                   "records": int(len(address))}}) as w:
        op = w.add_op("imported", "other", -1, "decode", 0, 1, 0)
        for k, r in enumerate(regions.tolist()):
            mine = tensor_of == k
            end = int(((first[mine] + n_lines[mine]) * line).max()) - (r << REGION_SHIFT)
            w.add_tensor(f"region_{r << REGION_SHIFT:#x}", "other", end, "u8")
        offset = (first * line - (region << REGION_SHIFT)).astype(np.uint64)
        if len(first):
            w.add_accesses(np.full(len(first), op, np.uint32), tensor_of.astype(np.uint32), offset,
                           (n_lines * line).astype(np.uint64), is_write=write)
    return {"trace": str(out), "format": fmt, "records": int(len(address)), "descriptors": int(len(first)),
            "tensors": int(len(regions)), "line": line}
