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
