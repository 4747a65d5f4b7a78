"""``tierlab mrc REQUESTS``: the hit curve's JSON, and one line and exit 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tierlab.cli import main
from kvstream_reference import random_requests, replay, write_csv

MOONCAKE = ('{"timestamp": 0, "input_length": 1000, "output_length": 50, "hash_ids": [0, 1]}\n'
            '{"timestamp": 27, "input_length": 1600, "output_length": 10, "hash_ids": [0, 1, 46, 47]}\n')


def test_json_matches_a_plain_replay(tmp_path):
    reqs, inps, bt = random_requests(11, n=40)
    p = write_csv(tmp_path / "r.csv", reqs, inps)
    res = CliRunner().invoke(main, ["mrc", str(p), "--block-tokens", str(bt), "--capacity", f"{3 * bt},{8 * bt}",
                                    "--policy", "fifo", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["policy"] == "fifo" and d["block_tokens"] == bt and d["requests"] == 40
    for point, c in zip(d["curve"], (3, 8)):
        assert point["capacity_tokens"] == c * bt
        assert point["hit_ratio_tokens"] == replay(reqs, inps, bt, c, "fifo")[1] / sum(inps)


def test_table_and_bad_input(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text(MOONCAKE)
    res = CliRunner().invoke(main, ["mrc", str(p)])
    assert res.exit_code == 0 and "infinite" in res.output and "0.3938" in res.output   # 1024 of 2600 tokens
    bad = tmp_path / "bad.jsonl"
    bad.write_text(MOONCAKE.replace("[0, 1, 46, 47]", "[0, 1, 46]"))
    for args in ([str(bad)], [str(p), "--capacity", "0"], [str(p), "--capacity", "x"],
                 [str(p), "--tier", "sram", "--policy", "opt"], [str(tmp_path / "t.npz")]):
        res = CliRunner().invoke(main, ["mrc", *args])
        assert res.exit_code == 2, (args, res.output)
        assert res.output.count("\n") == 1 and "error" in res.output, res.output
    res = CliRunner().invoke(main, ["mrc", str(bad)])
    assert f"{bad}: line 2: hash_ids: 3 ids" in res.output


def test_requests_command_json_parquet_and_plot(tmp_path):
    """``tierlab requests``: --json is the library's summary, -o writes one row per request, --plot draws."""
    import json as _json

    import pyarrow.parquet as pq
    from click.testing import CliRunner

    import tierlab
    from tierlab.cli import main
    from tierlab.traces.model.spec import load_model

    tiny = Path(__file__).parents[1] / "data" / "models" / "tiny-llama.json"
    lines = [{"timestamp": 100 * i, "input_length": 96 + 16 * (i % 3), "output_length": 4,
              "hash_ids": [0, 1, 2 + i % 3][: -(-(96 + 16 * (i % 3)) // 64)]} for i in range(12)]
    src = tmp_path / "r.jsonl"
    src.write_text("".join(_json.dumps(r) + "\n" for r in lines))
    args = ["requests", str(src), "--model", str(tiny), "--chip", "h100", "--block-tokens", "64",
            "--max-batch-tokens", "256", "--kv-tier", "dram=1GB"]
    res = CliRunner().invoke(main, args + ["--json", "-o", str(tmp_path / "r.parquet"),
                                           "--plot", str(tmp_path / "r.png")])
    assert res.exit_code == 0, res.output
    d = _json.loads(res.stdout)
    t = pq.read_table(tmp_path / "r.parquet")
    assert t.num_rows == d["requests"] == 12
    assert (tmp_path / "r.png").stat().st_size > 0
    assert d["output_tokens"] == 48 and d["input_tokens"] == sum(r["input_length"] for r in lines)
    # the library gives the same summary
    trace = tierlab.read_requests(src, block_tokens=64)
    lib = tierlab.serve_requests(trace, load_model(str(tiny)), chip="h100", kv_tiers={"dram": "1GB"},
                                 max_batch_tokens=256)
    assert lib.to_dict()["ttft_s"] == d["ttft_s"] and lib.to_dict()["hit_ratio"] == d["hit_ratio"]
    # the text view names every tier
    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0 and "dram" in text.stdout and "time to first token" in text.stdout


# ---- tierlab requests --html ------------------------------------------------------------------------

TINY = Path(__file__).parents[1] / "data" / "models" / "tiny-llama.json"
VOID = {"meta", "img", "br", "hr", "link", "input", "col", "area", "base", "wbr", "source"}


class _Tags:
    """Parse an HTML page strictly enough to find a broken one: every element closed, in order."""

    def __init__(self, text: str):
        from html.parser import HTMLParser

        self.stack, self.figures, self.tables, self.problems = [], {}, [], []
        outer = self

        class P(HTMLParser):
            def handle_starttag(self, tag, attrs):
                a = dict(attrs)
                if tag == "figure":
                    outer.figure = a.get("data-figure")
                if tag == "img" and outer.stack and outer.stack[-1] == "figure":
                    outer.figures[outer.figure] = a["src"]
                if tag == "table":
                    outer.tables.append([])
                if tag == "tr":
                    outer.tables[-1].append([])
                if tag in ("td", "th"):
                    outer.cell = []
                if tag not in VOID:
                    outer.stack.append(tag)

            def handle_endtag(self, tag):
                if not outer.stack or outer.stack.pop() != tag:
                    outer.problems.append(f"</{tag}> closes nothing open")
                if tag in ("td", "th"):
                    outer.tables[-1][-1].append("".join(outer.cell).strip())
                    outer.cell = None

            def handle_data(self, data):
                if getattr(outer, "cell", None) is not None:
                    outer.cell.append(data)

        p = P(convert_charrefs=True)
        p.feed(text)
        p.close()
        if self.stack:
            self.problems.append(f"left open: {self.stack}")


def _stream(tmp_path) -> Path:
    lines = [{"timestamp": 100 * i, "input_length": 96 + 16 * (i % 3), "output_length": 1 + 3 * (i % 4 != 0),
              "hash_ids": [0, 1, 2 + i % 3][: -(-(96 + 16 * (i % 3)) // 64)]} for i in range(12)]
    src = tmp_path / "r.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return src


def test_requests_html_report(tmp_path):
    """--html: one self-contained page that parses, with the configuration, the summary tables that the
    text prints, the TTFT and TPOT distributions with and without the tiers and the hit curve with the
    tiers marked, all SVG in data URIs; 'wrote FILE' on stderr; nothing else left in the directory."""
    import base64

    from tierlab.present.requests import format_text

    src = _stream(tmp_path)
    out = tmp_path / "report.html"
    args = ["requests", str(src), "--model", str(TINY), "--chip", "h100", "--block-tokens", "64",
            "--max-batch-tokens", "256", "--kv-tier", "dram=1GB", "--slo-ttft", "100"]
    res = CliRunner().invoke(main, args + ["--html", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert res.stderr == f"wrote {out}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl", "report.html"]
    d = json.loads(res.stdout)
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text.lower()
    tags = _Tags(text)
    assert tags.problems == []
    assert set(tags.figures) == {"ttft", "tpot", "hit_curve"}
    for name, uri in tags.figures.items():
        assert uri.startswith("data:image/svg+xml;base64,"), name
        svg = base64.b64decode(uri.split(",", 1)[1]).decode()
        assert svg.startswith("<svg") and "</svg>" in svg, name
    svgs = {n: base64.b64decode(u.split(",", 1)[1]).decode() for n, u in tags.figures.items()}
    assert "HBM alone" in svgs["ttft"] and "with the KV tiers" in svgs["ttft"]   # text kept as text
    assert "+ dram" in svgs["hit_curve"]                                          # the tier marks
    # the configuration, then the tables the text view prints, cell for cell
    head = {r[0]: r[1] for r in tags.tables[0]}
    assert head["model"] == "tiny-llama" and head["target"] == "chip h100" and head["SLOs"] == "TTFT 100 ms"
    assert "r.jsonl" in head["requests"] and "64-token blocks" in head["requests"] and "dram" in head["KV tiers"]
    printed = format_text(d).splitlines()
    for row in tags.tables[1][1:] + tags.tables[2][1:]:
        assert any(line.split() == " ".join(row).split() for line in printed), row
    assert [r[0] for r in tags.tables[2][1:]] == ["hbm", "dram"]
    assert f"{d['requests']:,} requests" in text and "with the KV tiers" in text and "HBM alone" in text


def test_requests_html_bad_path_and_no_matplotlib(tmp_path, monkeypatch):
    """A path that cannot be written, or an existing file without --force, is refused in one line,
    exit 2, before the stream is served; without matplotlib, one line naming the extra."""
    import tierlab.kvstream.server as server
    import tierlab.present.plots as plots
    from tierlab.common.errors import UsageError

    src = _stream(tmp_path)
    base = ["requests", str(src), "--model", str(TINY), "--chip", "h100", "--block-tokens", "64"]

    def never(*a, **k):
        raise AssertionError("served before the output was checked")

    monkeypatch.setattr(server, "serve_requests", never)
    missing = tmp_path / "no" / "r.html"
    res = CliRunner().invoke(main, base + ["--html", str(missing)])
    assert res.exit_code == 2 and res.stderr == f"tierlab: error: {missing}: parent directory {missing.parent} " \
                                                "does not exist\n"
    there = tmp_path / "old.html"
    there.write_text("old")
    res = CliRunner().invoke(main, base + ["--html", str(there)])
    assert res.exit_code == 2 and res.stderr == f"tierlab: error: {there}: output exists; pass --force to replace it\n"
    assert there.read_text() == "old"

    def no_matplotlib():
        raise UsageError("plotting needs matplotlib: pip install 'tierlab[plot]'", field="--plot")

    monkeypatch.setattr(plots, "pyplot", no_matplotlib)
    res = CliRunner().invoke(main, base + ["--html", str(tmp_path / "r.html")])
    assert res.exit_code == 2
    assert res.stderr == "tierlab: error: --html: the report's figures need matplotlib: pip install 'tierlab[plot]'\n"
    assert not (tmp_path / "r.html").exists()
