"""A replay's headline figures read straight from its replay and cost objects, without building the
whole ``--json`` dict: what a serving step (:mod:`tierlab.serving.replay`) and a sweep's row
(:mod:`tierlab.design_space.point`) read of it.

Each function computes its figures with the same calls, in the same order, as
:func:`tierlab.analysis.result.to_json` (one chip) or :func:`tierlab.analysis.system_result.to_json`
(a system) with their defaults, so every figure is exactly the dict's (tests/serving/test_figures.py):

* :func:`chip_per_token` / :func:`system_per_token`: ``to_json(...)["per_token"]``;
* :func:`run_figures`: ``latency_s`` (the whole run), ``energy_j["total"]``, and each tier's hits and
  misses (``tiers``; a system: every device's tiers, in device order), with ``per_token``.

A system's figures take :func:`system_cost`: :func:`tierlab.cost.system_cost.cost_system` less what
they never read, each device's own organisation into kernels (``Cost.organisation``, one chip's
calibrated latency: two passes over the device's accesses), which the system's calibration
(:func:`tierlab.cost.system_cost.calibrate`) makes again with kernels never spanning a collective.

Skipped are the rest of the dict: the tiers' other counters, the split by tensor kind, the turns, the
PIM and placement summaries, the prefill, the collectives' and network's tables, the connections and
the provenance (which reads the trace's manifest file again).
"""

from __future__ import annotations

import numpy as np

from tierlab.analysis.result import link_names
from tierlab.cost.model import Cost, per_token
from tierlab.engine.counters import tier_dict


def chip_per_token(tr, cst: Cost) -> dict | None:
    """``to_json(tr, cst)["per_token"]`` of a one-chip replay ``tr`` (a
    :class:`tierlab.pipeline.chip_replay.TraceReplay`) costed ``cst``."""
    r = tr.result
    ops = tr.trace.ops
    run = tr.trace.manifest.get("run") or {}
    return per_token(cst, r.per_op, r.block_bytes, ops.column("step").to_numpy(),
                     np.asarray(ops.column("phase").to_pylist(), dtype=object), run.get("batch", 1),
                     link_names(tr.chip), r.tier_names)


def system_per_token(sr, sc) -> dict | None:
    """``to_json(sr, sc)["per_token"]`` of a system replay ``sr`` (a
    :class:`tierlab.pipeline.system_replay.SystemReplay`) costed ``sc`` (a
    :class:`tierlab.cost.system_cost.SystemCost`), calibrated first as ``to_json`` calibrates it
    (the system file's collectives, no overlap) where it is not yet."""
    from tierlab.analysis.system_result import per_token as system_pt
    from tierlab.cost.system_cost import calibrate

    if sc.calibration is None or sc.calibration.overlap != "none":
        calibrate(sr, sc, None, "none")
    pt = system_pt(sr, sc)
    if pt:
        pt.pop("_coordination")
    return pt


def system_cost(sr):
    """:func:`tierlab.cost.system_cost.cost_system` of the system replay ``sr`` without each device's
    ``Cost.organisation`` (None; every other field the same, devices sharing a replay sharing its
    cost): what :func:`system_per_token` and :func:`run_figures` read of a system."""
    from tierlab.cost.model import cost
    from tierlab.cost.system_cost import SystemCost, cost_collectives

    colls, table = cost_collectives(sr)
    costs: dict[int, Cost] = {}
    for tr in sr.devices:
        r = tr.result
        if id(r) not in costs:
            flops = tr.trace.ops.column("flops").to_numpy().astype(np.float64)
            costs[id(r)] = cost(tr.chip, r.per_op, r.block_bytes, flops, tr.trace.manifest,
                                r.flush if tr.options.flush else None)
    return SystemCost(devices=[costs[id(tr.result)] for tr in sr.devices], collectives=colls, table=table,
                      system=sr.system)


def _tiers(tr) -> list[dict]:
    r = tr.result
    return [{"name": name, "hits": tier_dict(r.tiers[i])["hits"], "misses": tier_dict(r.tiers[i])["misses"]}
            for i, name in enumerate(r.tier_names)]


def run_figures(replay, cst) -> dict:
    """``per_token``, ``latency_s``, ``energy_j`` (``{"total": ...}``) and ``tiers`` (``name``,
    ``hits``, ``misses``; a system's over its devices in order) of a one-chip replay costed ``cst``,
    or of a system replay costed ``cst`` (a SystemCost, :func:`system_cost` will do), equal to those
    keys of ``to_json``."""
    if hasattr(replay, "devices"):                   # a SystemReplay
        from tierlab.analysis.system_result import network_table

        sr, sc = replay, cst
        pt = system_per_token(sr, sc)
        dev_j = float(sum(c.totals()["total"] for c in sc.devices))
        net_j = float(sum(n["energy_j"] for n in network_table(sr, sc)))
        return {"per_token": pt, "latency_s": sc.path(sr).latency_s,
                "energy_j": {"total": dev_j + net_j}, "tiers": [t for tr in sr.devices for t in _tiers(tr)]}
    return {"per_token": chip_per_token(replay, cst), "latency_s": float(cst.latency_s.sum()),
            "energy_j": {"total": cst.totals()["total"]}, "tiers": _tiers(replay)}
