"""``--html FILE`` on run, replay, compare and sweep: one self-contained file (no script, nothing
fetched: every image a data URI), each section and figure there, the figures the text report
prints, the provenance at the bottom; and without matplotlib, one line naming the extra.
(tests/cli/test_html_browser.py opens the reports in a real browser.)"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.present.format import format_si

DATA = Path(__file__).parents[1] / "data"
TINY = DATA / "models" / "tiny-llama.json"
CHIP_FIGURES = {"time", "busy", "bytes", "hit_rates", "energy", "latency", "roofline"}


def _cli(*args, code=0):
    r = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == code, r.output
    return r


def figures_of(html: str) -> dict[str, str]:
    """``data-figure`` name -> the SVG text of its data URI."""
    out = {}
    for name, uri in re.findall(r'<figure data-figure="([^"]+)"><img alt="[^"]*" src="([^"]+)"', html):
        assert uri.startswith("data:image/svg+xml;base64,")
        out[name] = base64.b64decode(uri.split(",", 1)[1]).decode()
    return out


def self_contained(html: str) -> None:
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert "<script" not in html.lower()
    # nothing to fetch: every src and href is a data URI or a fragment
    for attr in re.findall(r'(?:src|href)="([^"]*)"', html):
        assert attr.startswith(("data:", "#")), attr
    assert "url(http" not in html and "@import" not in html


def make_trace(tmp_path) -> Path:
    out = tmp_path / "t.trace"
    _cli("trace", TINY, "--prompt", "16", "--generate", "3", "-o", out)
    return out


def test_replay_report(tmp_path):
    trace = make_trace(tmp_path)
    out = tmp_path / "r.html"
    d = json.loads(_cli("replay", trace, "--chip", "h100", "--html", out, "--json").stdout)
    html = out.read_text()
    self_contained(html)
    figs = figures_of(html)
    assert set(figs) == CHIP_FIGURES and all(s.startswith("<svg") for s in figs.values())
    for sid in ("summary", "time", "placement", "bytes", "hits", "energy", "latency", "roofline", "provenance"):
        assert f'<section id="{sid}">' in html
    assert html.index('id="roofline"') < html.index('id="provenance"')      # provenance at the bottom
    pt = d["per_token"]
    assert f"<td>{format_si(pt['latency_s'], 's')}</td>" in html and f"<td>{pt['tokens_per_s']:.4g}</td>" in html
    assert d["provenance"]["chip_sha256"] in html
    for t in d["tiers"]:
        assert f"<td>{t['name']}</td><td>{t['managed']}</td>" in html


def test_mrc_in_the_report_when_asked(tmp_path):
    trace = make_trace(tmp_path)
    out = tmp_path / "m.html"
    mrc = json.loads(_cli("mrc", trace, "--chip", "h100", "--tier", "l2", "--json").stdout)
    _cli("replay", trace, "--chip", "h100", "--html", out, "--mrc", "l2")
    html = out.read_text()
    assert set(figures_of(html)) == CHIP_FIGURES | {"mrc"}
    from tierlab.present.mrc import format_mrc
    from html import escape

    assert escape(format_mrc(mrc)) in html                   # the table tierlab mrc prints
    r = _cli("replay", trace, "--chip", "h100", "--mrc", "l2", code=2)
    assert r.stderr == "tierlab: error: --mrc: adds a curve to the report: give --html FILE too\n"
    r = _cli("replay", trace, "--chip", "h100", "--html", tmp_path / "n.html", "--mrc", "l3", code=2)
    assert r.stderr == "tierlab: error: --mrc: unknown tier 'l3'; chip h100 has l2, hbm, ddr\n"
    assert not (tmp_path / "n.html").exists()


def test_run_chip_and_system_reports(tmp_path):
    out = tmp_path / "r.html"
    _cli("run", TINY, "--chip", "sn40l", "--generate", "2", "--html", out)
    assert set(figures_of(out.read_text())) == CHIP_FIGURES
    sout = tmp_path / "s.html"
    d = json.loads(_cli("run", TINY, "--system", "dgx-h100", "--tp", "2", "--generate", "2", "--html", sout,
                        "--json").stdout)
    html = sout.read_text()
    self_contained(html)
    assert {"bytes", "energy", "latency", "roofline"} <= set(figures_of(html))
    assert f"<td>{format_si(d['per_token']['latency_s'], 's')}</td>" in html
    assert d["provenance"]["system_sha256"] in html


def test_compare_report(tmp_path):
    out = tmp_path / "c.html"
    d = json.loads(_cli("compare", TINY, "--chips", "h100,sn40l", "--systems", "dgx-h100", "--generate", "2",
                        "--html", out, "--json").stdout)
    html = out.read_text()
    self_contained(html)
    assert set(figures_of(html)) == {"comparison"}
    assert "<th>h100</th><th>sn40l</th><th>dgx-h100</th>" in html
    for c in d["chips"]:
        assert f"{c['summary']['tokens_per_s']:.4g}" in html


def test_sweep_report(tmp_path):
    out = tmp_path / "s.html"
    _cli("sweep", "--model", TINY, "--chip", "h100,a100", "--batch", "1,4", "--context", "16", "--generate", "1",
         "-o", tmp_path / "s.parquet", "--workers", "1", "--html", out)
    html = out.read_text()
    self_contained(html)
    assert set(figures_of(html)) == {"pareto"}
    assert html.count("<tr>") == 1 + 4                       # header + one row per point
    assert html.count("★ ") == 2          # h100 at batch 1 and 4: the front (a100 is slower at each batch)


def test_without_matplotlib_one_line_naming_the_extra(tmp_path, monkeypatch):
    import tierlab.present.plots as plots
    from tierlab.common.errors import UsageError

    def missing():
        raise UsageError("plotting needs matplotlib: pip install 'tierlab[plot]'", field="--plot")

    monkeypatch.setattr(plots, "pyplot", missing)
    trace = make_trace(tmp_path)
    r = _cli("replay", trace, "--chip", "h100", "--html", tmp_path / "r.html", code=2)
    assert r.stderr == "tierlab: error: --html: the report's figures need matplotlib: pip install 'tierlab[plot]'\n"
    assert not (tmp_path / "r.html").exists()
    line = "tierlab: error: --html: the report's figures need matplotlib: pip install 'tierlab[plot]'\n"
    r = _cli("compare", TINY, "--chips", "h100", "--html", tmp_path / "c.html", code=2)
    assert r.stderr == line
    r = _cli("sweep", "--model", TINY, "--chip", "h100", "-o", tmp_path / "s.parquet", "--html", tmp_path / "s.html",
             code=2)
    assert r.stderr == line and not (tmp_path / "s.parquet").exists()
    r = _cli("replay", trace, "--chip", "h100", "--plot", tmp_path / "r.png", code=2)
    assert r.stderr == "tierlab: error: --plot: plotting needs matplotlib: pip install 'tierlab[plot]'\n"


@pytest.mark.parametrize("opt, name", [("--html", "x.html"), ("--timeline", "x.json"), ("--plot", "x.png")])
def test_outputs_are_not_replaced_without_force(tmp_path, opt, name):
    trace = make_trace(tmp_path)
    out = tmp_path / name
    out.write_text("old")
    r = _cli("replay", trace, "--chip", "h100", opt, out, code=2)
    assert r.stderr == f"tierlab: error: {out}: output exists; pass --force to replace it\n"
    _cli("replay", trace, "--chip", "h100", opt, out, "--force")
    assert out.read_bytes() != b"old"


# ---- where the time goes, the header, no temporary paths -------------------------------------------

def _rows(html: str, section_id: str) -> list[list[str]]:
    """The cells of every table row in a section."""
    sec = html[html.index(f'<section id="{section_id}">'):]
    sec = sec[:sec.index("</section>")]
    return [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r) for r in re.findall(r"<tr>(.*?)</tr>", sec)]


def _text(svg: str) -> str:
    return " ".join(re.findall(r">([^<>]+)</text>", svg))


def test_time_breakdown_of_a_chip_run(tmp_path):
    import tempfile

    out = tmp_path / "r.html"
    d = json.loads(_cli("run", TINY, "--chip", "h100", "--prompt", "8", "--generate", "3", "--html", out,
                        "--json").stdout)
    pt, html = d["per_token"], out.read_text()
    rows = {r[0]: r[1:] for r in _rows(html, "time")}
    # the bars add up to the step's latency: roofline and calibrated, the launch overhead its own part
    assert rows["total (the step&#x27;s latency)"] == ["-", format_si(pt["latency_s"], "s"),
                                                      format_si(pt["latency_calibrated_s"], "s")]
    assert rows["launch overhead"][2] == format_si(pt["overhead_s"], "s")
    for r, busy in pt["time_by_resource_s"].items():
        assert rows[r][0] == format_si(busy, "s")
    assert rows[pt["bound"]][1] != format_si(0.0, "s")          # the bound carries roofline time
    svg = figures_of(html)["time"]
    assert "roofline" in _text(svg) and "calibrated" in _text(svg) and "launch overhead" in _text(svg)
    # the header a person cites, the bound named, the temporary trace not shown as a path
    head = html[html.index('<table class="header">'):html.index("</table>")]
    assert "tiny-llama" in head and "h100" in head and "batch 1, context 0, prompt 8, generate 3" in head
    assert "pim True" in head and "kernel that ran" in head and "temporary, removed after the run" in head
    assert f"<td>{pt['bound']}</td>" in html
    assert tempfile.gettempdir() + "/" not in html and "(temporary)/tiny-llama.trace" in html


def test_time_breakdown_sums_against_the_per_op_table(tmp_path):
    """Each resource's roofline share is the per-op Parquet's latency of the decode ops it bounds."""
    import pyarrow.parquet as pq

    import tierlab
    from tierlab.present import breakdown

    trace = make_trace(tmp_path)
    _cli("replay", trace, "--chip", "sn40l", "-o", tmp_path / "ops.parquet")
    ops = pq.read_table(tmp_path / "ops.parquet").to_pylist()
    r = tierlab.replay(trace, chip="sn40l")      # the replay, its objects kept
    d, tb = r.to_dict(), breakdown.time_breakdown(r.replay, r.cost)
    steps = len({o["step"] for o in ops if o["phase"] == "decode"})
    for r, t in tb["roofline"].items():
        want = sum(o["latency_s"] for o in ops if o["phase"] == "decode" and o["bound"] == r) / steps
        assert t == pytest.approx(want, rel=1e-12), r
    assert sum(tb["calibrated"].values()) == pytest.approx(d["per_token"]["latency_calibrated_s"], rel=1e-12)
    assert sum(tb["roofline"].values()) == pytest.approx(d["per_token"]["latency_s"], rel=1e-12)


def test_time_breakdown_of_a_system_run(tmp_path):
    import tierlab
    from tierlab.present import breakdown
    from tierlab.present.format import format_percent

    out = tmp_path / "s.html"
    d = json.loads(_cli("run", TINY, "--system", "dgx-h100", "--tp", "2", "--generate", "2", "--html", out,
                        "--json").stdout)
    pt, html = d["per_token"], out.read_text()
    figs = figures_of(html)
    assert {"time", "devices", "bytes"} <= set(figs)
    rows = {r[0]: r[1:] for r in _rows(html, "time")}
    assert rows["total (the step&#x27;s latency)"] == [format_si(pt["latency_s"], "s"),
                                                      format_si(pt["latency_calibrated_s"], "s")]
    for r, t in pt["time_by_resource_s"].items():
        assert rows[r][0] == format_si(t, "s")
    share = d["coordination"]["collective_time_share"]
    assert rows["collectives&#x27; share of the critical path (roofline)"] == [format_percent(share)]
    assert "device 0" in _text(figs["devices"]) and "device 1" in _text(figs["devices"])
    # every device's bar adds up to the step: its ops, its collectives, its wait
    r = tierlab.run(TINY, system="dgx-h100", tp=2, generate=2)
    st = breakdown.system_time(r.replay, r.cost)
    assert len(st["devices"]) == 2 and st["collective_share"] == pytest.approx(share, rel=1e-12)
    for row in st["devices"]:
        assert sum(row.values()) == pytest.approx(pt["latency_s"], rel=1e-9)
        assert row[breakdown.COLLECTIVES] > 0
    assert sum(st["path"].values()) == pytest.approx(pt["latency_s"], rel=1e-12)
    # the scale-up fabric's bytes, a sliver beside HBM's, still carry their value on the bar
    uri = re.search(r'<figure data-figure="bytes"><img alt="bytes per decode token by link and fabric" src="([^"]+)"',
                    html).group(1)
    svg = _text(base64.b64decode(uri.split(",", 1)[1]).decode())
    sup = pt["bytes_by_link"]["scale_up"]
    unit = "KiB" if max(pt["bytes_by_link"].values()) >= 1024 else "B"
    scale = 1024.0 if unit == "KiB" else 1.0
    assert "link scale_up" in svg and f"{sup / scale:.3g} {unit}" in svg and sup > 0
    assert f"<td>{pt['bound']}</td>" in html and "dgx-h100" in html[:html.index("</table>")]


def test_a_preset_chip_is_named_as_a_preset_and_a_file_by_its_path(tmp_path):
    """The header names a shipped chip 'h100 (preset)' wherever the package lies (a venv under /tmp
    once read 'h100 ((temporary)/h100.toml)'), and a chip file by its path."""
    from tierlab.common.paths import configs_dir
    from tierlab.present.html import chip_text

    assert chip_text("h100", str(configs_dir("chips") / "h100.toml")) == "h100 (preset)"
    mine = tmp_path / "mine.toml"
    assert chip_text("mine", str(mine)) == f"mine ({mine})"
    assert chip_text("code-built", None) == "code-built"
