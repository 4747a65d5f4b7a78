"""What the API's functions return: a result holding the command's ``--json`` dict and its rows.

Every result has ``to_dict()`` (exactly what the same command prints with ``--json``: the dict is
passed through ``json`` as the CLI prints it), ``to_arrow()`` (a ``pyarrow.Table`` of its rows),
``to_pandas()`` / ``to_polars()`` (where those libraries are installed) and ``_repr_html_()`` (the
report's summary table, for Jupyter).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from tierlab.common.errors import UsageError


class Result:
    """Base of the API's results."""

    def __init__(self, d: dict, table: pa.Table):
        self._json = json.dumps(d)          # as the CLI prints it (json.dumps, no default=)
        self._table = table

    def to_dict(self) -> dict:
        """The command's ``--json`` output for the same arguments, as a fresh dict."""
        return json.loads(self._json)

    def to_arrow(self) -> pa.Table:
        """The rows as a ``pyarrow.Table``."""
        return self._table

    def to_pandas(self):
        """The rows as a pandas DataFrame (needs pandas)."""
        try:
            return self._table.to_pandas()      # pyarrow imports pandas, an optional library
        except ImportError:
            raise UsageError("needs pandas: pip install pandas (or use to_arrow() / to_polars())",
                             field="to_pandas") from None

    def to_polars(self):
        """The rows as a polars DataFrame (needs polars)."""
        try:
            import polars
        except ImportError:
            raise UsageError("needs polars: pip install polars (or use to_arrow() / to_pandas())",
                             field="to_polars") from None
        return polars.from_arrow(self._table)

    def _repr_html_(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self._table.num_rows} rows>"


class TraceResult(Result):
    """A trace written by :func:`tierlab.trace`: ``path`` is its directory (``os.fspath`` works,
    so it can be passed wherever a trace path is); ``to_arrow()`` is its ops table. A trace made
    without ``path=`` lives in a temporary directory removed when this object is."""

    def __init__(self, d: dict, trace, keep=None):
        super().__init__(d, trace.ops)
        self.path = str(trace.path)
        self._keep = keep            # the temporary directory, if any: removed with this object

    def __fspath__(self) -> str:
        return self.path

    def _repr_html_(self) -> str:
        from tierlab.present.html import trace_summary_html

        return trace_summary_html(self.to_dict())

    def __repr__(self) -> str:
        d = self.to_dict()
        return f"<TraceResult {d['model']}: {d['tables']['ops']} ops at {self.path}>"


def _per_op(replay, cost) -> pa.Table:
    from tierlab.present.report import per_op_table

    return per_op_table(replay, cost)


def _system_per_op(replay, cost) -> pa.Table:
    """Every device's per-op rows, a ``device`` column first."""
    tables = []
    for i, (tr, cst) in enumerate(zip(replay.devices, cost.devices)):
        t = _per_op(tr, cst)
        tables.append(t.add_column(0, "device", pa.array([i] * t.num_rows, pa.int32())))
    return pa.concat_tables(tables, promote_options="default") if tables else pa.table({"device": pa.array([], pa.int32())})


class ReplayResult(Result):
    """A replay on a chip or a system (:func:`tierlab.replay`, :func:`tierlab.run`):
    ``to_arrow()`` has one row per op (a system's: per device and op, ``device`` first), the columns
    of ``tierlab replay -o FILE.parquet``."""

    def __init__(self, d: dict, replay, cost, *, system: bool):
        super().__init__(d, _system_per_op(replay, cost) if system else _per_op(replay, cost))
        self.system = system

    @property
    def per_token(self) -> dict | None:
        """``per_token`` of the JSON (decode only, else None): bytes by link, energy, latency, tokens/s, bound."""
        return self.to_dict()["per_token"]

    @property
    def tokens_per_s(self) -> float | None:
        pt = self.per_token
        return None if pt is None else pt["tokens_per_s"]

    @property
    def bound(self) -> str | None:
        pt = self.per_token
        return None if pt is None else pt["bound"]

    def _repr_html_(self) -> str:
        from tierlab.present.html import replay_summary_html

        return replay_summary_html(self.to_dict())

    def __repr__(self) -> str:
        d = self.to_dict()
        where = d.get("system") or d.get("chip")
        pt = d["per_token"]
        figure = f"{pt['tokens_per_s']:.4g} tokens/s, {pt['bound']}-bound" if pt else "no decode steps"
        return f"<ReplayResult on {where}: {figure}; {self._table.num_rows} op rows>"


def _comparison_rows(rows) -> pa.Table:
    from tierlab.analysis.compare import table_rows

    metrics = table_rows(rows)
    out: list[dict[str, Any]] = []
    for i, r in enumerate(rows):
        row: dict[str, Any] = {"chip": r.chip, "fits": r.ok, "reason": r.reason}
        for label, vals in metrics:
            row[label] = vals[i]
        out.append(row)
    return pa.Table.from_pylist(out)


class ComparisonResult(Result):
    """Chips and systems side by side (:func:`tierlab.compare`): ``to_arrow()`` has one row per chip
    or system (systems after chips), the columns of ``tierlab compare --csv``."""

    def __init__(self, d: dict, rows):
        super().__init__(d, _comparison_rows(rows))
        self._rows = rows

    def _repr_html_(self) -> str:
        from tierlab.present.html import comparison_table_html

        return comparison_table_html(self._rows)


class SweepResult(Result):
    """A sweep (:func:`tierlab.sweep`): ``to_arrow()`` has one row per point of the grid (the sweep
    file's columns; a file's rows of other grids are left out), ``to_dict()`` the summary
    ``tierlab sweep --json`` prints."""

    def __init__(self, d: dict, table: pa.Table):
        super().__init__(d, table)

    def _repr_html_(self) -> str:
        from tierlab.present.html import sweep_table_html

        return sweep_table_html(self._table.to_pylist())


class CurveResult(Result):
    """A serving curve (:func:`tierlab.throughput`): ``to_dict()`` is ``tierlab throughput --json``
    (one curve, or ``{"curves": [...]}`` for several chips or systems); ``to_arrow()`` one row per
    point of each curve (the columns of ``tierlab throughput -o FILE.parquet``)."""

    def __init__(self, d: dict, curves: list):
        from tierlab.present.serving import rows

        super().__init__(d, pa.Table.from_pylist(rows(curves)))

    def _repr_html_(self) -> str:
        from tierlab.present.html import curve_table_html

        return curve_table_html(self._table.to_pylist())
