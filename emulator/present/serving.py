"""The serving curve shown: text table, plot, one self-contained HTML page, Parquet rows.

Every function takes the dicts of :func:`tierlab.serving.throughput.throughput` (one per chip or
system: ``--chips a,b`` / ``--systems a,b`` overlay them). The plot (matplotlib, the ``plot``
extra, as :mod:`tierlab.present.plots`) draws output tokens/s per chip against tokens/s per user,
one curve per chip or system as InferenceMAX's charts do, each point labelled with its
concurrency, the Pareto points of all curves ringed and the SLO as a vertical line (the speed per
user ``1 / slo_tpot``).
"""

from __future__ import annotations

import base64
import html
import io

from tierlab.common.atomic import atomic_path
from tierlab.present.plots import pareto_front, pyplot

COLUMNS = (("concurrency", "conc", "{:d}"), ("output_tokens_per_s", "out tok/s", "{:,.0f}"),
           ("output_tokens_per_s_per_chip", "out/chip", "{:,.0f}"),
           ("total_tokens_per_s_per_chip", "in+out/chip", "{:,.0f}"),
           ("tokens_per_s_per_user", "tok/s/user", "{:,.1f}"), ("ttft_s", "TTFT ms", "ms"),
           ("tpot_s", "TPOT ms", "ms"), ("usd_per_mtok", "USD/Mtok", "{:.3f}"),
           ("energy_j_per_token", "J/tok", "{:.3g}"))


def label(d: dict) -> str:
    par = d["parallelism"]
    where = d.get("system") or d["chip"]
    extra = "".join(f" {k.upper()}{par[k]}" for k in ("tp", "pp", "ep", "dp") if par[k] > 1)
    return where + extra


def _cell(v, fmt: str) -> str:
    if v is None:
        return "-"
    if fmt == "ms":
        return f"{v * 1e3:,.2f}"
    return fmt.format(v)


def format_text(d: dict) -> str:
    """One curve as an aligned table, with the best point, the KV limit and the cheapest point within the SLO."""
    slo_given = d["slo"]["tpot_s"] is not None or d["slo"]["ttft_s"] is not None
    head = [c[1] for c in COLUMNS] + (["meets SLO"] if slo_given else [])   # no column without an SLO
    rows = [[_cell(p[k], f) for k, _, f in COLUMNS] + (["yes" if m else "no"] if slo_given else [])
            for p, m in zip(d["curve"], d["slo"]["meets"])]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = [f"{d['model']} on {label(d)}: input {d['input_tokens']}, output {d['output_tokens']} tokens a request, "
             f"{d['max_batch_tokens']} tokens a step, weights {d['weights']}, KV {d['kv']}",
             "  ".join(h.rjust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    lines.append(f"max output tokens/s {d['max_output_tokens_per_s']:,.0f} (concurrency {d['best_concurrency']}); "
                 f"KV limit {d['max_concurrency']} requests")
    if d["beyond_memory"]:
        lines.append(f"not run: concurrency {', '.join(map(str, d['beyond_memory']))} (beyond the KV limit)")
    ch = d.get("cheapest_within_slo")
    if ch is not None and d["slo"]["tpot_s"] is not None:
        lines.append(f"cheapest within TPOT <= {d['slo']['tpot_s'] * 1e3:g} ms: concurrency {ch['concurrency']}, "
                     f"{ch['usd_per_mtok']:.3f} USD per million output tokens, {ch['tokens_per_s_per_user']:.1f} "
                     "tok/s per user")
    n = d["provenance"]["representative_steps"]["replays"]
    lines.append(f"{n} representative steps replayed (docs/serving.md)")
    return "\n".join(lines)


def draw(curves: list[dict], path=None):
    """The figure (module docstring); written atomically to ``path`` (PNG, SVG, PDF by suffix) when
    given, else returned as SVG bytes."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.6))
    cmap = plt.get_cmap("tab10")
    pts = []
    for k, d in enumerate(curves):
        xs = [p["tokens_per_s_per_user"] or 0.0 for p in d["curve"]]
        ys = [p["output_tokens_per_s_per_chip"] for p in d["curve"]]
        ax.plot(xs, ys, "-o", color=cmap(k % 10), label=f"{d['model']} on {label(d)}", ms=4, zorder=3)
        for x, y, p in zip(xs, ys, d["curve"]):
            ax.annotate(str(p["concurrency"]), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        pts += list(zip(xs, ys))
    front = pareto_front(pts)
    ax.scatter([pts[i][0] for i in front], [pts[i][1] for i in front], s=90, facecolors="none",
               edgecolors="black", label="Pareto points", zorder=4)
    slo = curves[0]["slo"]["tpot_s"]
    if slo:
        ax.axvline(1.0 / slo, color="grey", ls="--", lw=1, label=f"SLO: TPOT {slo * 1e3:g} ms")
    ax.set_xlabel("tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per chip")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    d0 = curves[0]
    ax.set_title(f"throughput against interactivity: input {d0['input_tokens']}, output {d0['output_tokens']}")
    fig.tight_layout()
    if path is None:
        buf = io.BytesIO()
        fig.savefig(buf, format="svg")
        plt.close(fig)
        return buf.getvalue()
    with atomic_path(path, force=True) as tmp:
        fig.savefig(tmp, dpi=120, format=str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else "png")
    plt.close(fig)
    return None


def write_html(curves: list[dict], path, *, force: bool = False) -> None:
    """One self-contained page: the figure as an SVG data URI and each curve's table."""
    svg = base64.b64encode(draw(curves)).decode()
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>tierlab throughput</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>",
             "<h1>Throughput against interactivity</h1>",
             f"<img alt='serving curve' src='data:image/svg+xml;base64,{svg}'>"]
    for d in curves:
        parts.append(f"<h2>{html.escape(d['model'])} on {html.escape(label(d))}</h2>")
        parts.append("<table><tr>" + "".join(f"<th>{html.escape(c[1])}</th>" for c in COLUMNS) + "</tr>")
        for p in d["curve"]:
            parts.append("<tr>" + "".join(f"<td>{html.escape(_cell(p[k], f))}</td>" for k, _, f in COLUMNS) + "</tr>")
        parts.append("</table>")
        parts.append(f"<p>max output tokens/s {d['max_output_tokens_per_s']:,.0f} at concurrency "
                     f"{d['best_concurrency']}; KV limit {d['max_concurrency']} requests; "
                     f"{html.escape(d['provenance']['representative_steps']['rule'])}.</p>")
    parts.append("</body></html>")
    with atomic_path(path, force=force) as tmp:
        tmp.write_text("\n".join(parts), encoding="utf-8")


def rows(curves: list[dict]) -> list[dict]:
    """One row per curve entry, with the model, chip, system, parallelism and lengths."""
    out = []
    for d in curves:
        base = {"model": d["model"], "chip": d["chip"], "system": d.get("system"), **d["parallelism"],
                "input_tokens": d["input_tokens"], "output_tokens": d["output_tokens"],
                "max_batch_tokens": d["max_batch_tokens"], "max_concurrency": d["max_concurrency"]}
        for p, m in zip(d["curve"], d["slo"]["meets"]):
            out.append({**base, **p, "meets_slo": m})
    return out


def write_parquet(curves: list[dict], path, *, force: bool = False) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows(curves))
    with atomic_path(path, force=force) as tmp:
        pq.write_table(table, tmp)
