"""A sweep's results: one Parquet file, a row per point, rewritten atomically as groups finish.

Each :meth:`SweepStore.append` writes every row so far to a temporary sibling (``.tmp-NAME-*``)
and renames it over the file, so an interrupted sweep leaves the last complete file (only complete
rows, readable) and never a half-written one. The file's schema metadata (``tierlab`` =
``sweep``, ``grid_columns``) says whose grid it holds: resuming a sweep of other columns into it is
a one-line error. Points are identified by ``point_hash`` (:attr:`emulator.sweep.grid.Point.hash`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from common.errors import UsageError

MARK = b"tierlab-sweep"


def _schema_of(rows: list[dict]):
    """Columns in first-seen order; types inferred by pyarrow over all rows."""
    import pyarrow as pa

    names: dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r))
    return pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows])


class SweepStore:
    """The Parquet file of a sweep over ``grid_columns``."""

    def __init__(self, path: str | os.PathLike, grid_columns: list[str]):
        self.path = Path(path)
        self.grid_columns = list(grid_columns)
        self.rows: list[dict] = self._read()

    def _read(self) -> list[dict]:
        p = self.path
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.is_dir():
            raise UsageError(f"parent directory {parent} does not exist", file=str(p))
        if not p.exists():
            if not os.access(parent, os.W_OK):
                raise UsageError(f"directory {parent} is not writable", file=str(p))
            return []
        import pyarrow.parquet as pq

        if p.is_dir():
            raise UsageError("output exists as a directory, expected a sweep's Parquet file", file=str(p))
        try:
            table = pq.read_table(p)
        except Exception:  # noqa: BLE001 - whatever pyarrow says, it is not a sweep file
            raise UsageError("output exists and is not a tierlab sweep (not a Parquet file); choose another -o",
                             file=str(p)) from None
        meta = table.schema.metadata or {}
        if meta.get(b"tierlab") != MARK:
            raise UsageError("output exists and is not a tierlab sweep; choose another -o", file=str(p))
        cols = json.loads(meta.get(b"grid_columns", b"[]"))
        if cols != self.grid_columns:
            raise UsageError(f"output is a sweep of other columns ({', '.join(cols)}); choose another -o",
                             file=str(p))
        return table.to_pylist()

    def done(self) -> set[str]:
        return {r["point_hash"] for r in self.rows}

    def append(self, rows: list[dict]) -> None:
        """Add ``rows`` and rewrite the file atomically (temporary sibling, then rename)."""
        if not rows:
            return
        import pyarrow.parquet as pq

        table = _schema_of([*self.rows, *rows])
        meta = {b"tierlab": MARK, b"grid_columns": json.dumps(self.grid_columns).encode()}
        table = table.replace_schema_metadata(meta)
        parent = self.path.parent if str(self.path.parent) else Path(".")
        fd, name = tempfile.mkstemp(prefix=f".tmp-{self.path.name}-", dir=parent)
        os.close(fd)
        try:
            pq.write_table(table, name)
            commit(name, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            raise
        self.rows.extend(rows)


def commit(tmp: str, final: Path) -> None:
    """Rename the complete temporary file over the sweep's file (a test interrupts it here)."""
    os.replace(tmp, final)


def read_rows(path: str | os.PathLike) -> list[dict]:
    """Every row of a sweep file, as dicts."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
