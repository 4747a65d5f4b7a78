"""Collective algorithms (tierlab.network): closed forms, properties over random groups, refusals
and the auto rule. Expected values are computed here from the formulas, not read from the code."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlab.common.errors import UsageError
from tierlab.network import tree as tree_mod
from tierlab.network.collective import ALGORITHM_NAMES, KINDS, Group, plan_collective, refusal
from tierlab.system.model import Fabric, System

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10
SIZES = (1000.0, 64 * MiB, 3 * GiB)
NS = (2, 3, 4, 5, 8, 16)


def fabric(name="nvlink", topology="switch", bw=450e9, lat=2e-6, e=1e-11, ports=1, reduce=False):
    return Fabric(name, topology, bw, lat, e, ports, reduce)


def system(n_chips, per_node, *, up=None, out=None):
    up = up or fabric()
    if out is None and n_chips > per_node:
        out = fabric("ib", bw=50e9, lat=5e-6, e=2e-11, ports=1)
    return System("test", None, n_chips, per_node, up, out)


def group(n, per_node=None, **kw):
    per_node = per_node or n
    return Group(tuple(range(n)), system(n, per_node, **kw))


def close(a, b):
    return a == pytest.approx(b, rel=1e-9, abs=1e-9)


# --- closed forms -------------------------------------------------------------------------------

@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("S", SIZES)
def test_ring_all_reduce(n, S):
    c = plan_collective("all_reduce", group(n), S, "ring")
    assert close(c.bytes_sent_per_rank, 2 * (n - 1) / n * S)
    assert close(c.bytes_received_per_rank, 2 * (n - 1) / n * S)
    assert c.steps == 2 * (n - 1)
    assert c.peers_per_rank == (1 if n == 2 else 2)
    # time = steps x latency + busiest link / bandwidth
    assert close(c.time_s, 2 * (n - 1) * 2e-6 + 2 * (n - 1) / n * S / 450e9)
    # a switch: each byte crosses chip->switch and switch->chip
    assert close(c.bytes_by_fabric["scale_up"], 2 * n * 2 * (n - 1) / n * S)
    assert close(c.energy_j, c.bytes_by_fabric["scale_up"] * 1e-11)


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("S", SIZES)
def test_ring_gather_scatter(kind, n, S):
    c = plan_collective(kind, group(n), S, "ring")
    assert close(c.bytes_sent_per_rank, (n - 1) / n * S)
    assert close(c.bytes_received_per_rank, (n - 1) / n * S)
    assert c.steps == n - 1


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("S", SIZES)
def test_direct(n, S):
    a2a = plan_collective("all_to_all", group(n), S, "direct")
    assert close(a2a.bytes_sent_per_rank, (n - 1) / n * S) and a2a.steps == 1 and a2a.peers_per_rank == n - 1
    ar = plan_collective("all_reduce", group(n), S, "direct")
    assert close(ar.bytes_sent_per_rank, (n - 1) * S) and ar.steps == 1
    ag = plan_collective("all_gather", group(n), S, "direct")
    assert close(ag.bytes_received_per_rank, (n - 1) * S / n) and ag.messages_per_rank == n - 1


@pytest.mark.parametrize("S", SIZES)
def test_send_recv(S):
    c = plan_collective("send_recv", Group((3, 12), system(16, 8)), S, "direct")
    assert close(c.bytes_sent_per_rank, S) and c.steps == 1
    assert close(c.bytes_by_fabric["scale_out"], 2 * S) and c.bytes_by_fabric["scale_up"] == 0
    assert close(c.time_s, 5e-6 + S / 50e9)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("S", SIZES)
def test_nvls_like(n, S):
    g = group(n, up=fabric(reduce=True))
    c = plan_collective("all_reduce", g, S, "in_network")
    assert close(c.bytes_sent_per_rank, S * (n + 1) / n)
    assert close(c.bytes_received_per_rank, S * (n + 1) / n)
    assert c.steps == 2 and c.peers_per_rank == 1
    assert close(c.time_s, 2 * 2e-6 + S * (n + 1) / n / 450e9)


@pytest.mark.parametrize("nodes,per_node", [(2, 4), (4, 2), (3, 8), (8, 1)])
@pytest.mark.parametrize("S", SIZES)
def test_sharp_like(nodes, per_node, S):
    out = fabric("ib", bw=50e9, lat=5e-6, reduce=True)
    g = Group(tuple(range(nodes * per_node)), system(nodes * per_node, per_node, out=out))
    c = plan_collective("all_reduce", g, S, "in_network")
    assert close(c.bytes_sent_per_rank, S) and close(c.bytes_received_per_rank, S)
    assert c.bytes_by_fabric["scale_up"] == 0
    assert close(c.bytes_by_fabric["scale_out"], 2 * nodes * per_node * S)   # one link each way


@pytest.mark.parametrize("n", range(2, 40))
def test_double_binary_tree(n):
    S = 64 * MiB
    a, b = tree_mod.trees(n)
    for parents in (a, b):
        assert parents.count(-1) == 1
        assert max(parents.count(p) for p in range(n)) <= 2
        for p in range(n):                                  # every position reaches the root
            seen = 0
            while parents[p] != -1:
                p, seen = parents[p], seen + 1
                assert seen <= n
    c = plan_collective("all_reduce", group(n), S, "tree")
    assert c.steps == 2 * math.ceil(math.log2(n))
    assert close(c.bytes_sent_total, 2 * (n - 1) * S)      # mean 2(n-1)/n * S per rank
    expected_max = {2: S, 3: 1.5 * S}.get(n, 2 * S)
    assert close(c.bytes_sent_per_rank, expected_max)


@pytest.mark.parametrize("m,k", [(2, 4), (4, 8), (3, 2)])
def test_hierarchical_closed_form(m, k):
    S = 256 * MiB
    g = Group(tuple(range(m * k)), system(m * k, k))
    c = plan_collective("all_reduce", g, S, "hierarchical")
    up_per_rank = 2 * (k - 1) / k * S
    out_per_rank = 2 * (m - 1) / m * S / k
    assert close(c.bytes_sent_per_rank, up_per_rank + out_per_rank)
    assert close(c.bytes_by_fabric["scale_out"], 2 * m * k * out_per_rank)
    assert close(c.bytes_by_fabric["scale_up"], 2 * m * k * up_per_rank)
    assert c.steps == 2 * (k - 1) + 2 * (m - 1)
    t = 2 * ((k - 1) * 2e-6 + (k - 1) / k * S / 450e9) + 2 * (m - 1) * 5e-6 + out_per_rank / 50e9
    assert close(c.time_s, t)


def test_ports_and_mesh():
    S = 64 * MiB
    two_nics = Group(tuple(range(8)), system(8, 4, out=fabric("ib", bw=50e9, lat=5e-6, ports=2)))
    one_nic = Group(tuple(range(8)), system(8, 4))
    a = plan_collective("all_reduce", two_nics, S, "ring").busiest_link_bytes_by_fabric["scale_out"]
    b = plan_collective("all_reduce", one_nic, S, "ring").busiest_link_bytes_by_fabric["scale_out"]
    assert close(a * 2, b) and close(b, 2 * 7 / 8 * S)
    mesh = group(4, up=fabric(topology="direct", bw=100e9))
    c = plan_collective("all_to_all", mesh, S, "direct")     # each pair's link carries S/n
    assert close(c.busiest_link_bytes_by_fabric["scale_up"], S / 4)
    assert close(c.bytes_by_fabric["scale_up"], 4 * 3 * S / 4)  # one link per byte on a mesh


# --- properties ---------------------------------------------------------------------------------

@st.composite
def groups(draw):
    per_node = draw(st.integers(1, 8))
    nodes = draw(st.integers(1, 4))
    reduce_up = draw(st.booleans())
    reduce_out = draw(st.booleans())
    sysm = System("h", None, per_node * nodes, per_node, fabric(reduce=reduce_up),
                  fabric("ib", bw=25e9, lat=4e-6, ports=draw(st.integers(1, 4)), reduce=reduce_out))
    devs = draw(st.lists(st.integers(0, per_node * nodes - 1), min_size=1, max_size=per_node * nodes,
                         unique=True))
    return Group(tuple(devs), sysm)


def served(kind, g):
    return [a for a in ALGORITHM_NAMES if refusal(a, kind, g) is None]


@settings(max_examples=150, deadline=None)
@given(groups(), st.sampled_from(KINDS), st.floats(1, 4 * GiB))
def test_properties(g, kind, S):
    if kind == "send_recv" and g.n_ranks != 2:
        return
    for a in served(kind, g):
        c = plan_collective(kind, g, S, a)
        assert close(c.bytes_sent_total, c.bytes_received_total)
        assert c.bytes_sent_per_rank * g.n_ranks >= c.bytes_sent_total * (1 - 1e-12)   # max >= mean
        assert all(v >= 0 for v in c.bytes_by_fabric.values())
        assert all(v >= 0 for v in c.busiest_link_bytes_by_fabric.values())
        if g.n_nodes == 1:
            assert c.bytes_by_fabric["scale_out"] == 0 and c.messages_by_fabric["scale_out"] == 0
        if g.n_ranks == 1:
            assert c.time_s == 0 and c.energy_j == 0 and c.steps == 0 and c.bytes_sent_per_rank == 0
        else:
            assert c.time_s > 0 and c.energy_j > 0
        bigger = plan_collective(kind, g, 2 * S, a)
        assert bigger.time_s >= c.time_s and bigger.energy_j >= c.energy_j
        assert close(bigger.bytes_sent_total, 2 * c.bytes_sent_total)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 16), st.floats(1, 4 * GiB))
def test_hierarchical_on_one_node_is_its_intra_node_phases(k, S):
    g = group(k, out=fabric("ib", bw=25e9))
    h = plan_collective("all_reduce", g, S, "hierarchical")
    rs = plan_collective("reduce_scatter", g, S, "ring")
    ag = plan_collective("all_gather", g, S, "ring")
    assert close(h.time_s, rs.time_s + ag.time_s)
    assert close(h.bytes_sent_per_rank, rs.bytes_sent_per_rank + ag.bytes_sent_per_rank)
    assert h.steps == rs.steps + ag.steps and h.bytes_by_fabric["scale_out"] == 0
    ring = plan_collective("all_reduce", g, S, "ring")
    assert close(h.bytes_sent_per_rank, ring.bytes_sent_per_rank) and h.steps == ring.steps


# --- refusals -----------------------------------------------------------------------------------

def refused(kind, g, algo):
    with pytest.raises(UsageError) as e:
        plan_collective(kind, g, 1 * MiB, algo)
    assert e.value.field == "collective_algo"
    return str(e.value)


def test_refusals():
    assert "cannot reduce" in refused("all_reduce", group(8), "in_network")
    assert "mesh" in refused("all_reduce", group(4, up=fabric(topology="direct", reduce=True)), "in_network")
    assert "'in_network'" in refused("all_gather", group(8, up=fabric(reduce=True)), "in_network")
    assert "unknown collective algorithm 'butterfly'" in refused("all_reduce", group(4), "butterfly")
    assert "two ranks" in refused("send_recv", group(3), "direct")
    assert "not all_to_all" in refused("all_to_all", group(4), "ring")
    assert "same number of ranks" in refused("all_reduce", Group((0, 1, 2, 4), system(8, 4)), "hierarchical")
    # NVLS in the node does not make a multi-node all-reduce in-network
    g = Group(tuple(range(8)), system(8, 4, up=fabric(reduce=True)))
    assert "scale_out switch 'ib' cannot reduce" in refused("all_reduce", g, "in_network")
    with pytest.raises(UsageError):
        plan_collective("broadcast", group(4), 1.0)
    with pytest.raises(UsageError):
        Group((0, 0), system(4, 4))
    with pytest.raises(UsageError):
        Group((0, 9), system(4, 4))
    with pytest.raises(UsageError):
        Group((), system(4, 4))


# --- the auto rule ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,g,S,expected", [
    ("all_reduce", group(8), 64 * KiB, "direct"),                              # one-shot in a node
    ("all_reduce", group(8, up=fabric(reduce=True)), 64 * MiB, "in_network"),  # NVLS
    ("all_reduce", group(8), 64 * MiB, "ring"),                                # large, one node
    ("all_reduce", group(32), 1 * MiB, "tree"),                                # many ranks, small
    ("all_reduce", group(16, up=fabric(topology="direct")), 64 * KiB, "direct"),   # 16 on a full mesh
    ("all_reduce", group(16, up=fabric(topology="direct")), 1 * MiB, "tree"),      # ... past one-shot sizes
    ("all_reduce", group(16, 8), 1 * MiB, "tree"),                             # across nodes, small
    ("all_reduce", group(16, 8), 1 * GiB, "hierarchical"),                     # across nodes, large
    ("all_reduce", Group((0, 1, 2, 8), system(16, 8)), 1 * GiB, "ring"),       # unequal nodes
    ("all_reduce", group(16, 8, out=fabric("ib", reduce=True)), 1 * GiB, "in_network"),  # SHARP
    ("all_gather", group(4), 4 * KiB, "direct"),
    ("reduce_scatter", group(4), 4 * GiB, "ring"),
    ("all_to_all", group(16, 8), 1 * GiB, "direct"),
    ("send_recv", Group((0, 9), system(16, 8)), 1 * MiB, "direct"),
    ("all_reduce", group(1), 1 * MiB, "direct"),
])
def test_auto(kind, g, S, expected):
    c = plan_collective(kind, g, S)
    assert c.algorithm == expected and c.why.startswith("auto: ")
