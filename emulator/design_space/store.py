"""A sweep's results: one Parquet file, a row per point; rows land as groups finish, atomically.

Each :meth:`SweepStore.append` either rewrites the whole file (every row so far, to a temporary
sibling ``.tmp-NAME-*`` renamed over the file) or, when that would rewrite far more than it adds,
writes only the new rows as a part file ``.NAME.parts/part-*.parquet`` (also under a temporary
name, renamed when complete). The file is compacted (rewritten with every part's rows, then the
parts removed) when the rows waiting in parts reach a quarter of the file's, when
:attr:`SweepStore.compact_after_s` has passed since the last rewrite, and when the sweep ends
(:meth:`SweepStore.flush`). A grid of N points therefore costs O(N) rows written in all, not
O(N²), and the file is never more than a quarter (or half a minute) behind.

An interrupted sweep leaves the last complete file (only complete rows, readable) and complete
parts, never a half-written one; reopening reads both (a point in both, left by an interruption
between the rename and the removal of the parts, is counted once), so no finished point is lost.
The file's schema metadata (``tierlab`` = ``sweep``, ``grid_columns``) says whose grid it holds:
resuming a sweep of other columns into it is a one-line error. Points are identified by
``point_hash`` (:attr:`tierlab.design_space.grid.Point.hash`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path

from tierlab.common.atomic import signals_held
from tierlab.common.errors import UsageError

MARK = b"tierlab-sweep"
COMPACT_AFTER_S = 30.0
COMPACT_SHARE = 4          # compact when rows waiting in parts x 4 >= rows in the file


def _table_of(rows: list[dict], grid_columns: list[str]):
    """Columns in first-seen order; types inferred by pyarrow over all rows; the sweep's metadata."""
    import pyarrow as pa

    names: dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r))
    table = pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows])
    return table.replace_schema_metadata({b"tierlab": MARK, b"grid_columns": json.dumps(grid_columns).encode()})


def _write_atomically(table, final: Path, prefix: str) -> None:
    """``table`` to a temporary sibling, renamed over ``final``; SIGINT/SIGTERM held meanwhile."""
    import pyarrow.parquet as pq

    with signals_held():
        fd, name = tempfile.mkstemp(prefix=prefix, dir=final.parent)
        os.close(fd)
        try:
            pq.write_table(table, name)
            commit(name, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            raise


class SweepStore:
    """The Parquet file of a sweep over ``grid_columns`` (and its waiting part files)."""

    def __init__(self, path: str | os.PathLike, grid_columns: list[str],
                 compact_after_s: float = COMPACT_AFTER_S):
        self.path = Path(path)
        self.grid_columns = list(grid_columns)
        self.compact_after_s = compact_after_s
        self.parts_dir = self.parent / f".{self.path.name}.parts"
        self.rows: list[dict] = self._read()
        self.parts: list[Path] = []
        self.waiting = 0                    # rows in parts, not yet in the file
        self._read_parts()
        self._last_compaction = time.monotonic()

    @property
    def parent(self) -> Path:
        return self.path.parent if str(self.path.parent) else Path(".")

    def _check(self, table, p: Path) -> None:
        meta = table.schema.metadata or {}
        if meta.get(b"tierlab") != MARK:
            raise UsageError("output exists and is not a tierlab sweep; choose another -o", file=str(p))
        cols = json.loads(meta.get(b"grid_columns", b"[]"))
        if cols != self.grid_columns:
            raise UsageError(f"output is a sweep of other columns ({', '.join(cols)}); choose another -o",
                             file=str(p))

    def _read_table(self, p: Path):
        import pyarrow.parquet as pq

        try:
            return pq.read_table(p)
        except Exception:  # noqa: BLE001 - whatever pyarrow says, it is not a sweep file
            raise UsageError("output exists and is not a tierlab sweep (not a Parquet file); choose another -o",
                             file=str(p)) from None

    def _read(self) -> list[dict]:
        p, parent = self.path, self.parent
        if not parent.is_dir():
            raise UsageError(f"parent directory {parent} does not exist", file=str(p))
        if not p.exists():
            if not os.access(parent, os.W_OK):
                raise UsageError(f"directory {parent} is not writable", file=str(p))
            return []
        if p.is_dir():
            raise UsageError("output exists as a directory, expected a sweep's Parquet file", file=str(p))
        table = self._read_table(p)
        self._check(table, p)
        return table.to_pylist()

    def _read_parts(self) -> None:
        """Rows of complete parts left by an interrupted sweep, each point once."""
        if not self.parts_dir.is_dir():
            return
        have = self.done()
        for part in sorted(self.parts_dir.glob("part-*.parquet")):
            table = self._read_table(part)
            self._check(table, part)
            new = [r for r in table.to_pylist() if r["point_hash"] not in have]
            have.update(r["point_hash"] for r in new)
            self.rows.extend(new)
            self.waiting += len(new)
            self.parts.append(part)

    def done(self) -> set[str]:
        return {r["point_hash"] for r in self.rows}

    def append(self, rows: list[dict]) -> None:
        """Add ``rows``: rewrite the file, or write them as one part file (see the module docstring)."""
        if not rows:
            return
        in_file = len(self.rows) - self.waiting
        self.rows.extend(rows)
        self.waiting += len(rows)
        due = time.monotonic() - self._last_compaction >= self.compact_after_s
        if due or self.waiting * COMPACT_SHARE >= in_file:
            self.flush()
            return
        self.parts_dir.mkdir(exist_ok=True)
        part = self.parts_dir / f"part-{time.time_ns():020d}-{os.getpid()}.parquet"
        _write_atomically(_table_of(rows, self.grid_columns), part, ".tmp-part-")
        self.parts.append(part)

    def flush(self) -> None:
        """Rewrite the file with every row (temporary sibling, then rename), then remove the parts."""
        if self.waiting == 0 and not self.parts:
            return
        _write_atomically(_table_of(self.rows, self.grid_columns), self.path, f".tmp-{self.path.name}-")
        for part in self.parts:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()
        with contextlib.suppress(OSError):
            self.parts_dir.rmdir()
        self.parts, self.waiting = [], 0
        self._last_compaction = time.monotonic()


def commit(tmp: str, final: Path) -> None:
    """Rename a complete temporary file over its final name (a test interrupts it here)."""
    os.replace(tmp, final)


def read_rows(path: str | os.PathLike) -> list[dict]:
    """Every row of a sweep file, as dicts."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
