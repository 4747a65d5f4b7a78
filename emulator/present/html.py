"""The self-contained HTML report (``--html FILE`` on ``run``, ``replay``, ``compare`` and ``sweep``):
one file, its figures SVG in data URIs (:mod:`tierlab.present.figures`), its style inline; no
script, no network, no CDN.

It is built from what the text reports use: the ``--json`` dict of a replay
(:func:`tierlab.analysis.result.to_json`, a system's :func:`tierlab.analysis.system_result.to_json`),
and for the figures that need per-op figures the replay and its cost (:mod:`tierlab.present.breakdown`);
a comparison's :class:`tierlab.analysis.compare.ChipResult` rows; a sweep's rows.

Sections of a replay: placement; bytes per decode token by link and tier; hit rates by tensor kind;
the energy split; latency by op kind with each op's bound; the roofline; the provenance at the
bottom. Every figure is a ``<figure data-figure=NAME>`` (the browser test finds each).
"""

from __future__ import annotations

import base64
import datetime
import json
from html import escape

from tierlab.common.atomic import atomic_path
from tierlab.present import breakdown, figures
from tierlab.present.format import format_bytes, format_percent, format_si

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;color:#222;
padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.2rem;border-bottom:1px solid #ccc;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.85rem}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child,td.text{text-align:left}
figure{margin:.8rem 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.8rem;color:#555}.note{font-size:.85rem;color:#555}
pre{background:#f7f7f7;padding:.6rem;font-size:.75rem;overflow-x:auto}
table.header th{text-align:left;background:#f4f4f4;width:9rem}table.header td{text-align:left}
"""


def _cell(c) -> str:
    """A table cell; text longer than a figure is left-aligned."""
    text = escape(str(c))
    return f'<td class="text">{text}</td>' if len(text) > 40 else f"<td>{text}</td>"


def table_html(headers, rows) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure_html(name: str, svg: str | None, caption: str) -> str:
    if svg is None:
        return f'<p class="note">{escape(caption)}: nothing to draw.</p>'
    uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
    return (f'<figure data-figure="{escape(name)}"><img alt="{escape(caption)}" src="{uri}">'
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def section(sid: str, title: str, *parts: str) -> str:
    return f'<section id="{sid}"><h2>{escape(title)}</h2>{"".join(parts)}</section>'


def page(title: str, subtitle: str, sections: list[str], provenance, *, header: str = "") -> str:
    """The whole page: title, ``subtitle`` (text) or ``header`` (HTML, :func:`header_html`), the
    sections, the provenance; a path under the temporary directory (a trace ``tierlab run`` made
    and removed) is shown as ``(temporary)/NAME``."""
    prov = section("provenance", "Provenance", f"<pre>{escape(json.dumps(provenance, indent=1, default=str))}</pre>",
                   f'<p class="note">written {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC '
                   "by tierlab</p>")
    top = header or f"<p>{escape(subtitle)}</p>"
    return scrub_temporary("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                           f"<meta name=\"viewport\" content=\"width=device-width\"><title>{escape(title)}</title>"
                           f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>{top}"
                           + "".join(sections) + prov + "</body></html>\n")


def _temporary_roots() -> list[str]:
    import os
    import tempfile

    roots = {tempfile.gettempdir(), os.path.realpath(tempfile.gettempdir())}
    return sorted((r.rstrip("/") for r in roots if r and r != "/"), key=len, reverse=True)


def is_temporary(path) -> bool:
    """``path`` lies under the temporary directory (where ``tierlab run`` and ``compare`` trace)."""
    text = str(path)
    return any(text == r or text.startswith(r + "/") for r in _temporary_roots())


def scrub_temporary(text: str) -> str:
    """Every path under the temporary directory in ``text`` as ``(temporary)/LAST-PART``: it names
    nothing a reader can open (the trace of a run is removed when the run ends)."""
    import re

    for root in _temporary_roots():
        text = re.sub(re.escape(root) + r"(?:/[^\s\"'<>,;:)(\]\[]*)?",
                      lambda m: "(temporary)/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], text)
    return text


def trace_text(path) -> str:
    """A trace's path for the header: as given, or its name where it lies under the temporary
    directory (removed after the run when ``tierlab run`` or ``compare`` made it there)."""
    path = str(path).rstrip("/")
    if not is_temporary(path):
        return path
    parts = path.rsplit("/", 2)
    made = len(parts) == 3 and parts[1].startswith("tierlab-")
    return f"{parts[-1]} ({'temporary, removed after the run' if made else 'under the temporary directory'})"


def chip_text(name: str, chip_file) -> str:
    """A chip as its header names it: ``h100 (preset)`` for a shipped preset (wherever the package is
    installed, a temporary venv included), else the name and its file."""
    from pathlib import Path

    from tierlab.common.paths import configs_dir

    if not chip_file:
        return name
    try:
        preset = Path(chip_file).resolve().parent == configs_dir("chips").resolve()
    except OSError:
        preset = False
    return f"{name} (preset)" if preset else f"{name} ({chip_file})"


def header_html(rows: list[list]) -> str:
    """The header a person cites: what ran, on what, with which options."""
    body = "".join(f'<tr><th scope="row">{escape(str(k))}</th><td class="text">{escape(str(v))}</td></tr>'
                   for k, v in rows)
    return f'<table class="header"><tbody>{body}</tbody></table>'


_RUN_KEYS = ("batch", "context", "prompt", "generate", "weights", "kv", "activations", "router", "attention")


def run_rows(trace, d: dict) -> list[list]:
    """Header rows of a replay's ``--json`` dict ``d``: model, run, parallelism, options, versions."""
    prov = d.get("provenance") or {}
    run = prov.get("trace_run") or trace.manifest.get("run") or {}
    rows = [["model", model_text(trace)],
            ["run", ", ".join(f"{k} {run[k]}" for k in _RUN_KEYS if k in run) or "-"]]
    par = {k: run.get(k, 1) for k in ("tp", "pp", "ep", "dp")}
    if any(v not in (1, None) for v in par.values()):
        rows.append(["parallelism", ", ".join(f"{k} {v}" for k, v in par.items())])
    opts = prov.get("options") or {}
    shown = ("pim", "flush", "inclusive", "kernel", "store_hit_recency", "fetch_on_write_miss", "seed")
    rows.append(["replay options", ", ".join(f"{k} {opts[k]}" for k in shown if k in opts)
                 + (f"; kernel that ran: {prov['kernel']['name']}" if (prov.get("kernel") or {}).get("name") else "")])
    cal = (d.get("per_token") or {}).get("calibration")
    if cal:
        rows.append(["calibration", f"fusion {cal.get('fusion')}, overlap {cal.get('overlap')}, "
                                    f"kernel overhead {format_si(cal.get('kernel_overhead_s') or 0.0, 's')}"
                     + (f", collectives {cal['collectives'].get('library')}" if cal.get("collectives") else "")])
    rows.append(["trace", trace_text(trace.path)])
    sha = prov.get("trace_manifest_sha256")
    rows.append(["tierlab", f"{prov.get('tierlab', '?')}, trace format {prov.get('trace_format', '?')}"
                 + (f", trace manifest sha256 {sha[:16]}" if sha else "")])
    return rows


def write_html(text: str, path, *, force: bool = False) -> None:
    with atomic_path(path, force=force) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)


# ---- summaries (also the Python API's _repr_html_) ----------------------------------------------

def per_token_rows(pt: dict) -> list[list]:
    """The per-decode-token figures a person reads first: tokens/s, latency (roofline and
    calibrated), bound, energy, bytes over each link."""
    rows = [["tokens/s", f"{pt['tokens_per_s']:.4g}"], ["latency per step (roofline)", format_si(pt["latency_s"], "s")]]
    if pt.get("latency_calibrated_s") is not None:
        rows.append(["latency per step (calibrated)", format_si(pt["latency_calibrated_s"], "s")])
    rows.append(["bound", pt["bound"]])
    if pt.get("bound_calibrated"):
        rows.append(["bound (calibrated)", pt["bound_calibrated"]])
    rows.append(["energy", format_si(pt["energy_j"], "J")])
    rows += [[f"bytes over {n}", format_bytes(v)] for n, v in pt["bytes_by_link"].items()]
    return rows


def replay_summary_html(d: dict) -> str:
    """A replay's ``--json`` dict (one chip's or a system's) as one table: where it ran and its
    per-decode-token figures."""
    where = [["system", f"{d['system']} ({d['n_devices']} x {d['chip']})"]] if "system" in d else [["chip", d["chip"]]]
    run = (d.get("provenance") or {}).get("trace_run") or {}
    if run:
        where.append(["run", ", ".join(f"{k} {run[k]}" for k in ("batch", "context", "prompt", "generate", "weights")
                                       if k in run)])
    pt = d.get("per_token")
    rows = where + (per_token_rows(pt) if pt else [["per decode token", "the trace has no decode steps"]])
    return table_html(["", "per decode token" if pt else ""], rows)


def trace_summary_html(info: dict) -> str:
    """``tierlab trace --json`` as a table."""
    t = info["tables"]
    return table_html(["trace", ""], [["model", info["model"]], ["path", info["path"]],
                                      ["tensors / ops / accesses", f"{t['tensors']} / {t['ops']} / {t['accesses']}"],
                                      ["bytes on disk", format_bytes(info["bytes_on_disk"])]])


def comparison_table_html(rows) -> str:
    """The side-by-side table of a comparison's rows (:class:`tierlab.analysis.compare.ChipResult`)."""
    from tierlab.analysis.compare import table_rows
    from tierlab.present.compare import format_metric

    body = [["fits"] + ["yes" if r.ok else "no" for r in rows]]
    body += [[label] + [format_metric(label, v) for v in vals] for label, vals in table_rows(rows)]
    return table_html(["per decode token"] + [r.chip for r in rows], body)


def curve_table_html(rows: list[dict]) -> str:
    """A serving curve's points (:func:`tierlab.present.serving.rows`) as a table."""
    cols = [("chip", "chip"), ("system", "system"), ("concurrency", "concurrency"),
            ("output_tokens_per_s", "output tokens/s"), ("tokens_per_s_per_user", "tokens/s per user"),
            ("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("meets_slo", "meets SLO")]
    cols = [(k, h) for k, h in cols if any(r.get(k) is not None for r in rows)]

    def cell(k, v):
        if v is None:
            return "-"
        if k in ("ttft_s", "tpot_s"):
            return format_si(v, "s")
        return f"{v:.4g}" if isinstance(v, float) else v

    return table_html([h for _, h in cols], [[cell(k, r.get(k)) for k, _ in cols] for r in rows])


# ---- one chip ------------------------------------------------------------------------------------

def _time_rows(tb: dict) -> list[list]:
    cal = tb["calibrated"] or {}
    names = list(dict.fromkeys([*tb["busy"], *tb["roofline"], *cal]))
    return [[r, format_si(tb["busy"][r], "s") if r in tb["busy"] else "-",
             format_si(tb["roofline"].get(r, 0.0), "s"), format_si(cal[r], "s") if r in cal else "-"]
            for r in names] + [["total (the step's latency)", "-", format_si(sum(tb["roofline"].values()), "s"),
                                format_si(sum(cal.values()), "s") if cal else "-"]]


def time_section(tr, cst, *, prefix: str = "") -> str:
    """Where a decode step's time goes on one chip: roofline and calibrated side by side."""
    tb = breakdown.time_breakdown(tr, cst)
    cols = {"roofline": tb["roofline"]}
    if tb["calibrated"]:
        cols["calibrated"] = tb["calibrated"]
    what = f"per {tb['per']}" + (f" (mean of {tb['steps']})" if tb["steps"] > 1 else "")
    return section(prefix + "time", f"Where the time goes ({what})",
                   figure_html("time", figures.time_figure(cols, f"time {what}: each op (roofline) or kernel group "
                                                                 "(calibrated) under the resource bounding it"),
                               "time per decode step by bounding resource, roofline and calibrated"),
                   table_html(["resource", "busy", "roofline: bound by it", "calibrated: bound by it"], _time_rows(tb)),
                   figure_html("busy", figures.busy_figure(tb["busy"], f"each resource's busy time {what}"),
                               "each resource's busy time per step (log scale)"),
                   '<p class="note">busy: the time each resource works in the step at its peak rate; the '
                   "roofline charges each op its busiest resource, ops one after another; the calibrated "
                   "latency charges each kernel group its busiest resource at the achievable fractions, "
                   "plus a fixed launch overhead per kernel (docs/accounting.md).</p>")


def replay_sections(d: dict, tr, cst, *, prefix: str = "") -> list[str]:
    """The sections of one chip's replay ``d`` (its ``--json`` dict) with its replay and cost."""
    out = [time_section(tr, cst, prefix=prefix)]
    pl = table_html(["tier", "managed", "caches", "home", "lent"],
                    [[t["name"], t["managed"], "yes" if t.get("caching") else "no", format_bytes(t["home_bytes"]),
                      format_bytes(t["lent_bytes"])] for t in d["tiers"]])
    out.append(section(prefix + "placement", "Placement", pl))
    pt = d["per_token"]
    tb = breakdown.tier_bytes_per_token(tr)
    if pt:
        rows = [[f"link {n}", format_bytes(v)] for n, v in pt["bytes_by_link"].items()]
        rows += [[f"tier {t} read / written", f"{format_bytes(v['read'])} / {format_bytes(v['written'])}"]
                 for t, v in (tb or {}).items()]
        rows += [["energy", format_si(pt["energy_j"], "J")], ["latency (per step)", format_si(pt["latency_s"], "s")],
                 ["tokens/s", f"{pt['tokens_per_s']:.4g}"], ["bound", pt["bound"]]]
        out.append(section(prefix + "bytes", f"Per decode token ({pt['steps']} steps, batch {pt['batch']})",
                           figure_html("bytes", figures.bytes_figure(pt["bytes_by_link"], tb),
                                       "bytes per decode token by link and tier"),
                           table_html(["per decode token", "value"], rows)))
    else:
        out.append(section(prefix + "bytes", "Per decode token",
                           '<p class="note">the trace has no decode steps: per-token figures need --generate N</p>'))
    caching = [t["name"] for t in d["tiers"] if t.get("caching")]
    rows = []
    for kind, v in d["by_kind"].items():
        for name, c in v["tiers"].items():
            n = c["hits"] + c["misses"]
            if n:
                rows.append([kind, name, c["hits"], c["misses"], format_percent(c["hits"] / n)])
    out.append(section(prefix + "hits", "Hit rates by tensor kind",
                       figure_html("hit_rates", figures.hit_rate_figure(d["by_kind"], caching),
                                   "hit rate by tensor kind at each caching tier"),
                       table_html(["kind", "tier", "hits", "misses", "hit rate"], rows)))
    e = d["energy_j"]
    split = pt["energy_split_j"] if pt else {k: e[k] for k in ("tiers", "links", "compute", "pim")}
    what = "per decode token" if pt else "whole run"
    out.append(section(prefix + "energy", f"Energy split ({what})",
                       figure_html("energy", figures.energy_figure(split, f"energy {what}"), f"energy {what}"),
                       table_html(["component", "energy"], [[k, format_si(v, "J")] for k, v in split.items()]
                                  + [["whole run total", format_si(e["total"], "J")]])))
    lat = breakdown.latency_by_kind(tr, cst)
    rows = [[k["kind"], f"{k['ops']:.4g}", format_si(k["latency_s"], "s"),
             ", ".join(f"{b} {format_si(s, 's')}" for b, s in k["by_bound"].items())] for k in lat["kinds"]]
    out.append(section(prefix + "latency", f"Latency by op kind (per {lat['per']})",
                       figure_html("latency", figures.latency_figure(lat), "latency by op kind, by each op's bound"),
                       table_html(["op kind", f"ops per {lat['per']}", "latency", "by bound"], rows)))
    pts = breakdown.roofline_points(tr, cst)
    ceil = breakdown.roofline_ceilings(tr.chip, cst)
    svg = figures.to_svg(figures.roofline_figure(pts, ceil)) if pts else None
    out.append(section(prefix + "roofline", "Roofline", figure_html("roofline", svg, "roofline: op kinds against "
                                                                    "the compute peak and each tier's bandwidth"),
                       table_html(["phase", "op kind", "tier", "FLOPs", "bytes", "FLOP/B", "attained FLOP/s"],
                                  [[p["phase"], p["kind"], p["tier"], f"{p['flops']:.4g}", format_bytes(p["bytes"]),
                                    f"{p['intensity']:.4g}", f"{p['flop_per_s']:.4g}"] for p in pts])))
    return out


def model_text(trace) -> str:
    from tierlab.present.compare import model_line

    return model_line(trace)[1]


def chip_report(d: dict, tr, cst, *, mrc: tuple[str, str] | None = None) -> str:
    """The report of one chip replay; ``mrc``: a tier's miss-ratio curve (SVG) and its table (text)."""
    secs = replay_sections(d, tr, cst)
    if mrc is not None:
        secs.append(section("mrc", "Miss-ratio curve", figure_html("mrc", mrc[0], "miss ratio against capacity"),
                            f"<pre>{escape(mrc[1])}</pre>"))
    head = header_html([["chip", chip_text(d["chip"], d["provenance"].get("chip_file"))], *run_rows(tr.trace, d)])
    return page(f"tierlab: {_model_name(tr.trace)} on {d['chip']}", "",
                [section("summary", "Summary", replay_summary_html(d)), *secs],
                d["provenance"], header=head)


def _model_name(trace) -> str:
    return model_text(trace).split(":", 1)[0]


# ---- a system ------------------------------------------------------------------------------------

def system_report(d: dict, sr, sc) -> str:
    """The report of a system run: devices, network, per token, and device 0's replay sections."""
    from tierlab.analysis.result import to_json

    secs = [section("summary", "Summary", replay_summary_html(d)), system_time_section(d, sr, sc)]
    rows = [[dev["device"], dev["chip"], format_bytes(sum(t["bytes_read"] for t in dev["tiers"])),
             format_bytes(sum(lk["bytes_down"] + lk["bytes_up"] for lk in dev["links"])),
             format_si(dev["energy_j"]["total"], "J"), format_si(dev["latency_s"], "s")] for dev in d["devices"]]
    secs.append(section("devices", f"System {d['system']}: {d['n_devices']} device(s) of {d['chip']}",
                        table_html(["device", "chip", "tier reads", "link bytes", "energy", "busy"], rows),
                        table_html(["fabric", "name", "bytes", "messages", "energy"],
                                   [[n["name"], n["fabric"], format_bytes(n["bytes"]), n["messages"],
                                     format_si(n["energy_j"], "J")] for n in d["network"]]),
                        table_html(["collective", "algorithm", "count", "bytes/rank", "time", "energy"],
                                   [[c["kind"], c["algorithm"], c["count"], format_bytes(c["bytes_per_rank"]),
                                     format_si(c["time_s"], "s"), format_si(c["energy_j"], "J")]
                                    for c in d["collectives"]])))
    pt = d["per_token"]
    if pt:
        secs.append(section("system-token", "Per decode token (system)",
                            figure_html("bytes", figures.bytes_figure(pt["bytes_by_link"]),
                                        "bytes per decode token by link and fabric"),
                            figure_html("energy", figures.energy_figure(pt["energy_split_j"], "energy per token"),
                                        "energy per decode token"),
                            table_html(["per decode token", "value"],
                                       [["latency (critical path per step)", format_si(pt["latency_s"], "s")],
                                        ["tokens/s", f"{pt['tokens_per_s']:.4g}"], ["bound", pt["bound"]],
                                        ["latency model", pt["latency_model"]]])))
    if sr.devices:
        tr, cst = sr.devices[0], sc.devices[0]
        secs.append('<h2 id="device0">Device 0</h2>')
        secs += [s for s in replay_sections(to_json(tr, cst), tr, cst, prefix="d0-") if 'id="d0-placement"' not in s]
    head = header_html([["system", f"{d['system']}: {d['n_devices']} device(s) of {d['chip']} "
                                   f"({d['provenance'].get('system_file')})"],
                        ["collective algorithm", d["provenance"].get("collective_algo", "auto")],
                        *run_rows(sr.trace, d)])
    return page(f"tierlab: {_model_name(sr.trace)} on {d['system']}", "", secs, d["provenance"], header=head)


def system_time_section(d: dict, sr, sc) -> str:
    """Where a decode step's time goes on a system: the critical path by resource, roofline and
    calibrated; each device's ops by bound, its collectives and its wait; the collectives' share."""
    st = breakdown.system_time(sr, sc)
    what = f"per {st['per']}" + (f" (mean of {st['steps']})" if st["steps"] > 1 else "")
    cols = {"critical path, roofline": st["path"]}
    if st["path_calibrated"]:
        cols["critical path, calibrated"] = st["path_calibrated"]
    devs = {f"device {i}": row for i, row in enumerate(st["devices"])}
    co = d.get("coordination") or {}
    share = [["collectives' share of the critical path (roofline)", format_percent(st["collective_share"])]]
    if co.get("collective_time_share_calibrated") is not None:
        share.append(["collectives' share of the critical path (calibrated)",
                      format_percent(co["collective_time_share_calibrated"])])
    share.append(["collectives per step", f"{co.get('collectives_per_step', 0):.4g}"])
    names = list(dict.fromkeys(r for c in cols.values() for r in c))
    path_rows = [[r] + [format_si(c.get(r, 0.0), "s") for c in cols.values()] for r in names]
    path_rows.append(["total (the step's latency)"] + [format_si(sum(c.values()), "s") for c in cols.values()])
    order = list(dict.fromkeys([*(r for c in cols.values() for r in c), *(r for row in devs.values() for r in row)]))
    return section("time", f"Where the time goes ({what})",
                   figure_html("time", figures.time_figure(cols, f"critical path {what} by resource "
                                                                 "(an op's bound, a collective's fabric)", order),
                               "the system's critical path by resource, roofline and calibrated"),
                   table_html(["resource", *cols], path_rows),
                   figure_html("devices", figures.time_figure(devs, f"each device {what} (roofline): its ops by "
                                                                    "bound, its collectives, its wait", order),
                               "each device's time per step: busy in ops and collectives, waiting for the others"),
                   table_html(["", "value"], share),
                   '<p class="note">the critical path walks back from the device finishing last: its ops '
                   "at their roofline (or calibrated) latency and each collective it waits for, from its last "
                   "rank's arrival to its end (network:FABRIC when the network bounds it, memory when its "
                   "buffers' memory time does); in the calibrated path each kernel's launch overhead is inside "
                   "the bar of the resource bounding it. A device's bar adds up to the step: its ops, its time "
                   "in collectives, and its wait for the others.</p>")


# ---- a comparison and a sweep ----------------------------------------------------------------------

def compare_report(rows, trace, *, pim: bool) -> str:
    """The comparison across chips and systems: the side-by-side table and its figure."""
    from tierlab.present.compare import plot_title
    from tierlab.present.plots import plot_comparison

    notes = "".join(f'<p class="note">{escape(r.chip)}: {escape(str(r.reason))}</p>' for r in rows if not r.ok)
    secs = [section("comparison", "Comparison (per decode token)",
                    figure_html("comparison", figures.svg_of_plot(plot_comparison, rows,
                                                                  title=plot_title(trace, pim=pim)),
                                "bytes and energy per decode token"),
                    comparison_table_html(rows), notes)]
    prov = {"trace": str(trace.path), "pim": pim, "chips": {r.chip: (r.result or {}).get("provenance") for r in rows}}
    head = header_html([["model", model_text(trace)], ["chips and systems", ", ".join(r.chip for r in rows)],
                        ["options", f"PIM {'on' if pim else 'off'}"],
                        ["trace", trace_text(trace.path)]])
    return page(f"tierlab compare: {_model_name(trace)}", "", secs, prov, header=head)


SWEEP_COLUMNS = ("model", "chip", "system", "batch", "context", "prompt", "generate", "weights", "tokens_per_s",
                 "latency_s", "energy_j_per_token", "bound", "usd_per_mtok", "error")


def sweep_report(rows: list[dict], output: str) -> str:
    """A sweep's rows as a table (the Pareto points marked) and the Pareto figure."""
    from tierlab.present.plots import plot_pareto

    parts = [figure_html("pareto", figures.svg_of_plot(plot_pareto, _ok(rows)) if _ok(rows) else None,
                         "tokens/s per device against tokens/s per user, the Pareto front dashed"),
             f'<p class="note">★: on the Pareto front (tokens/s per device against per user). {len(rows)} points.</p>',
             sweep_table_html(rows)]
    prov = {"sweep": str(output), "tierlab": sorted({str(r.get("tierlab_version")) for r in rows})}
    return page("tierlab sweep", f"{output}: {len(rows)} points", [section("sweep", "Sweep", *parts)], prov)


def _ok(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("error") is None and r.get("tokens_per_s")]


def sweep_table_html(rows: list[dict]) -> str:
    """A sweep's rows as a table, the Pareto points starred."""
    from tierlab.present.plots import pareto_front, pareto_points

    cols = [c for c in SWEEP_COLUMNS if any(r.get(c) is not None for r in rows)]
    cols += sorted({k for r in rows for k in r if "." in k and not k.startswith(("bytes_per_token.", "hit_rate."))})
    ok = [r for r in rows if r.get("error") is None and r.get("tokens_per_s")]
    pts = pareto_points(ok)
    front = {id(ok[i]) for i in pareto_front([(p[1], p[2]) for p in pts])} if pts else set()

    def cell(v):
        return "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else v)

    body = [[("★ " if id(r) in front else "") + str(r.get(cols[0]))] + [cell(r.get(c)) for c in cols[1:]]
            for r in rows]
    return table_html(cols, body)
