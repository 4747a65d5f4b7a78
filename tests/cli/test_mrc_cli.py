"""``tierlab mrc`` on a small synthetic trace: every row checked against per-size replays."""

import json
import numpy as np
import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.traces.format.writer import TraceWriter
from reference import naive_lru_misses

CHIP = """
name = "tiny"
[compute]
flops = {{ bf16 = "1 TFLOP/s" }}
energy = {{ bf16 = "1 pJ" }}
[[tier]]
name = "sram"
capacity = "{cap}"
block = "64 B"
{ways}
policy = "lru"
managed = "cache"
bandwidth = "1 TB/s"
read_energy = "1 pJ/bit"
write_energy = "1 pJ/bit"
[[tier]]
name = "dram"
capacity = "1 GiB"
block = "64 B"
managed = "memory"
bandwidth = "100 GB/s"
read_energy = "10 pJ/bit"
write_energy = "10 pJ/bit"
[[link]]
from = "sram"
to = "dram"
bandwidth = "100 GB/s"
energy = "1 pJ/bit"
"""


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """Weights streamed (with a strided walk), a hot KV region re-read and written, random probes."""
    path = tmp_path_factory.mktemp("t") / "small.trace"
    rng = np.random.default_rng(11)
    expected = []                                   # the byte addresses, written out independently
    with TraceWriter(path) as w:
        wt = w.add_tensor("w", "weight", 40_000, "bf16")
        kv = w.add_tensor("kv", "kv", 6_000, "bf16")
        addr = {wt: 0, kv: 65536}                   # default 64 KiB alignment
        for step in range(3):
            op = w.add_op(f"op{step}", "linear", 0, "decode", step, 1, 100)
            w.add_access(op, wt, 0, 40_000)
            expected += [(addr[wt] + x) // 64 for x in range(0, 40_000, 64)]
            w.add_access(op, wt, 100, 10, count=50, stride=700)
            for k in range(50):
                s = addr[wt] + 100 + 700 * k
                expected += list(range(s // 64, (s + 9) // 64 + 1))
            w.add_access(op, kv, 0, 6_000, is_write=step == 1)
            expected += [(addr[kv] + x) // 64 for x in range(0, 6_000, 64)]
            for off in rng.integers(0, 5_000, 30).tolist():
                w.add_access(op, kv, off, 200)
                expected += list(range((addr[kv] + off) // 64, (addr[kv] + off + 199) // 64 + 1))
    return path, expected


def run_mrc(tmp_path, trace_path, cap, ways, *extra):
    chip = tmp_path / "tiny.toml"
    chip.write_text(CHIP.format(cap=cap, ways=f"ways = {ways}" if ways else ""))
    res = CliRunner().invoke(main, ["mrc", str(trace_path), "--tier", "sram", "--chip", str(chip), *extra])
    assert res.exit_code == 0, res.output
    return res.output


def test_fully_associative_rows_match_replay(trace, tmp_path):
    path, blocks = trace
    out = json.loads(run_mrc(tmp_path, path, "16 KiB", None, "--json", "--sizes", "1KiB,4KiB,16KiB,64KiB"))
    assert out["accesses"] == len(blocks)
    assert out["distinct_blocks"] == len(set(blocks))
    for row in out["rows"]:
        cap = row["capacity_bytes"] // 64
        assert row["lru_misses"] == naive_lru_misses(blocks, 1, cap)
        assert row["opt_misses"] <= row["lru_misses"]
        assert row["opt_misses"] >= len(set(blocks))
    assert [r["lru_misses"] for r in out["rows"]] == sorted((r["lru_misses"] for r in out["rows"]), reverse=True)


def test_set_associative_rows_match_replay(trace, tmp_path):
    path, blocks = trace
    out = json.loads(run_mrc(tmp_path, path, "8 KiB", 4, "--json"))   # 32 sets
    assert out["n_sets"] == 32 and out["max_ways"] == 8
    assert [r["capacity_bytes"] for r in out["rows"]] == [w * 32 * 64 for w in (1, 2, 4, 8)]
    for row in out["rows"]:
        ways = row["capacity_bytes"] // (32 * 64)
        assert row["set_lru_misses"] == naive_lru_misses(blocks, 32, ways)
        assert row["lru_misses"] == naive_lru_misses(blocks, 1, ways * 32)


def test_table_and_plot(trace, tmp_path):
    pytest.importorskip("matplotlib")
    path, _ = trace
    png = tmp_path / "mrc.png"
    text = run_mrc(tmp_path, path, "8 KiB", 4, "--plot", str(png))
    assert "<- tier" in text and "LRU 32 sets" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_is_one_line(trace, tmp_path):
    path, _ = trace
    chip = tmp_path / "tiny.toml"
    chip.write_text(CHIP.format(cap="8 KiB", ways=""))
    runner = CliRunner()
    for args in (["--tier", "l9"], ["--tier", "sram", "--sizes", "100B"], ["--tier", "sram", "--sizes", "1 parsec"],
                 ["--tier", "sram", "--opt", "--opt-limit", "10"]):
        res = runner.invoke(main, ["mrc", str(path), "--chip", str(chip), *args])
        assert res.exit_code == 2, (args, res.output)
        assert res.output.count("\n") == 1 and "error" in res.output


SPAD_CHIP = """
name = "spad"
[compute]
flops = { bf16 = "1 TFLOP/s" }
energy = { bf16 = "1 pJ" }
[[tier]]
name = "sram"
capacity = "64 KiB"
block = "64 B"
managed = "scratchpad"
bandwidth = "1 TB/s"
read_energy = "1 pJ/bit"
write_energy = "1 pJ/bit"
[[tier]]
name = "l2"
capacity = "8 KiB"
block = "128 B"
ways = 4
policy = "lru"
managed = "cache"
bandwidth = "1 TB/s"
read_energy = "1 pJ/bit"
write_energy = "1 pJ/bit"
[[tier]]
name = "dram"
capacity = "1 GiB"
block = "128 B"
managed = "memory"
bandwidth = "100 GB/s"
read_energy = "10 pJ/bit"
write_energy = "10 pJ/bit"
[[link]]
from = "sram"
to = "l2"
bandwidth = "1 TB/s"
energy = "1 pJ/bit"
[[link]]
from = "l2"
to = "dram"
bandwidth = "100 GB/s"
energy = "1 pJ/bit"
[[placement]]
tier = "sram"
kind = "kv"
"""


def test_deeper_tier_sees_only_tensors_homed_beyond_nearer_tiers(trace, tmp_path):
    """KV is pinned in the scratchpad (the weights do not fit it), so the l2 curve is that of the
    weight accesses alone."""
    path, _ = trace
    chip = tmp_path / "spad.toml"
    chip.write_text(SPAD_CHIP)
    res = CliRunner().invoke(main, ["mrc", str(path), "--tier", "l2", "--chip", str(chip), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    weight_blocks = []                              # the fixture's weight walks at 128 B blocks
    for _ in range(3):
        weight_blocks += list(range(0, 40_000 // 128 + 1))
        for k in range(50):
            s = 100 + 700 * k
            weight_blocks += list(range(s // 128, (s + 9) // 128 + 1))
    assert out["accesses"] == len(weight_blocks)
    # the fully-associative curve tracks 16 KiB (128 blocks): fewer than the 313 distinct blocks
    assert out["tracked_blocks"] == 128 and out["distinct_blocks"] is None
    for row in out["rows"]:
        assert row["set_lru_misses"] == naive_lru_misses(weight_blocks, 16, row["capacity_bytes"] // (16 * 128))
        assert row["lru_misses"] == naive_lru_misses(weight_blocks, 1, row["capacity_bytes"] // 128)


def test_plot_without_matplotlib_is_a_clear_error(trace, tmp_path, monkeypatch):
    path, _ = trace
    chip = tmp_path / "tiny.toml"
    chip.write_text(CHIP.format(cap="8 KiB", ways=""))
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)    # import matplotlib fails
    res = CliRunner().invoke(main, ["mrc", str(path), "--tier", "sram", "--chip", str(chip),
                                    "--plot", str(tmp_path / "x.png")])
    assert res.exit_code == 2 and "pip install 'tierlab[plot]'" in res.output
    assert not (tmp_path / "x.png").exists()


def test_cli_default_opt_limit_is_the_librarys():
    from tierlab.analysis.tier_mrc import DEFAULT_OPT_LIMIT_BLOCKS
    from tierlab.api.tier_curves import OPT_LIMIT_BLOCKS as LIBRARY
    from tierlab.cli.mrc import OPT_LIMIT_BLOCKS

    assert OPT_LIMIT_BLOCKS == DEFAULT_OPT_LIMIT_BLOCKS == LIBRARY


def test_the_curves_progress_moves_within_a_batch_and_sums_to_the_rows(trace, tmp_path):
    """``run --html --mrc`` draws the curve's progress: reported per expanded chunk (a model's batch
    is tens of seconds of curve), in rows of the batch in proportion to its blocks, summing to the
    trace's rows (issue 42)."""
    from unittest import mock

    from tierlab.analysis import tier_mrc as tm
    from tierlab.chip.chipfile import load_chip
    from tierlab.engine.blocks import BlockExpander
    from tierlab.traces.format.reader import open_trace

    path, blocks = trace
    chip_path = tmp_path / "tiny.toml"
    chip_path.write_text(CHIP.format(cap="16 KiB", ways="ways = 4"))
    tr, chip = open_trace(path), load_chip(str(chip_path))
    steps = []
    small = lambda *a, **k: BlockExpander(*a, **{**k, "buffer_blocks": 256})   # noqa: E731
    with mock.patch.object(tm, "BlockExpander", small):
        result, _ = tm.tier_mrc(tr, chip, "sram", progress=steps.append)
    plain, _ = tm.tier_mrc(tr, chip, "sram")
    assert sum(steps) == tr.n_accesses and len(steps) > 3 and min(steps) > 0
    assert result["rows"] == plain["rows"]
