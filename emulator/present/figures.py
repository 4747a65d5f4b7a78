"""The report's figures (matplotlib, the ``plot`` extra, imported only when drawing), each returned
as SVG text for the HTML report (:mod:`tierlab.present.html`) or saved by suffix (the roofline's
``--plot FILE``).

* :func:`bytes_figure` -- bytes per decode token by link (and read / written by tier);
* :func:`hit_rate_figure` -- hit rate by tensor kind at each caching tier;
* :func:`energy_figure` -- the energy split (tiers, links, compute, PIM, network);
* :func:`latency_figure` -- latency by op kind, stacked by each op's bound resource;
* :func:`time_figure` -- where the time goes: stacked bars by resource (roofline and calibrated,
  a system's critical path, each device's busy and waiting time), every part's value readable;
* :func:`busy_figure` -- each resource's busy time on a log axis, every bar labelled;
* :func:`roofline_figure` -- :func:`tierlab.present.breakdown.roofline_points` against the compute
  peak and each tier's bandwidth (log-log; attainable = min(peak, bandwidth x intensity));
* :func:`svg_of_plot` -- any drawing of :mod:`tierlab.present.plots` that writes a file, as SVG text.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

from tierlab.common.atomic import atomic_path
from tierlab.present.plots import pyplot

_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974",
            "#64b5cd")


def _plt():
    plt = pyplot()
    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "tierlab"        # the same figure gives the same SVG
    matplotlib.rcParams["svg.fonttype"] = "none"           # text stays text: searchable, selectable, smaller
    return plt


def to_svg(fig) -> str:
    """The figure as SVG text (from ``<svg``), closed afterwards."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    _plt().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def save(fig, path, *, force: bool = False) -> None:
    """Save ``fig`` to ``path`` (PNG, SVG, PDF by suffix) atomically."""
    suffix = Path(str(path)).suffix.lstrip(".").lower() or "png"
    with atomic_path(path, force=force) as tmp:
        fig.savefig(tmp, dpi=120, format=suffix, bbox_inches="tight")
    _plt().close(fig)


def _bytes_unit(vmax: float) -> tuple[str, float]:
    for unit, scale in (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if vmax >= scale:
            return unit, scale
    return "B", 1.0


def _si_unit(vmax: float, unit: str) -> tuple[str, float]:
    for p, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0), ("m", 1e-3), ("µ", 1e-6), ("n", 1e-9)):
        if vmax >= scale:
            return p + unit, scale
    return "p" + unit, 1e-12


def _hbar(title: str, labels, stacks: dict, unit: str, scale: float):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 0.5 * len(labels) + 1.6))
    left = [0.0] * len(labels)
    for k, (name, vals) in enumerate(stacks.items()):
        v = [x / scale for x in vals]
        ax.barh(labels, v, left=left, label=name, color=_COLOURS[k % len(_COLOURS)])
        left = [a + b for a, b in zip(left, v)]
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title)
    _label_bars(ax, labels, left, unit.split(" ")[0])
    if len(stacks) > 1:
        ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def _label_bars(ax, labels, totals, unit: str) -> None:
    """Each bar's value at its end, so that a bar too short to see still reads (a scale-up fabric's
    bytes beside HBM's, a link that carries nothing)."""
    top = max(totals, default=0.0) or 1.0
    for y, v in zip(range(len(labels)), totals):
        ax.text(v + top * 0.01, y, f"{v:.3g} {unit}" if v else "0", va="center", fontsize=7, color="#333")
    ax.set_xlim(0, top * 1.18)


def bytes_figure(bytes_by_link: dict, tier_bytes: dict | None = None) -> str:
    """Bytes per decode token: each link (one bar), then each tier read / written."""
    labels = [f"link {n}" for n in bytes_by_link]
    read = list(bytes_by_link.values())
    written = [0.0] * len(read)
    for t, v in (tier_bytes or {}).items():
        labels.append(f"tier {t}")
        read.append(v["read"])
        written.append(v["written"])
    stacks = {"moved (link) / read (tier)": read}
    if any(written):
        stacks["written (tier)"] = written
    unit, scale = _bytes_unit(max(a + b for a, b in zip(read, written)) if read else 0.0)
    return to_svg(_hbar("bytes per decode token", labels, stacks, f"{unit} per token", scale))


def hit_rate_figure(by_kind: dict, caching: list[str]) -> str | None:
    """Hit rate (hits / (hits + misses)) of each tensor kind at each caching tier; None if no tier caches."""
    plt = _plt()
    rows = [(k, t, v["tiers"][t]["hits"], v["tiers"][t]["misses"]) for k, v in by_kind.items() for t in caching]
    rows = [r for r in rows if r[2] + r[3] > 0]
    if not rows:
        return None
    kinds = list(dict.fromkeys(r[0] for r in rows))
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    w = 0.8 / max(len(caching), 1)
    for j, t in enumerate(caching):
        xs, ys = [], []
        for i, k in enumerate(kinds):
            hit = [r for r in rows if r[0] == k and r[1] == t]
            if hit:
                xs.append(i + (j - (len(caching) - 1) / 2) * w)
                ys.append(100 * hit[0][2] / (hit[0][2] + hit[0][3]))
        ax.bar(xs, ys, width=w, label=f"tier {t}", color=_COLOURS[j % len(_COLOURS)])
    ax.set_xticks(range(len(kinds)))
    ax.set_xticklabels(kinds)
    ax.set_ylim(0, 100)
    ax.set_ylabel("hit rate (%)")
    ax.set_title("hit rate by tensor kind (whole run)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return to_svg(fig)


def energy_figure(split_j: dict, title: str) -> str:
    """One horizontal bar per component of ``split_j`` (joules)."""
    items = [(k, v) for k, v in split_j.items() if v]
    labels = [k for k, _ in items] or ["(none)"]
    vals = [v for _, v in items] or [0.0]
    unit, scale = _si_unit(max(vals), "J")
    return to_svg(_hbar(title, labels, {"energy": vals}, unit, scale))


def latency_figure(lat: dict) -> str:
    """:func:`tierlab.presentbreakdown.latency_by_kind` stacked by bound resource."""
    kinds = [e["kind"] for e in lat["kinds"]]
    bounds = list(dict.fromkeys(b for e in lat["kinds"] for b in e["by_bound"]))
    stacks = {f"bound: {b}": [e["by_bound"].get(b, 0.0) for e in lat["kinds"]] for b in bounds}
    unit, scale = _si_unit(max((e["latency_s"] for e in lat["kinds"]), default=0.0), "s")
    return to_svg(_hbar(f"latency by op kind, per {lat['per']} (each op's bound)", kinds, stacks, unit, scale))


def roofline_figure(points: list[dict], ceilings: dict, title: str = ""):
    """The hierarchical roofline as a matplotlib figure (see the module docstring)."""
    plt = _plt()
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 5.4))
    peak = ceilings["compute"]
    xs = [p["intensity"] for p in points]
    lo = min(xs + [1.0]) / 4
    hi = max(xs + [peak / min(ceilings["tiers"].values())]) * 4
    grid = np.geomspace(lo, hi, 200)
    tiers = list(ceilings["tiers"])
    for j, t in enumerate(tiers):
        bw = ceilings["tiers"][t]
        ax.plot(grid, np.minimum(peak, bw * grid), color=_COLOURS[j % len(_COLOURS)], lw=1.4,
                label=f"{t}: {bw / 1e12:.3g} TB/s")
    ax.axhline(peak, color="black", lw=1, ls="--", label=f"compute: {peak / 1e12:.4g} TFLOP/s ({ceilings['dtype']})")
    shapes = "osD^vPX*h<>p"
    kinds = list(dict.fromkeys(p["kind"] for p in points))
    for p in points:
        c = _COLOURS[tiers.index(p["tier"]) % len(_COLOURS)]
        ax.scatter(p["intensity"], p["flop_per_s"], marker=shapes[kinds.index(p["kind"]) % len(shapes)], s=40,
                   zorder=3, facecolor=c if p["phase"] == "decode" else "none", edgecolor=c, lw=1.3)
    for k, kind in enumerate(kinds):         # legend entries for the shapes (grey: the colour is the tier)
        ax.scatter([], [], marker=shapes[k % len(shapes)], color="grey", label=kind)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte through the tier's port)")
    ax.set_ylabel("FLOP/s (attained: FLOPs / summed roofline latency)")
    ax.set_title(title or "roofline: each op kind at each tier")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="upper left", title="colour: tier; shape: op kind; filled: decode, hollow: prefill",
              title_fontsize=7, ncol=2)
    return fig


def svg_of_plot(draw, *args, **kw) -> str:
    """``draw(*args, path, **kw)`` of :mod:`tierlab.present.plots` into a temporary SVG, as text."""
    with tempfile.TemporaryDirectory(prefix="tierlab-fig-") as tmp:
        path = Path(tmp) / "f.svg"
        draw(*args, path, **kw)
        text = path.read_text()
    return text[text.index("<svg"):]


def time_figure(columns: dict[str, dict[str, float]], title: str, order: list[str] | None = None) -> str | None:
    """Stacked horizontal bars, one per column of ``columns`` (``label -> {part: seconds}``; e.g.
    roofline and calibrated, or one per device), each part a colour shared across bars; parts wide
    enough carry their value inside, each bar its total at its end followed by the parts too narrow
    to see, so that every value reads; ``order``: the parts' colour order (shared by a page's
    figures). None when there is nothing to draw."""
    from tierlab.present.format import format_si

    labels = [k for k, v in columns.items() if v]
    if not labels:
        return None
    plt = _plt()
    present = set(p for k in labels for p, s in columns[k].items() if s > 0)
    parts = [p for p in dict.fromkeys([*(order or []), *(p for k in labels for p in columns[k])]) if p in present]
    colour_of = {p: _COLOURS[i % len(_COLOURS)] for i, p in enumerate(dict.fromkeys([*(order or []), *parts]))}
    totals = [sum(columns[k].values()) for k in labels]
    unit, scale = _si_unit(max(totals), "s")
    top = max(totals) / scale
    fig, ax = plt.subplots(figsize=(8.5, 0.55 * len(labels) + 2.0))
    left = [0.0] * len(labels)
    small: list[list[str]] = [[] for _ in labels]
    for j, part in enumerate(parts):
        v = [columns[k].get(part, 0.0) / scale for k in labels]
        ax.barh(labels, v, left=left, label=part, color=colour_of[part], edgecolor="white", lw=0.5)
        for i, x in enumerate(v):
            if x <= 0:
                continue
            if x >= 0.09 * top:
                ax.text(left[i] + x / 2, i, f"{x:.3g}", ha="center", va="center", fontsize=7, color="white")
            else:
                small[i].append(f"{part} {format_si(x * scale, 's')}")
        left = [a + b for a, b in zip(left, v)]
    for i, total in enumerate(left):
        note = f"{total:.3g} {unit}" + (f"  ({'; '.join(small[i])})" if small[i] else "")
        ax.text(total + top * 0.01, i, note, va="center", fontsize=7, color="#333")
    ax.set_xlim(0, top * 1.9 if any(small) else top * 1.2)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    ax.grid(True, axis="x", alpha=0.3)
    return to_svg(fig)


def busy_figure(busy_s: dict[str, float], title: str) -> str | None:
    """Each resource's busy time (seconds), one bar each on a log axis (compute's nanoseconds beside
    a tier's microseconds), every bar labelled; resources never busy listed as 0."""
    from tierlab.present.format import format_si

    items = list(busy_s.items())
    if not any(v > 0 for _, v in items):
        return None
    plt = _plt()
    labels = [k for k, _ in items]
    vals = [v for _, v in items]
    floor = min(v for v in vals if v > 0) / 10
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(labels) + 1.6))
    ax.barh(labels, [max(v, floor) if v > 0 else 0 for v in vals], color=[_COLOURS[i % len(_COLOURS)]
                                                                         for i in range(len(labels))])
    ax.set_xscale("log")
    ax.set_xlim(floor, max(vals) * 30)
    for y, v in enumerate(vals):
        ax.text(max(v, floor) * 1.15 if v > 0 else floor * 1.15, y, format_si(v, "s") if v > 0 else "0 (never busy)",
                va="center", fontsize=7, color="#333")
    ax.invert_yaxis()
    ax.set_xlabel("seconds (log scale)")
    ax.set_title(title)
    ax.grid(True, axis="x", which="both", alpha=0.25)
    return to_svg(fig)
