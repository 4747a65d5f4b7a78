"""Address traces (format version 5, and 4, manifest ``kind`` ``"addresses"``): one op over one stream of lines.

An address trace is what a memory tracer records: one address stream, each access a read or a
write. It holds no descriptors: ``lines.arrow`` is one column, ``word = line << 1 | is_write``
(uint32 where every word of the trace fits, the manifest's ``lines.word_bits`` 32, else uint64;
version 4 wrote uint64 always), one row per line an access touches, in order; ``line`` is the line number (byte address
>> log2 ``line_bytes``) in the trace's address space, where the 2**30-byte region holding the k-th
region the recorded addresses reached (in first-seen order) is tensor k, at address ``k * 2**30``
(so addresses keep their value modulo 2**30, and every set index of a cache of up to 1 GiB a way
is the recorded address's); its tensor covers the lines touched there, from a multiple of 1 MiB. ``straddles.arrow`` lists the rows whose line continues the access of
the row before (an access straddling lines): with the manifest's ``straddle`` ``"once"``
(cachegrind's convention), a replay counts such an access once at tier 0 (a miss if any of its
lines missed); with ``"both"`` every line counts.

Plain words were measured against delta-coded int32 words (``benchmarks/bench_import.py``
``encodings``): see ``docs/address-traces.md``. Plain words are read as zero-copy views of the
memory-mapped file and fed to the stream kernels as they are; 32-bit ones halve the bytes mapped,
checked and read (a trace's lines reach 2**31 only past 128 regions of 64-byte lines).

:class:`AddressTraceWriter` writes one (atomically, manifest last); :class:`AddressTrace` reads
one: :meth:`~AddressTrace.iter_lines` gives the checked words, :meth:`~AddressTrace.iter_accesses`
the same stream as descriptor batches (one per line) for every consumer of descriptor traces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from tierlab.common.atomic import atomic_path
from tierlab.common.errors import TraceError
from tierlab.common.jit import njit
from tierlab.traces.format import schema as fmt
from tierlab.traces.format.trace import Trace

REGION_BYTES = 1 << fmt.REGION_SHIFT
TENSOR_ALIGN = 1 << 20     # a region's tensor starts at a multiple of this inside it (every preset's blocks divide it)


@njit(nogil=True)
def word_range(words):
    """(smallest, largest) word: one pass the compiler vectorises."""
    lo = words[0]
    hi = words[0]
    for j in range(1, len(words)):
        w = words[j]
        lo = min(lo, w)
        hi = max(hi, w)
    return lo, hi


@njit(nogil=True)
def check_words(words, sh, address, nbytes, n_tensors):
    """The first row whose line lies outside its region's tensor (tensor ``b >> 30`` for the line's
    byte address ``b``, at ``address``, of ``nbytes``), or -1. When every word lies in one region,
    the range of the words decides (one vectorised pass); otherwise each word is looked at."""
    if len(words) == 0:
        return -1
    lo, hi = word_range(words)
    if lo >= 0:
        b0, b1 = (lo >> 1) << sh, (hi >> 1) << sh
        t = b0 >> 30
        if t == b1 >> 30 and t < n_tensors and b0 >= address[t] and b1 + (1 << sh) <= address[t] + nbytes[t]:
            return -1
    for j in range(len(words)):
        w = words[j]
        b = (w >> 1) << sh
        t = b >> 30
        if w < 0 or t >= n_tensors or b < address[t] or b + (1 << sh) > address[t] + nbytes[t]:
            return j
    return -1


class AddressTraceWriter:
    """Write an address trace directory (a temporary sibling, renamed into place on success).

    :meth:`add` appends line words and the rows continuing an access; :meth:`regions` sets the
    tensors (each region's base byte address and the bytes used in it) before the ``with`` ends."""

    def __init__(self, path, *, line_bytes: int, straddle: str = "both", force: bool = False,
                 extra: dict | None = None, batch_rows: int = 1 << 22):
        self.path, self.line_bytes, self.straddle, self.force = Path(path), int(line_bytes), straddle, force
        self.extra, self.batch_rows = dict(extra or {}), batch_rows
        self.rows = self.n_straddles = 0
        self._pending: list[np.ndarray] = []
        self._pending_rows = 0
        self.word_bits = 32         # until a word needs 64 (then the batches written are rewritten)
        self._cont: list[np.ndarray] = []
        self._regions: list[tuple[int, int]] = []

    def __enter__(self) -> "AddressTraceWriter":
        self._ctx = atomic_path(self.path, directory=True, force=self.force)
        self.tmp = self._ctx.__enter__()
        try:
            self._open_lines()
        except BaseException as err:
            self._ctx.__exit__(type(err), err, err.__traceback__)
            raise
        return self

    def add(self, words: np.ndarray, cont_rows: np.ndarray | None = None) -> None:
        """Append ``words`` (``line << 1 | is_write``; copied) and the rows (of the whole table)
        continuing an access."""
        if len(words):
            self._pending.append(np.array(words, np.uint64))
            self._pending_rows += len(words)
            self.rows += len(words)
            if self._pending_rows >= self.batch_rows:
                self._flush()
        if cont_rows is not None and len(cont_rows):
            self._cont.append(np.array(cont_rows, np.uint64))
            self.n_straddles += len(cont_rows)

    def _open_lines(self) -> None:
        self._sink = pa.OSFile(str(self.tmp / fmt.LINES_FILE), "wb")
        self._writer = pa.ipc.new_file(self._sink, fmt.LINES_SCHEMAS[self.word_bits])

    def _flush(self) -> None:
        if self._pending:
            col = self._pending[0] if len(self._pending) == 1 else np.concatenate(self._pending)
            if self.word_bits == 32 and len(col) and int(col.max()) >> 32:
                self._widen()
            schema = fmt.LINES_SCHEMAS[self.word_bits]
            words = col.astype(np.uint32) if self.word_bits == 32 else col
            self._writer.write_batch(pa.RecordBatch.from_arrays([pa.array(words)], schema=schema))
        self._pending, self._pending_rows = [], 0

    def _widen(self) -> None:
        """A word needs 64 bits: rewrite the 32-bit batches written so far as 64-bit ones, go on in 64."""
        self._writer.close()
        self._sink.close()
        narrow = self.tmp / (fmt.LINES_FILE + ".32")
        (self.tmp / fmt.LINES_FILE).rename(narrow)
        self.word_bits = 64
        self._open_lines()
        with pa.memory_map(str(narrow), "r") as src:
            reader = pa.ipc.open_file(src)
            for i in range(reader.num_record_batches):
                col = reader.get_batch(i).column(0).to_numpy().astype(np.uint64)
                self._writer.write_batch(pa.RecordBatch.from_arrays([pa.array(col)], schema=fmt.LINES_SCHEMA))
        narrow.unlink()

    def regions(self, bases: list[int], ends: list[int], lows: list[int] | None = None) -> None:
        """The tensors: region k (recorded base byte address ``bases[k]``) covers its lines from
        ``lows[k]`` (default 0) to ``ends[k]`` (bytes from the region's start); its tensor starts at
        ``k * 2**30`` plus ``lows[k]`` rounded down to :data:`TENSOR_ALIGN` and ends at ``ends[k]``."""
        lows = [0] * len(bases) if lows is None else lows
        self._regions = [(b, lo // TENSOR_ALIGN * TENSOR_ALIGN, e) for b, lo, e in zip(bases, lows, ends)]

    def __exit__(self, exc_type, exc, tb):
        try:
            self._flush() if exc_type is None else None
            self._writer.close()
            self._sink.close()
        except BaseException as err:
            if exc_type is None:
                return self._ctx.__exit__(type(err), err, err.__traceback__)
        if exc_type is not None:
            return self._ctx.__exit__(exc_type, exc, tb)
        try:
            self._write_small()
        except BaseException as err:
            self._ctx.__exit__(type(err), err, err.__traceback__)
            raise
        return self._ctx.__exit__(None, None, None)

    def _write_small(self) -> None:
        from tierlab.traces.format.writer import generator_name

        n = len(self._regions)
        tensors = pa.table({"tensor_id": pa.array(range(n), pa.uint32()),
                            "name": [f"region_{b:#x}" for b, _, _ in self._regions], "kind": ["other"] * n,
                            "layer": pa.array([-1] * n, pa.int32()), "expert": pa.array([-1] * n, pa.int32()),
                            "dtype": ["u8"] * n,
                            "address": pa.array([k * REGION_BYTES + lo for k, (_, lo, _) in enumerate(self._regions)],
                                                pa.uint64()),
                            "nbytes": pa.array([e - lo for _, lo, e in self._regions], pa.uint64())},
                           schema=fmt.TENSORS_SCHEMA)
        ops = pa.table({"op_id": pa.array([0], pa.uint32()), "name": ["imported"], "kind": ["other"],
                        "layer": pa.array([-1], pa.int32()), "phase": ["decode"], "step": pa.array([0], pa.int32()),
                        "tokens": pa.array([1], pa.uint32()), "flops": pa.array([0], pa.uint64()),
                        "expert": pa.array([-1], pa.int32()), "pim_eligible": [False]}, schema=fmt.OPS_SCHEMA)
        cont = np.concatenate(self._cont) if self._cont else np.zeros(0, np.uint64)
        for file, schema, table in ((fmt.TENSORS_FILE, fmt.TENSORS_SCHEMA, tensors), (fmt.OPS_FILE, fmt.OPS_SCHEMA, ops),
                                    (fmt.STRADDLES_FILE, fmt.STRADDLES_SCHEMA,
                                     pa.table({"row": pa.array(cont, pa.uint64())}, schema=fmt.STRADDLES_SCHEMA))):
            with pa.OSFile(str(self.tmp / file), "wb") as sink, pa.ipc.new_file(sink, schema) as w:
                w.write_table(table)
        manifest = {"format": fmt.FORMAT_NAME, "version": fmt.ADDRESS_VERSION, "kind": fmt.ADDRESS_KIND,
                    "devices": 1, "generator": generator_name(), "model": None, "run": None,
                    "alignment": TENSOR_ALIGN,
                    "tables": {"tensors": n, "ops": 1, "lines": self.rows, "straddles": int(len(cont))},
                    "lines": {"line_bytes": self.line_bytes, "encoding": "plain", "word": "line << 1 | is_write",
                              "word_bits": self.word_bits},
                    "straddle": self.straddle, **self.extra}
        (self.tmp / fmt.MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def open_address_trace(p: Path, manifest: dict, mpath: Path):
    """Open the version-4 or -5 address trace ``p`` (manifest read): check its tables, return an
    :class:`AddressTrace`."""
    from tierlab.traces.format.tables import check_tensor_layout, read_small_table

    tables = manifest.get("tables")
    if not isinstance(tables, dict):
        raise TraceError("missing row counts", file=str(mpath), field="tables")
    for name, (file, _) in fmt.ADDRESS_TABLES.items():
        n = tables.get(name)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise TraceError(f"row count of {name} is {n!r}, expected a non-negative integer", file=str(mpath),
                             field=f"tables.{name}")
        if not (p / file).is_file():
            raise TraceError("missing table file", file=str(p / file))
    lines = manifest.get("lines")
    lb = lines.get("line_bytes") if isinstance(lines, dict) else None
    if not isinstance(lb, int) or isinstance(lb, bool) or lb < 1 or lb & (lb - 1) or lb > REGION_BYTES:
        raise TraceError(f"line_bytes is {lb!r}, expected a power of two of at most 2**30", file=str(mpath),
                         field="lines.line_bytes")
    if manifest["version"] >= 5:        # version 4's words are 64-bit, and it names no width
        bits = lines.get("word_bits")
        if not isinstance(bits, int) or isinstance(bits, bool) or bits not in fmt.LINES_SCHEMAS:
            raise TraceError(f"word_bits is {bits!r}, expected 32 or 64", file=str(mpath), field="lines.word_bits")
    if lines.get("encoding", "plain") != "plain":
        raise TraceError(f"encoding {lines.get('encoding')!r}; this tierlab reads 'plain'", file=str(mpath),
                         field="lines.encoding")
    if manifest.get("straddle", "both") not in fmt.STRADDLE_CONVENTIONS:
        raise TraceError(f"straddle {manifest.get('straddle')!r}; expected one of "
                         f"{', '.join(fmt.STRADDLE_CONVENTIONS)}", file=str(mpath), field="straddle")
    tensors = read_small_table(p / fmt.TENSORS_FILE, fmt.TENSORS_SCHEMA)
    ops = read_small_table(p / fmt.OPS_FILE, fmt.OPS_SCHEMA)
    for name, table in (("tensors", tensors), ("ops", ops)):
        if table.num_rows != tables[name]:
            raise TraceError(f"holds {table.num_rows} rows, the manifest says {tables[name]}",
                             file=str(p / fmt.ADDRESS_TABLES[name][0]))
    if ops.num_rows != 1:
        raise TraceError(f"an address trace has one op, this one {ops.num_rows}", file=str(p / fmt.OPS_FILE))
    address = tensors.column("address").to_numpy()
    k = np.arange(len(address), dtype=np.uint64)
    if np.any(address >> np.uint64(fmt.REGION_SHIFT) != k) or \
            np.any(address + tensors.column("nbytes").to_numpy() > (k + np.uint64(1)) * np.uint64(REGION_BYTES)):
        raise TraceError("an address trace's tensor k lies inside the 2**30 bytes from k * 2**30",
                         file=str(p / fmt.TENSORS_FILE), field="address")
    check_tensor_layout(tensors, manifest, str(p / fmt.TENSORS_FILE), str(mpath))
    return AddressTrace(p, manifest, tensors, ops)


class AddressTrace(Trace):
    """A validated address trace (see the module's docstring). Descriptor consumers see one
    descriptor per line (:meth:`iter_accesses`); the replay takes the words (:meth:`iter_lines`)."""

    @property
    def kind(self) -> str:
        return fmt.ADDRESS_KIND

    @property
    def line_bytes(self) -> int:
        return int(self.manifest["lines"]["line_bytes"])

    @property
    def word_bits(self) -> int:
        """32 or 64: the width of the stored words (version 4: always 64)."""
        return int(self.manifest["lines"]["word_bits"]) if self.manifest["version"] >= 5 else 64

    @property
    def n_lines(self) -> int:
        return int(self.manifest["tables"]["lines"])

    @property
    def n_accesses(self) -> int:
        return self.n_lines

    @property
    def straddle(self) -> str:
        return self.manifest.get("straddle", "both")

    @property
    def writes(self) -> bool | None:
        """Whether any line writes (from the manifest's import summary; None: not recorded)."""
        w = (self.manifest.get("imported") or {}).get("writes")
        return None if not isinstance(w, int) else w > 0

    def straddle_rows(self) -> np.ndarray:
        """The rows continuing the access of the row before (int64, increasing)."""
        path = self.path / fmt.STRADDLES_FILE
        t = _read_table(path, fmt.STRADDLES_SCHEMA)
        rows = t.column("row").to_numpy().astype(np.int64)
        if len(rows) != self.manifest["tables"]["straddles"]:
            raise TraceError(f"holds {len(rows)} rows, the manifest says {self.manifest['tables']['straddles']}",
                             file=str(path))
        if len(rows) and (rows[0] < 1 or rows[-1] >= self.n_lines or np.any(np.diff(rows) <= 0)):
            raise TraceError(f"rows must increase within 1..{self.n_lines - 1}", file=str(path), field="row")
        return rows

    def iter_lines(self, check: bool = True) -> Iterator[np.ndarray]:
        """The checked words (views of the memory-mapped file, read-only: int64 for 64-bit words,
        uint32 for 32-bit ones: widen before arithmetic that may pass 2**32), one array per stored
        record batch, then the row count. ``check=False``: the words are not checked against the
        tensors here (the caller runs :meth:`check_lines` on each, e.g. beside the
        replay); everything else is."""
        from tierlab.traces.format.ipc import IpcTable, corrupt, ipc_form
        from tierlab.traces.format.tables import check_schema, one_line

        path = self.path / fmt.LINES_FILE
        nbytes = self._tensor_nbytes.astype(np.int64)
        address = self.tensors.column("address").to_numpy().astype(np.int64)
        form = ipc_form(path)
        rows = 0
        try:
            src = IpcTable(path, form, advise=False)     # the replay's check thread is first to read each page
        except (pa.ArrowException, OSError, UnicodeDecodeError, ValueError) as err:
            raise TraceError(f"{corrupt(form)} after 0 rows: {one_line(err)}", file=str(path)) from None
        try:
            check_schema(src.schema, fmt.LINES_SCHEMAS[self.word_bits], path)
            batches = src.batches()
            while True:
                try:
                    b = next(batches)
                except StopIteration:
                    break
                except (pa.ArrowException, OSError) as err:
                    raise TraceError(f"{corrupt(form)} after {rows} rows: {one_line(err)}", file=str(path)) from None
                col = b.column(0)
                if col.null_count:
                    raise TraceError(f"rows {rows}..{rows + len(col) - 1}: null words", file=str(path), field="word")
                words = col.to_numpy()
                if words.dtype == np.uint64:
                    words = words.view(np.int64)
                if check:
                    self.check_lines(words, rows, address, nbytes)
                rows += len(words)
                yield words
        finally:
            src.close()
        if rows != self.n_lines:
            raise TraceError(f"holds {rows} lines, the manifest says {self.n_lines} (truncated?)", file=str(path))

    def check_lines(self, words: np.ndarray, row0: int, address=None, nbytes=None) -> None:
        """Raise the TraceError naming the first of ``words`` (rows from ``row0``) whose line lies
        outside its region's tensor."""
        if nbytes is None:
            nbytes = self._tensor_nbytes.astype(np.int64)
            address = self.tensors.column("address").to_numpy().astype(np.int64)
        bad = check_words(words, self.line_bytes.bit_length() - 1, address, nbytes, len(nbytes))
        if bad >= 0:
            w = int(words[bad])
            raise TraceError(f"row {row0 + bad}: line {w >> 1} ({self.line_bytes} B) lies outside the tensors",
                             file=str(self.path / fmt.LINES_FILE), field="word")

    def iter_accesses(self, batch_rows: int = 1 << 20) -> Iterator[pa.RecordBatch]:
        """The lines as descriptor batches (``ACCESSES_SCHEMA``): op 0, the line's region tensor,
        its offset there, ``line_bytes`` bytes, count 1."""
        sh = self.line_bytes.bit_length() - 1
        address = self.tensors.column("address").to_numpy().astype(np.int64)
        for words in self.iter_lines():
            for lo in range(0, len(words), batch_rows):
                w = words[lo:lo + batch_rows].astype(np.int64)
                b = (w >> 1) << sh
                n = len(w)
                tid = b >> fmt.REGION_SHIFT
                yield pa.RecordBatch.from_arrays(
                    [pa.array(np.zeros(n, np.uint32)), pa.array(tid.astype(np.uint32)),
                     pa.array((b - address[tid]).astype(np.uint64)),
                     pa.array(np.full(n, self.line_bytes, np.uint64)), pa.array(np.ones(n, np.uint32)),
                     pa.array(np.zeros(n, np.uint64)), pa.array((w & 1).astype(bool))], schema=fmt.ACCESSES_SCHEMA)

    def access_columns(self) -> dict[str, np.ndarray]:
        batches = list(self.iter_accesses(1 << 22))
        if not batches:
            return {f.name: np.empty(0, f.type.to_pandas_dtype()) for f in fmt.ACCESSES_SCHEMA}
        return {f.name: np.concatenate([b.column(i).to_numpy(zero_copy_only=False) for b in batches])
                for i, f in enumerate(fmt.ACCESSES_SCHEMA)}

    def once_rows(self) -> np.ndarray:
        """Rows continuing a straddling access, counted once at tier 0 under ``--straddle once``
        (empty under ``both``)."""
        return self.straddle_rows() if self.straddle == "once" else np.zeros(0, np.int64)


def _read_table(path: Path, schema: pa.Schema) -> pa.Table:
    from tierlab.traces.format.tables import read_small_table
    return read_small_table(path, schema)
