"""The HTML reports opened as a person would: in a real headless Chromium (Debian's ``chromium``,
driven by Playwright), each report must load with no console error, no uncaught page error and no
request for anything but itself, and every figure must be there and drawn (its image decoded, with
a size on the page). A full-page screenshot of each is kept in ``tests/artifacts/``.

Without ``/usr/bin/chromium`` the test is skipped, with the reason -- except in CI (``CI=true``,
which ``.ci/run`` sets after installing Chromium), where a missing browser fails it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

import pytest
from test_html_report import _cli


ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TINY = DATA / "models" / "tiny-llama.json"
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
WAIT_MS = 600_000
# what this machine's Chromium needs headless (no GPU, no background calls to a closed network)
FLAGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-sandbox"]


def _browser_or_skip():
    in_ci = os.environ.get("CI") == "true"
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        why = "Debian's chromium is not installed (apt-get install -y chromium)"
        if in_ci:
            pytest.fail(f"CI=true: {why}; .ci/run installs it")
        pytest.skip(why)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:       # part of the test extra: its absence is a broken install, not a skip
        pytest.fail("playwright is not installed: pip install -e '.[test]'")
    return sync_playwright, CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reports")
    trace = tmp / "t.trace"
    _cli("trace", TINY, "--prompt", "16", "--generate", "3", "-o", trace)
    out, bounds = {}, {}
    out["replay"] = tmp / "replay.html"
    d = json.loads(_cli("replay", trace, "--chip", "h100", "--html", out["replay"], "--mrc", "l2", "--json").stdout)
    bounds["replay"] = [d["per_token"]["bound"]]
    out["system"] = tmp / "system.html"       # its trace made in a temporary directory, removed after the run
    d = json.loads(_cli("run", TINY, "--system", "dgx-h100", "--tp", "2", "--generate", "2", "--html", out["system"],
                        "--json").stdout)
    bounds["system"] = [d["per_token"]["bound"]]
    out["compare"] = tmp / "compare.html"
    d = json.loads(_cli("compare", TINY, "--chips", "h100,sn40l", "--systems", "dgx-h100", "--generate", "2", "--html",
                        out["compare"], "--json").stdout)
    bounds["compare"] = [c["replay"]["per_token"]["bound"] for c in d["chips"]]
    out["sweep"] = tmp / "sweep.html"
    _cli("sweep", "--model", TINY, "--chip", "h100,a100", "--batch", "1,4", "--context", "16", "--generate", "1",
         "-o", tmp / "s.parquet", "--workers", "1", "--html", out["sweep"])
    bounds["sweep"] = sorted({r["bound"] for r in pq.read_table(tmp / "s.parquet").to_pylist()})
    src = tmp / "r.jsonl"           # a request stream (issue 41): 12 requests sharing a 2-block prefix
    src.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 96 + 16 * (i % 3), "output_length": 4,
                                       "hash_ids": [0, 1]}) + "\n" for i in range(12)))
    out["requests"] = tmp / "requests.html"
    _cli("requests", src, "--model", TINY, "--chip", "h100", "--block-tokens", "64", "--kv-tier", "dram=1GB",
         "--html", out["requests"])
    bounds["requests"] = ["time to first token", "dram"]     # not a bound: the page names the summary and tier
    return out, bounds


EXPECTED = {"replay": {"time", "busy", "bytes", "hit_rates", "energy", "latency", "roofline", "mrc"},
            "system": {"time", "devices", "busy", "bytes", "energy", "hit_rates", "latency", "roofline"},
            "compare": {"comparison"}, "sweep": {"pareto"}, "requests": {"ttft", "tpot", "hit_curve"}}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_report_in_headless_chromium(reports, name):
    sync_playwright, exe = _browser_or_skip()
    reports, bounds = reports
    path = reports[name]
    declared = set(re.findall(r'<figure data-figure="([^"]+)"', path.read_text()))
    assert EXPECTED[name] <= declared
    problems, requests = [], []
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        # Playwright's 30 s default waits are bounds, not verdicts: a loaded machine gets 10 minutes
        browser = p.chromium.launch(executable_path=exe, headless=True, args=FLAGS, timeout=WAIT_MS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.set_default_timeout(WAIT_MS)
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri(), wait_until="load")
            figs = page.eval_on_selector_all(
                "figure[data-figure] img",
                "els => els.map(e => ({name: e.closest('figure').dataset.figure, complete: e.complete, "
                "w: e.naturalWidth, h: e.naturalHeight, shown: e.getBoundingClientRect().width}))")
            # what a person sees: each figure's pixels (drawn into a canvas), not only its element
            inked = page.eval_on_selector_all(
                "figure[data-figure] img",
                "els => els.map(e => { const c = document.createElement('canvas'); c.width = e.naturalWidth; "
                "c.height = e.naturalHeight; const g = c.getContext('2d'); g.drawImage(e, 0, 0); "
                "const px = g.getImageData(0, 0, c.width, c.height).data; let n = 0; "
                "for (let i = 0; i < px.length; i += 4) if (px[i + 3] > 0 && (px[i] < 200 || px[i + 1] < 200 || "
                "px[i + 2] < 200)) n++; return n / (c.width * c.height); })")
            text = page.inner_text("body")
            title = page.title()
            sections = page.eval_on_selector_all("section", "els => els.map(e => e.id)")
            page.screenshot(path=str(ARTIFACTS / f"report-{name}.png"), full_page=True)
        finally:
            browser.close()
    assert problems == []
    assert [u for u in requests if not u.startswith(("data:", path.as_uri()))] == []
    assert {f["name"] for f in figs} == declared
    for f in figs:
        assert f["complete"] and f["w"] > 100 and f["h"] > 100 and f["shown"] > 100, f
    assert title.startswith("tierlab") and sections[-1] == "provenance"
    assert all(share > 0.005 for share in inked), inked         # every figure has ink, not a blank box
    for bound in bounds[name]:                                   # the page names the bound
        assert bound in text, bound
    assert tempfile.gettempdir() + "/" not in text and tempfile.gettempdir() + "/" not in path.read_text()
    assert (ARTIFACTS / f"report-{name}.png").stat().st_size > 10_000
