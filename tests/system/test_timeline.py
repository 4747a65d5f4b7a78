"""``--timeline FILE.json``: a valid Chrome trace-event file whose op durations add up to the
cost model's latencies (per decode step, per run, per device of a system), and ``--plot`` /
:func:`tierlab.present.breakdown.roofline_points` against arithmetic on the trace and the per-op
Parquet."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tierlab.cost.model import per_step
from tierlab.cost.trace_cost import cost_of
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.present.breakdown import roofline_ceilings, roofline_points
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.format.reader import open_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model
from test_html_report import _cli

DATA = Path(__file__).parents[1] / "data"
TINY = DATA / "models" / "tiny-llama.json"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    spec = load_model(str(DATA / "models" / "tiny-mixtral.json"))
    return generate_trace(spec, RunConfig(prompt=16, generate=3, batch=2), tmp_path_factory.mktemp("t") / "t.trace")


def check_trace_events(doc: dict) -> list[dict]:
    """The trace-event format (the JSON object form): every event a dict with ``ph``; complete
    events with a name, numeric ``ts``/``dur`` >= 0 and integer ``pid``/``tid`` on a named track."""
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] in ("ms", "ns")
    named = {(e["pid"], e["tid"]) for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    xs = []
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M"), e
        if e["ph"] == "X":
            assert isinstance(e["name"], str) and e["name"]
            assert isinstance(e["ts"], float) and isinstance(e["dur"], float) and e["ts"] >= 0 and e["dur"] >= 0
            assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and (e["pid"], e["tid"]) in named
            assert isinstance(e["args"], dict)
            xs.append(e)
    return xs


@pytest.mark.parametrize("chip", ["h100", "sn40l"])
def test_chip_timeline_sums_to_the_step_latencies(trace, tmp_path, chip):
    out = tmp_path / "t.json"
    d = json.loads(_cli("replay", trace, "--chip", chip, "--timeline", out, "--json").stdout)
    xs = check_trace_events(json.loads(out.read_text()))
    ops = [e for e in xs if e["tid"] == 0]
    tr = replay_trace(open_trace(trace), chip)
    cst = cost_of(tr)
    assert [e["args"]["op_id"] for e in ops] == list(range(tr.trace.n_ops))
    # each op's duration is its roofline latency; the ops run back to back from 0
    assert np.allclose([e["dur"] for e in ops], cst.latency_s * 1e6, rtol=1e-12, atol=0)
    ends = np.cumsum([e["dur"] for e in ops])
    assert np.allclose([e["ts"] for e in ops[1:]], ends[:-1], rtol=1e-12)
    assert ends[-1] == pytest.approx(d["latency_s"] * 1e6, rel=1e-9)
    # a decode step's events add up to the step's latency (the cost model's sum over its ops)
    ph = np.asarray(tr.trace.ops.column("phase").to_pylist(), dtype=object)
    steps = per_step(cst, tr.trace.ops.column("step").to_numpy(), ph)
    by_step = defaultdict(float)
    for e in ops:
        if e["args"]["phase"] == "decode":
            by_step[e["args"]["step"]] += e["dur"] / 1e6
    assert sorted(by_step) == sorted(steps) and len(steps) == 3
    for s, ids in steps.items():
        assert by_step[s] == pytest.approx(float(cst.latency_s[ids].sum()), rel=1e-9)
    assert np.mean(list(by_step.values())) == pytest.approx(d["per_token"]["latency_s"], rel=1e-9)
    # resource tracks: busy no longer than the op, exactly one event per op the bound, as long as the op
    dur = {e["args"]["op_id"]: e["dur"] for e in ops}
    bound = defaultdict(list)
    for e in xs:
        if e["tid"] > 0:
            assert e["dur"] <= dur[e["args"]["op_id"]] * (1 + 1e-12)
            if e["args"]["bound"]:
                bound[e["args"]["op_id"]].append(e["dur"])
    assert all(len(bound[i]) == 1 and bound[i][0] == pytest.approx(dur[i], rel=1e-12) for i in dur if dur[i] > 0)
    # bytes in args add up to the run's link bytes (a conservation law against the --json)
    for lk in d["links"]:
        n = f"{lk['from']}-{lk['to']}"
        assert sum(e["args"]["bytes_by_link"][n] for e in ops) == lk["bytes_down"] + lk["bytes_up"]
    for t in d["tiers"]:
        assert sum(e["args"]["bytes_by_tier"][t["name"]] for e in ops) == t["bytes_read"] + t["bytes_written"]


def test_system_timeline_ends_at_the_critical_path(tmp_path):
    out = tmp_path / "s.json"
    d = json.loads(_cli("run", TINY, "--system", "dgx-h100", "--tp", "2", "--generate", "2", "--timeline", out,
                        "--json").stdout)
    xs = check_trace_events(json.loads(out.read_text()))
    assert {e["pid"] for e in xs} == {0, 1}
    ends = [e["ts"] + e["dur"] for e in xs]
    assert max(ends) == pytest.approx(d["latency_s"] * 1e6, rel=1e-9)
    colls = [e for e in xs if e["cat"] == "collective"]
    assert colls and all(e["args"]["ranks"] == [0, 1] for e in colls)
    for pid in (0, 1):          # a device's ops never overlap, and its busy time is its ops' latencies
        ops = sorted((e for e in xs if e["pid"] == pid and e["tid"] == 0), key=lambda e: e["ts"])
        assert all(a["ts"] + a["dur"] <= b["ts"] * (1 + 1e-12) + 1e-9 for a, b in zip(ops, ops[1:]))
        assert sum(e["dur"] for e in ops) == pytest.approx(d["devices"][pid]["latency_s"] * 1e6, rel=1e-9)


def test_roofline_points_are_flops_over_bytes_from_the_trace(trace, tmp_path):
    parquet = tmp_path / "p.parquet"
    _cli("replay", trace, "--chip", "h100", "-o", parquet)
    per_op = pq.read_table(parquet).to_pylist()          # the second path: the per-op Parquet
    tr = replay_trace(open_trace(trace), "h100")
    cst = cost_of(tr)
    pts = roofline_points(tr, cst)
    ceil = roofline_ceilings(tr.chip, cst)
    assert ceil["compute"] == tr.chip.compute.flop_per_s["bf16"]
    want = defaultdict(lambda: [0, defaultdict(int), 0.0, set()])
    for r in per_op:
        g = want[(r["phase"], r["kind"])]
        g[0] += r["flops"]
        for t, tier in zip(tr.result.tier_names, tr.chip.tiers):
            b = r[f"{t}.bytes_read"] + r[f"{t}.bytes_written"]
            if tier.forward_misses:      # a read miss's fill goes through to the reader: one pass (issue 39)
                b -= min((r[f"{t}.fills"] - r[f"{t}.unfetched"]) * tier.block_bytes, r[f"{t}.bytes_read"])
            g[1][t] += b
        g[2] += r["latency_s"]
        g[3].add(r["bound"])
    seen = set()
    for p in pts:
        f, b, lat, bounds = want[(p["phase"], p["kind"])]
        assert (p["flops"], p["bytes"]) == (f, b[p["tier"]])
        assert p["intensity"] == pytest.approx(f / b[p["tier"]], rel=1e-12)
        assert p["flop_per_s"] == pytest.approx(f / lat, rel=1e-12)
        bw = ceil["tiers"][p["tier"]]
        # under its roof: an op's latency is at least its bytes at the tier over the bandwidth, and
        # its FLOPs over the peak; on the roof when every op of the group is bound by that tier
        assert p["flop_per_s"] <= min(ceil["compute"], bw * p["intensity"]) * (1 + 1e-9)
        if bounds == {f"tier:{p['tier']}"}:
            assert p["flop_per_s"] == pytest.approx(bw * p["intensity"], rel=1e-9)
            seen.add(p["kind"])
        seen.add((p["phase"], p["kind"], p["tier"]))
    expect = {(ph, k, t) for (ph, k), (f, b, lat, _) in want.items() if f > 0 and lat > 0 for t, v in b.items() if v}
    assert {s for s in seen if isinstance(s, tuple)} == expect
    assert "linear" in seen                    # the decode GEMVs are L2-bound on h100: on the roof


def test_plot_writes_the_roofline(trace, tmp_path):
    out = tmp_path / "roof.png"
    _cli("replay", trace, "--chip", "h100", "--plot", out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "roof.svg"
    _cli("replay", trace, "--chip", "h100", "--plot", svg)
    assert b"<svg" in svg.read_bytes()[:400]
