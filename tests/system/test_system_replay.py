"""A trace replayed on a system of many chips: each device's slice is a one-chip replay, the
collectives are costed on the network, a decode step's latency is the critical path over devices."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner

from tierlab.common.errors import TraceError, UsageError
from tierlab.analysis.result import to_json as chip_json
from tierlab.analysis.system_result import per_token
from tierlab.analysis.system_result import to_json as system_json
from tierlab.chip.hierarchy import Chip, Compute, Link, Power, Tier
from tierlab.cli import main
from tierlab.cost.system_cost import COLL, OP, cost_system, critical_path
from tierlab.cost.trace_cost import cost_of
from tierlab.network.collective import Group, plan_collective
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.system.systemfile import load_system
from tierlab.pipeline.system_replay import replay_system
from tierlab.traces.format.reader import open_trace
from tierlab.traces.format.writer import TraceWriter

KIB = 1024


def _emit(path, n, *, only=None, steps=2, run=None):
    """A TP-like decode of ``n`` devices: per step each device runs a projection over its own
    weight shard (of a size that differs per device), an all-reduce of the activation, then a second
    projection. ``only=d`` writes device d's part alone as a version-1 trace (no collectives)."""
    run = {"tp": n, "batch": 2, "activations": "bf16", "weights": "bf16", **(run or {})}
    devices = range(n) if only is None else (only,)
    kw = {"devices": n} if only is None else {}
    with TraceWriter(path, run=run, alignment=64 * KIB, **kw) as w:
        def dev(d):
            return {"device": d} if only is None else {}
        t = {}
        for d in devices:
            t[d] = (w.add_tensor("w0", "weight", (32 + 8 * d) * KIB, "bf16", layer=0, **dev(d)),
                    w.add_tensor("w1", "weight", 48 * KIB, "bf16", layer=0, **dev(d)),
                    w.add_tensor("kv", "kv", 16 * KIB, "bf16", layer=0, **dev(d)),
                    w.add_tensor("act", "activation", 4 * KIB, "bf16", **dev(d)))
        for s in range(steps):
            for d in devices:
                w0, _, kv, act = t[d]
                a = w.add_op("proj", "linear", 0, "decode", s, 2, 4000 * (d + 1), **dev(d))
                w.add_access(a, w0, 0, (32 + 8 * d) * KIB)
                w.add_access(a, kv, 0, 1024, count=16, stride=1024)
                w.add_access(a, act, 0, 4 * KIB, is_write=True)
            cid = w.add_collective("all_reduce", list(range(n)), 4 * KIB, "decode", s, layer=0) if only is None else -1
            for d in devices:
                act = t[d][3]
                b = w.add_op("all_reduce", "all_reduce", 0, "decode", s, 2, 0,
                             **({"device": d, "collective": cid} if only is None else {}))
                w.add_access(b, act, 0, 4 * KIB)
                w.add_access(b, act, 0, 4 * KIB, is_write=True)
            for d in devices:
                _, w1, _, act = t[d]
                c = w.add_op("out", "linear", 0, "decode", s, 2, 6000, **dev(d))
                w.add_access(c, w1, 0, 48 * KIB)
                w.add_access(c, act, 0, 4 * KIB)
    return path


def _strip(d: dict) -> dict:
    return {k: d[k] for k in ("tiers", "links", "energy_j", "latency_s", "placement", "counts")}


def test_one_device_trace_is_the_single_chip_replay(tmp_path):
    p = _emit(tmp_path / "one.trace", 1, only=0)
    assert open_trace(p).version == 3 and open_trace(p).n_devices == 1
    sr = replay_system(p, "dgx-h100")
    d = system_json(sr)
    tr = replay_trace(p, "h100")
    c = chip_json(tr, cost_of(tr))
    assert _strip(d["devices"][0]) == _strip(c)
    assert d["devices"][0]["chip"] == "h100" and len(d["devices"]) == 1
    assert d["collectives"] == [] and all(n["bytes"] == 0 and n["energy_j"] == 0 for n in d["network"])
    pt, cp = d["per_token"], c["per_token"]
    for k, v in cp["bytes_by_link"].items():
        assert pt["bytes_by_link"][k] == v
    assert pt["bytes_by_link"]["scale_up"] == 0
    assert (pt["energy_j"], pt["latency_s"], pt["tokens_per_s"]) == (cp["energy_j"], cp["latency_s"], cp["tokens_per_s"])
    # the system's own path (critical path, parts summed) gives the same figures up to rounding order
    own = per_token(sr, cost_system(sr))
    assert own["latency_s"] == pytest.approx(cp["latency_s"], rel=1e-12)
    assert own["energy_j"] == pytest.approx(cp["energy_j"], rel=1e-12)
    assert pt["bound"] == cp["bound"]
    assert d["coordination"]["collectives_per_token"] == 0 and d["coordination"]["collective_time_share"] == 0


@pytest.mark.parametrize("n", [2, 4])
def test_every_device_is_a_one_chip_replay_of_its_slice(tmp_path, n):
    sr = replay_system(_emit(tmp_path / "tp.trace", n), "dgx-h100")
    d = system_json(sr)
    assert d["parallelism"] == {"tp": n, "pp": 1, "ep": 1, "dp": 1} and len(d["devices"]) == n
    reads = set()
    for k in range(n):
        p = _emit(tmp_path / f"slice{k}.trace", n, only=k)
        tr = replay_trace(p, "h100")
        c = chip_json(tr, cost_of(tr))
        assert _strip(d["devices"][k]) == _strip(c)
        assert np.array_equal(sr.devices[k].result.per_op, tr.result.per_op)
        reads.add(sum(t["bytes_read"] for t in c["tiers"]))
    assert len(reads) == n           # the slices differ: each device's counts are its own
    # every collective costed as plan_collective costs it
    sc = cost_system(sr)
    want = plan_collective("all_reduce", Group(tuple(range(n)), sr.system), 4 * KIB)
    assert [cc.time_s for cc in sc.collectives] == [want.time_s] * 2
    (row,) = d["collectives"]
    assert row["count"] == 2 and row["time_s"] == pytest.approx(2 * want.time_s)
    assert row["bytes_per_rank"] == pytest.approx(2 * want.bytes_sent_per_rank)
    assert d["coordination"]["connections"]["peer_processes_per_rank_max"] == n - 1
    # each peer connection keeps 16 channels (estimate) x NCCL's default 4 MiB buffer
    assert d["coordination"]["connections"]["queue_bytes_per_rank_max"] == (n - 1) * 16 * (4 << 20)


def test_energy_is_the_sum_of_its_parts(tmp_path):
    sr = replay_system(_emit(tmp_path / "tp.trace", 4), "dgx-h100")
    sc = cost_system(sr)
    d = system_json(sr, sc)
    dev = sum(float(c.energy_j.sum()) for c in sc.devices)
    net = sum(cc.energy_j for cc in sc.collectives)
    assert net > 0
    assert d["energy_j"]["devices"] == pytest.approx(dev, rel=1e-12)
    assert d["energy_j"]["network"] == pytest.approx(net, rel=1e-12)
    assert d["energy_j"]["total"] == pytest.approx(dev + net, rel=1e-12)
    pt = d["per_token"]
    assert pt["energy_j"] == pytest.approx(sum(pt["energy_split_j"].values()), rel=1e-12)
    # both steps are alike, so per token = whole run / steps / tokens per step
    assert pt["energy_j"] == pytest.approx(d["energy_j"]["total"] / 2 / 2, rel=1e-9)
    assert pt["energy_split_j"]["network"] == pytest.approx(net / 2 / 2, rel=1e-12)
    assert pt["bytes_by_link"]["scale_up"] == pytest.approx(sum(cc.bytes_by_fabric["scale_up"]
                                                                for cc in sc.collectives) / 4)


def _round_chip():
    """Bandwidths so large that every op is compute-bound at 1e12 FLOP/s: 1e6 FLOPs = 1 us. No static
    power (board energy = the dynamic energy; the test reads no energy; tdp must be positive)."""
    tiers = (Tier("l2", 64 * KIB, 128, 4, "lru", "cache", 1e18, 1e-13, 2e-13),
             Tier("hbm", 1 << 24, 128, None, "lru", "memory", 1e18, 1e-12, 2e-12))
    return Chip("round", tiers, (Link("l2", "hbm", 1e18, 5e-12),), Compute({"bf16": 1e12}, {"bf16": 1e-12}),
                power=Power(idle_w=0.0, tdp_w=1.0))


def test_critical_path_by_hand(tmp_path):
    system = dataclasses.replace(load_system("dgx-h100"), chip=_round_chip())
    p = tmp_path / "cp.trace"
    with TraceWriter(p, run={"tp": 2, "batch": 1}, alignment=4 * KIB, devices=2) as w:
        act = [w.add_tensor("act", "activation", 4 * KIB, "bf16", device=d) for d in range(2)]
        for d, flops in ((0, 3_000_000), (1, 1_000_000)):
            w.add_access(w.add_op("a", "linear", 0, "decode", 0, 1, flops, device=d), act[d], 0, 4 * KIB, is_write=True)
        cid = w.add_collective("all_reduce", [0, 1], 4 * KIB, "decode", 0)
        for d in range(2):
            w.add_access(w.add_op("ar", "all_reduce", 0, "decode", 0, 1, 0, device=d, collective=cid), act[d], 0, 4 * KIB)
        for d, flops in ((0, 1_000_000), (1, 2_000_000)):
            w.add_access(w.add_op("b", "linear", 0, "decode", 0, 1, flops, device=d), act[d], 0, 4 * KIB)
    sr = replay_system(p, system)
    d = system_json(sr)
    net = plan_collective("all_reduce", Group((0, 1), system), 4 * KIB).time_s
    # device 0 reaches the all-reduce at 3 us, device 1 at 1 us; both leave at 3 us + net; device 1
    # then runs 2 us more
    assert d["per_token"]["latency_s"] == pytest.approx(3e-6 + net + 2e-6, rel=1e-12)
    c = d["coordination"]
    assert c["collective_time_on_path_s"] == pytest.approx(net, rel=1e-12)
    assert c["collective_time_share"] == pytest.approx(net / (5e-6 + net), rel=1e-12)
    assert c["per_message_overhead_s"] == pytest.approx(system.scale_up.latency_s)
    assert d["per_token"]["tokens_per_s"] == pytest.approx(1 / (5e-6 + net), rel=1e-12)


def test_critical_path_pipelines_microbatches():
    """Two stages, two microbatches: stage 0 sends each microbatch to stage 1 (0.5 s each)."""
    items = [[(OP, 1.0, "compute"), (COLL, 0, 0.0), (OP, 1.0, "compute"), (COLL, 1, 0.0)],
             [(COLL, 0, 0.0), (OP, 1.0, "compute"), (COLL, 1, 0.0), (OP, 1.0, "compute")]]
    p = critical_path(items, {0: 0.5, 1: 0.5})
    assert p.latency_s == 4.0 and p.finish_s == [3.0, 4.0]
    assert p.collective_s == 1.0 and p.ops_s == 3.0
    # a collective's memory time longer than its network time sets its span
    p = critical_path([[(COLL, 0, 2.0)], [(COLL, 0, 0.1)]], {0: 0.5})
    assert p.latency_s == 2.0 and p.by_resource_s == {"memory": 2.0}
    with pytest.raises(TraceError, match="cannot all complete"):
        critical_path([[(COLL, 0, 0.0), (COLL, 1, 0.0)], [(COLL, 1, 0.0), (COLL, 0, 0.0)]], {0: 1.0, 1: 1.0})


def test_runs_of_ops_walk_as_the_ops_one_by_one(tp8):
    """walk_items gives each run of compute ops as one RUN item; the same walk over one OP item per
    op (the plain form critical_path also takes) gives the same path."""
    from tierlab.cost.system_cost import RUN, run_starts, walk_items
    sr = replay_system(tp8, "dgx-h100")
    sc = cost_system(sr)
    items, coll_time, coll_res = walk_items(sr, sc)
    assert any(it[0] == RUN for its in items for it in its)
    plain = [[it for x in its for it in ([(OP, float(t), x[3][b]) for t, b in zip(x[1], x[2])]
                                         if x[0] == RUN else [x])] for its in items]
    assert sum(len(p) for p in plain) > sum(len(i) for i in items)
    a, b = critical_path(items, coll_time, coll_res), critical_path(plain, coll_time, coll_res)
    assert a.latency_s == pytest.approx(b.latency_s, rel=1e-12)
    assert a.finish_s == pytest.approx(b.finish_s, rel=1e-12) and a.busy_s == pytest.approx(b.busy_s, rel=1e-12)
    assert (a.ops_s, a.collective_s) == pytest.approx((b.ops_s, b.collective_s), rel=1e-12)
    assert a.by_resource_s.keys() == b.by_resource_s.keys()
    for k in a.by_resource_s:
        assert a.by_resource_s[k] == pytest.approx(b.by_resource_s[k], rel=1e-12), k
    seg = next(s for s in a.segments[0] if s[0] == RUN)        # its ops placed one after another
    ops = [s for s in b.segments[0] if s[0] == OP][:len(seg[3][1])]
    assert run_starts(seg[1], seg[3]) == pytest.approx([s[1] for s in ops], rel=1e-12)


def test_all_to_all_from_the_send_matrix():
    system = load_system("dgx-h100")
    m = [0, 10, 20, 30,
         5, 0, 0, 0,
         0, 7, 0, 100,
         1, 1, 1, 9]
    c = plan_collective("all_to_all", Group((0, 1, 2, 3), system), 64, send_bytes=m)
    assert c.bytes_sent_per_rank == 107          # rank 2: 7 + 100 (its diagonal stays)
    assert c.bytes_received_per_rank == 130      # rank 3: 30 + 100
    assert c.bytes_sent_total == 175
    assert c.time_s == pytest.approx(system.scale_up.latency_s + 130 / system.scale_up.bandwidth_bytes_per_s)
    assert c.peers_by_rank[1] == (0, 2, 3)


def test_more_devices_than_chips_and_refused_algorithms(tmp_path):
    p = _emit(tmp_path / "tp.trace", 4)
    small = dataclasses.replace(load_system("dgx-h100"), n_chips=2, chips_per_node=2)
    with pytest.raises(UsageError, match="the trace needs 4 devices; dgx-h100 has 2 chips") as e:
        replay_system(p, small)
    assert e.value.field == "system or tp"
    sr = replay_system(p, "sn40l-16", collective_algo="in_network")
    with pytest.raises(UsageError, match="no switch to reduce in"):
        cost_system(sr)
    sr = replay_system(p, "dgx-h100", collective_algo="ring")
    assert {cc.algorithm for cc in cost_system(sr).collectives} == {"ring"}


CONTRACT = {"system", "parallelism", "devices", "network", "collectives", "coordination", "provenance",
            "per_token", "energy_j", "latency_s"}


def test_cli_run_system_json_has_every_contract_key():
    r = CliRunner().invoke(main, ["run", "qwen2-0.5b", "--system", "dgx-h100", "--context", "32",
                                  "--generate", "1", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert CONTRACT <= set(d)
    assert {"latency_s", "tokens_per_s", "energy_j", "bytes_by_link", "bound"} <= set(d["per_token"])
    assert set(d["parallelism"]) == {"tp", "pp", "ep", "dp"}
    assert {"device", "chip", "tiers", "links"} <= set(d["devices"][0])
    assert {"name", "bytes", "messages", "energy_j"} <= set(d["network"][0])
    assert {"collectives_per_token", "collective_time_share", "per_message_overhead_s",
            "connections"} <= set(d["coordination"])
    assert d["provenance"]["system_file"].endswith("dgx-h100.toml") and len(d["provenance"]["system_sha256"]) == 64
    assert "scale_up" in d["per_token"]["bytes_by_link"]
    r = CliRunner().invoke(main, ["run", "qwen2-0.5b", "--system", "dgx-h100", "--context", "32", "--generate", "1"])
    assert r.exit_code == 0 and "coordination" in r.stdout and "critical path" in r.stdout


def test_cli_compare_systems_and_chips_side_by_side(tmp_path):
    p = _emit(tmp_path / "tp.trace", 2)
    r = CliRunner().invoke(main, ["compare", str(p), "--systems", "dgx-h100,sn40l-16", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["chips"] == [] and [s["system"] for s in d["systems"]] == ["dgx-h100", "sn40l-16"]
    direct = system_json(replay_system(p, "dgx-h100"))
    assert d["systems"][0]["summary"]["tokens_per_s"] == direct["per_token"]["tokens_per_s"]
    assert d["systems"][0]["summary"]["bytes_by_link"]["scale_up"] > 0
    r = CliRunner().invoke(main, ["compare", "qwen2-0.5b", "--chips", "h100", "--systems", "dgx-h100",
                                  "--context", "32", "--generate", "1"])
    assert r.exit_code == 0, r.output
    header = next(line for line in r.stdout.splitlines() if line.startswith("per decode token")).split()
    assert header[-2:] == ["h100", "dgx-h100"] and "bytes/token scale_up" in r.stdout


def test_cli_run_a_sharded_trace_on_a_system():
    """The lowering's own TP x PP trace: its collectives are costed and sit on the critical path."""
    r = CliRunner().invoke(main, ["run", "qwen2-0.5b", "--system", "dgx-h100", "--tp", "2", "--pp", "2",
                                  "--context", "32", "--generate", "1", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["parallelism"] == {"tp": 2, "pp": 2, "ep": 1, "dp": 1} and len(d["devices"]) == 4
    kinds = {c["kind"] for c in d["collectives"]}
    assert {"all_reduce", "send_recv"} <= kinds
    assert d["network"][0]["bytes"] > 0 and d["per_token"]["bytes_by_link"]["scale_up"] > 0
    assert 0 < d["coordination"]["collective_time_share"] < 1
    assert d["energy_j"]["total"] == pytest.approx(d["energy_j"]["devices"] + d["energy_j"]["network"])


# ---- identical slices replayed once; distinct slices on threads: pure speed-ups -------------------

def _lowered(tmp_path, model, **run):
    from tierlab.traces.lowering.generate import generate_trace
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model
    return open_trace(generate_trace(load_model(model), RunConfig(**run), tmp_path / f"{model}.trace"))


def _same_counts(a, b):
    assert len(a.devices) == len(b.devices)
    for d, (x, y) in enumerate(zip(a.devices, b.devices)):
        assert np.array_equal(x.result.per_op, y.result.per_op), d
        assert np.array_equal(x.result.flush, y.result.flush), d
        assert np.array_equal(np.asarray(x.placement.home), np.asarray(y.placement.home)), d
        assert x.trace.device == y.trace.device == d
    assert [np.array_equal(p, q) for p, q in zip(a.op_ids, b.op_ids)] == [True] * len(a.op_ids)
    ja, jb = system_json(a), system_json(b)
    for k in ("devices", "per_token", "collectives", "network", "energy_j", "latency_s"):
        assert ja[k] == jb[k], k


@pytest.fixture(scope="module")
def tp8(tmp_path_factory):
    return _lowered(tmp_path_factory.mktemp("tp8"), "llama-3.1-8b", context=64, generate=1, tp=8)


def test_identical_tp_slices_are_replayed_once(tp8):
    full = replay_system(tp8, "dgx-h100", dedupe=False, threads=1)
    once = replay_system(tp8, "dgx-h100", threads=1)
    _same_counts(full, once)
    assert full.distinct_slices == 8 and full.replayed_as == list(range(8))
    # only the vocab-split embedding differs: the rank owning the token's row reads it
    assert 1 < once.distinct_slices < 8
    assert len(once.replayed_as) == 8 and all(once.replayed_as[r] == r for r in once.replayed_as)
    shared = [d for d, r in enumerate(once.replayed_as) if r != d]
    assert shared and all(once.devices[d].result is once.devices[once.replayed_as[d]].result for d in shared)


def test_slice_digests_tell_differing_slices_apart(tmp_path):
    from tierlab.pipeline.system_slices import held_streams, slice_classes, slice_digests, slices
    tr = open_trace(_emit(tmp_path / "tp.trace", 4))       # the weight shard's size differs per device
    assert len(set(slice_digests(tr, slices(tr)))) == 4
    sls = slices(tr)
    assert slice_classes(sls, held_streams(tr, sls, 1 << 20)) == [0, 1, 2, 3]
    sr = replay_system(tr, "dgx-h100")
    assert sr.distinct_slices == 4
    _same_counts(replay_system(tr, "dgx-h100", dedupe=False, threads=1), sr)
    # same shapes on every device but one access: only that device differs
    p = tmp_path / "alike.trace"
    with TraceWriter(p, run={"tp": 3, "batch": 1}, alignment=64 * KIB, devices=3) as w:
        t = [w.add_tensor("w", "weight", 64 * KIB, "bf16", layer=0, device=d) for d in range(3)]
        for d in range(3):
            a = w.add_op("proj", "linear", 0, "decode", 0, 1, 1000, device=d)
            w.add_access(a, t[d], 0, 64 * KIB if d != 1 else 32 * KIB)
    sr = replay_system(p, "dgx-h100")
    assert sr.replayed_as == [0, 1, 0]
    _same_counts(replay_system(p, "dgx-h100", dedupe=False), sr)


def test_dedupe_on_a_pipeline_trace_whose_slices_differ(tmp_path):
    tr = _lowered(tmp_path, "qwen2-0.5b", context=32, generate=1, tp=2, pp=2)
    full = replay_system(tr, "dgx-h100", dedupe=False, threads=1)
    once = replay_system(tr, "dgx-h100")
    _same_counts(full, once)
    stage = [int(tr.op_device[g[0]]) // 2 for g in once.op_ids]
    assert once.distinct_slices >= 2            # the stages' slices differ
    assert all(stage[d] == stage[r] for d, r in enumerate(once.replayed_as))


@pytest.mark.parametrize("dedupe", [False, True])
def test_threads_give_the_sequential_counts(tp8, dedupe):
    seq = replay_system(tp8, "dgx-h100", dedupe=dedupe, threads=1)
    par = replay_system(tp8, "dgx-h100", dedupe=dedupe, threads=4)
    # twins replay in their base's job (tests/engine/test_twins.py); the other distinct slices, one job each
    jobs = par.distinct_slices - len(par.twin_of)
    assert seq.threads == 1 and par.threads == min(4, jobs)
    assert par.threads > 1 or (dedupe and par.twin_of)
    assert seq.replayed_as == par.replayed_as and seq.twin_of == par.twin_of
    _same_counts(seq, par)


def test_twin_slices_replay_beside_their_base(tp8):
    full = replay_system(tp8, "dgx-h100", dedupe=False, threads=1)
    once = replay_system(tp8, "dgx-h100")
    twins = sorted(once.twin_of)
    assert twins and all(once.replayed_as[r] == r for r in twins)
    for r in twins:
        t = once.devices[r].result.meta["twin"]
        assert t["joined"] and 0 < t["window_ops"] < tp8.n_ops // 8 // 10     # a few ops of the slice's
    _same_counts(full, once)
    prov = system_json(once)["provenance"]["slices"]
    assert prov == {"replayed_as": once.replayed_as, "twins": {str(r): once.twin_of[r] for r in twins}}
    assert system_json(full)["provenance"]["slices"] == {"replayed_as": list(range(8)), "twins": {}}
    for r in twins:               # the statistics too, not only the counts
        a, b = full.devices[r].result.meta, once.devices[r].result.meta
        assert {k: a[k] for k in a if k != "twin"} == {k: b[k] for k in b if k != "twin"}


def test_twins_on_a_chip_whose_kernel_does_not_fork(tp8):
    """sn40l's three caching tiers are not set groups: the twins replay on their own, on threads."""
    full = replay_system(tp8, "sn40l-16", dedupe=False, threads=1)
    once = replay_system(tp8, "sn40l-16", threads=2)
    assert once.twin_of == {} and once.distinct_slices > 1 and once.threads == 2
    _same_counts(full, once)


def test_threads_on_slices_that_are_not_twins(tmp_path):
    tr = _lowered(tmp_path, "qwen2-0.5b", context=32, generate=1, tp=2, pp=2)
    seq = replay_system(tr, "dgx-h100", threads=1)
    par = replay_system(tr, "dgx-h100", threads=4)
    assert par.threads > 1
    _same_counts(seq, par)


def test_progress_counts_every_device_once(tp8):
    for kw in ({"dedupe": False, "threads": 1}, {"threads": 3}):
        seen = []
        replay_system(tp8, "dgx-h100", progress=seen.append, **kw)
        assert sum(seen) == tp8.n_accesses


def test_an_access_to_another_devices_tensor_is_refused_with_dedupe(tmp_path):
    p = tmp_path / "bad.trace"
    with TraceWriter(p, run={"tp": 3, "batch": 1}, alignment=64 * KIB, devices=3) as w:
        t = [w.add_tensor("w", "weight", 64 * KIB, "bf16", layer=0, device=d) for d in range(3)]
        for d in range(3):
            a = w.add_op("proj", "linear", 0, "decode", 0, 1, 1000, device=d)
            w.add_access(a, t[d if d != 2 else 0], 0, 64 * KIB)    # device 2 reads device 0's tensor
    for kw in ({}, {"threads": 1}, {"dedupe": False}):
        with pytest.raises(TraceError, match="of another device"):
            replay_system(p, "dgx-h100", **kw)


def test_dedupe_without_holding_the_batches_in_memory(tp8, monkeypatch):
    import tierlab.pipeline.system_replay as sp
    from tierlab.pipeline.system_slices import slice_digests, slices
    held = replay_system(tp8, "dgx-h100")
    # the exact comparison (held slices) and the digests (streamed) find the same classes
    g = slice_digests(tp8, slices(tp8))
    assert held.replayed_as == [g.index(x) for x in g]
    monkeypatch.setattr(sp, "HOLD_ROWS", 0)           # every slice streams from the file
    streamed = replay_system(tp8, "dgx-h100")
    assert streamed.replayed_as == held.replayed_as
    _same_counts(held, streamed)
    _same_counts(replay_system(tp8, "dgx-h100", dedupe=False, threads=1), streamed)
