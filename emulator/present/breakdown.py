"""Sums of a costed replay for the report's figures (pure: no matplotlib; nothing counted or costed
here, only the per-op counts of :class:`tierlab.pipeline.chip_replay.TraceReplay` and the per-op
:class:`tierlab.cost.model.Cost` added up by op kind).

* :func:`latency_by_kind` -- per op kind, the latency of a decode step (or, without decode, of the
  whole run) split by each op's bound resource;
* :func:`tier_bytes_per_token` -- bytes read and written at each tier per decode token;
* :func:`time_breakdown` / :func:`system_time` -- where a decode step's time goes: by the resource
  bounding each op (roofline) or kernel group (calibrated, with the kernels' launch overhead), and on
  a system the critical path and each device's busy and waiting time;
* :func:`roofline_points` / :func:`roofline_ceilings` -- a hierarchical roofline: per phase and op
  kind and per tier, the arithmetic intensity FLOPs / (bytes read + written at that tier) and the
  attained FLOP/s = FLOPs / the ops' summed roofline latency, against the compute peak of the run's
  dtype and each tier's bandwidth (attainable = min(peak, bandwidth x intensity)).
"""

from __future__ import annotations

import numpy as np

from tierlab.cost.model import port_bytes
from tierlab.engine.counters import BYTES_READ, BYTES_WRITTEN


def _decode_rows(tr) -> tuple[np.ndarray, int]:
    """(op ids of the decode steps, number of steps), or every op and 1 without decode."""
    ops = tr.trace.ops
    phase = np.asarray(ops.column("phase").to_pylist(), dtype=object)
    dec = np.nonzero(phase == "decode")[0]
    if len(dec) == 0:
        return np.arange(ops.num_rows), 1
    steps = np.unique(ops.column("step").to_numpy()[dec])
    return dec, len(steps)


def latency_by_kind(tr, cst) -> dict:
    """``{"per": "decode step" | "run", "kinds": [{kind, ops, latency_s, by_bound: {resource: s}}]}``,
    kinds by falling latency; the latencies of the kinds add up to the step (or run) latency."""
    rows, n_steps = _decode_rows(tr)
    kinds = np.asarray(tr.trace.ops.column("kind").to_pylist(), dtype=object)[rows]
    lat = np.asarray(cst.latency_s)[rows]
    bound = np.asarray(cst.bound)[rows]
    out = []
    for k in dict.fromkeys(kinds.tolist()):
        sel = kinds == k
        by = {}
        for b in np.unique(bound[sel]):
            by[cst.resources[int(b)]] = float(lat[sel & (bound == b)].sum()) / n_steps
        out.append({"kind": k, "ops": int(sel.sum()) / n_steps, "latency_s": float(lat[sel].sum()) / n_steps,
                    "by_bound": dict(sorted(by.items(), key=lambda kv: -kv[1]))})
    out.sort(key=lambda e: -e["latency_s"])
    has_decode = "decode" in tr.trace.ops.column("phase").to_pylist()
    return {"per": "decode step" if has_decode else "run", "steps": n_steps, "kinds": out}


def tier_bytes_per_token(tr) -> dict | None:
    """``{tier: {"read": B, "written": B}}`` per decode token (None without decode)."""
    ops = tr.trace.ops
    if "decode" not in ops.column("phase").to_pylist():
        return None
    rows, n_steps = _decode_rows(tr)
    batch = int((tr.trace.manifest.get("run") or {}).get("batch", 1))
    c = tr.result.per_op[rows].sum(0)
    return {t: {"read": float(c[i, BYTES_READ]) / n_steps / batch, "written": float(c[i, BYTES_WRITTEN]) / n_steps / batch}
            for i, t in enumerate(tr.result.tier_names)}


def roofline_points(tr, cst) -> list[dict]:
    """One point per (phase, op kind, tier) with FLOPs and bytes at that tier: ``phase``, ``kind``,
    ``tier``, ``flops``, ``bytes``, ``intensity`` (FLOP/B), ``latency_s`` (summed), ``flop_per_s``
    (attained). Kinds without FLOPs (copies, appends) have no intensity and are left out."""
    ops = tr.trace.ops
    phase = np.asarray(ops.column("phase").to_pylist(), dtype=object)
    kind = np.asarray(ops.column("kind").to_pylist(), dtype=object)
    flops = ops.column("flops").to_numpy().astype(np.float64)
    r = tr.result
    tb = port_bytes(tr.chip.tiers, r.per_op)      # what each tier's port carries (tierlab.cost.model)
    lat = np.asarray(cst.latency_s, np.float64)
    out = []
    for ph in dict.fromkeys(phase.tolist()):
        for k in dict.fromkeys(kind[phase == ph].tolist()):
            sel = (phase == ph) & (kind == k)
            f, t = float(flops[sel].sum()), float(lat[sel].sum())
            if f <= 0 or t <= 0:
                continue
            for i, name in enumerate(r.tier_names):
                b = float(tb[sel, i].sum())
                if b > 0:
                    out.append({"phase": ph, "kind": k, "tier": name, "flops": f, "bytes": b, "intensity": f / b,
                                "latency_s": t, "flop_per_s": f / t})
    return out


def roofline_ceilings(chip, cst) -> dict:
    """``{"compute": peak FLOP/s of the run's dtype, "dtype": ..., "tiers": {tier: bytes/s}}``."""
    return {"compute": float(chip.compute.flop_per_s[cst.dtype]), "dtype": cst.dtype,
            "tiers": {t.name: float(t.bandwidth_bytes_per_s) for t in chip.tiers}}


# ---- where the time goes ------------------------------------------------------------------------

LAUNCH = "launch overhead"
COLLECTIVES = "collectives"
WAITING = "waiting for other devices"


def time_breakdown(tr, cst) -> dict:
    """Where a decode step's time goes on one chip (or, without decode, the whole run's): each op's
    roofline latency under the resource bounding it (``roofline``, adding up to
    ``per_token.latency_s``); the calibrated latency's kernel groups under their busiest resource
    and the kernels' fixed time as ``launch overhead`` (``calibrated``, adding up to
    ``latency_calibrated_s``; None without the organisation); ``busy``: each resource's busy time
    (``per_token.time_by_resource_s``). Seconds per step, resources in the Cost's order."""
    rows, n = _decode_rows(tr)
    res = list(cst.resources)
    lat = np.asarray(cst.latency_s, np.float64)[rows]
    bound = np.asarray(cst.bound, np.int64)[rows]
    roof = np.bincount(bound, weights=lat, minlength=len(res)) / n
    busy = np.asarray(cst.time_s, np.float64)[rows].sum(0) / n
    out = {"per": "decode step" if _has_decode(tr) else "run", "steps": n,
           "resources": res,
           "roofline": {r: float(t) for r, t in zip(res, roof) if t > 0},
           "busy": {r: float(t) for r, t in zip(res, busy)},
           "calibrated": None}
    org = getattr(cst, "organisation", None)
    if org is not None and len(rows):
        groups = np.unique(org.group[rows])
        cal = np.bincount(np.asarray(org.group_bound, np.int64)[groups], weights=org.group_s[groups],
                          minlength=len(res)) / n
        out["calibrated"] = {r: float(t) for r, t in zip(res, cal) if t > 0}
        over = org.overhead_s(rows) / n
        if over > 0:
            out["calibrated"][LAUNCH] = float(over)
    return out


def _has_decode(tr) -> bool:
    return "decode" in tr.trace.ops.column("phase").to_pylist()


def _device_split(segments) -> tuple[dict, float]:
    """A device's walk (:attr:`tierlab.cost.system_cost.Path.segments`): its ops' time by bound
    resource, and that time's sum."""
    from tierlab.cost.system_cost import OP, RUN

    by: dict[str, float] = {}
    total = 0.0
    for kind, start, end, what in segments:
        if kind == OP:
            by[what] = by.get(what, 0.0) + end - start
            total += end - start
        elif kind == RUN:
            lats, bound, names = what[1], what[2], what[3]
            for i, t in enumerate(np.bincount(np.asarray(bound, np.int64), weights=lats, minlength=len(names))):
                if t:
                    by[names[i]] = by.get(names[i], 0.0) + float(t)
            total += end - start
    return by, total


def system_time(sr, sc) -> dict:
    """Where a decode step's time goes on a system (averaged over the steps; the whole run without
    decode): ``path`` and ``path_calibrated`` -- the critical path by resource (an op's bound,
    ``network:FABRIC`` or ``memory`` for a collective; :attr:`~tierlab.cost.system_cost.Path.by_resource_s`,
    adding up to the step's latency); ``devices`` -- per device its ops' roofline time by bound
    resource, its time in collectives (from its last rank's arrival to the end) and its wait for
    other devices, adding up to the step's latency; ``collective_share`` of the critical path."""
    from tierlab.cost.system_cost import decode_steps

    steps = decode_steps(sr) or {-1: np.arange(sr.trace.n_ops)}
    n = len(steps)
    path: dict[str, float] = {}
    cal: dict[str, float] | None = {} if sc.calibration is not None else None
    devices = [dict() for _ in sr.devices]
    share = latency = 0.0
    for ids in steps.values():
        p = sc.path(sr, ids)
        latency += p.latency_s / n
        share += (p.collective_s / p.latency_s if p.latency_s > 0 else 0.0) / n
        for r, t in p.by_resource_s.items():
            path[r] = path.get(r, 0.0) + t / n
        if cal is not None:
            for r, t in sc.path(sr, ids, calibrated=True).by_resource_s.items():
                cal[r] = cal.get(r, 0.0) + t / n
        for d, segs in enumerate(p.segments):
            by, ops_s = _device_split(segs)
            row = devices[d]
            for r, t in by.items():
                row[r] = row.get(r, 0.0) + t / n
            busy = p.busy_s[d] if d < len(p.busy_s) else ops_s
            row[COLLECTIVES] = row.get(COLLECTIVES, 0.0) + max(busy - ops_s, 0.0) / n
            row[WAITING] = row.get(WAITING, 0.0) + max(p.latency_s - busy, 0.0) / n
    return {"per": "decode step" if -1 not in steps else "run", "steps": n, "latency_s": latency,
            "path": path, "path_calibrated": cal, "devices": devices, "collective_share": share}
