"""The benchmark harness: the issue-4 stream's shape, the scripts' JSON, ``tierlab bench``."""

import json
import sys

import numpy as np
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.cli.bench import benchmarks_dir, format_result

sys.path.insert(0, str(benchmarks_dir()))

from _common import issue_blocks  # noqa: E402


def test_issue_stream_shape():
    lines = 20_000
    b = issue_blocks(lines)
    again = issue_blocks(lines)
    assert np.array_equal(b, again)                        # fixed seed: the same stream every run
    rounds = b.reshape(-1, 500)
    region_lines = (64 << 20) // 64
    # each round: 250 consecutive lines of the region continuing the previous run, then 250 hot lines
    assert np.array_equal(rounds[:, :250].reshape(-1), np.arange(lines // 2) % region_lines)
    hot = rounds[:, 250:]
    assert hot.min() >= region_lines and hot.max() < region_lines + (512 << 10) // 64
    assert len(np.unique(hot)) > 5000                      # 10k draws spread over the 8192-line hot set
    assert len(issue_blocks(1001)) == 1001


def test_floor_loop_counts_matches():
    from bench_replay import floor_loop

    tags = np.full((4, 2), -1, np.int64)
    tags[1, 0], tags[2, 1] = 5, 6
    assert floor_loop(np.array([5, 6, 7, 9, 5], np.int64), tags) == 3


def test_bench_runs_a_script_and_reports_json():
    res = CliRunner().invoke(main, ["bench", "mrc", "--quick", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output[res.output.index("{"):])["mrc"]
    assert doc["benchmark"] == "bench_mrc" and doc["machine"]["cores"] >= 1
    assert doc["vs_naive"]["histograms_equal"] and doc["per_set_vs_replays"]["counts_equal"]
    for r in doc["opt"]["miss_ratio"]:
        assert doc["opt"]["miss_ratio"][r] <= doc["opt"]["lru_miss_ratio"][r]
    text = format_result("mrc", doc)
    assert "vs_naive.speedup" in text


def test_bench_list_and_unknown_name():
    runner = CliRunner()
    res = runner.invoke(main, ["bench", "--list"])
    assert res.exit_code == 0 and {"replay", "mrc", "memory", "model", "sweep"} <= set(res.output.split())
    res = runner.invoke(main, ["bench", "nope"])
    assert res.exit_code == 2 and "unknown benchmark" in res.output
