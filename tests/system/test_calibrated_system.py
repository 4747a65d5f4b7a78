"""The calibrated latency of a system (issue 22): collectives as they run (tierlab.network.protocols)
against closed forms, the organisation model on every device against one chip's, the roofline back
when every overhead is off, overlap, and the prefill (time to first token)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.cost.system_cost import COLL, RUN, critical_path
from tierlab.network.collective import plan_collective
from tierlab.network.protocols import Settings, load_library, time_collective, time_of
from tierlab.network.schedule import Group
from tierlab.system.systemfile import load_system

TINY = Path(__file__).parents[1] / "data" / "models" / "tiny-llama.json"
US = 1e-6


@pytest.fixture(scope="module")
def h100x8():
    return load_system("dgx-h100")


@pytest.fixture(scope="module")
def lib():
    return load_library()


def test_library_constants_are_nccls(lib):
    """The file carries NCCL's tuning constants (tuning.cc: Ring LL base 6.6 us, NVLink LL step 0.6 us)."""
    assert lib.base_s["ring"] == pytest.approx({"LL": 6.6 * US, "LL128": 14.0 * US, "Simple": 8.4 * US})
    assert lib.step_s["nvlink"]["ring"]["LL"] == pytest.approx(0.6 * US)
    assert lib.step_s["net"]["tree"]["Simple"] == pytest.approx(14.0 * US)
    assert lib.efficiency == {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("proto", ["LL", "LL128", "Simple"])
def test_ring_all_reduce_closed_form(h100x8, lib, n, proto):
    """Ring all_reduce: launch + base + 2(n-1) steps x step latency + 2(n-1)/n S over the link at the
    protocol's fraction of the achievable bandwidth."""
    S = 3 * 2**20
    st = Settings(launch_s=1.3 * US, skew_s=0.5 * US)
    t = time_of("ring", proto, "all_reduce", Group(tuple(range(n)), h100x8), S, lib, st)
    fab = h100x8.scale_up
    bw = fab.bandwidth_bytes_per_s * fab.achievable * lib.efficiency[proto]
    want = (1.3 * US + lib.base_s["ring"][proto] + 2 * (n - 1) * lib.step_s["nvlink"]["ring"][proto]
            + 2 * (n - 1) / n * S / bw + 0.5 * US)
    assert t.time_s == pytest.approx(want, rel=1e-12)
    assert t.launch_s == 1.3 * US and t.skew_s == 0.5 * US
    assert t.latency_s + t.transfer_s + t.launch_s + t.skew_s == pytest.approx(t.time_s)
    # the same bytes as the roofline's ring
    rc = plan_collective("all_reduce", Group(tuple(range(n)), h100x8), S, "ring")
    assert rc.bytes_sent_per_rank == pytest.approx(2 * (n - 1) / n * S)
    assert rc.steps == 2 * (n - 1)


def test_tree_latency_is_ncclss_chain_in_a_node(lib):
    """NCCL's tree: 2 x ((ranks per node - 1) x intra + log2(nodes) x inter) beside its base."""
    sys16 = load_system("dgx-h100-x2")
    g = Group(tuple(range(16)), sys16)
    t = time_of("tree", "LL", "all_reduce", g, 1024, lib, Settings())
    lat = lib.base_s["tree"]["LL"] + 2 * (7 * lib.step_s["nvlink"]["tree"]["LL"] + 1 * lib.step_s["net"]["tree"]["LL"])
    assert t.latency_s == pytest.approx(lat)


def test_protocol_choice_follows_size(h100x8):
    """Small buffers take LL (least latency), large ones the full-bandwidth path; the choice is the
    least time of the candidates, each of which is listed."""
    g = Group(tuple(range(8)), h100x8)
    st = Settings(launch_s=1.3 * US)
    small = time_collective("all_reduce", g, 8192, st)
    assert small.protocol == "LL" and small.algorithm in ("ring", "tree")
    assert small.time_s == min(small.candidates.values())
    big = time_collective("all_reduce", g, 2**30, st)
    assert big.protocol == "Simple"
    assert big.time_s == min(big.candidates.values())
    # the LL -> Simple crossover of a ring, in closed form: where the latency saved equals the
    # bandwidth lost (per-rank bytes B = 2(n-1)/n S): dlat = B/(bw/2) - B/bw = B/bw
    lib = load_library()
    d_lat = (lib.base_s["ring"]["Simple"] - lib.base_s["ring"]["LL"]
             + 14 * (lib.step_s["nvlink"]["ring"]["Simple"] - lib.step_s["nvlink"]["ring"]["LL"]))
    bw = h100x8.scale_up.bandwidth_bytes_per_s * h100x8.scale_up.achievable
    cross = d_lat * bw / (2 * 7 / 8)
    only_ring = lambda S, p: time_of("ring", p, "all_reduce", g, S, lib, st).time_s  # noqa: E731
    assert only_ring(cross * 0.9, "LL") < only_ring(cross * 0.9, "Simple")
    assert only_ring(cross * 1.1, "LL") > only_ring(cross * 1.1, "Simple")


def test_forced_protocol_and_nvls(h100x8):
    """An asked protocol restricts the choice; NVLS (in_network) runs Simple only, with NCCL's 25 us
    and 0.85 of the port bandwidth."""
    g = Group(tuple(range(8)), h100x8)
    t = time_collective("all_reduce", g, 2**20, Settings(protocol="LL128"))
    assert t.protocol == "LL128"
    nv = time_collective("all_reduce", g, 2**28, Settings(), algorithm="in_network")
    assert nv.algorithm == "in_network" and nv.protocol == "Simple"
    assert nv.latency_s == pytest.approx(25 * US)
    fab = h100x8.scale_up
    assert nv.transfer_s == pytest.approx(2**28 * 9 / 8 / (fab.bandwidth_bytes_per_s * fab.achievable * 0.85))


def test_custom_library_one_shot_and_two_shot(h100x8, lib):
    """library custom: one-shot (direct) for small buffers, a barrier a round; two-shot's bytes are a
    ring's 2(n-1)/n S in 2 steps; past the custom buffer NCCL's algorithms alone."""
    g = Group(tuple(range(8)), h100x8)
    st = Settings(library="custom", launch_s=1.3 * US)
    t = time_collective("all_reduce", g, 16384, st)
    assert t.algorithm == "direct"
    fab = h100x8.scale_up
    link = fab.bandwidth_bytes_per_s * fab.achievable
    # a switch port carries the whole buffer to each of the 7 peers
    assert t.time_s == pytest.approx(1.3 * US + lib.barrier_s + 7 * 16384 / link)
    two = plan_collective("all_reduce", g, 2**20, "two_shot")
    assert two.steps == 2 and two.bytes_sent_per_rank == pytest.approx(2 * 7 / 8 * 2**20)
    t2 = time_of("two_shot", "Simple", "all_reduce", g, 2**20, lib, st)
    assert t2.latency_s == pytest.approx(2 * lib.barrier_s)
    past = time_collective("all_reduce", g, 64 * 2**20, st)
    assert past.algorithm not in ("direct", "two_shot")


def test_overlapped_collective_runs_beside_the_next_ops():
    """Two devices: ops 1 s, an all-reduce of 3 s, ops 1 s. Waiting: 5 s; overlapped: the second ops
    run during the collective and the device ends with it, at 4 s."""
    items = [[(RUN, np.array([1.0]), np.array([0]), ("compute",)), (COLL, 0, 0.0),
              (RUN, np.array([1.0]), np.array([0]), ("compute",))] for _ in range(2)]
    assert critical_path(items, {0: 3.0}).latency_s == pytest.approx(5.0)
    assert critical_path(items, {0: 3.0}, overlapped={0}).latency_s == pytest.approx(4.0)
    # the next collective waits for the overlapped one (one communication stream a device)
    items2 = [its + [(COLL, 1, 0.0)] for its in items]
    assert critical_path(items2, {0: 3.0, 1: 2.0}, overlapped={0}).latency_s == pytest.approx(6.0)


def _run(args) -> dict:
    r = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def tiny_runs():
    base = ["run", str(TINY), "--context", "16", "--prompt", "8", "--generate", "2"]
    return {"chip": _run([*base, "--chip", "h100"]),
            "tp1": _run([*base, "--system", "dgx-h100"]),
            "tp2": _run([*base, "--system", "dgx-h100", "--tp", "2"]),
            "tp2-off": _run([*base, "--system", "dgx-h100", "--tp", "2", "--no-overheads"]),
            "tp2-overlap": _run([*base, "--system", "dgx-h100", "--tp", "2", "--comm-overlap", "tp"])}


def test_tp1_system_equals_one_chip(tiny_runs):
    chip, sys1 = tiny_runs["chip"], tiny_runs["tp1"]
    assert sys1["per_token"]["latency_calibrated_s"] == pytest.approx(chip["per_token"]["latency_calibrated_s"],
                                                                      rel=1e-12)
    assert sys1["per_token"]["kernels"] == chip["per_token"]["kernels"]
    assert sys1["prefill"]["latency_calibrated_s"] == pytest.approx(chip["prefill"]["latency_calibrated_s"],
                                                                    rel=1e-12)
    assert sys1["prefill"]["latency_s"] == pytest.approx(chip["prefill"]["latency_s"], rel=1e-12)


def test_every_overhead_off_gives_the_roofline(tiny_runs):
    pt = tiny_runs["tp2-off"]["per_token"]
    assert pt["latency_calibrated_s"] == pt["latency_s"]
    assert pt["tokens_per_s_calibrated"] == pt["tokens_per_s"]
    assert pt["bound_calibrated"] == pt["bound"]
    pf = tiny_runs["tp2-off"]["prefill"]
    assert pf["latency_calibrated_s"] == pf["latency_s"]
    # and the roofline keys are what they are without calibration options
    for k in ("latency_s", "tokens_per_s", "bound", "time_by_resource_s", "energy_j"):
        assert tiny_runs["tp2"]["per_token"][k] == pt[k]


def test_calibrated_is_slower_than_the_roofline_and_overlap_helps(tiny_runs):
    pt = tiny_runs["tp2"]["per_token"]
    assert pt["latency_calibrated_s"] > pt["latency_s"]
    assert pt["calibration"]["collectives"]["library"] == "nccl"
    colls = tiny_runs["tp2"]["collectives"]
    assert all(c["time_calibrated_s"] > c["time_s"] for c in colls)
    ov = tiny_runs["tp2-overlap"]["per_token"]
    assert ov["latency_calibrated_s"] <= pt["latency_calibrated_s"]
    assert ov["calibration"]["comm_overlap"] == "tp"
    assert ov["latency_s"] == pt["latency_s"]            # the roofline does not overlap


def test_step_is_ops_plus_collectives_on_one_chip_path(tiny_runs):
    """TP2 with identical devices: a decode step's calibrated latency is one device's calibrated
    ops plus its step's collectives' calibrated times (no waits between twins)."""
    d = tiny_runs["tp2"]
    pt, coord = d["per_token"], d["coordination"]
    assert coord["collective_time_on_path_calibrated_s"] > 0
    assert pt["latency_calibrated_s"] > coord["collective_time_on_path_calibrated_s"]
    n = sum(c["count"] for c in d["collectives"])
    t = sum(c["time_calibrated_s"] for c in d["collectives"])
    # every collective is in a decode step or the prefill: their mean per step is bounded by the total
    assert coord["collective_time_on_path_calibrated_s"] * pt["steps"] <= t * (1 + 1e-9)
    assert n > 0


def test_prefill_alone(tmp_path):
    d = _run(["run", str(TINY), "--chip", "h100", "--prompt", "32", "--generate", "0"])
    assert d["per_token"] is None
    pf = d["prefill"]
    assert pf["tokens"] == 32 and pf["latency_s"] > 0 and pf["latency_calibrated_s"] >= pf["latency_s"]
    assert pf["bound"] and pf["bound_calibrated"]
    r = CliRunner().invoke(main, ["run", str(TINY), "--chip", "h100", "--prompt", "32", "--generate", "0"])
    assert "time to first token" in r.stdout


def test_op_latency_shares_sum_to_groups():
    """Organisation.op_latency_s: whole groups' ops sum to latency_s of them."""
    from tierlab.chip.chipfile import load_chip
    from tierlab.cost.organisation import organise, with_execution

    chip = with_execution(load_chip("h100"), fusion="layer", kernel_overhead_s=2e-6)
    rng = np.random.default_rng(0)
    n = 40
    t = rng.random((n, 3))
    layer = np.repeat(np.arange(8), 5)
    org = organise(chip, ("compute", "tier:l2", "tier:hbm"), t, layer, np.array(["decode"] * n, object),
                   np.zeros(n, np.int64))
    lat = org.op_latency_s()
    assert lat.sum() == pytest.approx(org.latency_s(np.arange(n)))
    assert lat[:5].sum() == pytest.approx(org.latency_s(np.arange(5)))
    seg = np.repeat([0, 1], 20)
    seg_org = organise(chip, ("compute", "tier:l2", "tier:hbm"), t, np.zeros(n, np.int64),
                       np.array(["decode"] * n, object), np.zeros(n, np.int64), segment=seg)
    assert seg_org.kernels(np.arange(n)) == 2


def test_system_file_fields(tmp_path):
    src = Path(load_system("dgx-h100").source_file).read_text()
    assert "achievable" in src
    bad = src.replace("[scale_up]", "[collectives]\nlibrary = \"mpi\"\n\n[scale_up]", 1)
    p = tmp_path / "s.toml"
    p.write_text(bad)
    from tierlab.common.errors import ConfigError

    with pytest.raises(ConfigError, match="collectives.library"):
        load_system(p)
    ok = src.replace("[scale_up]", "[collectives]\nlibrary = \"custom\"\nskew = \"2 us\"\n\n[scale_up]", 1)
    p.write_text(ok)
    s = load_system(p)
    assert s.collective_library == "custom" and s.collective_skew_s == pytest.approx(2e-6)
    assert math.isclose(s.scale_up.achievable, load_system("dgx-h100").scale_up.achievable)


def _two(kind_a, ranks_a, ranks_b, size, spans):
    from tierlab.cost.system_cost import SystemCost, contention

    system = load_system("dgx-h100")
    a = plan_collective(kind_a, Group(ranks_a, system), size, "ring")
    b = plan_collective(kind_a, Group(ranks_b, system), size, "ring")
    sc = SystemCost(devices=[], collectives=[a, b], table=[], system=system)
    return contention(sc, spans, {0: 1.0, 1: 1.0}), a, b, system


def test_contention_of_disjoint_groups_is_zero():
    extra, *_ = _two("all_reduce", (0, 1), (2, 3), 2**24, {0: (0.0, 1.0), 1: (0.0, 1.0)})
    assert extra == {0: 0.0, 1: 0.0}


def test_contention_sharing_a_link_costs_the_sum_of_bytes():
    """Two rings through device 0's port at once: each takes at least the sum of their bytes on that
    link over its rate; apart in time, nothing is added."""
    extra, a, b, system = _two("all_reduce", (0, 1), (0, 2), 2**24, {0: (0.0, 1.0), 1: (0.5, 1.5)})
    rate = system.scale_up.bandwidth_bytes_per_s * system.scale_up.achievable
    la, lb = dict(a.link_loads), dict(b.link_loads)
    shared = set(la) & set(lb)
    assert shared
    own = max(v for v in la.values()) / rate
    need = max((la[k] + lb[k]) / rate for k in shared)
    assert own + extra[0] >= need * (1 - 1e-12)
    assert extra[0] > 0 and extra[1] > 0
    apart, *_ = _two("all_reduce", (0, 1), (0, 2), 2**24, {0: (0.0, 1.0), 1: (1.0, 2.0)})
    assert apart == {0: 0.0, 1: 0.0}


def test_link_loads_are_the_collectives_bytes(h100x8):
    """A ring's per-link loads on a switch: each rank's port carries 2(n-1)/n S up and down."""
    n, S = 8, 2**20
    cc = plan_collective("all_reduce", Group(tuple(range(n)), h100x8), S, "ring")
    loads = dict(cc.link_loads)
    ups = [v for k, v in loads.items() if k[1] == "up"]
    assert len(ups) == n and all(v == pytest.approx(2 * (n - 1) / n * S) for v in ups)


def _oversubscribed(ratio, rails=False):
    s = load_system("dgx-h100-x2")
    return replace(s, scale_out=replace(s.scale_out, oversubscription=ratio, rail_optimised=rails))


def test_oversubscribed_spine_bounds_an_all_to_all():
    """16 chips in 2 nodes, a uniform all_to_all: each chip's NIC carries half its buffer out of the
    node, the node's spine 8 x that; at ratio r the spine's share is 8 NICs / r, so past r = 1 the
    spine binds and the transfer takes r times the NICs' time."""
    S = 2**26
    base = plan_collective("all_to_all", Group(tuple(range(16)), _oversubscribed(1.0)), S, "direct")
    two = plan_collective("all_to_all", Group(tuple(range(16)), _oversubscribed(2.0)), S, "direct")
    lat = base.overhead_s
    nic = load_system("dgx-h100-x2").scale_out
    assert base.time_s - lat == pytest.approx(S / 16 * 8 / nic.bandwidth_bytes_per_s / nic.ports, rel=1e-9)
    assert two.time_s - lat == pytest.approx(2 * (base.time_s - lat), rel=1e-9)
    spine = {k: v for k, v in two.link_loads if str(k[1]).startswith("spine")}
    assert spine and all(v == pytest.approx(8 * 8 * S / 16) for v in spine.values())
    assert not any(str(k[1]).startswith("spine") for k, _ in base.link_loads)


def test_rail_optimised_keeps_same_index_traffic_off_the_spine():
    s = _oversubscribed(4.0, rails=True)
    same = plan_collective("all_reduce", Group((0, 8), s), 2**24, "ring")
    cross = plan_collective("all_reduce", Group((0, 9), s), 2**24, "ring")
    assert not any(str(k[1]).startswith("spine") for k, _ in same.link_loads)
    assert any(str(k[1]).startswith("spine") for k, _ in cross.link_loads)
