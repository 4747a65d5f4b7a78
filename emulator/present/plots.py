"""Plots (matplotlib, the optional ``plot`` extra, imported only when drawing), written atomically
in the format the path's suffix names (PNG, SVG, PDF).

* :func:`plot_comparison`: a chip comparison in two panels, one bar per chip: bytes per decode token
  stacked by link (plus the bytes a PIM unit read in memory, hatched), and energy per decode token
  stacked by component (tiers, links, compute, PIM). Chips that cannot hold the model get an empty
  slot labelled "does not fit".
* :func:`plot_mrc`: a tier's miss ratio against capacity (log scale): the fully-associative LRU
  curve, the per-set one, and the OPT rows.

* :func:`plot_pareto`: a sweep's rows, throughput per device (tokens/s over the chip or system's
  devices) against throughput per user (tokens/s per sequence: tokens/s over the batch), a marker
  per point coloured by chip or system, the Pareto front (:func:`pareto_front`, pure, no
  matplotlib) a line through the non-dominated points.

:func:`pyplot` is matplotlib's pyplot on the Agg backend, or a :class:`UsageError` saying how to
install it (callers check it before doing the work whose result they would plot).
"""

from __future__ import annotations

import numpy as np

from tierlab.analysis.compare import ENERGY_PARTS, union_keys
from tierlab.present.format import format_size
from tierlab.common.atomic import atomic_path
from tierlab.common.errors import UsageError

_ENERGY_COLOURS = {"tiers": "#4c72b0", "links": "#dd8452", "compute": "#55a868", "pim": "#c44e52"}


def pyplot():
    """matplotlib.pyplot (Agg backend); a UsageError naming ``--plot`` when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("plotting needs matplotlib: pip install 'tierlab[plot]'", field="plot") from None
    return plt


def plot_comparison(rows, path, *, title: str = "", force: bool = False) -> None:
    """Draw the two panels for ``rows`` (:class:`tierlab.analysis.compare.ChipResult`) to ``path`` (PNG, SVG, PDF
    by suffix), written atomically."""
    plt = pyplot()
    names = [r.chip for r in rows]
    x = list(range(len(rows)))
    links = union_keys(rows, "bytes_by_link")
    in_mem = union_keys(rows, "in_memory_bytes")
    fig, (ax_b, ax_e) = plt.subplots(1, 2, figsize=(max(8.0, 1.6 * len(rows) + 5), 5.6))
    cmap = plt.get_cmap("tab10")

    bottom = [0.0] * len(rows)
    for k, n in enumerate(links):
        v = [(r.summary["bytes_by_link"].get(n, 0.0) if r.ok else 0.0) / 2**20 for r in rows]
        ax_b.bar(x, v, bottom=bottom, label=f"link {n}", color=cmap(k % 10))
        bottom = [b + y for b, y in zip(bottom, v)]
    for k, n in enumerate(in_mem):
        v = [(r.summary["in_memory_bytes"].get(n, 0.0) if r.ok else 0.0) / 2**20 for r in rows]
        ax_b.bar(x, v, bottom=bottom, label=f"in memory {n} (PIM)", color="white",
                 edgecolor=cmap((len(links) + k) % 10), hatch="//")
        bottom = [b + y for b, y in zip(bottom, v)]
    ax_b.set_ylabel("MiB per decode token")
    ax_b.set_title("bytes moved per token")

    bottom = [0.0] * len(rows)
    for p in ENERGY_PARTS:
        v = [(r.summary["energy_j"].get(p, 0.0) if r.ok else 0.0) * 1e3 for r in rows]
        if not any(v):
            continue
        ax_e.bar(x, v, bottom=bottom, label=p, color=_ENERGY_COLOURS[p])
        bottom = [b + y for b, y in zip(bottom, v)]
    ax_e.set_ylabel("mJ per decode token")
    ax_e.set_title("energy per token")

    for ax in (ax_b, ax_e):
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=20, ha="right")
        for i, r in enumerate(rows):
            if not r.ok:
                ax.text(i, 0, "does not fit", rotation=90, ha="center", va="bottom", fontsize=8, color="grey")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path, force=force) as tmp:
        fig.savefig(tmp, dpi=120, format=_suffix(path).lower())
    plt.close(fig)


def _suffix(path) -> str:
    return str(path).rsplit(".", 1)[-1] if "." in str(path) else "png"


def plot_mrc(result: dict, curves, path, *, force: bool = False) -> None:
    """Draw :func:`tierlab.analysis.tier_mrc.tier_mrc`'s ``(result, curves)`` to ``path``."""
    plt = pyplot()
    import matplotlib.ticker

    curve, set_curve, opt_by_row = curves
    n = max(curve.accesses, 1)
    caps_b, misses = curve.curve()
    pick = np.unique(np.geomspace(1, max(len(caps_b) - 1, 1), 2000).astype(np.int64))
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    xs, ys = caps_b[pick], misses[pick] / n
    right = max([r["capacity_bytes"] for r in result["rows"]] + [result["tier_capacity_bytes"]])
    if right > xs[-1]:                              # flat beyond the footprint: every miss is cold
        xs, ys = np.append(xs, right), np.append(ys, ys[-1])
    ax.step(xs, ys, where="post", label="LRU, fully associative")
    if set_curve is not None:
        c, m = set_curve.curve()
        ax.plot(c[1:], m[1:] / n, "o-", ms=3, label=f"LRU, {set_curve.n_sets} sets (per way count)")
    if opt_by_row:
        ks = sorted(opt_by_row)
        ax.plot(ks, [opt_by_row[k] / n for k in ks], "s--", ms=4, label="OPT (Belady), fully associative")
    ax.axvline(result["tier_capacity_bytes"], color="grey", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: format_size(int(x))))
    ax.set_xlabel("capacity (bytes)")
    ax.set_ylabel("miss ratio")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{result['chip']} / {result['tier']} ({result['block_bytes']} B blocks)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path, force=force) as tmp:
        fig.savefig(tmp, format=_suffix(path))
    plt.close(fig)


def pareto_front(points) -> list[int]:
    """Indices of the non-dominated ``(x, y)`` points when both are to be maximised, in increasing x.
    A point is dominated when another is at least as good in both and better in one; of equal
    points one is kept."""
    pts = [(float(x), float(y)) for x, y in points]
    order = sorted(range(len(pts)), key=lambda i: (-pts[i][0], -pts[i][1], i))
    front, best_y = [], float("-inf")
    for i in order:
        if pts[i][1] > best_y:
            front.append(i)
            best_y = pts[i][1]
    return sorted(front, key=lambda i: (pts[i][0], -pts[i][1]))


def pareto_points(rows) -> list[tuple[str, float, float]]:
    """``(chip or system, tokens/s per user, tokens/s per device)`` of each sweep row with a result."""
    out = []
    for r in rows:
        tps = r.get("tokens_per_s")
        if r.get("error") is not None or not tps:
            continue
        label = r.get("system") or r.get("chip") or "?"
        out.append((label, tps / max(int(r.get("batch") or 1), 1), tps / max(int(r.get("devices") or 1), 1)))
    return out


def plot_pareto(rows, path, *, title: str = "") -> None:
    """Throughput per device against throughput per user for a sweep's ``rows`` (dicts), the Pareto
    front marked; written atomically to ``path`` (PNG, SVG, PDF by suffix)."""
    plt = pyplot()
    pts = pareto_points(rows)
    if not pts:
        raise UsageError("no point of the sweep has a result to plot", field="plot")
    fig, ax = plt.subplots(figsize=(8, 5.6))
    cmap = plt.get_cmap("tab10")
    labels = list(dict.fromkeys(p[0] for p in pts))
    for k, lab in enumerate(labels):
        xs = [p[1] for p in pts if p[0] == lab]
        ys = [p[2] for p in pts if p[0] == lab]
        ax.scatter(xs, ys, color=cmap(k % 10), label=lab, s=28, zorder=3)
    front = pareto_front([(p[1], p[2]) for p in pts])
    ax.plot([pts[i][1] for i in front], [pts[i][2] for i in front], color="black", lw=1.2, ls="--",
            marker="o", mfc="none", ms=9, label="Pareto front", zorder=2)
    ax.set_xlabel("tokens/s per user (per sequence: tokens/s / batch)")
    ax.set_ylabel("tokens/s per device (chip or system's devices)")
    if all(p[1] > 0 for p in pts) and all(p[2] > 0 for p in pts):
        import matplotlib.ticker

        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):        # plain numbers at 1, 2, 5 of each decade
            axis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "sweep: throughput per device against throughput per user")
    fig.tight_layout()
    with atomic_path(path, force=True) as tmp:      # a view of the sweep file: redrawn on each run
        fig.savefig(tmp, dpi=120, format=_suffix(path).lower())
    plt.close(fig)
