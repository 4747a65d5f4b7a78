"""A replay's headline figures read straight from its replay and cost objects, without building the
whole ``--json`` dict: what a serving step (:mod:`tierlab.serving.replay`) and a sweep's row
(:mod:`tierlab.design_space.point`) read of it.

Each function computes its figures with the same calls, in the same order, as
:func:`tierlab.analysis.result.to_json` (one chip) or :func:`tierlab.analysis.system_result.to_json`
(a system) with their defaults, so every figure is exactly the dict's (tests/serving/test_figures.py):

* :func:`chip_per_token` / :func:`system_per_token`: ``to_json(...)["per_token"]``;
* :func:`run_figures`: ``latency_s`` (the whole run), ``energy_j["total"]``, and each tier's hits and
  misses (``tiers``; a system: every device's tiers, in device order), with ``per_token``.

A system's figures take :func:`system_cost`: :func:`tierlab.cost.system_cost.cost_system` with
``organised=False``, without what they never read, each device's own organisation into kernels
(``Cost.organisation``: two passes over the device's accesses), which the system's calibration
(:func:`tierlab.cost.system_cost.calibrate`) makes again with kernels never spanning a collective.
:func:`chip_per_token` is :mod:`tierlab.analysis.result`'s, the one ``to_json`` holds.

Skipped are the rest of the dict: the tiers' other counters, the split by tensor kind, the turns, the
PIM and placement summaries, the prefill, the collectives' and network's tables, the connections and
the provenance (which reads the trace's manifest file again).
"""

from __future__ import annotations

from tierlab.analysis.result import chip_per_token  # noqa: F401  (one of this module's figures)
from tierlab.engine.counters import tier_dict


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
    ``Cost.organisation``: what :func:`system_per_token` and :func:`run_figures` read of a system."""
    from tierlab.cost.system_cost import cost_system

    return cost_system(sr, organised=False)


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
