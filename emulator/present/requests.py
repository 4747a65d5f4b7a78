"""``tierlab requests`` for people: the summary as aligned tables, a picture of the TTFT
distribution with and without the KV tiers beside the stream's prefix hit curve (``--plot``), and
the self-contained HTML report (``--html``: the configuration, the same tables, the TTFT and TPOT
distributions and the hit curve with the tiers' capacities marked)."""

from __future__ import annotations

from html import escape

import numpy as np

from tierlab.common.atomic import atomic_path
from tierlab.present.format import format_bytes, format_si, table


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:,.1f}"


def summary_tables(s: dict) -> tuple[str, list[tuple[list, list]], list[str]]:
    """What :func:`format_text` prints, as data: the head line, ``(headers, rows)`` of the latency
    and tier tables, and the closing lines (the HTML report draws the same tables)."""
    tgt = s["target"].get("system") or s["target"]["chip"]
    par = s["parallelism"]
    head = (f"{s['model']} on {tgt} (tp {par['tp']}, pp {par['pp']}, dp {par['dp']}: {par['chips']} chips): "
            f"{s['requests']:,} requests over {s['duration_s']:,.1f} s, {s['input_tokens']:,} prompt and "
            f"{s['output_tokens']:,} output tokens")
    lat = (["latency (ms)", "p50", "p90", "p99", "mean"],
           [[name] + [_ms(s[key][p]) for p in ("p50", "p90", "p99", "mean")]
            for name, key in (("time to first token", "ttft_s"), ("time per output token", "tpot_s"),
                              ("end to end", "e2e_s"))])
    rows = []
    for t in s["tiers"]:
        n = t["name"]
        tb = s["tier_bytes"].get(n, {})
        lr = s["load_or_recompute"].get(n, {})
        cap = t.get("capacity_bytes")
        bw = t.get("bandwidth_bytes_per_s")
        rows.append([n, "-" if cap is None else format_bytes(cap),
                     "-" if not bw or not np.isfinite(bw) else format_si(bw, "B/s"),
                     f"{s['hit_ratio'].get(n, 0.0):.1%}", format_bytes(tb.get("loaded", 0.0)),
                     format_bytes(tb.get("written", 0.0)), f"{lr.get('recomputed_tokens', 0):,}"])
    tiers = (["KV tier", "capacity", "bandwidth", "prompt tokens from it", "loaded", "written",
              "recomputed instead"], rows)
    slo = s["slo"]
    given = [f"TTFT {slo['ttft_s'] * 1e3:g} ms" for _ in [0] if slo["ttft_s"]] + \
            [f"TPOT {slo['tpot_s'] * 1e3:g} ms" for _ in [0] if slo["tpot_s"]]
    e = s["energy"]
    lines = [
        f"output tokens/s: {s['output_tokens_per_s']:,.1f} ({s['output_tokens_per_s_per_chip']:,.1f} per chip)",
        f"prompt tokens served from a cache: {s['hit_ratio']['total']:.1%}; bytes moved between tiers per output "
        f"token: {format_bytes(s['bytes_moved_per_output_token'])}",
        f"energy per output token: {format_si(e['j_per_output_token'], 'J')} (steps {format_si(e['steps_j'], 'J')}, "
        f"tier traffic {format_si(e['tiers_j'], 'J')})",
        "cost: " + ("no price in the chip or system file" if s["usd_per_mtok"] is None
                    else f"${s['usd_per_mtok']:.2f} per million output tokens"),
        ("goodput: " + f"{s['goodput_rps']:.3f} requests/s meet {' and '.join(given)} ({s['slo_met']:.1%})"
         if given else "goodput: no SLO given (--slo-ttft, --slo-tpot)"),
    ]
    return head, [lat, tiers], lines


def format_text(s: dict) -> str:
    """The summary of :func:`tierlab.kvstream.server.serve_requests` (its ``summary`` dict)."""
    head, tables, lines = summary_tables(s)
    return "\n\n".join([head, *(table(h, r) for h, r in tables), "\n".join(lines)])


def tier_marks(s: dict) -> list[tuple[float, str]]:
    """Where a replica's tiers end on the hit curve's capacity axis (tokens): HBM's KV tokens, then
    each lower tier's capacity added (write-back keeps a block in one tier; a shared remote pool
    counted whole)."""
    kv = s["kv_bytes_per_token"]
    at = float(s["hbm_kv_tokens"])
    marks = [(at, "HBM")]
    for t in s["tiers"]:
        if t["name"] == "hbm" or not t.get("capacity_bytes"):
            continue
        at += t["capacity_bytes"] / kv
        marks.append((at, f"+ {t['name']} {format_bytes(t['capacity_bytes'])}"))
    return marks


def draw(res, base, curve: dict | None, path, *, force: bool = False) -> None:
    """TTFT's distribution (with the tiers, and with HBM alone when ``base`` is given) and the hit
    curve (``curve``: :meth:`tierlab.kvstream.hitcurve.HitCurve.to_dict`), written atomically."""
    runs = [(res, "with the KV tiers" if base is not None else "as served")]
    if base is not None:
        runs.append((base, "HBM alone"))
    draw_runs(runs, curve, path)


def draw_runs(runs, curve: dict | None, path, *, title: str = "TTFT distribution", marks=()) -> None:
    """The TTFT distribution of each ``(result, label)`` of ``runs`` beside the hit curve (when given,
    with vertical ``(capacity_tokens, label)`` marks), written atomically to ``path``."""
    from tierlab.present.plots import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, 2 if curve else 1, figsize=(11 if curve else 6, 4.4), squeeze=False)
    _cdf_axes(axes[0][0], runs, "ttft_s", "time to first token (ms)", title)
    if curve:
        _curve_axes(axes[0][1], curve, marks)
    fig.tight_layout()
    with atomic_path(path, force=True) as tmp:
        fig.savefig(tmp, dpi=120, format=str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else "png")
    plt.close(fig)


def _finite_ms(r, column: str) -> np.ndarray:
    t = np.sort(np.asarray(r.table.column(column).to_numpy(zero_copy_only=False), np.float64))
    return t[np.isfinite(t)] * 1e3


def _cdf_axes(ax, runs, column: str, xlabel: str, title: str) -> None:
    """The distribution (share of requests at or below) of ``column`` for each run, in ms."""
    for r, label in runs:
        t = _finite_ms(r, column)
        if t.size:
            ax.plot(t, np.arange(1, t.size + 1) / t.size, label=label)
    _axes(ax, xlabel, "share of requests", title)


def _curve_axes(ax, curve: dict, marks) -> None:
    pts = [p for p in curve["curve"] if p["capacity_tokens"] > 0]
    ax.plot([p["capacity_tokens"] for p in pts], [p["hit_ratio_tokens"] for p in pts], "-o", ms=3,
            label=f"{curve['policy']} prefix cache")
    ax.axhline(curve["max_hit_ratio_tokens"], color="grey", ls="--", lw=1, label="infinite capacity")
    for x, label in marks:
        ax.axvline(x, color="grey", ls=":", lw=1)
        ax.annotate(label, (x, 0.02), fontsize=7, rotation=90)
    _axes(ax, "cache capacity (tokens)", "prompt tokens hit", "the stream's prefix hit curve")


def _axes(ax, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)


# ---- the HTML report (``tierlab requests --html``) ------------------------------------------------

def _svg(draw) -> str:
    """``draw(ax)`` on a figure of its own, as SVG text (deterministic, text kept as text, as the
    other reports' figures)."""
    import matplotlib

    from tierlab.present.figures import to_svg
    from tierlab.present.plots import pyplot

    with matplotlib.rc_context({"svg.hashsalt": "tierlab", "svg.fonttype": "none"}):
        fig, ax = pyplot().subplots(figsize=(7.5, 4.2))
        draw(ax)
        fig.tight_layout()
        return to_svg(fig)


def _runs_table(runs) -> tuple[list, list]:
    """Each run side by side: its hit ratio, TTFT and TPOT percentiles, energy and cost per token."""
    rows = []
    for r, label in runs:
        s = r.summary
        rows.append([label, f"{s['hit_ratio']['total']:.1%}",
                     " / ".join(_ms(s["ttft_s"][p]) for p in ("p50", "p90", "p99")),
                     " / ".join(_ms(s["tpot_s"][p]) for p in ("p50", "p90", "p99")),
                     f"{s['output_tokens_per_s_per_chip']:,.1f}", format_si(s["energy"]["j_per_output_token"], "J"),
                     "-" if s["usd_per_mtok"] is None else f"${s['usd_per_mtok']:.2f}"])
    return (["run", "prompt tokens from a cache", "TTFT p50 / p90 / p99 (ms)", "TPOT p50 / p90 / p99 (ms)",
             "output tokens/s per chip", "energy per output token", "$ per Mtok"], rows)


def _config_rows(s: dict, trace) -> list[list]:
    """The header a person cites: model, hardware, parallelism, trace, tiers, serving options."""
    from tierlab.present.html import trace_text

    st, par, tgt = s["settings"], s["parallelism"], s["target"]
    rows = [["model", s["model"]],
            ["target", f"system {tgt['system']} ({tgt['chip']} chips)" if tgt.get("system") else f"chip {tgt['chip']}"]]
    if st.get("prefill_instances") is not None:
        split = f"{st['prefill_instances']} prefill + {st['decode_instances']} decode replicas"
    else:
        split = f"dp {par['dp']}"
    rows.append(["parallelism", f"tp {par['tp']}, pp {par['pp']}, ep {par['ep']}, {split}: {par['chips']} chips"])
    rows.append(["requests", f"{trace_text(trace.source)} ({trace.format}): {len(trace):,} requests"
                 + (f", {trace.block_tokens}-token blocks, {trace.n_unique_blocks:,} distinct" if trace.has_hash_ids
                    else ", no block ids (no prefix reuse)")])
    tiers = [f"hbm {s['hbm_kv_tokens']:,} KV tokens per replica"]
    for t in s["tiers"]:
        if t["name"] != "hbm":
            tiers.append(f"{t['name']} {format_bytes(t['capacity_bytes'])} at {format_si(t['bandwidth_bytes_per_s'], 'B/s')}"
                         + (" (shared)" if t.get("shared") else ""))
    rows.append(["KV tiers", "; ".join(tiers) + f"; {format_bytes(s['kv_bytes_per_token'])} of KV per token"])
    rows.append(["serving", f"rate scale {st['rate_scale']:g}, max batch tokens {st['max_batch_tokens']:,}, "
                            f"{st['write_policy']}, load {'overlapped layer by layer' if st['overlap_load'] else 'before the prefill'}"
                            f", router {st['router']}, weights {st['weights']}, KV {st['kv']}, activations "
                            f"{st['activations']}, HBM utilisation {st['utilisation']:g}"])
    slo = s["slo"]
    given = [f"{k} {slo[key] * 1e3:g} ms" for k, key in (("TTFT", "ttft_s"), ("TPOT", "tpot_s")) if slo[key]]
    rows.append(["SLOs", ", ".join(given) or "none given"])
    sf = s["step_surface"]
    rows.append(["step times", f"{sf['source']}: {sf['replays']} replays"])
    return rows


def html_report(res, base, curve: dict | None, trace) -> str:
    """The self-contained report of a served stream ``res`` (``base``: the same stream with HBM alone,
    or None): its configuration, the summary tables :func:`format_text` prints, the TTFT and TPOT
    distributions and the hit curve (``curve``, :meth:`tierlab.kvstream.hitcurve.HitCurve.to_dict`)
    with the tiers' capacities marked. Figures are SVG in data URIs; no script."""
    from tierlab.common.version import tierlab_version
    from tierlab.present.html import figure_html, header_html, page, section, table_html

    s = res.summary
    runs = [(res, "with the KV tiers" if base is not None else "as served")]
    if base is not None:
        runs.append((base, "HBM alone"))
    head, tables, lines = summary_tables(s)
    secs = [section("summary", "Summary", f"<p>{escape(head)}</p>", *(table_html(h, r) for h, r in tables),
                    "<ul>" + "".join(f"<li>{escape(x)}</li>" for x in lines) + "</ul>")]
    if base is not None:
        secs.append(section("runs", "With the KV tiers and with HBM alone", table_html(*_runs_table(runs))))

    def cdf(column, xlabel, title):
        if not any(_finite_ms(r, column).size for r, _ in runs):
            return None
        return _svg(lambda ax: _cdf_axes(ax, runs, column, xlabel, title))

    secs.append(section("latency", "Latency distributions",
                        figure_html("ttft", cdf("ttft_s", "time to first token (ms)", "TTFT distribution"),
                                    "time to first token: share of requests at or below"),
                        figure_html("tpot", cdf("tpot_s", "time per output token (ms)", "TPOT distribution"),
                                    "time per output token: share of requests at or below (one output token: none)")))
    if curve:
        marks = tier_marks(s)
        secs.append(section("hit-curve", "The stream's prefix hit curve",
                            figure_html("hit_curve", _svg(lambda ax: _curve_axes(ax, curve, marks)),
                                        f"prompt tokens hit against the capacity of one {curve['policy']} prefix "
                                        "cache; dotted: where this run's tiers end (one replica's, added up)"),
                            table_html(["capacity (tokens)", "prompt tokens hit", "blocks hit"],
                                       [[f"{p['capacity_tokens']:,}", f"{p['hit_ratio_tokens']:.1%}",
                                         f"{p['hit_ratio_blocks']:.1%}"] for p in curve["curve"]]
                                       + [["infinite", f"{curve['max_hit_ratio_tokens']:.1%}", "-"]])))
    else:
        secs.append(section("hit-curve", "The stream's prefix hit curve",
                            '<p class="note">the trace has no block ids (Azure, or a CSV without hash_ids): '
                            "no prefix is shared, no curve to draw.</p>"))
    prov = {"tierlab": tierlab_version() or "unknown", "trace": str(trace.source), "format": trace.format,
            "settings": s["settings"], "tiers": s["tiers"], "step_surface": s["step_surface"]}
    return page(f"tierlab requests: {s['model']} on {s['target'].get('system') or s['target']['chip']}", "",
                secs, prov, header=header_html(_config_rows(s, trace)))


def write_html_report(res, base, curve: dict | None, trace, path, *, force: bool = False) -> None:
    """:func:`html_report` written to ``path`` under a temporary name, then renamed."""
    from tierlab.present.html import write_html

    write_html(html_report(res, base, curve, trace), path, force=force)
