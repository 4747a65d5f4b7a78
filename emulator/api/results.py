"""What the API's functions return: a result holding the command's ``--json`` dict and its rows.

Every result has ``to_dict()`` (exactly what the same command prints with ``--json``: the dict is
passed through ``json`` as the CLI prints it), ``to_arrow()`` (a ``pyarrow.Table`` of its rows),
``to_pandas()`` / ``to_polars()`` (where those libraries are installed) and ``_repr_html_()`` (the
report's summary table, for Jupyter).
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any, Callable

import pyarrow as pa

from tierlab.common.errors import UsageError


class Result:
    """Base of the API's results: the ``--json`` dict (as JSON reads it back), the rows, and the files
    the call wrote (``written``, in order)."""

    def __init__(self, d: dict, table: pa.Table | Callable[[], pa.Table], written: list | None = None):
        self._d = json.loads(json.dumps(d))    # as the CLI prints it (json.dumps, no default=): tuples are lists
        self._rows = table                     # or a function building it when first asked for (a replay's)
        self.written: list[str] = [str(p) for p in written or ()]

    @property
    def _table(self) -> pa.Table:
        if callable(self._rows):
            self._rows = self._rows()
        return self._rows

    def to_dict(self) -> dict:
        """The command's ``--json`` output for the same arguments, as a fresh dict."""
        return copy.deepcopy(self._d)

    def to_json(self, indent: int | None = 2) -> str:
        """``to_dict()`` as the command prints it with ``--json``."""
        return json.dumps(self._d, indent=indent)

    def to_text(self) -> str:
        """What the command prints without ``--json``."""
        raise NotImplementedError

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
        self.trace = trace           # the opened trace (tierlab.traces.format.trace.Trace)
        self._keep = keep            # the temporary directory, if any: removed with this object

    def __fspath__(self) -> str:
        return self.path

    def to_text(self) -> str:
        t = self._d["tables"]
        return (f"wrote {self.path}: {t['tensors']} tensors, {t['ops']} ops, {t['accesses']} accesses, "
                f"{self._d['bytes_on_disk'] / 1e6:.1f} MB")

    def _repr_html_(self) -> str:
        from tierlab.present.html import trace_summary_html

        return trace_summary_html(self._d)

    def __repr__(self) -> str:
        return f"<TraceResult {self._d['model']}: {self._d['tables']['ops']} ops at {self.path}>"


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
    of ``tierlab replay -o FILE.parquet``. ``replay`` and ``cost`` are the objects behind it
    (:class:`~tierlab.pipeline.chip_replay.TraceReplay` and its cost, or a system's twins)."""

    def __init__(self, d: dict, replay, cost, *, system: bool, written: list | None = None):
        # the per-op rows are built on first use: a command printing the text or --json never does
        super().__init__(d, functools.partial(_system_per_op if system else _per_op, replay, cost), written)
        self.system = system
        self.replay, self.cost = replay, cost

    @property
    def per_token(self) -> dict | None:
        """``per_token`` of the JSON (decode only, else None): bytes by link, energy, latency, tokens/s, bound."""
        pt = self._d["per_token"]
        return None if pt is None else copy.deepcopy(pt)

    @property
    def tokens_per_s(self) -> float | None:
        pt = self._d["per_token"]
        return None if pt is None else pt["tokens_per_s"]

    @property
    def bound(self) -> str | None:
        pt = self._d["per_token"]
        return None if pt is None else pt["bound"]

    def to_text(self) -> str:
        if self.system:
            from tierlab.present.system_report import format_system_text

            return format_system_text(self._d)
        from tierlab.present.report import format_text

        return format_text(self._d)

    def _repr_html_(self) -> str:
        from tierlab.present.html import replay_summary_html

        return replay_summary_html(self._d)

    def __repr__(self) -> str:
        d = self._d
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
    or system (systems after chips), the columns of ``tierlab compare --csv``; ``rows`` the
    :class:`~tierlab.analysis.compare.Row` s behind them."""

    def __init__(self, d: dict, rows, title: str, written: list | None = None):
        super().__init__(d, _comparison_rows(rows), written)
        self.rows = rows
        self._title = title

    def to_text(self) -> str:
        from tierlab.present.compare import format_table

        return format_table(self.rows, title=self._title)

    def _repr_html_(self) -> str:
        from tierlab.present.html import comparison_table_html

        return comparison_table_html(self.rows)


class SweepResult(Result):
    """A sweep (:func:`tierlab.sweep`): ``to_arrow()`` has one row per point of the grid (the sweep
    file's columns; a file's rows of other grids are left out), ``to_dict()`` the summary
    ``tierlab sweep --json`` prints."""

    def to_text(self) -> str:
        d = self._d
        lines = [f"{d['output']}: {d['points']} points ({d['present']} already present, {d['computed']} computed, "
                 f"{d['failed']} failed)"]
        if d.get("plot"):
            lines.append(f"plot: {d['plot']}")
        if d.get("html"):
            lines.append(f"report: {d['html']}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from tierlab.present.html import sweep_table_html

        return sweep_table_html(self._table.to_pylist())


class CurveResult(Result):
    """A serving curve (:func:`tierlab.throughput`): ``to_dict()`` is ``tierlab throughput --json``
    (one curve, or ``{"curves": [...]}`` for several chips or systems); ``to_arrow()`` one row per
    point of each curve (the columns of ``tierlab throughput -o FILE.parquet``); ``curves`` one dict
    per chip or system."""

    def __init__(self, curves: list, written: list | None = None):
        from tierlab.present.serving import rows

        super().__init__(curves[0] if len(curves) == 1 else {"curves": curves},
                         pa.Table.from_pylist(rows(curves)), written)
        self.curves = curves

    def to_text(self) -> str:
        from tierlab.present import serving as view

        return "\n\n".join(view.format_text(d) for d in self.curves)

    def _repr_html_(self) -> str:
        from tierlab.present.html import curve_table_html

        return curve_table_html(self._table.to_pylist())


class CurveOfTier(Result):
    """A tier's miss-ratio curve (:func:`tierlab.mrc`): ``to_dict()`` is ``tierlab mrc --json``;
    ``to_arrow()`` one row per capacity of the table."""

    def __init__(self, d: dict, curves, written: list | None = None):
        super().__init__(d, pa.Table.from_pylist(d.get("rows") or []), written)
        self.curves = curves

    def to_text(self) -> str:
        from tierlab.present.mrc import format_mrc

        return format_mrc(self._d)

    def _repr_html_(self) -> str:
        return "<pre>" + self.to_text().replace("&", "&amp;").replace("<", "&lt;") + "</pre>"
