"""``tierlab sweep`` on Dask: a real LocalCluster (2 worker processes) and a real scheduler + worker.

Every row equals the single run of its point (``per_token`` of ``to_json``, exactly); a rerun adds
nothing and starts no cluster; a changed grid computes only its new points; a failing point records
its error; an interrupted write leaves a readable file of complete rows.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.analysis.result import to_json
from tierlab.cli import main
from tierlab.cost.trace_cost import cost_of
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.design_space import runner, store as store_mod
from tierlab.design_space.grid import grid_from_dict, load_grid
from tierlab.design_space.overrides import build_chip
from tierlab.design_space.point import run_config
from tierlab.design_space.store import SweepStore, read_rows
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.model.spec import load_model

pytestmark = pytest.mark.filterwarnings("ignore")

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "tests" / "data" / "models" / "tiny-llama.json")
L2 = "tier.l2.capacity"

TOY = """\
name = "toy"
[compute]
flops = { bf16 = "100 TFLOP/s" }
energy = { bf16 = "0.5 pJ" }
[[tier]]
name = "l2"
capacity = "1 MiB"
block = "128 B"
policy = "lru"
managed = "cache"
bandwidth = "10 TB/s"
read_energy = "0.2 pJ/bit"
write_energy = "0.2 pJ/bit"
[[tier]]
name = "hbm"
capacity = "128 KiB"
block = "64 KiB"
managed = "memory"
bandwidth = "1 TB/s"
read_energy = "3 pJ/bit"
write_energy = "3 pJ/bit"
[[link]]
from = "l2"
to = "hbm"
bandwidth = "1 TB/s"
energy = "1 pJ/bit"
"""


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster
    import logging

    c = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                     silence_logs=logging.ERROR)
    try:
        yield c
    finally:
        c.close()


def factory_on(cluster, calls: list):
    """A client factory on the module's cluster, counting how often a sweep asks for one."""

    @contextlib.contextmanager
    def factory(scheduler, workers, timeout):
        from distributed import Client

        calls.append(1)
        client = Client(cluster)
        try:
            yield client
        finally:
            client.close()
    return factory


@contextlib.contextmanager
def no_cluster(scheduler, workers, timeout):
    raise AssertionError("a cluster was asked for")
    yield


def grid(batches=(1, 2), chips=("h100", "a100"), caps=("25 MiB", "50 MiB")):
    return grid_from_dict({"model": TINY, "chip": list(chips), "batch": list(batches), "context": 16,
                           "generate": 1}, {L2: list(caps)} if caps else {})


def single_run(tmp: Path, row: dict) -> dict:
    """The ``to_json`` of the point's own trace and replay, as ``tierlab run`` does it."""
    from tierlab.design_space.grid import Point

    run = {k: row[k] for k in ("batch", "context", "prompt", "generate", "weights", "kv", "tp", "pp", "ep", "dp")}
    p = Point(row["model"], row["chip"], None, run, {L2: row[L2]} if row.get(L2) else {})
    spec = load_model(p.model)
    out = tmp / f"single-{p.hash[:12]}.trace"
    path = generate_trace(spec, run_config(p), out)
    tr = replay_trace(path, build_chip(p.chip, p.overrides))
    return to_json(tr, cost_of(tr))


def test_rows_equal_single_runs_then_resume_then_grow(cluster, tmp_path):
    out = tmp_path / "r.parquet"
    g = grid()
    calls: list = []
    s = runner.run_sweep(g, SweepStore(out, g.columns), client_factory=factory_on(cluster, calls))
    assert (s.points, s.computed, s.failed, s.groups) == (8, 8, 0, 2) and s.cluster_started
    rows = read_rows(out)
    assert len(rows) == 8 and len({r["point_hash"] for r in rows}) == 8
    for r in rows:
        assert r["error"] is None
        d = single_run(tmp_path, r)
        assert json.loads(r["per_token_json"]) == d["per_token"]
        assert r["tokens_per_s"] == d["per_token"]["tokens_per_s"]
        assert r["energy_j_per_token"] == d["per_token"]["energy_j"]
        assert r["bytes_per_token.l2-hbm"] == d["per_token"]["bytes_by_link"]["l2-hbm"]
    # the h100 preset has a 50 MiB L2: that row is `tierlab run --chip h100 --json` to the bit
    cli = CliRunner().invoke(main, ["run", TINY, "--chip", "h100", "--context", "16", "--generate", "1",
                                    "--batch", "2", "--json"], catch_exceptions=False)
    want = json.loads(cli.stdout)["per_token"]
    (row,) = [r for r in rows if r["chip"] == "h100" and r["batch"] == 2 and r[L2] == "50 MiB"]
    assert json.loads(row["per_token_json"]) == want

    # resume: nothing new, no cluster
    s2 = runner.run_sweep(g, SweepStore(out, g.columns), client_factory=no_cluster)
    assert (s2.present, s2.computed, s2.cluster_started) == (8, 0, False)
    assert read_rows(out) == rows

    # a grown grid: only the new points (batch 4) are computed
    g3 = grid(batches=(1, 2, 4))
    s3 = runner.run_sweep(g3, SweepStore(out, g3.columns), client_factory=factory_on(cluster, calls))
    assert (s3.present, s3.computed, s3.groups) == (8, 4, 1)
    rows3 = read_rows(out)
    assert len(rows3) == 12 and rows3[:8] == rows


def test_failing_point_records_error(cluster, tmp_path):
    (tmp_path / "toy.toml").write_text(TOY)
    g = grid_from_dict({"model": TINY, "chip": ["h100", str(tmp_path / "toy.toml")], "context": 16,
                        "generate": 1})
    out = tmp_path / "f.parquet"
    s = runner.run_sweep(g, SweepStore(out, g.columns), client_factory=factory_on(cluster, []))
    assert (s.computed, s.failed) == (2, 1)
    rows = {r["chip"]: r for r in read_rows(out)}
    assert rows["h100"]["error"] is None and rows["h100"]["tokens_per_s"] > 0
    bad = rows[str(tmp_path / "toy.toml")]
    assert "fits in no home tier" in bad["error"] and "\n" not in bad["error"] and bad["tokens_per_s"] is None


def test_interrupted_write_leaves_complete_rows(cluster, tmp_path, monkeypatch):
    out = tmp_path / "i.parquet"
    g = grid(caps=None)          # 2 trace groups (batch 1, 2) x 2 chips
    real = store_mod.commit
    n = []

    def commit(tmp, final):
        n.append(1)
        if len(n) == 2:          # the second group's file is written in full, then the rename "dies"
            raise KeyboardInterrupt
        real(tmp, final)

    monkeypatch.setattr(store_mod, "commit", commit)
    with pytest.raises(KeyboardInterrupt):
        runner.run_sweep(g, SweepStore(out, g.columns), client_factory=factory_on(cluster, []))
    rows = read_rows(out)
    assert len(rows) == 2 and all(r["error"] is None for r in rows)
    assert len({r["batch"] for r in rows}) == 1          # one whole group, nothing of the other
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []
    monkeypatch.setattr(store_mod, "commit", real)
    s = runner.run_sweep(g, SweepStore(out, g.columns), client_factory=factory_on(cluster, []))
    assert (s.present, s.computed) == (2, 2) and len(read_rows(out)) == 4


def test_cli_toml_grid_embedded_cluster(tmp_path):
    (tmp_path / "g.toml").write_text(f'model = ["{TINY}"]\nchip = ["h100"]\nbatch = [1, 2]\ncontext = 16\n'
                                     f'generate = 1\n[overrides]\n"link.l2-hbm.bandwidth" = ["1 TB/s", "3.35 TB/s"]\n')
    assert len(load_grid(tmp_path / "g.toml").points()) == 4
    r = CliRunner().invoke(main, ["sweep", str(tmp_path / "g.toml"), "--workers", "2", "--json"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["points"], d["computed"], d["failed"], d["cluster_started"]) == (4, 4, 0, True)
    rows = read_rows(tmp_path / "g.parquet")
    assert sorted(r["link.l2-hbm.bandwidth"] for r in rows) == ["1 TB/s", "1 TB/s", "3.35 TB/s", "3.35 TB/s"]
    r2 = CliRunner().invoke(main, ["sweep", str(tmp_path / "g.toml"), "--json"], catch_exceptions=False)
    assert json.loads(r2.stdout)["cluster_started"] is False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_real_scheduler_and_worker(tmp_path):
    dask = Path(sys.executable).parent / "dask"
    port = _free_port()
    addr = f"tcp://127.0.0.1:{port}"
    procs = []
    try:
        procs.append(subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                       "--no-dashboard"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen([str(dask), "worker", addr, "--nworkers", "1", "--nthreads", "1",
                                       "--no-dashboard"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        out = tmp_path / "s.parquet"
        r = subprocess.run([str(Path(sys.executable).parent / "tierlab"), "sweep", "--model", TINY, "--chip", "h100,a100",
                            "--context", "16", "--generate", "1", "--scheduler", addr, "--connect-timeout", "30",
                            "-o", str(out), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        d = json.loads(r.stdout)
        assert (d["points"], d["computed"], d["failed"]) == (2, 2, 0)
        assert {x["chip"] for x in read_rows(out)} == {"h100", "a100"}
    finally:
        for p in reversed(procs):
            _stop(p)
    assert all(p.poll() is not None for p in procs)


def test_system_rows_equal_tierlab_run(cluster, tmp_path):
    g = grid_from_dict({"model": TINY, "system": ["dgx-h100"], "tp": [1, 2], "context": 16, "generate": 1})
    out = tmp_path / "sys.parquet"
    s = runner.run_sweep(g, SweepStore(out, g.columns), client_factory=factory_on(cluster, []))
    assert (s.computed, s.failed) == (2, 0)
    for row in read_rows(out):
        cli = CliRunner().invoke(main, ["run", TINY, "--system", "dgx-h100", "--tp", str(row["tp"]), "--context",
                                        "16", "--generate", "1", "--json"], catch_exceptions=False)
        assert json.loads(row["per_token_json"]) == json.loads(cli.stdout)["per_token"]
        assert row["chip"] is None and row["system"] == "dgx-h100"


def test_terminated_sweep_leaves_complete_rows(tmp_path):
    """SIGTERM to a sweep in a subprocess, once its file holds a group: whenever it lands, the file
    is readable, holds only complete rows and no temporary is left; a rerun completes the grid."""
    import os
    import signal

    out = tmp_path / "t.parquet"
    args = [str(Path(sys.executable).parent / "tierlab"), "sweep", "--model", TINY, "--chip", "h100",
            "--batch", "1,2,3,4,5,6,7,8", "--context", "16", "--generate", "1", "--workers", "1", "-o", str(out)]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode in (0, 143)
    rows = read_rows(out) if out.exists() else []
    assert all(r["error"] is None and r["tokens_per_s"] > 0 and r["point_hash"] for r in rows)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []
    r = subprocess.run(args + ["--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert d["present"] == len(rows) and d["present"] + d["computed"] == 8
    assert len(read_rows(out)) == 8


def _row(i: int) -> dict:
    return {"model": "m", "chip": "c", "batch": i, "tokens_per_s": float(i), "error": None,
            "point_hash": f"h{i:06d}"}


def test_store_writes_parts_then_compacts_each_row_once(tmp_path):
    """Past a few groups, a group's rows go to a part file instead of a rewrite of the whole file;
    a reopened store reads the file and the parts (each point once); flush folds the parts in."""
    out = tmp_path / "p.parquet"
    cols = ["model", "chip", "batch"]
    st = SweepStore(out, cols, compact_after_s=1e9)
    st.append([_row(i) for i in range(40)])              # an empty file: written whole
    assert len(read_rows(out)) == 40 and not st.parts
    for i in range(40, 49):                              # 9 rows waiting, 9 x 4 < 40: parts
        st.append([_row(i)])
    assert len(st.parts) == 9 and len(read_rows(out)) == 40
    assert all(p.parent == tmp_path / ".p.parquet.parts" for p in st.parts)
    again = SweepStore(out, cols, compact_after_s=1e9)   # as after an interruption
    assert len(again.rows) == 49 and again.done() == {f"h{i:06d}" for i in range(49)}
    st.append([_row(49)])                                # 10 x 4 >= 40: compaction
    assert len(read_rows(out)) == 50 and not (tmp_path / ".p.parquet.parts").exists()
    assert sorted(r["batch"] for r in read_rows(out)) == list(range(50))
    st.append([_row(50)])
    st.flush()
    assert len(read_rows(out)) == 51 and [p.name for p in tmp_path.iterdir()] == ["p.parquet"]


def test_store_counts_a_point_in_file_and_part_once(tmp_path):
    """An interruption between the file's rename and the parts' removal leaves a point in both."""
    out = tmp_path / "d.parquet"
    st = SweepStore(out, ["model"], compact_after_s=1e9)
    st.append([_row(i) for i in range(8)])
    st.append([_row(8)])                                 # a part
    part = st.parts[0]
    keep = part.read_bytes()
    st.flush()                                           # the file holds row 8; put its part back
    part.parent.mkdir()
    part.write_bytes(keep)
    again = SweepStore(out, ["model"])
    assert len(again.rows) == 9 and again.waiting == 0
    again.flush()
    assert len(read_rows(out)) == 9 and not part.parent.exists()


def test_system_overrides_reach_the_system_and_its_chip(cluster, tmp_path):
    """A system grid with what-if keys of the fabric and of the chip: each row equals the run of the
    system file with those values written in."""
    g = grid_from_dict({"model": TINY, "system": ["dgx-h100"], "tp": [2], "context": 16, "generate": 1},
                       {"scale_up.bandwidth": ["100 GB/s", "450 GB/s"], "chip.tier.hbm.bandwidth": ["1 TB/s"]})
    out = tmp_path / "so.parquet"
    s = runner.run_sweep(g, SweepStore(out, g.columns), client_factory=factory_on(cluster, []))
    assert (s.computed, s.failed) == (2, 0)
    base = (ROOT / "configs" / "systems" / "dgx-h100.toml").read_text()
    chip = (ROOT / "configs" / "chips" / "h100.toml").read_text()
    (tmp_path / "chip.toml").write_text(chip.replace('bandwidth = "3.35 TB/s"      # [S14] [S16] HBM3 3.35 TB/s',
                                                     'bandwidth = "1 TB/s"', 1))
    assert (tmp_path / "chip.toml").read_text() != chip
    rows = read_rows(out)
    assert len({r["tokens_per_s"] for r in rows}) == 2
    for row in rows:
        f = tmp_path / f"s-{row['scale_up.bandwidth'].split()[0]}.toml"
        f.write_text(base.replace('chip = "h100"', f'chip = "{tmp_path / "chip.toml"}"')
                     .replace('bandwidth = "450 GB/s"', f'bandwidth = "{row["scale_up.bandwidth"]}"'))
        cli = CliRunner().invoke(main, ["run", TINY, "--system", str(f), "--tp", "2", "--context", "16",
                                        "--generate", "1", "--json"], catch_exceptions=False)
        assert cli.exit_code == 0, cli.stderr
        assert json.loads(row["per_token_json"]) == json.loads(cli.stdout)["per_token"]
