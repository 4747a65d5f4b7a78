"""A chip comparison for people and files: the model line, the side-by-side table, the CSV and the
plot's title of :func:`tierlab.analysis.compare.compare`'s rows (its figures are explained there)."""

from __future__ import annotations

import csv

from tierlab.analysis.compare import ChipResult, cache_notes, csv_rows, model_info, table_rows
from tierlab.common.atomic import atomic_path
from tierlab.present.format import format_bytes, format_percent, format_si, table
from tierlab.traces.model.spec import human_count


def model_line(trace) -> tuple[dict, str]:
    """:func:`tierlab.analysis.compare.model_info` and a one-line summary of the model and the run."""
    d = model_info(trace)
    if "active_weight_bytes" not in d:
        return d, str(d["name"] or "trace")
    run = trace.manifest.get("run") or {}
    text = (f"{d['name']}: {human_count(d['params'])} parameters, {human_count(d['active_params'])} active per "
            f"token ({format_bytes(d['active_weight_bytes'])} of {d['weights']} weights); batch {run.get('batch', 1)}, "
            f"context {run.get('context', 0)} + prompt {run.get('prompt', 0)}, {run.get('generate', 0)} decode steps")
    return d, text


def format_metric(label: str, v) -> str:
    """One cell of the table: the value of metric ``label`` in its unit (``-`` for None)."""
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if label.startswith("bytes/"):
        return format_bytes(v)
    if label.startswith("found"):
        return format_percent(v)
    if label.startswith("energy"):
        return format_si(v, "J")
    if label.startswith("latency"):
        return format_si(v, "s")
    return f"{v:.4g}"


def format_table(rows: list[ChipResult], title: str = "") -> str:
    """The side-by-side table; chips that do not fit show ``-`` and their reason below."""
    metrics = table_rows(rows)
    body = [[label] + [format_metric(label, v) for v in vals] for label, vals in metrics]
    status = ["fits"] + ["yes" if r.ok else "no (see below)" for r in rows]
    text = table(["per decode token"] + [r.chip for r in rows], [status] + body, title=title or None)
    notes = [f"{r.chip}: {r.reason}" for r in rows if not r.ok] + cache_notes(rows)
    if any(label.startswith("found") for label, _ in metrics):
        notes.append("found at TIER (KIND): share of the requests arriving at the tier found there, whole run")
    if not any(r.ok and r.result.get("per_token") for r in rows):
        notes.append("the trace has no decode steps: per-token figures need --generate N")
    return text + ("\n\n" + "\n".join(notes) if notes else "")


def write_csv(rows: list[ChipResult], path, *, force: bool = False) -> None:
    """:func:`tierlab.analysis.compare.csv_rows` to ``path``, written atomically."""
    header, body = csv_rows(rows)
    with atomic_path(path, force=force) as tmp:
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(body)


def plot_title(trace, *, pim: bool) -> str:
    """The comparison plot's title: the model, its batch and weights dtype (and "PIM off")."""
    spec = trace.manifest.get("spec") or {}
    run = trace.manifest.get("run") or {}
    return (f"{spec.get('name', 'trace')}: batch {run.get('batch', 1)}, weights {run.get('weights', '?')}"
            f"{'' if pim else ', PIM off'}")
