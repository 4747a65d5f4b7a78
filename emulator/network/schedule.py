"""The types of a collective and the one accounting every algorithm goes through.

An algorithm describes a collective as **stages** run one after another; a stage is a number of
sequential message rounds (``steps``) and the **flows** it moves: ``Flow(src, dst, bytes, messages)``
between two ranks (device ids), or between a rank and the switch itself (:data:`SWITCH`) for
in-network reduction. :func:`account` turns the stages into a :class:`CollectiveCost`:

* each flow is carried by the scale-up fabric when both ends are in one node, else by scale-out
  (a flow with the switch names its fabric);
* **busiest link** of a fabric: on a ``switch`` fabric the most bytes one chip's port carries in one
  direction (a chip's sends, or its receives, on that fabric, spread evenly over its ``ports``); on a
  ``direct`` mesh the most bytes one pair's link carries in one direction;
* **time** of a stage: for each fabric it touches, ``steps x latency_s + busiest link bytes /
  bandwidth_bytes_per_s`` (the busiest link of that stage); fabrics used in one stage work at
  once, so the stage takes the slowest of them; a collective takes the sum of its stages;
* ``busiest_link_bytes_by_fabric``: the most bytes one link (one direction) carries over the whole
  collective;
* **bytes carried** by a fabric counts link traversals: on a switch a byte between two chips crosses
  two links (chip to switch, switch to chip), a byte to or from the switch one; on a mesh one;
  **energy** = bytes carried x ``energy_j_per_byte``;
* ``overhead_s``: the per-message part of the time, each stage's ``steps x latency_s`` of the
  slowest-latency fabric it touches; ``peers_by_rank``: each rank's peers (ranks, or :data:`SWITCH`)
  it sends to or receives from.

On a ``torus`` or ``mesh`` a flow crosses the links of its dimension-ordered route
(:func:`grid_route`: one for neighbours, as the ``torus`` algorithm's flows are; a ring or a one-shot
between chips far apart pays every hop). On an ``oversubscribed`` scale-out switch, bytes that cross the spine
(:meth:`~tierlab.system.model.System.crosses_spine`: all between nodes, or with ``rail_optimised``
NICs those between chips of different indices) also load their nodes' spine links, each a node's
NICs over the ratio.

Modelled: per-link bandwidth and per-message latency, the busiest link as the bottleneck. Not
modelled: congestion beyond the busiest link (contention between collectives is the calibrated
path's, :func:`tierlab.cost.system_cost.contention`; no adaptive routing), packets, protocol overheads (NCCL's LL/LL128/Simple), kernel launch, the
compute of the reduction, overlap of stages, chunk pipelining beyond the steps counted.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from tierlab.common.errors import UsageError
from tierlab.system.model import Fabric, System

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
SCALE_UP, SCALE_OUT = "scale_up", "scale_out"
FABRICS = (SCALE_UP, SCALE_OUT)
SWITCH = -1     # the switch as one end of a flow (in-network reduction)
FIELD = "collective_algo"


@dataclass(frozen=True)
class Group:
    """The ranks taking part: device ids of ``system`` (each rank's node is ``system.node_of``)."""

    devices: tuple[int, ...]
    system: System

    def __post_init__(self):
        devs = tuple(int(d) for d in self.devices)
        if not devs:
            raise UsageError("a group has at least one device", field="group")
        object.__setattr__(self, "devices", devs)
        if len(set(devs)) != len(devs):
            raise UsageError(f"a group names each device once (got {list(devs)})", field="group")
        bad = [d for d in devs if not 0 <= d < self.system.n_chips]
        if bad:
            raise UsageError(f"device {bad[0]} is not in {self.system.name!r} "
                             f"(devices 0..{self.system.n_chips - 1})", field="group")

    @property
    def n_ranks(self) -> int:
        return len(self.devices)

    def node_of(self, device: int) -> int:
        return self.system.node_of(device)

    def nodes(self) -> dict[int, tuple[int, ...]]:
        """node -> the group's devices in it (ascending), nodes ascending."""
        out = defaultdict(list)
        for d in sorted(self.devices):
            out[self.node_of(d)].append(d)
        return {k: tuple(v) for k, v in sorted(out.items())}

    @property
    def n_nodes(self) -> int:
        return len(self.nodes())

    def ordered(self) -> tuple[int, ...]:
        """The ranks node by node (a ring in this order crosses each node boundary once)."""
        return tuple(d for devs in self.nodes().values() for d in devs)


@dataclass(frozen=True)
class Flow:
    """``bytes`` from ``src`` to ``dst`` in ``messages`` messages; ``fabric`` only for a flow with the
    switch (between ranks it follows from their nodes)."""

    src: int
    dst: int
    bytes: float
    messages: int = 1
    fabric: str | None = None


@dataclass(frozen=True)
class Stage:
    """``steps`` sequential message rounds moving ``flows``."""

    name: str
    steps: int
    flows: tuple[Flow, ...]


@dataclass(frozen=True)
class CollectiveCost:
    """What a collective costs. Per-rank figures are the most any rank sends or receives; per-fabric
    figures are keyed ``scale_up`` / ``scale_out``."""

    kind: str
    algorithm: str
    n_ranks: int
    size_bytes: float
    bytes_sent_per_rank: float
    bytes_received_per_rank: float
    steps: int
    messages_per_rank: int
    peers_per_rank: int
    bytes_by_fabric: dict = field(default_factory=dict)          # link-bytes carried
    messages_by_fabric: dict = field(default_factory=dict)
    busiest_link_bytes_by_fabric: dict = field(default_factory=dict)
    time_by_stage_s: dict = field(default_factory=dict)
    time_s: float = 0.0
    energy_j: float = 0.0
    bytes_sent_total: float = 0.0
    bytes_received_total: float = 0.0
    why: str = ""
    overhead_s: float = 0.0                                      # per-message part of time_s: steps x latency
    peers_by_rank: dict = field(default_factory=dict)            # rank -> the ranks it exchanges with (SWITCH: -1)
    #: per link, one direction, the bytes it carries over the collective: ((fabric, "up"|"down", chip)
    #: on a switch, (fabric, "pair", src, dst) on a mesh, ...), for contention between collectives
    link_loads: tuple = ()

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def fabric_of(group: Group, flow: Flow) -> str:
    if flow.src == SWITCH or flow.dst == SWITCH:
        if flow.fabric not in FABRICS:
            raise ValueError("a flow with the switch names its fabric")
        return flow.fabric
    return SCALE_UP if group.node_of(flow.src) == group.node_of(flow.dst) else SCALE_OUT


def fabric_obj(system: System, role: str) -> Fabric:
    fab = system.scale_up if role == SCALE_UP else system.scale_out
    if fab is None:
        raise ValueError(f"{system.name!r} has no {role} fabric")
    return fab


def account(kind: str, algorithm: str, group: Group, size_bytes: float, stages, why: str = "") -> CollectiveCost:
    """Sum ``stages`` into a :class:`CollectiveCost` (see the module docstring for the rules)."""
    system = group.system
    sent = defaultdict(float)
    recv = defaultdict(float)
    msgs = defaultdict(int)
    peers = defaultdict(set)
    fab_bytes = {f: 0.0 for f in FABRICS}
    fab_msgs = {f: 0 for f in FABRICS}
    link_total = defaultdict(float)     # (fabric, link) -> bytes over the whole collective
    times = {}
    steps = 0
    overhead = 0.0
    for st in stages:
        if not st.flows:
            continue
        steps += st.steps
        used, up, down, pair, spine, _ = _link_tally(group, st, carried=fab_bytes)
        for fl in st.flows:
            f = fabric_of(group, fl)
            if fl.src != SWITCH:
                sent[fl.src] += fl.bytes
                msgs[fl.src] += fl.messages
                peers[fl.src].add(fl.dst)
            if fl.dst != SWITCH:
                recv[fl.dst] += fl.bytes
                peers[fl.dst].add(fl.src)
            fab_msgs[f] += fl.messages
        stage_t = 0.0
        overhead += st.steps * max(fabric_obj(system, f).latency_s for f in used)
        for f, busiest in _busiest(system, used, up, down, pair, spine).items():
            fab = fabric_obj(system, f)
            stage_t = max(stage_t, st.steps * fab.latency_s + busiest / fab.bandwidth_bytes_per_s)
        times[st.name] = times.get(st.name, 0.0) + stage_t
        for k, v in spine.items():
            link_total[k] += v
        for f in used:
            fab = fabric_obj(system, f)
            if point_to_point(fab):
                for (g, a, b), v in pair.items():
                    if g == f:
                        link_total[f, "pair", a, b] += v
            else:
                for (g, c), v in up.items():
                    if g == f:
                        link_total[f, "up", c] += v / fab.ports
                for (g, c), v in down.items():
                    if g == f:
                        link_total[f, "down", c] += v / fab.ports
    fab_busiest = {f: max((v for k, v in link_total.items() if k[0] == f), default=0.0) for f in FABRICS}
    energy = sum(fab_bytes[f] * fabric_obj(system, f).energy_j_per_byte for f in FABRICS if fab_bytes[f])
    return CollectiveCost(
        kind=kind, algorithm=algorithm, n_ranks=group.n_ranks, size_bytes=float(size_bytes),
        bytes_sent_per_rank=max(sent.values(), default=0.0),
        bytes_received_per_rank=max(recv.values(), default=0.0),
        steps=steps, messages_per_rank=max(msgs.values(), default=0),
        peers_per_rank=max((len(p) for p in peers.values()), default=0),
        bytes_by_fabric=fab_bytes, messages_by_fabric=fab_msgs, busiest_link_bytes_by_fabric=fab_busiest,
        time_by_stage_s=times, time_s=sum(times.values()), energy_j=energy,
        bytes_sent_total=sum(sent.values()), bytes_received_total=sum(recv.values()), why=why,
        overhead_s=overhead, peers_by_rank={r: tuple(sorted(p)) for r, p in sorted(peers.items())},
        link_loads=tuple(sorted((k, v) for k, v in link_total.items() if v)))


def link_bandwidth(system: System, link: tuple) -> float:
    """Bytes per second one way of a link of :attr:`CollectiveCost.link_loads`: its fabric's per-port
    or per-link bandwidth, a node's spine share for a spine link (:func:`spine_rate`)."""
    fab = fabric_obj(system, link[0])
    return spine_rate(system, fab) if str(link[1]).startswith("spine") else fab.bandwidth_bytes_per_s


def grid_route(system: System, src: int, dst: int) -> list[tuple[int, int]]:
    """The links a flow from ``src`` to ``dst`` (one node's grid) crosses: dimension-ordered routing,
    the first axis first, each axis the shorter way round (wrapping only on a ``torus`` axis of 3 or
    more chips; a tie goes the positive way). Neighbours: one link."""
    fab = system.scale_up
    node = system.node_of(src)
    cur, goal = list(system.grid_coord(src)), system.grid_coord(dst)
    hops = []
    for a, k in enumerate(fab.dims):
        while cur[a] != goal[a]:
            fwd = (goal[a] - cur[a]) % k
            if fab.wraps and k >= 3:
                step = 1 if fwd <= k - fwd else -1
            else:
                step = 1 if goal[a] > cur[a] else -1
            here = system.grid_device(node, cur)
            cur[a] = (cur[a] + step) % k
            hops.append((here, system.grid_device(node, cur)))
    return hops


def point_to_point(fab: Fabric) -> bool:
    """Whether the fabric's links join chips directly (a full ``direct`` mesh, a ``torus`` or a
    ``mesh`` grid): a flow crosses one link, the pair's; else a switch (two: chip to switch to chip)."""
    return fab.topology == "direct" or bool(getattr(fab, "is_grid", False))


def spine_rate(system: System, fab: Fabric) -> float:
    """One node's spine share one way: its chips' NICs over ``oversubscription``."""
    return system.chips_per_node * fab.ports * fab.bandwidth_bytes_per_s / fab.oversubscription


def _busiest(system: System, used, up, down, pair, spine=None) -> dict[str, float]:
    """Per fabric of a stage the bytes its busiest link carries one way (the module docstring), in
    bytes of one port's (or one link's) rate: an oversubscribed spine's load counts as
    ``bytes x port rate / spine rate``."""
    out = {}
    for f in sorted(used):
        fab = fabric_obj(system, f)
        if point_to_point(fab):
            out[f] = max(b for (g, _, _), b in pair.items() if g == f)
        else:
            out[f] = max([b for (g, _), b in up.items() if g == f]
                         + [b for (g, _), b in down.items() if g == f]) / fab.ports
        sp = [b for (g, _, _), b in (spine or {}).items() if g == f]
        if sp:
            out[f] = max(out[f], max(sp) * fab.bandwidth_bytes_per_s / spine_rate(system, fab))
    return out


def _link_tally(group: Group, stage: Stage, carried=None):
    """One stage's flows on the links they cross: the fabric roles used; per (fabric, chip) the bytes
    into (``up``) and out of (``down``) the fabric; per (fabric, src, dst) the bytes on a
    point-to-point link (a grid flow on each hop of its :func:`grid_route`); per (fabric, "spine-up" |
    "spine-down", node) the bytes through an oversubscribed spine; per fabric the link-bytes carried
    (a switch flow crosses two links, a flow with the switch one, a grid flow its hops), added into
    ``carried`` where given."""
    system = group.system
    up, down, pair, spine = (defaultdict(float) for _ in range(4))
    carried = defaultdict(float) if carried is None else carried
    used = set()
    for fl in stage.flows:
        f = fabric_of(group, fl)
        fab = fabric_obj(system, f)
        used.add(f)
        if fl.src != SWITCH:
            up[f, fl.src] += fl.bytes
        if fl.dst != SWITCH:
            down[f, fl.dst] += fl.bytes
        if f == SCALE_UP and getattr(fab, "is_grid", False) and SWITCH not in (fl.src, fl.dst):
            hops = grid_route(system, fl.src, fl.dst)       # neighbour to neighbour, axis by axis
            carried[f] += len(hops) * fl.bytes
            for a, b in hops:
                pair[f, a, b] += fl.bytes
        else:
            carried[f] += (1 if point_to_point(fab) or SWITCH in (fl.src, fl.dst) else 2) * fl.bytes
            pair[f, fl.src, fl.dst] += fl.bytes
        if f == SCALE_OUT and fab.oversubscription > 1 and SWITCH not in (fl.src, fl.dst) \
                and system.crosses_spine(fl.src, fl.dst):
            spine[f, "spine-up", system.node_of(fl.src)] += fl.bytes
            spine[f, "spine-down", system.node_of(fl.dst)] += fl.bytes
    return used, up, down, pair, spine, carried


def stage_loads(group: Group, stage: Stage) -> dict[str, float]:
    """Per fabric role a stage touches, the bytes its busiest link carries one way: the load
    :func:`account` times a stage by, for models that time the same stages another way
    (:mod:`tierlab.network.protocols`)."""
    used, up, down, pair, spine, _ = _link_tally(group, stage)
    return _busiest(group.system, used, up, down, pair, spine)


def link_rate(system: System, link: tuple) -> float:
    """Bytes per second one way a link reaches: :func:`link_bandwidth` x its fabric's ``achievable``."""
    return link_bandwidth(system, link) * fabric_obj(system, link[0]).achievable


def ring_flows(ranks, chunk_bytes: float, rounds: int) -> tuple[Flow, ...]:
    """Each rank sends ``rounds`` chunks of ``chunk_bytes`` to the next in ``ranks`` (a ring)."""
    n = len(ranks)
    if n < 2 or rounds == 0:
        return ()
    return tuple(Flow(ranks[i], ranks[(i + 1) % n], rounds * chunk_bytes, rounds) for i in range(n))
