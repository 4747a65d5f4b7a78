"""The cost of a trace replayed on a system: each device's ops costed as on one chip, each
collective costed once on the system's network, and a step's latency as a critical path.

* **Devices.** Each device's slice is costed per op by :func:`tierlab.cost.trace_cost.cost_of`
  (energy and roofline latency per op from its counts, :mod:`tierlab.cost.model`).
* **Collectives.** Each row of the trace's collectives table is costed once by
  :func:`tierlab.network.collective.plan_collective` (its kind, ``Group(ranks, system)``, its size
  S, the all-to-all send matrix when given, the algorithm). An algorithm asked for applies to the
  kinds it serves; other kinds take the ``auto`` rule; an algorithm that serves the kind but cannot
  run on the fabric (``in_network`` on a switch that does not reduce) is a UsageError.
* **Critical path** (:func:`critical_path`). The ops are walked in trace order per device, each
  device's clock advanced by its ops' roofline latency. A device's consecutive ops naming one
  collective are its part of it (their latency is its memory time for the collective's buffers). A
  collective starts when the last of its ranks reaches it and ends after max(its network time, the
  largest memory time of its ranks); all its ranks leave at that end. A collective declared in the
  walk's ops (its step) with no op of a rank is joined by that rank after its last op. The latency
  is the latest device clock. Pipeline stages thereby run in sequence for one microbatch and
  overlap across microbatches. Time in collectives on the critical path: walking back from the
  last device, a collective's span (start to end) is counted and the walk continues on the rank
  that reached it last.

It is a **bound**, stated as one: the busiest link bounds a collective; there is no congestion
between concurrent collectives, no packet-level simulation; compute and communication of one device
do not overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from tierlab.common.errors import TraceError
from tierlab.cost.model import Cost
from tierlab.cost.trace_cost import cost_of
from tierlab.network.choices import OVERLAPS
from tierlab.network.collective import CollectiveCost, Group, plan_collective
from tierlab.network.registry import ALGORITHMS
from tierlab.network.queues import BUFFER_BYTES, CHANNELS, queue_bytes
from tierlab.network.schedule import SWITCH

if TYPE_CHECKING:                                   # only for the annotation
    from tierlab.pipeline.system_replay import SystemReplay

OP, COLL, RUN = "op", "coll", "run"


@dataclass
class Path:
    """One critical-path walk: ``latency_s`` (the latest device clock), ``collective_s`` (time in
    collectives on the critical path), ``ops_s`` (time in ops on it; the two add to the latency),
    ``finish_s`` per device, ``by_resource_s`` (critical-path time by the resource bounding each
    piece: an op's bound, ``network:FABRIC`` or ``memory`` for a collective), ``busy_s`` per device
    (its ops' latencies plus the span of each collective it takes part in, from its last rank's
    arrival to its end: the time the device works, without the waits for other devices)."""

    latency_s: float
    collective_s: float
    ops_s: float
    finish_s: list[float]
    by_resource_s: dict = field(default_factory=dict)
    busy_s: list[float] = field(default_factory=list)
    #: per device its walk in order: ``(OP, start_s, end_s, resource)``, ``(RUN, start_s, end_s, item)``
    #: (a run of ops, its item as given: :func:`run_starts` places its ops) or ``(COLL, start_s, end_s, id)``
    segments: list = field(default_factory=list)
    #: per collective id its span: (start, end), from its last rank's arrival to its end
    spans: dict = field(default_factory=dict)
    #: per collective id the time contention added (the calibrated path only, :func:`contention`)
    contention_s: dict = field(default_factory=dict)


def run_starts(start_s: float, item: tuple) -> np.ndarray:
    """When each op of a RUN item starts, the run starting at ``start_s``: one after another."""
    lats = np.asarray(item[1], np.float64)
    return start_s + np.concatenate([[0.0], np.cumsum(lats)[:-1]]) if len(lats) else np.zeros(0)


def critical_path(items: list[list[tuple]], coll_time: dict, coll_resource: dict | None = None,
                  overlapped: frozenset | set = frozenset()) -> Path:
    """The critical path over devices. ``items[d]``: device d's items in order, ``(OP, latency_s,
    resource)``, ``(RUN, latencies, resource index of each, resource names[, their sum])``
    (consecutive ops as one item, as :func:`walk_items` gives them) or ``(COLL, collective id, memory_s)``;
    ``coll_time[cid]``: its network time. The
    ranks of a collective are the devices with an item for it. A wait that can never end (a cycle
    of collectives) is a TraceError. A collective in ``overlapped`` runs beside its ranks' next
    ops: each rank goes on from its own arrival, its next collective waits for this one's end (one
    communication stream a device), and the device finishes no earlier than it."""
    n = len(items)
    ranks: dict[int, set] = {}
    for d, its in enumerate(items):
        for it in its:
            if it[0] == COLL:
                ranks.setdefault(it[1], set()).add(d)
    pos = [0] * n
    clock = [0.0] * n
    comm_end = [0.0] * n                              # when a device's overlapped collectives end
    seg: list[list[tuple]] = [[] for _ in range(n)]   # (kind, start, end, resource or cid)
    arrived: dict[int, dict] = {}
    resolved: dict[int, tuple] = {}                   # cid -> (start, end, last device, its seg index)
    coll_resource = coll_resource or {}
    progress = True
    while progress:
        progress = False
        for d in range(n):
            its = items[d]
            run_start, run = clock[d], []
            while pos[d] < len(its) and its[pos[d]][0] != COLL:
                it = its[pos[d]]
                if it[0] == RUN:            # (RUN, latencies, resource index of each, resource names[, sum])
                    t = it[4] if len(it) > 4 else float(np.sum(it[1]))
                    seg[d].append((RUN, clock[d], clock[d] + t, it))
                    clock[d] += t
                    run.append(it[1])
                else:
                    _, lat, res = it
                    seg[d].append((OP, clock[d], clock[d] + lat, res))
                    clock[d] += lat
                    run.append([lat])
                pos[d] += 1
            if len(run) > 1:     # a run of ops takes the sum of their latencies, summed as a chip's step is
                clock[d] = run_start + float(np.sum(np.concatenate(run)))
            if pos[d] < len(its):
                cid, mem = its[pos[d]][1], its[pos[d]][2]
                if d not in arrived.get(cid, {}):
                    clock[d] = max(clock[d], comm_end[d])
                arrived.setdefault(cid, {})[d] = (clock[d], mem)
        for cid in [c for c, a in arrived.items() if set(a) == ranks[c]]:
            a = arrived.pop(cid)
            last = max(a, key=lambda d: (a[d][0], -d))
            start = a[last][0]
            mem = max(m for _, m in a.values())
            net = float(coll_time.get(cid, 0.0))
            end = start + max(net, mem)
            res = coll_resource.get(cid, "network") if net >= mem else "memory"
            resolved[cid] = (start, end, last, len(seg[last]), res)
            for d in a:
                seg[d].append((COLL, a[d][0], end, cid))
                if cid in overlapped:
                    comm_end[d] = max(comm_end[d], end)
                    clock[d] = a[d][0]
                else:
                    clock[d] = end
                pos[d] += 1
            progress = True
    clock = [max(c, e) for c, e in zip(clock, comm_end)]
    stuck = [d for d in range(n) if pos[d] < len(items[d])]
    if stuck:
        d = stuck[0]
        raise TraceError(f"the collectives cannot all complete: device {d} waits at collective "
                         f"{items[d][pos[d]][1]} forever (its ranks wait at each other's collectives in "
                         "different orders)", field="collective")
    by_res: dict[str, float] = {}
    ops_s = coll_s = 0.0
    if n and any(seg):
        d = max(range(n), key=lambda i: (clock[i], -i))
        k = len(seg[d]) - 1
        while k >= 0:
            kind, start, end, what = seg[d][k]
            if kind == OP:
                ops_s += end - start
                by_res[what] = by_res.get(what, 0.0) + end - start
                k -= 1
            elif kind == RUN:
                ops_s += end - start
                lats, bound, names = what[1], what[2], what[3]
                for i, t in enumerate(np.bincount(bound, weights=lats, minlength=len(names))):
                    if t:
                        by_res[names[i]] = by_res.get(names[i], 0.0) + float(t)
                k -= 1
            else:
                cs, ce, last, idx, res = resolved[what]
                coll_s += ce - cs
                by_res[res] = by_res.get(res, 0.0) + ce - cs
                d, k = last, idx - 1
    busy = [0.0] * n
    for d in range(n):
        for kind, start, end, what in seg[d]:
            busy[d] += (end - start) if kind != COLL else (end - resolved[what][0])
    return Path(latency_s=max(clock, default=0.0), collective_s=coll_s, ops_s=ops_s, finish_s=clock,
                by_resource_s=by_res, busy_s=busy, segments=seg,
                spans={c: (v[0], v[1]) for c, v in resolved.items()})


OVERLAP_FIELD = "comm_overlap"
#: the collectives each overlap option runs beside compute: tensor-parallel ones, or EP's dispatch/combine
OVERLAP_KINDS = {"none": (), "tp": ("all_reduce", "all_gather", "reduce_scatter"), "ep": ("all_to_all",)}


@dataclass
class Calibration:
    """The calibrated latency of a system (the organisation model on every device, collectives as
    they run): per device ``op_latency_s`` and ``op_bound`` (index into the device Cost's
    resources) by local op id, and its :class:`~tierlab.cost.organisation.Organisation` of the
    device's own ops (``organisations``; ``kernel_start`` marks each kernel's first op by local
    op id); per collective id its
    :class:`~tierlab.network.protocols.Timed`; ``settings`` and ``overlap`` as used."""

    op_latency_s: list
    op_bound: list
    organisations: list
    collectives: list
    settings: object
    overlap: str = "none"
    kernel_start: list = field(default_factory=list)   # per device, per local op: the first op of a kernel
    contention_s: dict = field(default_factory=dict)   # per collective id: the time sharing links added

    def overlapped(self, table: list[dict]) -> frozenset:
        kinds = OVERLAP_KINDS[self.overlap]
        return frozenset(i for i, c in enumerate(table) if c["kind"] in kinds)


@dataclass
class SystemCost:
    """Per device its :class:`~tierlab.cost.model.Cost` (by local op id); per collective id its
    :class:`~tierlab.network.collective.CollectiveCost`; the trace's collectives as dicts; and the
    :class:`Calibration` where one was made (:func:`calibrate`)."""

    devices: list[Cost]
    collectives: list[CollectiveCost]
    table: list[dict]
    calibration: Calibration | None = None
    system: object = None

    def path(self, sr: SystemReplay, op_ids: np.ndarray | None = None, calibrated: bool = False) -> Path:
        """The critical path over the global ops ``op_ids`` (all if None): of the roofline, or of
        the calibrated latency (``calibrated``, which needs :attr:`calibration`: collectives whose
        spans overlap share the links they cross, :func:`contention`)."""
        if not calibrated:
            return critical_path(*walk_items(sr, self, op_ids))
        cal = self.calibration
        items, times, res = walk_items(sr, self, op_ids, cal)
        first = critical_path(items, times, res, overlapped=cal.overlapped(self.table))
        if not cal.settings.overheads:
            return first
        extra = contention(self, first.spans, times)
        if not any(extra.values()):
            first.contention_s = extra
            return first
        for c, t in extra.items():
            cal.contention_s[c] = t
        p = critical_path(items, {c: t + extra.get(c, 0.0) for c, t in times.items()}, res,
                          overlapped=cal.overlapped(self.table))
        p.contention_s = extra
        return p


def algorithm_for(kind: str, asked: str) -> str:
    """The algorithm ``asked`` where it serves ``kind``, else ``auto``."""
    if asked != "auto" and asked in ALGORITHMS and kind not in ALGORITHMS[asked].kinds:
        return "auto"
    return asked


def per_distinct_collective(sr: SystemReplay, table: list[dict], cost) -> list:
    """``cost(kind, group, size_bytes, algorithm, send_bytes)`` for each row of the trace's collectives
    ``table``, called once per distinct (kind, ranks, size, send matrix): a step repeats the same few
    collectives. ``algorithm`` is the one asked for where it serves the kind (:func:`algorithm_for`)."""
    done: dict[tuple, object] = {}
    out = []
    for c in table:
        send = tuple(c["send_bytes"] or ())
        key = (c["kind"], tuple(c["ranks"]), float(c["size_bytes"]), send)
        if key not in done:
            done[key] = cost(c["kind"], Group(key[1], sr.system), key[2],
                             algorithm_for(c["kind"], sr.collective_algo), send or None)
        out.append(done[key])
    return out


def cost_collectives(sr: SystemReplay) -> tuple[list[CollectiveCost], list[dict]]:
    """Each collective of the trace costed once on the system (see the module docstring)."""
    table = sr.trace.collectives.to_pylist()
    return per_distinct_collective(
        sr, table, lambda kind, g, size, algo, send: plan_collective(kind, g, size, algo, send_bytes=send)), table


def cost_system(sr: SystemReplay, *, organised: bool = True) -> SystemCost:
    """Every device's ops and every collective of ``sr``, costed (``organised``: as ``cost_of``)."""
    colls, table = cost_collectives(sr)
    costs: dict[int, Cost] = {}       # devices sharing a replay (identical slices) share its cost
    for tr in sr.devices:
        if id(tr.result) not in costs:
            costs[id(tr.result)] = cost_of(tr, organised=organised)
    return SystemCost(devices=[costs[id(tr.result)] for tr in sr.devices], collectives=colls, table=table,
                      system=sr.system)


def fabric_resource(cc: CollectiveCost) -> str:
    """``network:FABRIC``: the fabric carrying the collective's busiest link (scale-up if none)."""
    busy = cc.busiest_link_bytes_by_fabric or {}
    f = max(busy, key=lambda k: busy[k]) if any(busy.values()) else "scale_up"
    return f"network:{f}"


def walk_items(sr: SystemReplay, sc: SystemCost, op_ids: np.ndarray | None = None,
               cal: Calibration | None = None):
    """(items per device, network time per collective, resource per collective) for
    :func:`critical_path` over the global ops ``op_ids`` (all if None); with ``cal``, the
    calibrated latencies of ops and collectives in place of the roofline's."""
    coll = sr.trace.op_collective
    sel = None
    if op_ids is not None:
        sel = np.zeros(sr.trace.n_ops, bool)
        sel[np.asarray(op_ids, np.int64)] = True
    items, used, joined = [], set(), []
    for d, tr in enumerate(sr.devices):
        cst = sc.devices[d]
        g = np.asarray(sr.op_ids[d], np.int64)
        local = np.arange(len(g))
        if sel is not None:
            local = local[sel[g]]
        c = coll[g[local]]
        lat = np.asarray(cst.latency_s if cal is None else cal.op_latency_s[d], np.float64)[local]
        bound = np.asarray(cst.bound if cal is None else cal.op_bound[d], np.int64)[local]
        its: list[tuple] = []
        mine: set[int] = set()          # the collectives this device has an op of
        # runs: consecutive compute ops (one RUN item), or consecutive ops of one collective (one COLL)
        cut = np.flatnonzero(np.diff(c)) + 1 if len(c) else np.zeros(0, np.int64)
        for lo, hi in zip(np.concatenate([[0], cut]), np.concatenate([cut, [len(c)]])):
            if hi <= lo:
                continue
            cid = int(c[lo])
            if cid < 0:
                run = lat[lo:hi]
                its.append((RUN, run, bound[lo:hi], cst.resources, float(np.sum(run))))
            else:
                t = 0.0
                for x in lat[lo:hi]:        # summed in order, as the ops came
                    t += float(x)
                its.append((COLL, cid, t))
                used.add(cid)
                mine.add(cid)
        items.append(its)
        joined.append(mine)
    for c in sorted(used):            # a rank of a collective with no op of its own joins at its end
        for r in sc.table[c]["ranks"]:
            if r < len(items) and c not in joined[r]:
                items[r].append((COLL, c, 0.0))
                joined[r].add(c)
    times = ({c: sc.collectives[c].time_s for c in used} if cal is None
             else {c: cal.collectives[c].time_s for c in used})
    return (items, times, {c: fabric_resource(sc.collectives[c]) for c in used})


def contention(sc: SystemCost, spans: dict, times: dict) -> dict:
    """Per collective id the time contention adds: collectives whose spans overlap share the links
    they cross, each link's load is the sum of their bytes on it, and a collective's transfer is
    bounded by its most loaded link. ``extra(c) = max over c's links of (its bytes + the overlapping
    collectives' bytes) / the link's rate - max over c's links of its own bytes / the rate`` (rate:
    the fabric's per-link bandwidth x its achievable fraction). A bound, stated as one: every
    overlapping collective is counted for all of c's span, and the critical path is walked once more
    with the extra times (no fixed point)."""
    from tierlab.network.schedule import link_rate

    out = {c: 0.0 for c in times}
    ids = sorted((c for c in times if c in spans and sc.collectives[c].link_loads), key=lambda c: spans[c][0])
    loads = {c: dict(sc.collectives[c].link_loads) for c in ids}
    rate: dict = {}
    for i, c in enumerate(ids):
        s0, e0 = spans[c]
        if e0 <= s0:
            continue
        others = [o for o in ids if o != c and spans[o][0] < e0 and spans[o][1] > s0]
        if not others:
            continue
        own = worst = 0.0
        for link, b in loads[c].items():
            if link not in rate:
                rate[link] = link_rate(sc.system, link)
            own = max(own, b / rate[link])
            worst = max(worst, (b + sum(loads[o].get(link, 0.0) for o in others)) / rate[link])
        out[c] = max(0.0, worst - own)
    return out


def _device_calibration(tr, cst: Cost, coll: np.ndarray):
    """One device's calibrated op latencies and bounds (:class:`Calibration`): its own ops
    organised as one chip's are (:func:`tierlab.cost.organisation.organise`), kernels never
    spanning a collective; a collective's own ops (its buffers' memory work, inside the collective's
    kernel) their memory time at the achievable fractions, no launch of their own."""
    from tierlab.cost.organisation import fractions, organise

    ops = tr.trace.ops
    n = ops.num_rows
    is_coll = np.asarray(coll) >= 0
    sub = np.flatnonzero(~is_coll)
    segment = np.cumsum(is_coll)[sub]
    frac = fractions(tr.chip, cst.resources)
    t = np.asarray(cst.time_s, np.float64) / frac if n else np.zeros((0, len(cst.resources)))
    index = np.full(n, -1, np.int64)
    index[sub] = np.arange(len(sub))

    def tensors():
        for b in tr.trace.iter_accesses():
            op = index[b.column("op_id").to_numpy()]
            keep = op >= 0
            yield (op[keep], b.column("tensor_id").to_numpy()[keep],
                   b.column("is_write").to_numpy(zero_copy_only=False)[keep])

    layer = ops.column("layer").to_numpy()
    phase = np.asarray(ops.column("phase").to_pylist(), dtype=object)
    step = ops.column("step").to_numpy()
    from tierlab.cost.gemv import gemv_fractions

    gemv = gemv_fractions(tr.chip, tr.trace)
    org = organise(tr.chip, cst.resources, np.asarray(cst.time_s)[sub], layer[sub], phase[sub], step[sub],
                   tensors, segment, gemv=None if gemv is None else gemv[sub])
    lat = np.zeros(n)
    bound = np.zeros(n, np.int64)
    lat[sub] = org.op_latency_s()
    starts = np.zeros(n, bool)          # the first op of each kernel
    if len(org.group):
        bound[sub] = org.group_bound[org.group]
        starts[sub] = np.r_[True, org.kernel[1:] != org.kernel[:-1]]
    if is_coll.any():
        lat[is_coll] = t[is_coll].max(axis=1) if t.shape[1] else 0.0
        bound[is_coll] = t[is_coll].argmax(axis=1) if t.shape[1] else 0
    return lat, bound, org, starts


def calibrate(sr: SystemReplay, sc: SystemCost, settings=None, overlap: str = "none") -> Calibration:
    """The :class:`Calibration` of the replay ``sr`` (its costs ``sc``), stored on ``sc`` and
    returned. ``settings``: a :class:`tierlab.network.protocols.Settings` (default: the system
    file's library and skew, launch = the chip's kernel overhead)."""
    from tierlab.common.errors import UsageError
    from tierlab.network.protocols import Settings, time_collective

    if overlap not in OVERLAPS:
        raise UsageError(f"unknown overlap {overlap!r}; expected one of {', '.join(OVERLAPS)}", field=OVERLAP_FIELD)
    if overlap != "none":
        kinds = OVERLAP_KINDS[overlap]
        if not any(c["kind"] in kinds for c in sc.table):
            what = "tensor-parallel collectives (all_reduce, all_gather, reduce_scatter)" if overlap == "tp" \
                else "expert-parallel all_to_all (dispatch and combine)"
            raise UsageError(f"{overlap!r} overlaps {what}, and this trace has none (--tp/--ep above 1 makes them)",
                             field=OVERLAP_FIELD)
    system = sr.system
    if settings is None:
        settings = Settings(library=system.collective_library, launch_s=system.chip.execution.kernel_overhead_s,
                            skew_s=system.collective_skew_s)
    settings.check()
    coll = sr.trace.op_collective
    lats, bounds, orgs, starts, done = [], [], [], [], {}
    for d, tr in enumerate(sr.devices):
        cst = sc.devices[d]
        c = np.asarray(coll[np.asarray(sr.op_ids[d], np.int64)])
        key = (id(cst), (c >= 0).tobytes())
        if key not in done:
            done[key] = _device_calibration(tr, cst, c)
        lat, bound, org, st = done[key]
        starts.append(st)
        lats.append(lat)
        bounds.append(bound)
        orgs.append(org)
    if not settings.overheads:          # every overhead off: the roofline's collectives, as costed
        from tierlab.network.protocols import Timed

        timed = [Timed(cc.kind, cc.algorithm, "roofline", cc.time_s, 0.0, cc.overhead_s, cc.time_s - cc.overhead_s,
                       0.0) for cc in sc.collectives]
    else:
        timed = per_distinct_collective(sr, sc.table, lambda kind, g, size, algo, send: time_collective(
            kind, g, size, settings, algorithm=algo, send_bytes=send))
    sc.calibration = Calibration(lats, bounds, orgs, timed, settings, overlap, starts)
    return sc.calibration


def decode_steps(sr: SystemReplay) -> dict[int, np.ndarray]:
    """Global op ids of each decode step, keyed by step."""
    ops = sr.trace.ops
    phase = np.asarray(ops.column("phase").to_pylist(), dtype=object)
    step = ops.column("step").to_numpy()
    dec = np.nonzero(phase == "decode")[0]
    return {int(s): dec[step[dec] == s] for s in np.unique(step[dec])}


def connections(sc: SystemCost, system) -> dict:
    """The connections each rank holds over the run: its distinct peer devices (one connection per
    peer process) and the distinct other nodes among them (one per peer node); the switch of an
    in-network reduction is not a peer. ``queue_bytes``: the staging memory those connections take
    (:mod:`tierlab.network.queues`)."""
    peers: dict[int, set] = {}
    for cc in sc.collectives:
        for r, ps in cc.peers_by_rank.items():
            if r == SWITCH:
                continue
            peers.setdefault(r, set()).update(p for p in ps if p != SWITCH)
    per_rank = {r: {"peer_processes": len(ps),
                    "peer_nodes": len({system.node_of(p) for p in ps} - {system.node_of(r)})}
                for r, ps in sorted(peers.items())}
    for v in per_rank.values():
        # staging memory of those connections, one set of buffers per peer process
        # (tierlab.network.queues: NCCL's default buffer, an estimated channel count)
        v["queue_bytes"] = queue_bytes(v["peer_processes"])
    return {"peer_processes_per_rank_max": max((v["peer_processes"] for v in per_rank.values()), default=0),
            "peer_nodes_per_rank_max": max((v["peer_nodes"] for v in per_rank.values()), default=0),
            "queue_bytes_per_rank_max": max((v["queue_bytes"] for v in per_rank.values()), default=0),
            "queue_model": f"peers x {CHANNELS} channels (estimate) x {BUFFER_BYTES >> 20} MiB "
                           "(NCCL_BUFFSIZE default) per rank",
            "by_rank": [{"device": r, **v} for r, v in per_rank.items()]}
