"""``tierlab mrc REQUESTS``: the hit curve's JSON, and one line and exit 2 on bad input."""

from __future__ import annotations

import json

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
