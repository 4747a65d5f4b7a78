"""A replay as a timeline for people: a Chrome trace-event file (``tierlab run/replay --timeline
FILE.json``) that ui.perfetto.dev and chrome://tracing open.

The times are the cost model's, nothing new: each op lasts its roofline latency
(:mod:`tierlab.cost.model`) and the ops of a device run one after another in trace order, as the
model sums them (no overlap between ops), so a decode step's ops span exactly the step latency.

* One process (``pid``) per device: the chip's run is device 0; a system run has one per device,
  its ops placed on the critical-path walk of :mod:`tierlab.cost.system_cost` (a collective waits
  for its last rank), each collective an event on the device's ``collectives`` track.
* Tracks (``tid``) per device: ``ops`` (each op for its whole latency), then one per resource --
  ``compute``, each ``tier:NAME``, each ``link:A-B`` and PIM unit -- each op drawn there for the
  time that resource is busy in it (starting with the op), ``args.bound`` true on the op's bound.
* Events are complete events (``ph: "X"``) with ``name`` (the op's name), ``cat`` (its kind),
  ``ts`` and ``dur`` in microseconds, ``pid``, ``tid`` and ``args``: ``op_id``, ``kind``, ``phase``,
  ``step``, ``layer``, ``bound`` (the op's bounding resource), ``latency_s``, ``flops``,
  ``bytes_by_tier`` (read + written), ``bytes_by_link`` (down + up). Track and process names are
  metadata events (``ph: "M"``).
"""

from __future__ import annotations

import json

import numpy as np

from tierlab.common.atomic import atomic_path
from tierlab.analysis.result import link_names
from tierlab.cost.model import Cost
from tierlab.engine.counters import BYTES_READ, BYTES_WRITTEN, link_bytes

US = 1e6        # trace-event times are microseconds
OPS_TRACK = "ops"


def _meta(pid: int, tid: int | None, what: str, name: str) -> dict:
    e = {"ph": "M", "pid": pid, "name": what, "args": {"name": name}}
    if tid is not None:
        e["tid"] = tid
    return e


def device_events(tr, cst: Cost, pid: int = 0, starts_s: np.ndarray | None = None, label: str | None = None,
                  op_ids: np.ndarray | None = None) -> list[dict]:
    """The events of one device's replay ``tr`` costed as ``cst``. ``starts_s[op]``: each op's
    start (default: back to back from 0). ``op_ids``: the ids to show in ``args`` (default local)."""
    ops = tr.trace.ops
    n = ops.num_rows
    lat = np.asarray(cst.latency_s, np.float64)
    if starts_s is None:
        starts_s = np.concatenate([[0.0], np.cumsum(lat)[:-1]]) if n else np.zeros(0)
    names, kinds = ops.column("name").to_pylist(), ops.column("kind").to_pylist()
    phases, steps = ops.column("phase").to_pylist(), ops.column("step").to_pylist()
    layers, flops = ops.column("layer").to_pylist(), ops.column("flops").to_pylist()
    r = tr.result
    tb = (r.per_op[:, :, BYTES_READ] + r.per_op[:, :, BYTES_WRITTEN]).astype(np.int64)
    lb = link_bytes(r.per_op, r.block_bytes).sum(2).astype(np.int64) if r.per_op.shape[0] else np.zeros((0, 0))
    lnames = link_names(tr.chip)
    tracks = [OPS_TRACK, *cst.resources]
    ev = [_meta(pid, None, "process_name", label or f"{tr.chip.name}")]
    ev += [_meta(pid, k, "thread_name", t) for k, t in enumerate(tracks)]
    ev += [{"ph": "M", "pid": pid, "tid": k, "name": "thread_sort_index", "args": {"sort_index": k}}
           for k in range(len(tracks))]
    for i in range(n):
        bound = cst.resources[int(cst.bound[i])]
        args = {"op_id": int(i if op_ids is None else op_ids[i]), "kind": kinds[i], "phase": phases[i],
                "step": steps[i], "layer": layers[i], "bound": bound, "latency_s": float(lat[i]),
                "flops": int(flops[i]),
                "bytes_by_tier": {t: int(tb[i, j]) for j, t in enumerate(r.tier_names)},
                "bytes_by_link": {ln: int(lb[i, j]) for j, ln in enumerate(lnames)}}
        ts = float(starts_s[i]) * US
        ev.append({"ph": "X", "name": names[i], "cat": kinds[i], "ts": ts, "dur": float(lat[i]) * US,
                   "pid": pid, "tid": 0, "args": args})
        for k, res in enumerate(cst.resources):
            busy = float(cst.time_s[i, k])
            if busy > 0:
                ev.append({"ph": "X", "name": names[i], "cat": kinds[i], "ts": ts, "dur": busy * US, "pid": pid,
                           "tid": k + 1, "args": {"op_id": args["op_id"], "bound": res == bound, "busy_s": busy}})
    return ev


def chip_timeline(tr, cst: Cost) -> dict:
    """The trace-event document of a chip replay."""
    return {"traceEvents": device_events(tr, cst), "displayTimeUnit": "ns",
            "otherData": {"tierlab": "timeline", "chip": tr.chip.name, "time_model": "roofline per op, ops in "
                          "sequence (tierlab.cost.model)"}}


def system_timeline(sr, sc) -> dict:
    """The trace-event document of a system replay: each device's ops where the critical-path walk
    puts them, each collective on its ranks' ``collectives`` track."""
    from tierlab.cost.system_cost import COLL, RUN, critical_path, run_starts, walk_items

    items, coll_time, coll_res = walk_items(sr, sc)
    path = critical_path(items, coll_time, coll_res)
    coll = sr.trace.op_collective
    ev = []
    table = sc.table
    for d, tr in enumerate(sr.devices):
        cst = sc.devices[d]
        n = tr.trace.ops.num_rows
        starts = np.zeros(n)
        segs = iter(path.segments[d])
        local = 0
        while local < n:                 # the walk's items in order: an op, or a run of one collective's ops
            c = int(coll[sr.op_ids[d][local]])
            kind, start, _, what = next(segs)
            if kind == RUN:
                k = len(what[1])
                starts[local:local + k] = run_starts(start, what)
                local += k
                continue
            if c < 0:
                starts[local] = start
                local += 1
                continue
            t = start
            while local < n and int(coll[sr.op_ids[d][local]]) == c:
                starts[local] = t
                t += float(cst.latency_s[local])
                local += 1
        ev += device_events(tr, cst, pid=d, starts_s=starts, label=f"device {d} ({tr.chip.name})",
                            op_ids=sr.op_ids[d])
        ctid = len(cst.resources) + 1
        ev.append(_meta(d, ctid, "thread_name", "collectives"))
        for kind, start, end, what in path.segments[d]:
            if kind == COLL:
                c = table[what]
                ev.append({"ph": "X", "name": c["kind"], "cat": "collective", "ts": start * US,
                           "dur": (end - start) * US, "pid": d, "tid": ctid,
                           "args": {"collective": int(what), "ranks": list(c["ranks"]),
                                    "size_bytes": int(c["size_bytes"]), "phase": c["phase"], "step": c["step"],
                                    "network_s": float(coll_time.get(what, 0.0))}})
    return {"traceEvents": ev, "displayTimeUnit": "ns",
            "otherData": {"tierlab": "timeline", "system": sr.system.name,
                          "time_model": "critical path over devices (tierlab.cost.system_cost)"}}


def write_timeline(doc: dict, path, *, force: bool = False) -> None:
    """Write a trace-event document atomically."""
    with atomic_path(path, force=force) as tmp:
        with open(tmp, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
