"""Plots of a chip comparison (matplotlib, the optional ``plot`` extra, imported only when drawing).

Two panels, one bar per chip: bytes per decode token stacked by link (plus the bytes a PIM unit
read in memory, hatched), and energy per decode token stacked by component (tiers, links, compute,
PIM). Chips that cannot hold the model get an empty slot labelled "does not fit".
"""

from __future__ import annotations

from common.errors import UsageError

_ENERGY_COLOURS = {"tiers": "#4c72b0", "links": "#dd8452", "compute": "#55a868", "pim": "#c44e52"}


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("plotting needs matplotlib: pip install 'tierlab[plot]'", field="--plot") from None
    return plt


def plot_comparison(rows, path, *, title: str = "", force: bool = False) -> None:
    """Draw the two panels for ``rows`` (:class:`emulator.analysis.compare.ChipResult`) to ``path`` (PNG, SVG, PDF
    by suffix), written atomically."""
    from emulator.analysis.compare import ENERGY_PARTS, _union
    from common.atomic import atomic_path

    plt = _pyplot()
    names = [r.chip for r in rows]
    x = list(range(len(rows)))
    links = _union(rows, "bytes_by_link")
    in_mem = _union(rows, "in_memory_bytes")
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
        fmt = str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else "png"
        fig.savefig(tmp, dpi=120, format=fmt)
    plt.close(fig)
