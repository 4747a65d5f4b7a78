"""Sums of a costed replay for the report's figures (pure: no matplotlib; nothing counted or costed
here, only the per-op counts of :class:`emulator.pipeline.TraceReplay` and the per-op
:class:`emulator.cost.model.Cost` added up by op kind).

* :func:`latency_by_kind` -- per op kind, the latency of a decode step (or, without decode, of the
  whole run) split by each op's bound resource;
* :func:`tier_bytes_per_token` -- bytes read and written at each tier per decode token;
* :func:`roofline_points` / :func:`roofline_ceilings` -- a hierarchical roofline: per phase and op
  kind and per tier, the arithmetic intensity FLOPs / (bytes read + written at that tier) and the
  attained FLOP/s = FLOPs / the ops' summed roofline latency, against the compute peak of the run's
  dtype and each tier's bandwidth (attainable = min(peak, bandwidth x intensity)).
"""

from __future__ import annotations

import numpy as np

from emulator.engine.counters import BYTES_READ, BYTES_WRITTEN


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
    tb = (r.per_op[:, :, BYTES_READ] + r.per_op[:, :, BYTES_WRITTEN]).astype(np.float64)
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
