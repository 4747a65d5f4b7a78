"""``tierlab requests`` for people: the summary as aligned tables, and a picture of the TTFT
distribution with and without the KV tiers beside the stream's prefix hit curve."""

from __future__ import annotations

import numpy as np

from tierlab.common.atomic import atomic_path
from tierlab.present.format import format_bytes, format_si, table


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:,.1f}"


def format_text(s: dict) -> str:
    """The summary of :func:`tierlab.kvstream.server.serve_requests` (its ``summary`` dict)."""
    tgt = s["target"].get("system") or s["target"]["chip"]
    par = s["parallelism"]
    head = (f"{s['model']} on {tgt} (tp {par['tp']}, pp {par['pp']}, dp {par['dp']}: {par['chips']} chips): "
            f"{s['requests']:,} requests over {s['duration_s']:,.1f} s, {s['input_tokens']:,} prompt and "
            f"{s['output_tokens']:,} output tokens")
    lat = table(["latency (ms)", "p50", "p90", "p99", "mean"],
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
    tiers = table(["KV tier", "capacity", "bandwidth", "prompt tokens from it", "loaded", "written",
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
    return "\n\n".join([head, lat, tiers, "\n".join(lines)])


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
    ax = axes[0][0]
    for r, label in runs:
        t = np.sort(np.asarray(r.table.column("ttft_s").to_numpy(zero_copy_only=False), np.float64))
        t = t[np.isfinite(t)]
        if t.size:
            ax.plot(t * 1e3, np.arange(1, t.size + 1) / t.size, label=label)
    _axes(ax, "time to first token (ms)", "share of requests", title)
    if curve:
        ax2 = axes[0][1]
        pts = [p for p in curve["curve"] if p["capacity_tokens"] > 0]
        ax2.plot([p["capacity_tokens"] for p in pts], [p["hit_ratio_tokens"] for p in pts], "-o", ms=3,
                 label=f"{curve['policy']} prefix cache")
        ax2.axhline(curve["max_hit_ratio_tokens"], color="grey", ls="--", lw=1, label="infinite capacity")
        for x, label in marks:
            ax2.axvline(x, color="grey", ls=":", lw=1)
            ax2.annotate(label, (x, 0.02), fontsize=7, rotation=90)
        _axes(ax2, "cache capacity (tokens)", "prompt tokens hit", "the stream's prefix hit curve")
    fig.tight_layout()
    with atomic_path(path, force=True) as tmp:
        fig.savefig(tmp, dpi=120, format=str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else "png")
    plt.close(fig)


def _axes(ax, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
