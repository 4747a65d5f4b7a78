"""Address traces in the forms memory tracers write, into an address trace (``tierlab import``).

Forms (``--format``, else from the extension, after a ``.gz`` / ``.xz`` one):

* ``npy`` (``.npy``): a 1-d integer array of byte addresses, each a load of one byte (its line).
* ``text`` (``.txt``, ``.trace``, ``.addr``): one address per line (``0x`` hex or decimal), optionally
  with a kind token before or after it: ``R``/``W``, ``L``/``S``, ``LD``/``ST``, ``READ``/``WRITE``.
* ``din`` (``.din``): Dinero IV's format, ``label address [size]`` with the address in hex (``0x``
  optional); labels 0 read, 1 write, 2 instruction fetch (a read); 3 (escape) and 4 (flush) are refused.
* ``csv`` (``.csv``): ``address,size,kind`` (kind ``R``/``W`` or ``read``/``write``, size optional),
  an optional header line.
* ``lackey`` (``.lackey``): Valgrind Lackey's ``--trace-mem=yes`` log: `` L``/`` S`` a load/store,
  `` M`` a load then a store, ``I`` an instruction fetch (left out unless ``instructions``);
  ``SB`` lines (``--trace-superblocks=yes``) are skipped.
* ``drcachesim`` (``.view``): DynamoRIO drcachesim's ``-simulator_type view`` text: ``read``,
  ``write``, ``prefetch*`` (a read), ``ifetch`` (left out unless ``instructions``).
* ``champsim`` (``.champsim``, ``.champsimtrace``): ChampSim's binary trace, 64-byte ``input_instr``
  records (ip; branch flags; 2 destination and 4 source register bytes; 2 destination (store) and 4
  source (load) memory addresses, 0 = none): per instruction its loads, then its stores, each one byte.

Text forms are parsed in compiled code over the raw bytes (:mod:`tierlab.traces.importers.textparse`), chunk by
chunk; gzip and xz input (told by its magic bytes) is decompressed as a stream. Every record
touches the ``line``-byte lines covering ``[address, address + size)``; with ``straddle="once"``
an access touching several lines counts once at tier 0 of a replay (cachegrind's convention), by
default each line counts. The result is a version-4 address trace (:mod:`tierlab.traces.format.addresses`).
"""

from __future__ import annotations

import lzma
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tierlab.common.errors import TraceError, UsageError
from tierlab.traces.importers import textparse as tp
from tierlab.traces.format.schema import REGION_SHIFT, STRADDLE_CONVENTIONS

FORMATS = ("npy", "text", "din", "csv", "lackey", "drcachesim", "champsim")
EXTENSIONS = {".npy": "npy", ".txt": "text", ".trace": "text", ".addr": "text", ".din": "din", ".csv": "csv",
              ".lackey": "lackey", ".view": "drcachesim", ".champsim": "champsim", ".champsimtrace": "champsim"}
COMPRESSED = {".gz": "gzip", ".xz": "xz"}
INSTRUCTIONS_BY_DEFAULT = {"din": True}          # din's label 2 has always been read; tracers' logs: data only
CHUNK_BYTES = 1 << 24
MAX_REGIONS = 1 << 16

_EXPECTED = {"text": "an address with an optional R/W", "din": "'label address [size]' (label 0, 1 or 2)",
             "csv": "'address,size,read|write'", "lackey": "'I  addr,size' or ' L|S|M addr,size' (hex address)",
             "drcachesim": "'RECORD INSTR: TID read|write|ifetch SIZE byte(s) @ 0xADDR'"}

CHAMPSIM_RECORD = np.dtype([("ip", "<u8"), ("is_branch", "u1"), ("branch_taken", "u1"), ("dst_reg", "u1", 2),
                            ("src_reg", "u1", 4), ("dst_mem", "<u8", 2), ("src_mem", "<u8", 4)])
assert CHAMPSIM_RECORD.itemsize == 64


def format_of(path: Path, given: str | None) -> str:
    if given is not None:
        return given
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSED:
        suffixes = suffixes[:-1]
    fmt = EXTENSIONS.get(suffixes[-1]) if suffixes else None
    if fmt is None:
        raise UsageError(f"cannot tell the format from the extension {path.suffix or '(none)'!r}; pass "
                         f"--format {'|'.join(FORMATS)}", file=str(path))
    return fmt


def compression_of(path: Path) -> str | None:
    """None, ``"gzip"`` or ``"xz"``, told from the file's first bytes (not its name)."""
    if not path.is_file():
        raise UsageError("no such file" if not path.exists() else "not a file", file=str(path))
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except OSError as err:
        raise TraceError(f"cannot read: {err.strerror or err}", file=str(path)) from None
    return "gzip" if magic[:2] == b"\x1f\x8b" else "xz" if magic == b"\xfd7zXZ\x00" else None


def _chunks(path: Path, size: int | None = None):
    """The file's (decompressed) bytes in chunks. A gzip or xz stream is decompressed here, so that
    a truncated one still yields all it holds before :class:`_Truncated` is raised (the parser
    then names the first line it could not read whole); a damaged one raises :class:`_Damaged`."""
    size = size or CHUNK_BYTES
    comp = compression_of(path)
    try:
        f = open(path, "rb")
    except OSError as err:
        raise TraceError(f"cannot read: {err.strerror or err}", file=str(path)) from None
    with f:
        if comp is None:
            while True:
                data = f.read(size)
                if not data:
                    return
                yield data
        new = (lambda: zlib.decompressobj(47)) if comp == "gzip" else lzma.LZMADecompressor   # 47: gzip header
        d = new()
        pending = b""
        while True:
            raw = pending or f.read(1 << 20)
            pending = b""
            if not raw:
                break
            try:
                data = d.decompress(raw)
            except (zlib.error, lzma.LZMAError) as err:
                raise _Damaged(comp, err) from None
            if data:
                yield data
            if d.eof:
                pending = d.unused_data          # a further member (gzip) or stream (xz)
                if not pending:
                    pending = f.read(1 << 20)
                    if not pending:
                        return
                d = new()
        if not d.eof:
            raise _Truncated(comp)


class _Truncated(Exception):
    def __init__(self, comp):
        self.comp = comp


class _Damaged(Exception):
    def __init__(self, comp, err):
        self.comp, self.err = comp, err


class _RecordBuffer:
    """Record arrays one parser thread fills (grown to the chunk: at most a record per 2 bytes)."""

    def __init__(self):
        self.addr, self.size, self.kind = np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.uint8)
        self.res = np.zeros(8, np.int64)

    def parse(self, arr: np.ndarray, code: int, instructions: bool, final: bool, header: int) -> np.ndarray:
        cap = len(arr) // 2 + 2
        if cap > len(self.addr):
            self.addr, self.size, self.kind = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.uint8)
        tp.parse_lines(arr, len(arr), code, instructions, final, header, self.addr, self.size, self.kind, self.res)
        return self.res


class Records:
    """Parses a file's records chunk by chunk: :meth:`chunks` yields ``(address, size, kind)``
    arrays (int64, int64, uint8; reused buffers, valid until the next chunk)."""

    def __init__(self, path, fmt: str, instructions: bool | None = None):
        self.path = Path(path)
        self.fmt = fmt
        self.instructions = INSTRUCTIONS_BY_DEFAULT.get(fmt, False) if instructions is None else bool(instructions)
        self.lines = 0          # text lines read (for messages)
        self.compression = None

    def chunks(self):
        self.compression = compression_of(self.path)
        try:
            if self.fmt == "npy":
                yield from self._npy()
            elif self.fmt == "champsim":
                yield from self._champsim()
            else:
                yield from self._text()
        except _Truncated as t:
            where = f"line {self.lines + 1}: " if self.fmt not in ("npy", "champsim") else ""
            raise TraceError(f"{where}the {t.comp} stream ends before its end-of-stream marker (truncated?)",
                             file=str(self.path)) from None
        except _Damaged as d:
            where = f"line {self.lines + 1}: " if self.fmt not in ("npy", "champsim") else ""
            raise TraceError(f"{where}damaged {d.comp} data: {' '.join(str(d.err).split())}",
                             file=str(self.path)) from None

    def _text(self):
        """Chunks split in two at a newline, the halves parsed on two threads (the parser holds
        no GIL); records come out in file order."""
        code = tp.FORMATS[self.fmt]
        bufs = [_RecordBuffer(), _RecordBuffer()]
        header = 0
        carry = b""
        src = _chunks(self.path)
        done = False
        with ThreadPoolExecutor(2) as pool:
            while not done:
                data = next(src, None)
                if data is None:
                    done, buf = True, carry
                else:
                    buf = carry + data if carry else data
                arr = np.frombuffer(buf, np.uint8)
                cut = buf.find(b"\n", len(buf) // 2) + 1 if len(buf) > 1 << 16 else 0
                if cut <= 0:
                    cut = 0
                halves = [(0, cut, True, header), (cut, len(arr), done, 1 if cut else header)] if cut else \
                    [(0, len(arr), done, header)]
                runs = list(pool.map(lambda h: bufs[h[0]].parse(arr[h[1][0]:h[1][1]], code, self.instructions,
                                                                h[1][2], h[1][3]), enumerate(halves)))
                consumed = 0
                for k, (lo, hi, _, _) in enumerate(halves):
                    res = runs[k]
                    if res[tp.R_ERROR] != tp.OK:
                        self._bad_line(buf[lo:hi], int(res[tp.R_LINES]), int(res[tp.R_BAD_START]),
                                       int(res[tp.R_BAD_END]), int(res[tp.R_ERROR]))
                    self.lines += int(res[tp.R_LINES])
                    header = max(header, int(res[tp.R_HEADER]))
                    consumed = lo + int(res[tp.R_CONSUMED])
                    n = int(res[tp.R_RECORDS])
                    if n:
                        yield bufs[k].addr[:n], bufs[k].size[:n], bufs[k].kind[:n]
                carry = buf[consumed:]

    def _bad_line(self, buf: bytes, lines_before: int, start: int, end: int, err: int):
        n = self.lines + lines_before + 1
        raw = buf[start:end]
        text = raw.decode("utf-8", "replace").rstrip()[:60]
        if err == tp.BINARY:
            col = next(i for i, b in enumerate(raw) if b < 32 and b not in (9, 13))
            msg = f"line {n}: binary data (byte {raw[col]:#04x} at column {col + 1}), not text (--format {self.fmt})"
        elif err == tp.UNKNOWN_RECORD:
            what = "Lackey record" if self.fmt == "lackey" else "drcachesim record"
            msg = f"line {n}: unknown {what} {text!r}; expected {_EXPECTED[self.fmt]}"
        elif err == tp.REFUSED_LABEL:
            msg = f"line {n}: din label {text.split()[0]} (escape or flush) is not an access; expected 0, 1 or 2"
        elif err == tp.TOO_LARGE:
            msg = f"line {n}: {text!r}: the address or size is beyond the 2**62-byte space tierlab emulates"
        elif err == tp.ZERO_SIZE:
            msg = f"line {n}: {text!r}: size 0; expected a size >= 1"
        else:
            msg = f"line {n}: cannot parse {text!r} as {_EXPECTED[self.fmt]}"
        raise TraceError(msg, file=str(self.path))

    def _npy(self):
        try:
            a = np.load(self.path, allow_pickle=False, mmap_mode="r")
        except (ValueError, OSError, EOFError) as err:
            raise TraceError(f"not a readable .npy array: {' '.join(str(err).split())}", file=str(self.path)) from None
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
            raise TraceError(f"expected a 1-d integer array of addresses, got {a.ndim}-d {a.dtype}", file=str(self.path))
        step = CHUNK_BYTES // 4
        ones, reads = np.ones(step, np.int64), np.zeros(step, np.uint8)
        for lo in range(0, len(a), step):
            c = np.asarray(a[lo:lo + step]).astype(np.int64)
            if len(c) and int(c.min()) < 0:
                i = int(np.argmin(c))
                raise TraceError(f"element {lo + i}: address {int(c[i])} is negative", file=str(self.path))
            yield c, ones[:len(c)], reads[:len(c)]

    def _champsim(self):
        carry = b""
        start = 0
        for data in _chunks(self.path, CHUNK_BYTES // 64 * 64):
            buf = carry + data if carry else data
            n = len(buf) // 64
            carry = buf[n * 64:]
            if n == 0:
                continue
            rec = np.frombuffer(buf, CHAMPSIM_RECORD, n)
            cols = [rec["src_mem"][:, i] for i in range(4)] + [rec["dst_mem"][:, i] for i in range(2)]
            kinds = [tp.READ] * 4 + [tp.WRITE] * 2
            if self.instructions:
                cols.insert(0, rec["ip"])
                kinds.insert(0, tp.IFETCH)
            a = np.stack(cols, axis=1).reshape(-1)
            k = np.tile(np.array(kinds, np.uint8), n)
            keep = a != 0
            a = a[keep]
            if len(a) and int(a.max()) >= 1 << 62:
                i = int(np.flatnonzero(a >= 1 << 62)[0])
                raise TraceError(f"record {start + int(np.flatnonzero(keep)[i]) // len(kinds)}: address "
                                 f"{int(a[i]):#x} is beyond the 2**62-byte space tierlab emulates", file=str(self.path))
            start += n
            yield a.astype(np.int64), np.ones(len(a), np.int64), k[keep]
        if carry:
            raise TraceError(f"ends inside record {start} ({len(carry)} of its 64 bytes): not a whole number of "
                             "ChampSim input_instr records (truncated?)", file=str(self.path))


def import_trace(path, out, *, fmt: str | None = None, line: int = 64, force: bool = False,
                 straddle: str = "both", instructions: bool | None = None) -> dict:
    """Write the address trace at ``path`` as an address trace directory ``out``; return a summary
    (``tierlab import --json``)."""
    from tierlab.traces.format.addresses import AddressTraceWriter

    src = Path(path)
    fmt = format_of(src, fmt)
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}", field="format")
    if not isinstance(line, int) or line < 1 or line & (line - 1) or line > 1 << REGION_SHIFT:
        raise UsageError(f"line must be a power of two number of bytes up to 1 GiB, got {line}", field="line")
    if straddle not in STRADDLE_CONVENTIONS:
        raise UsageError(f"straddle {straddle!r}; expected {' or '.join(STRADDLE_CONVENTIONS)}", field="straddle")
    sh = line.bit_length() - 1
    recs = Records(src, fmt, instructions)
    regions = np.zeros(MAX_REGIONS, np.int64)
    region_end = np.zeros(MAX_REGIONS, np.int64)
    region_lo = np.zeros(MAX_REGIONS, np.int64)
    n_regions = np.zeros(1, np.int64)
    table = np.full(2 * MAX_REGIONS, -1, np.int64)
    stats = np.zeros(9, np.int64)
    n_records = 0
    words, cont = np.empty(0, np.int64), np.empty(0, np.int64)
    summary = {"file": src.name, "format": fmt, "line": line, "straddle": straddle,
               "instructions": recs.instructions}
    with AddressTraceWriter(out, line_bytes=line, straddle=straddle, force=force) as w:
        def to_words(a, s, k):
            nonlocal words, cont
            need = tp.count_lines(a, s, k, len(a), sh)
            if need > len(words):
                words, cont = np.empty(need, np.int64), np.empty(need, np.int64)
            before = int(stats[6])
            m = tp.to_lines(a, s, k, len(a), sh, regions, region_lo, region_end, n_regions, table, w.rows, words, cont,
                            stats)
            if m < 0:
                raise TraceError(f"the addresses reach more than {MAX_REGIONS} regions of 1 GiB", file=str(src))
            w.add(words[:m], cont[:int(stats[6]) - before])

        # a chunk's lines are made and written on one thread, in order, while the next chunk is
        # parsed (the parser's buffers are reused: each chunk's records are copied first)
        with ThreadPoolExecutor(1) as pool:
            pending = None
            try:
                for a, s, k in recs.chunks():
                    n_records += len(a)
                    job = pool.submit(to_words, a.copy(), s.copy(), k.copy())
                    if pending is not None:
                        pending.result()
                    pending = job
            except TraceError:
                if pending is not None:
                    pending.result()        # an earlier chunk's error comes first
                raise
            if pending is not None:
                pending.result()
        r = int(n_regions[0])
        w.regions([int(x) << REGION_SHIFT for x in regions[:r]], [int(x) for x in region_end[:r]],
                  [int(x) for x in region_lo[:r]])
        summary.update(records=n_records, accesses=int(stats[0]), lines=int(stats[1]), reads=int(stats[7]),
                       writes=int(stats[8]), read_lines=int(stats[2]), write_lines=int(stats[3]),
                       straddles=int(stats[4]), instruction_fetches=int(stats[5]), compression=recs.compression,
                       tensors=r)
        w.extra["imported"] = dict(summary)
    return {"trace": str(out), **summary, "descriptors": summary["lines"], "word_bits": w.word_bits}
