"""Torus / mesh topologies (issue 24): the system-file fields, the grid's coordinates and links, and
the ``torus`` collective's bytes, steps and per-link loads against closed forms in 2D and 3D, a
1 x n torus against a ring, and every byte on a physical link.

The per-link loads are tallied here from the stages' flows (a plain sum per directed pair), not by
:func:`tierlab.network.schedule.account`, which is only asked for per-rank bytes, steps and time."""

from __future__ import annotations

from collections import defaultdict

import pytest

from tierlab.common.errors import ConfigError, UsageError
from tierlab.network import torus
from tierlab.network.collective import Group, plan_collective
from tierlab.system.model import grid_neighbours
from tierlab.system.systemfile import load_system, system_from_dict

S = 96e6          # a buffer every axis length here divides evenly


def grid(dims, topology="torus", **scale_out):
    n = 1
    for k in dims:
        n *= k
    d = {"name": "g", "chip": "h100", "chips": n,
         "scale_up": {"topology": topology, "dims": list(dims), "bandwidth": "100 GB/s", "latency": "1 us",
                      "energy": "5 pJ/bit"}}
    if scale_out:
        d["chips"] = 2 * n
        d["chips_per_node"] = n
        d["scale_out"] = {"bandwidth": "50 GB/s", "latency": "5 us", "energy": "5 pJ/bit", **scale_out}
    return system_from_dict(d)


def whole(system):
    return Group(tuple(range(system.chips_per_node)), system)


def link_loads(group, kind, size):
    """(src, dst) -> bytes over the whole collective, from the algorithm's stages."""
    out = defaultdict(float)
    for st in torus.stages(kind, group, size):
        for f in st.flows:
            out[f.src, f.dst] += f.bytes
    return out


def test_fields_and_defaults():
    s = grid((16, 16))
    up = s.scale_up
    assert (up.topology, up.dims, up.ports, up.is_grid, up.wraps) == ("torus", (16, 16), 4, True, True)
    assert grid((4, 4, 4)).scale_up.ports == 6 and grid((2, 8)).scale_up.ports == 3
    assert grid((4, 4), "mesh").scale_up.ports == 4 and not grid((4, 4), "mesh").scale_up.wraps
    # every existing preset keeps the defaults
    for name in ("dgx-h100", "sn40l-16", "dgx-h100-x2"):
        for f in (load_system(name).scale_up, load_system(name).scale_out):
            if f is not None:
                assert (f.dims, f.oversubscription, f.rail_optimised) == ((), 1.0, False)


def test_coordinates_round_trip_and_neighbours():
    s = grid((2, 3, 4))
    assert s.grid_coord(0) == (0, 0, 0) and s.grid_coord(1) == (0, 0, 1) and s.grid_coord(4) == (0, 1, 0)
    assert s.grid_coord(12) == (1, 0, 0)
    assert all(s.grid_device(0, s.grid_coord(d)) == d for d in range(24))
    assert sorted(grid_neighbours((0, 0), (4, 4), True)) == [(0, 1), (0, 3), (1, 0), (3, 0)]
    assert sorted(grid_neighbours((0, 0), (4, 4), False)) == [(0, 1), (1, 0)]
    assert grid_neighbours((0,), (2,), True) == [(1,)]


@pytest.mark.parametrize("dims", [(4, 4), (16, 16), (3, 3), (4, 4, 4), (2, 2, 2)])
def test_all_reduce_closed_forms(dims):
    """k^d torus: 2(n-1)/n * S per chip in 2d(k-1) steps; each link 2(n-1)/n * S / (2d) each way
    (a 2-chip axis has one link, carrying both directions' share: twice that)."""
    s = grid(dims)
    g = whole(s)
    n, d, k = g.n_ranks, len(dims), dims[0]
    c = plan_collective("all_reduce", g, S, "torus")
    assert c.bytes_sent_per_rank == pytest.approx(2 * (n - 1) / n * S)
    assert c.bytes_received_per_rank == pytest.approx(2 * (n - 1) / n * S)
    assert c.steps == 2 * d * (k - 1)
    loads = link_loads(g, "all_reduce", S)
    per_link = 2 * (n - 1) / n * S / (2 * d) * (2 if k == 2 else 1)
    assert max(loads.values()) == pytest.approx(per_link) and min(loads.values()) == pytest.approx(per_link)
    if k >= 3:     # every chip's 2d links equally loaded: the busiest-port rule gives the same link
        assert c.busiest_link_bytes_by_fabric["scale_up"] == pytest.approx(per_link)
        bw, lat = 100e9, 1e-6
        assert c.time_s == pytest.approx(2 * d * (k - 1) * lat + per_link / bw)


def test_four_k_minus_one_steps_on_k_by_k_versus_a_ring():
    s = grid((16, 16))
    g = whole(s)
    t, r = plan_collective("all_reduce", g, S, "torus"), plan_collective("all_reduce", g, S, "ring")
    assert (t.steps, r.steps) == (4 * 15, 2 * 255)
    assert t.bytes_sent_per_rank == pytest.approx(r.bytes_sent_per_rank)


@pytest.mark.parametrize("dims", [(4, 8), (2, 8), (3, 4, 5)])
def test_rectangular_tori(dims):
    """Axes of different lengths: still a ring's 2(n-1)/n * S per chip; each phase as long as its
    longest ring, so 2d(max k - 1) steps."""
    g = whole(grid(dims))
    n = g.n_ranks
    c = plan_collective("all_reduce", g, S, "torus")
    assert c.bytes_sent_per_rank == pytest.approx(2 * (n - 1) / n * S)
    assert c.steps == 2 * len(dims) * (max(dims) - 1)


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("dims", [(4, 4), (4, 4, 4)])
def test_gather_and_scatter_closed_forms(kind, dims):
    g = whole(grid(dims))
    n, d, k = g.n_ranks, len(dims), dims[0]
    c = plan_collective(kind, g, S, "torus")
    assert c.bytes_sent_per_rank == pytest.approx((n - 1) / n * S) and c.steps == d * (k - 1)
    assert max(link_loads(g, kind, S).values()) == pytest.approx((n - 1) / n * S / (2 * d))


@pytest.mark.parametrize("n", [3, 4, 8, 16])
@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter"])
def test_one_by_n_torus_is_a_ring(n, kind):
    """A 1 x n torus: the ring's bytes per rank and steps (ring.py on the same ranks), each link
    carrying half the ring's per-link bytes each way (the bidirectional ring)."""
    s = grid((1, n))
    g = whole(s)
    t, r = plan_collective(kind, g, S, "torus"), plan_collective(kind, g, S, "ring")
    assert t.bytes_sent_per_rank == pytest.approx(r.bytes_sent_per_rank)
    assert t.bytes_received_per_rank == pytest.approx(r.bytes_received_per_rank)
    assert t.steps == r.steps
    ring_link = defaultdict(float)
    from tierlab.network import ring
    for st in ring.stages(kind, g, S):
        for f in st.flows:
            ring_link[f.src, f.dst] += f.bytes
    assert max(link_loads(g, kind, S).values()) == pytest.approx(max(ring_link.values()) / 2)


@pytest.mark.parametrize("dims, topology", [((4, 4), "torus"), ((4, 4), "mesh"), ((3, 5), "mesh"),
                                            ((4, 4, 4), "torus"), ((2, 4), "torus"), ((5,), "mesh")])
def test_every_flow_is_one_link(dims, topology):
    s = grid(dims, topology)
    g = whole(s)
    for st in torus.stages("all_reduce", g, S):
        for f in st.flows:
            assert s.grid_coord(f.dst) in grid_neighbours(s.grid_coord(f.src), dims, topology == "torus"), f


def test_mesh_axis_loads_twice_a_torus_axis():
    """A line of m chips carries a one-way ring, each link once each way: (m-1)/m * D per direction,
    twice the bidirectional ring's (m-1)/(2m) * D. So a 4 x 4 mesh's busiest link has twice the
    torus's bytes; every chip still reduces its 2(n-1)/n * S (plus what it forwards)."""
    t, m = whole(grid((4, 4))), whole(grid((4, 4), "mesh"))
    lt, lm = link_loads(t, "all_reduce", S), link_loads(m, "all_reduce", S)
    assert max(lm.values()) == pytest.approx(2 * max(lt.values()))
    assert plan_collective("all_reduce", m, S, "torus").bytes_sent_per_rank >= 2 * 15 / 16 * S


def test_sub_box_groups():
    s = grid((4, 4))
    row = Group((4, 5, 6, 7), s)                   # a full row: its axis wraps
    c = plan_collective("all_reduce", row, S, "torus")
    assert c.steps == 2 * 3 and c.bytes_sent_per_rank == pytest.approx(2 * 3 / 4 * S)
    assert max(link_loads(row, "all_reduce", S).values()) == pytest.approx(2 * 3 / 4 * S / 2)   # a bidirectional ring
    half = Group((0, 1, 4, 5), s)                  # a 2 x 2 block: one link per axis, no wraparound
    assert plan_collective("all_reduce", half, S, "torus").steps == 4
    for bad in ((0, 1, 5), (0, 2)):                # not a box; not contiguous
        with pytest.raises(UsageError, match="'torus' cannot serve all_reduce"):
            plan_collective("all_reduce", Group(bad, s), S, "torus")


def test_torus_refused_on_a_switch_and_unknown_kinds():
    g = Group(tuple(range(8)), load_system("dgx-h100"))
    with pytest.raises(UsageError, match="torus needs a 'torus' or 'mesh' scale-up fabric"):
        plan_collective("all_reduce", g, S, "torus")
    with pytest.raises(UsageError, match="torus serves all_reduce, all_gather, reduce_scatter, not all_to_all"):
        plan_collective("all_to_all", whole(grid((4, 4))), S, "torus")


@pytest.mark.parametrize("d, message", [
    ({"dims": [4, 3]}, "scale_up.dims: [4, 3] make 12 chips; expected a grid of the node's 16 chips"),
    ({"dims": []}, "scale_up.dims: expected a non-empty array of positive integers"),
    ({"dims": [4, 0, 4]}, "scale_up.dims: expected a non-empty array of positive integers"),
    ({"topology": "switch"}, "scale_up.dims: dims apply to a 'torus' or 'mesh' fabric, not a 'switch'"),
    ({"in_network_reduction": True}, "scale_up.in_network_reduction: a 'torus' has no switch to reduce in"),
    ({"ports": 6}, "scale_up.ports: a torus of dims [4, 4] gives a chip up to 4 links: expected a multiple of 4, got 6"),
    ({"oversubscription": 2}, "scale_up.oversubscription: oversubscription applies to the scale-out fabric"),
])
def test_bad_grid_fields(d, message):
    base = {"name": "g", "chip": "h100", "chips": 16,
            "scale_up": {"topology": "torus", "dims": [4, 4], "bandwidth": "100 GB/s", "latency": "1 us",
                         "energy": "5 pJ/bit"}}
    base["scale_up"].update(d)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        system_from_dict(base)


def test_oversubscription_and_rails():
    s = grid((2, 2), oversubscription=4, rail_optimised=True)
    assert s.scale_out.oversubscription == 4.0 and s.scale_out.rail_optimised
    assert not s.crosses_spine(0, 4) and s.crosses_spine(0, 5) and not s.crosses_spine(0, 1)
    plain = grid((2, 2), oversubscription=1.5)
    assert plain.crosses_spine(0, 4) and not plain.scale_out.rail_optimised
    with pytest.raises(ConfigError, match=r"oversubscription: expected a ratio >= 1 \(1 = non-blocking, 4 = 4:1\), got 0.9"):
        grid((2, 2), oversubscription=0.9)


def test_presets():
    v6e, v7, trn = load_system("tpu-v6e-256"), load_system("tpu-v7-4x4x4"), load_system("trn2-16")
    assert (v6e.n_chips, v6e.scale_up.dims, v6e.scale_up.ports, v6e.scale_up.bandwidth_bytes_per_s) == \
           (256, (16, 16), 4, 100e9)
    assert v6e.scale_up.chip_bandwidth_bytes_per_s * 2 == 800e9            # [S26] 800 GB/s bidirectional per chip
    assert v6e.price.usd_per_hour == pytest.approx(256 * 2.70)
    assert (v7.n_chips, v7.scale_up.dims, v7.scale_up.ports) == (64, (4, 4, 4), 6)
    assert v7.scale_up.chip_bandwidth_bytes_per_s * 2 == pytest.approx(1.2e12)
    assert (trn.n_chips, trn.scale_up.dims, trn.scale_up.ports) == (16, (4, 4), 4)
    assert trn.scale_up.chip_bandwidth_bytes_per_s * 2 == pytest.approx(1.28e12)


def test_bytes_carried_count_one_link_per_flow():
    g = whole(grid((4, 4)))
    c = plan_collective("all_reduce", g, S, "torus")
    assert c.bytes_by_fabric["scale_up"] == pytest.approx(sum(link_loads(g, "all_reduce", S).values()))


def test_v6e_pod_all_reduce_bandwidth_is_googles():
    """Google gives a v6e pod's all-reduce bandwidth as 102.4 TB/s [S26 of chips-2026.md], i.e.
    400 GB/s a chip: four 100 GB/s links each way. The torus all-reduce's bus bandwidth on
    tpu-v6e-256 (2(n-1)/n * S over its roofline time) tends to it as the buffer grows."""
    s = load_system("tpu-v6e-256")
    g = whole(s)
    n, size = g.n_ranks, 1e12
    c = plan_collective("all_reduce", g, size, "torus")
    busbw = 2 * (n - 1) / n * size / c.time_s
    assert busbw * n == pytest.approx(102.4e12, rel=1e-3)


def test_grid_route_is_dimension_ordered_and_shortest():
    from tierlab.network.schedule import grid_route

    s = grid((4, 4))                       # a 4 x 4 torus: device = 4 row + column
    assert grid_route(s, 0, 1) == [(0, 1)]                   # neighbours: one link
    assert grid_route(s, 0, 3) == [(0, 3)]                   # the wraparound is the short way
    assert grid_route(s, 0, 10) == [(0, 4), (4, 8), (8, 9), (9, 10)]   # rows first, then columns
    m = grid((4, 4), "mesh")
    assert len(grid_route(m, 0, 3)) == 3                     # no wraparound on a mesh


def test_a_ring_far_apart_on_a_grid_pays_every_hop():
    """A ring in group order over one 1 x 8 row of a 16-wide torus: its closing edge 7 -> 0 crosses
    7 links, so that link-path carries the ring's per-edge bytes on each hop and the fabric carries
    (7 + 7) x more than the neighbour edges."""
    s = load_system("tpu-v6e-256")
    g = Group(tuple(range(8)), s)
    S = 2**24
    ring = plan_collective("all_reduce", g, S, "ring")
    per_edge = 2 * 7 / 8 * S
    assert ring.bytes_by_fabric["scale_up"] == pytest.approx(per_edge * (7 + 7))
