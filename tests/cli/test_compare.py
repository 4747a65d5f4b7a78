"""tierlab compare: rows equal separate replays; chips that do not fit keep their column; outputs; errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.analysis.compare import compare, summarise, table_rows
from tierlab.present.compare import format_table
from tierlab.engine.options import ReplayOptions
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.format.reader import open_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model

DATA = Path(__file__).parents[1] / "data" / "models"
CHIPS = ["h100", "sn40l", "h100-hbm-pim", "attacc", "aim-gddr6"]


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp")
    spec = load_model(DATA / "tiny-llama.json")
    return generate_trace(spec, RunConfig(context=6, generate=3, batch=2), d / "t.trace")


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def replay_json(trace_path, chip, *flags):
    r = cli("replay", trace_path, "--chip", chip, "--json", *flags)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("pim", ["--pim", "--no-pim"])
def test_compare_rows_equal_separate_replays(trace_path, pim):
    r = cli("compare", trace_path, "--chips", ",".join(CHIPS), "--json", pim)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert [c["chip"] for c in d["chips"]] == CHIPS and d["pim"] == (pim == "--pim")
    for c in d["chips"]:
        assert c["fits"]
        alone = replay_json(trace_path, c["chip"], pim)
        for key in ("tiers", "links", "energy_j", "per_token", "by_kind", "pim", "placement", "latency_s"):
            assert c["replay"][key] == alone[key], (c["chip"], key)
        assert c["summary"] == json.loads(json.dumps(summarise(alone)))


def test_summary_figures_follow_the_replay(trace_path):
    (row,) = compare(trace_path, ["h100"])
    pt, s = row.result["per_token"], row.summary
    assert s["bytes_by_link"] == pt["bytes_by_link"]
    assert s["energy_per_token_j"] == pt["energy_j"] and s["tokens_per_j"] == 1 / pt["energy_j"]
    assert sum(s["energy_j"].values()) == pytest.approx(pt["energy_j"], rel=1e-12)
    assert s["tokens_per_s"] == pt["tokens_per_s"] == pt["batch"] / pt["latency_s"]
    # found share = hits / requests arriving, from the by-kind counters
    for kind, v in row.result["by_kind"].items():
        for tier, c in v["tiers"].items():
            n = c["hits"] + c["misses"] + c["bypasses"]
            assert s["found"].get(f"{tier} ({kind})") == (c["hits"] / n if n else None)
    # per-token link bytes are per step / batch over the decode steps, from the per-op counters
    ops = open_trace(trace_path).ops.to_pydict()
    assert pt["steps"] == len({st for st, ph in zip(ops["step"], ops["phase"]) if ph == "decode"}) == 3


def test_moe_active_parameters_in_the_title(tmp_path):
    spec = load_model(DATA / "tiny-mixtral.json")
    path = generate_trace(spec, RunConfig(context=2, generate=1), tmp_path / "t.trace")
    r = cli("compare", path, "--chips", "sn40l")
    assert r.exit_code == 0, r.output
    from tierlab.traces.model.spec import human_count

    assert spec.active_param_count() < spec.param_count()
    assert r.output.startswith(f"tiny-mixtral: {human_count(spec.param_count())} parameters, "
                               f"{human_count(spec.active_param_count())} active per token")


def test_chip_that_cannot_hold_the_model_is_shown_with_the_reason(tmp_path):
    spec = load_model(DATA / "tiny-llama.json")
    path = generate_trace(spec, RunConfig(context=4, generate=1), tmp_path / "t.trace")
    small = tmp_path / "small.toml"
    text = (Path(__file__).parents[2] / "configs" / "chips" / "h100.toml").read_text()
    small.write_text(text.replace('capacity = "80 GB"', 'capacity = "64 KiB"')
                     .replace('capacity = "256 GB"', 'capacity = "64 KiB"'))
    rows = compare(path, ["h100", str(small)])
    assert rows[0].ok and not rows[1].ok and "fits in no home tier" in rows[1].reason
    text = format_table(rows)
    assert "no (see below)" in text and rows[1].chip in text.splitlines()[0]
    assert all(vals[1] is None for _, vals in table_rows(rows))
    r = cli("compare", path, "--chips", f"h100,{small}", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["chips"][1]["fits"] is False and d["chips"][1]["replay"] is None
    assert d["chips"][1]["reason"] == rows[1].reason


def test_trace_aligned_below_a_block_is_a_reason_not_a_crash(tmp_path):
    spec = load_model(DATA / "tiny-llama.json")
    path = generate_trace(spec, RunConfig(context=4, generate=1, alignment=64), tmp_path / "t.trace")
    rows = compare(path, ["h100"])  # 128 B blocks
    assert not rows[0].ok and "align" in rows[0].reason


def test_unknown_chip_is_one_line_exit_2(trace_path):
    for chips, msg in (("h100,nochip", "nochip"), ("h100,,sn40l", "comma-separated"), ("h100,h100", "listed twice"),
                       ("h100 --generate 5", "trace options apply only when tracing")):
        r = cli("compare", trace_path, "--chips", *chips.split())
        assert r.exit_code == 2, r.output
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and msg in lines[0], r.output


def test_model_is_traced_once_and_compared(tmp_path):
    keep = tmp_path / "kept.trace"
    r = cli("compare", DATA / "tiny-llama.json", "--chips", "h100,sn40l", "--context", 4, "--generate", 2,
            "--keep-trace", keep, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["run"]["generate"] == 2 and d["model"]["name"] == "tiny-llama"
    spec = load_model(DATA / "tiny-llama.json")
    assert d["model"]["active_params"] == spec.active_param_count() == d["model"]["params"]
    assert d["model"]["active_weight_bytes"] == spec.active_param_count() * 2
    r2 = cli("compare", keep, "--chips", "h100,sn40l", "--json")
    assert [c["replay"]["per_token"] for c in json.loads(r2.output)["chips"]] == \
        [c["replay"]["per_token"] for c in d["chips"]]


def test_csv_and_plot(tmp_path, trace_path):
    out_csv, out_png = tmp_path / "c.csv", tmp_path / "c.png"
    r = cli("compare", trace_path, "--chips", "h100,h100-hbm-pim", "--csv", out_csv, "--plot", out_png)
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(out_csv.open()))
    assert [x["chip"] for x in rows] == ["h100", "h100-hbm-pim"]
    d = compare(trace_path, ["h100", "h100-hbm-pim"])
    assert float(rows[1]["energy/token total"]) == d[1].summary["energy_per_token_j"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out_png.stat().st_size > 10_000
    r = cli("compare", trace_path, "--chips", "h100", "--csv", out_csv)
    assert r.exit_code == 2 and "--force" in r.output
    assert cli("compare", trace_path, "--chips", "h100", "--csv", out_csv, "--force").exit_code == 0


def test_pim_lowers_link_bytes_and_energy(trace_path):
    on = compare(trace_path, ["h100-hbm-pim"])[0].summary
    off = compare(trace_path, ["h100-hbm-pim"], ReplayOptions(pim=False))[0].summary
    assert on["in_memory_bytes"] and not off["in_memory_bytes"]
    assert on["bytes_by_link"]["l2-hbm"] <= off["bytes_by_link"]["l2-hbm"]


def test_plot_without_matplotlib_is_one_line_before_any_work(tmp_path, trace_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "c.png"
    r = cli("compare", trace_path, "--chips", "h100", "--plot", out)
    assert r.exit_code == 2 and r.output.strip() == \
        "tierlab: error: --plot: plotting needs matplotlib: pip install 'tierlab[plot]'"
    assert not out.exists()


def _slow_l2(name, hbm_scale=1.0):
    """h100 whose L2 is slow enough to bind the decode, its HBM scaled."""
    import dataclasses

    from tierlab.chip.chipfile import load_chip

    c = load_chip("h100")
    tiers = tuple(dataclasses.replace(t, bandwidth_bytes_per_s=1e9) if t.name == "l2" else
                  dataclasses.replace(t, bandwidth_bytes_per_s=t.bandwidth_bytes_per_s * hbm_scale)
                  if t.name == "hbm" else t for t in c.tiers)
    return dataclasses.replace(c, name=name, tiers=tiers, source_sha256=None, source_file=None)


def test_compare_says_which_tier_binds_and_flags_a_hidden_memory(trace_path):
    """A cache that binds the decode hides the memory behind it: two chips whose HBM differs by 1.5x come
    out alike, and compare says so under the table; the bound rows name each chip's binding tier."""
    from tierlab.analysis.compare import cache_notes

    rows = compare(trace_path, [_slow_l2("a"), _slow_l2("b", 1.5), "h100"])
    a, b, h = rows
    assert a.summary["bound"] == b.summary["bound"] == "tier:l2"
    assert a.memory["bandwidth_bytes_per_s"] * 1.5 == pytest.approx(b.memory["bandwidth_bytes_per_s"])
    assert a.summary["tokens_per_s"] == pytest.approx(b.summary["tokens_per_s"], rel=0.02)
    notes = cache_notes(rows)
    assert any(n.startswith("a: decode bound by its cache tier l2") for n in notes)
    assert any(n.startswith("warning: a = b (roofline") and "bandwidth 3.35 TB/s vs 5.03 TB/s" in n for n in notes)
    assert not any("h100" in n for n in notes if h.summary["bound"] != "tier:l2")
    text = format_table(rows)
    assert "bound calibrated" in text and "hides the difference" in text
    # chips whose memory is the same, or that no cache binds, draw no warning
    assert not [n for n in cache_notes([a, _twin(a)]) if n.startswith("warning")]


def _twin(r):
    import dataclasses

    return dataclasses.replace(r, chip="twin")
