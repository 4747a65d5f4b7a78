"""A system replay's results as a JSON-able dict: :func:`to_json`, the dict behind
``tierlab run MODEL --system NAME --json``.

Top-level keys:

* ``system`` (its name), ``chip``, ``parallelism`` (``tp``, ``pp``, ``ep``, ``dp`` from the trace
  manifest's run, 1 when absent), ``n_devices`` (devices of the trace);
* ``per_token`` (decode only, else null): ``steps``, ``batch``, ``tokens_per_step`` (dp x batch),
  ``latency_s`` (a decode step's critical path, :mod:`tierlab.cost.system_cost`), ``tokens_per_s``
  (tokens per step / step latency: the step's fill and drain included), ``steady_tokens_per_s``
  (continuous decoding, the microbatches cycling through the pipeline: :func:`steady_rate`, from the
  busiest device's busy time :attr:`tierlab.cost.system_cost.Path.busy_s`; equal to
  ``tokens_per_s`` with one microbatch), ``energy_j`` (J per token: devices' tier, link, compute and PIM
  energy plus the network's), ``energy_split_j`` (``tiers``, ``links``, ``compute``, ``pim``,
  ``network``), ``bytes_by_link`` (chip links summed over devices, and the network fabrics
  ``scale_up`` / ``scale_out``: link-bytes carried), ``bound`` and ``time_by_resource_s`` (critical-
  path time per step by bounding resource), ``latency_model`` (what the bound assumes);
* ``devices``: one object per device: ``device``, ``chip``, ``tiers``, ``links`` (as in the one-chip
  ``--json``), ``energy_j``, ``latency_s`` (its ops' summed roofline latency), ``placement``, ``counts``;
* ``network``: per fabric ``name`` (``scale_up`` / ``scale_out``), ``fabric``, ``bytes`` (link-bytes
  carried over the run), ``messages``, ``energy_j``;
* ``collectives``: per kind and algorithm ``kind``, ``algorithm``, ``count``, ``bytes_per_rank``
  (the most bytes a rank sends in one collective, summed over the ``count``), ``time_s`` (summed),
  ``energy_j``, over the whole run;
* ``coordination`` (decode, per step unless named): ``collectives_per_step``,
  ``collectives_per_token``, ``collective_time_on_path_s`` and ``collective_time_share`` (time in
  collectives on the critical path / step latency), ``per_message_overhead_s`` (sum over the step's
  collectives of steps x latency), ``messages_per_step`` (messages over all fabrics), and the run's
  ``connections`` (peer processes and peer nodes per rank, :func:`tierlab.cost.system_cost.connections`);
* ``energy_j`` (whole run: ``total``, ``devices``, ``network``), ``latency_s`` (the whole run's
  critical path) and ``provenance`` (the one-chip provenance plus ``system_file``,
  ``system_sha256``, ``collective_algo`` and ``slices``: how the devices' slices were replayed —
  ``replayed_as`` per device, the device whose replay its counts are, and ``twins``, each twin
  device with the device it replayed beside, :mod:`tierlab.engine.twins`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tierlab.common.errors import CapacityError, TraceError
from tierlab.analysis.compare import ENERGY_PARTS, ChipResult, summary_of
from tierlab.analysis.result import link_names, to_json as chip_json
from tierlab.cost.model import Cost
from tierlab.cost.system_cost import SystemCost, calibrate, connections, cost_system, decode_steps
from tierlab.engine.counters import link_bytes
from tierlab.network.schedule import FABRICS, fabric_obj
from tierlab.engine.options import ReplayOptions
from tierlab.system.model import System
from tierlab.system.systemfile import load_system
from tierlab.pipeline.system_replay import SystemReplay, check_fits, replay_system
from tierlab.traces.format.reader import Trace, open_trace

PARALLELISM = ("tp", "pp", "ep", "dp")
LATENCY_MODEL = ("critical path over devices, a bound: each op its roofline latency, a collective from "
                 "its last rank's arrival for max(network time, its buffers' memory time); the busiest "
                 "link bounds a collective; no congestion between concurrent collectives, no packet-level "
                 "simulation; compute and communication of one device do not overlap")


def parallelism(trace) -> dict:
    run = trace.manifest.get("run") or {}
    return {k: int(run.get(k) or 1) for k in PARALLELISM}


def fabrics(system) -> list[str]:
    """The fabric roles the system has (``scale_up``, and ``scale_out`` across nodes)."""
    return [f for f in FABRICS if (system.scale_up if f == FABRICS[0] else system.scale_out) is not None]


def _step_collectives(sc: SystemCost, s: int) -> list[int]:
    return [i for i, c in enumerate(sc.table) if c["phase"] == "decode" and c["step"] == s]


def steady_rate(tokens: int, latency_s: float, busy_s: float, microbatches: int) -> float:
    """Tokens/s of continuous decoding: the step's ``microbatches`` cycle through the pipeline, a
    microbatch's next token entering the first stage once its last one leaves the last stage. A
    round (every microbatch one token on) takes the longer of the busiest device's work
    (``busy_s``) and one microbatch's way through every stage, ``latency_s`` less the ``m - 1``
    stage times (``busy_s / m`` each, stages balanced) by which the last microbatch trails the
    first. One microbatch: the one-batch rate ``tokens / latency_s``; ``m >= pp``: the busiest
    device bounds."""
    m = max(1, microbatches)
    way = latency_s - (m - 1) * busy_s / m
    period = max(busy_s, way)
    return tokens / period if period > 0 else float("inf")


def per_token(sr: SystemReplay, sc: SystemCost) -> dict | None:
    """Decode figures per token of the system (see the module docstring); None without decode."""
    steps = decode_steps(sr)
    if not steps:
        return None
    run = sr.trace.manifest.get("run") or {}
    batch = int(run.get("batch", 1))
    tokens = parallelism(sr.trace)["dp"] * batch
    phase = np.asarray(sr.trace.ops.column("phase").to_pylist(), dtype=object)
    step = sr.trace.ops.column("step").to_numpy()
    names = link_names(sr.system.chip)
    roles = fabrics(sr.system)
    lat, busy, colls, share, overhead, msgs = [], [], [], [], [], []
    en = {k: [] for k in ("tiers", "links", "compute", "pim", "network")}
    total = []          # a step's energy: each device's ops summed as a chip's step is, plus the network
    lb = {n: [] for n in names + roles}
    by_res: dict[str, float] = {}
    for s, ids in steps.items():
        p = sc.path(sr, ids)
        lat.append(p.latency_s)
        busy.append(max(p.busy_s, default=0.0))
        share.append(p.collective_s / p.latency_s if p.latency_s > 0 else 0.0)
        colls.append(p.collective_s)
        for r, t in p.by_resource_s.items():
            by_res[r] = by_res.get(r, 0.0) + t / len(steps)
        parts = {k: 0.0 for k in en}
        step_j = 0.0
        chip_links = np.zeros(len(names))
        for d, tr in enumerate(sr.devices):
            g = sr.op_ids[d]
            local = np.nonzero((phase[g] == "decode") & (step[g] == s))[0]
            tot = sc.devices[d].totals(local)
            for k in ("tiers", "links", "compute", "pim"):
                parts[k] += tot[k]
            step_j += float(sc.devices[d].energy_j[local].sum())
            chip_links += link_bytes(tr.result.per_op[local].sum(0), tr.result.block_bytes).sum(1)
        cids = _step_collectives(sc, s)
        parts["network"] = sum(sc.collectives[c].energy_j for c in cids)
        total.append(step_j + parts["network"])
        for k in en:
            en[k].append(parts[k])
        for i, n in enumerate(names):
            lb[n].append(chip_links[i])
        for f in roles:
            lb[f].append(sum(sc.collectives[c].bytes_by_fabric.get(f, 0.0) for c in cids))
        overhead.append(sum(sc.collectives[c].overhead_s for c in cids))
        msgs.append(sum(sum(sc.collectives[c].messages_by_fabric.values()) for c in cids))
    step_latency = float(np.mean(lat))
    cal = calibrated(sr, sc, steps, tokens) if sc.calibration is not None else {}
    split = {k: float(np.mean(v)) / tokens for k, v in en.items()}
    n_coll = sum(len(_step_collectives(sc, s)) for s in steps) / len(steps)
    out = {
        "steps": len(steps),
        "batch": batch,
        "tokens_per_step": tokens,
        "bytes_by_link": {n: float(np.mean(v)) / tokens for n, v in lb.items()},
        "energy_j": float(np.mean(total)) / tokens,
        "energy_split_j": split,
        "latency_s": step_latency,
        "tokens_per_s": tokens / step_latency if step_latency > 0 else float("inf"),
        "steady_tokens_per_s": steady_rate(tokens, step_latency, float(np.mean(busy)),
                                           int(run.get("pp_microbatches") or 1)),
        "bound": max(by_res, key=lambda r: by_res[r]) if by_res else None,
        "time_by_resource_s": by_res,
        "latency_model": LATENCY_MODEL,
        **{k: v for k, v in cal.items() if not k.startswith("_")},
        "_coordination": {
            "collectives_per_step": n_coll,
            "collectives_per_token": n_coll / tokens,
            "collective_time_on_path_s": float(np.mean(colls)),
            "collective_time_share": float(np.mean(share)),
            "per_message_overhead_s": float(np.mean(overhead)),
            "messages_per_step": float(np.mean(msgs)),
            **cal.get("_coordination", {}),
        },
    }
    return board_energy(out, sc)


def board_energy(out: dict, sc: SystemCost) -> dict:
    """The per-token board-energy keys (:func:`tierlab.cost.model.add_board_energy`): every device's
    static power over the step's modelled time (calibrated where there is one), dynamic only if a
    device's chip has no ``[power]``."""
    from tierlab.cost.model import add_board_energy

    watts = [c.static_power_w for c in sc.devices]
    one = sc.devices[0] if sc.devices else None
    if one is None or any(w is None for w in watts):
        return add_board_energy(out, replace(one, static_power_w=None), 0.0, "dynamic only") if one else out
    cal = out.get("latency_calibrated_s")
    time_s, basis = (cal, "calibrated") if cal is not None else (out["latency_s"], "roofline")
    return add_board_energy(out, replace(one, static_power_w=float(sum(watts))), time_s, basis)


def calibration_settings(sc: SystemCost) -> dict:
    """The calibrated latency's settings: the devices' organisation (as one chip's
    ``calibration``) and how collectives run."""
    c = sc.calibration
    org = c.organisations[0] if c.organisations else None
    st = c.settings
    return {"fusion": getattr(org, "fusion", None), "overlap": getattr(org, "overlap", None),
            "kernel_overhead_s": getattr(org, "kernel_overhead_s", 0.0),
            "achievable": dict(getattr(org, "achievable", {}) or {}),
            "comm_overlap": c.overlap,
            "collectives": {"library": st.library, "protocol": st.protocol, "launch_s": st.launch_s,
                            "skew_s": st.skew_s, "overheads": st.overheads,
                            "model": "launch + base latency + steps x step latency + bytes / (bandwidth x "
                                     "achievable x protocol efficiency) + skew; the least over the library's "
                                     "algorithms and protocols (tierlab.network.protocols)"}}


def calibrated(sr: SystemReplay, sc: SystemCost, steps: dict, tokens: int) -> dict:
    """The calibrated per-token keys of a system (:attr:`SystemCost.calibration`): a decode step's
    critical path with each device's ops organised as one chip's and collectives as they run."""
    lat, colls, by_res, cont = [], [], {}, []
    util: dict[str, list] = {}
    for ids in steps.values():
        p = sc.path(sr, ids, calibrated=True)
        lat.append(p.latency_s)
        colls.append(p.collective_s)
        cont.append(sum(p.contention_s.values()))
        for f, u in busiest_utilisation(sc, p.spans, p.latency_s).items():
            util.setdefault(f, []).append(u)
        for r, t in p.by_resource_s.items():
            by_res[r] = by_res.get(r, 0.0) + t / len(steps)
    step = float(np.mean(lat))
    cal = sc.calibration
    phase = np.asarray(sr.trace.ops.column("phase").to_pylist(), dtype=object)
    step_of = sr.trace.ops.column("step").to_numpy()
    kernels = []                  # kernels per step on the device that launches the most
    for s in steps:
        kernels.append(max((int(cal.kernel_start[d][(phase[g] == "decode") & (step_of[g] == s)].sum())
                            for d, g in enumerate(np.asarray(x, np.int64) for x in sr.op_ids)), default=0))
    n_coll = float(np.mean([sum(1 for c in sc.table if c["phase"] == "decode" and c["step"] == s) for s in steps]))
    overhead = cal.organisations[0].kernel_overhead_s if cal.organisations else 0.0
    return {
        "latency_calibrated_s": step,
        "tokens_per_s_calibrated": tokens / step if step > 0 else float("inf"),
        "bound_calibrated": max(by_res, key=lambda r: by_res[r]) if by_res else None,
        "time_by_resource_calibrated_s": by_res,
        "kernels": float(np.mean(kernels)),
        "overhead_s": float(np.mean(kernels)) * overhead,
        "collective_launches": n_coll,
        "calibration": calibration_settings(sc),
        "_coordination": {
            "collective_time_on_path_calibrated_s": float(np.mean(colls)),
            "collective_time_share_calibrated": float(np.mean([c / t if t > 0 else 0.0 for c, t in zip(colls, lat)])),
            "contention_s": float(np.mean(cont)),
            "busiest_link_utilisation": {f: float(np.mean(v)) for f, v in util.items()},
        },
    }


def busiest_utilisation(sc: SystemCost, spans: dict, latency_s: float) -> dict:
    """Per fabric, the busiest link's utilisation over a step: the bytes its collectives put on it /
    (its rate x the step's calibrated latency)."""
    from tierlab.network.schedule import link_rate

    per_link: dict = {}
    for c in spans:
        for link, b in sc.collectives[c].link_loads:
            per_link[link] = per_link.get(link, 0.0) + b
    out: dict = {}
    for link, b in per_link.items():
        u = b / (link_rate(sc.system, link) * latency_s) if latency_s > 0 else 0.0
        out[link[0]] = max(out.get(link[0], 0.0), u)
    return out


def collectives_table(sc: SystemCost) -> list[dict]:
    """Per kind and algorithm over the whole run (see the module docstring); with a calibration,
    ``time_calibrated_s`` (summed) and ``calibrated`` (per calibrated algorithm/protocol, its count)."""
    out: dict[tuple, dict] = {}
    cal = sc.calibration
    for i, cc in enumerate(sc.collectives):
        e = out.setdefault((cc.kind, cc.algorithm), {"kind": cc.kind, "algorithm": cc.algorithm, "count": 0,
                                                     "bytes_per_rank": 0.0, "time_s": 0.0, "energy_j": 0.0})
        e["count"] += 1
        e["bytes_per_rank"] += cc.bytes_sent_per_rank
        e["time_s"] += cc.time_s
        e["energy_j"] += cc.energy_j
        if cal is not None:
            t = cal.collectives[i]
            e["time_calibrated_s"] = e.get("time_calibrated_s", 0.0) + t.time_s
            e["contention_s"] = e.get("contention_s", 0.0) + cal.contention_s.get(i, 0.0)
            ways = e.setdefault("calibrated", {})
            ways[f"{t.algorithm}/{t.protocol}"] = ways.get(f"{t.algorithm}/{t.protocol}", 0) + 1
    return list(out.values())


def prefill(sr: SystemReplay, sc: SystemCost) -> dict | None:
    """The prefill of the trace's prompt (time to first token, without queueing or the host):
    ``tokens`` (prompt x batch x dp), ``latency_s`` and ``bound`` (the roofline critical path over the
    prefill ops), ``latency_calibrated_s`` and ``bound_calibrated`` (the calibrated one); None without
    prefill."""
    phase = np.asarray(sr.trace.ops.column("phase").to_pylist(), dtype=object)
    ids = np.flatnonzero(phase == "prefill")
    if not len(ids):
        return None
    run = sr.trace.manifest.get("run") or {}
    tokens = int(run.get("prompt", 0) or 0) * int(run.get("batch", 1) or 1) * parallelism(sr.trace)["dp"]
    p = sc.path(sr, ids)
    out = {"tokens": tokens, "latency_s": p.latency_s,
           "bound": max(p.by_resource_s, key=p.by_resource_s.get) if p.by_resource_s else None,
           "latency_calibrated_s": None, "bound_calibrated": None}
    if sc.calibration is not None:
        c = sc.path(sr, ids, calibrated=True)
        out["latency_calibrated_s"] = c.latency_s
        out["bound_calibrated"] = max(c.by_resource_s, key=c.by_resource_s.get) if c.by_resource_s else None
    return out


def network_table(sr: SystemReplay, sc: SystemCost) -> list[dict]:
    out = []
    for f in fabrics(sr.system):
        fab = fabric_obj(sr.system, f)
        b = sum(cc.bytes_by_fabric.get(f, 0.0) for cc in sc.collectives)
        out.append({"name": f, "fabric": fab.name, "bytes": float(b),
                    "messages": int(sum(cc.messages_by_fabric.get(f, 0) for cc in sc.collectives)),
                    "energy_j": float(b * fab.energy_j_per_byte)})
    return out


def device_entry(d: int, full: dict, cst: Cost) -> dict:
    return {"device": d, "chip": full["chip"], "tiers": full["tiers"], "links": full["links"],
            "energy_j": full["energy_j"], "latency_s": full["latency_s"], "placement": full["placement"],
            "counts": full["counts"], "by_kind": full["by_kind"]}


def to_json(sr: SystemReplay, sc: SystemCost | None = None, *, collectives=None, overlap: str = "none") -> dict:
    """The result dict behind ``--json`` of a system run. ``collectives`` (an
    :class:`tierlab.network.protocols.Settings`, default the system file's) and ``overlap``
    (``none``, ``tp``, ``ep``) set the calibrated latency (:func:`tierlab.cost.system_cost.calibrate`)."""
    sc = sc or cost_system(sr)
    if sc.calibration is None or collectives is not None or overlap != sc.calibration.overlap:
        calibrate(sr, sc, collectives, overlap)
    shared: dict[tuple[int, int], dict] = {}      # devices sharing a replay and its cost: one JSON
    for tr, cst in zip(sr.devices, sc.devices):
        if (id(tr.result), id(cst)) not in shared:
            shared[(id(tr.result), id(cst))] = chip_json(tr, cst)
    fulls = [shared[(id(tr.result), id(cst))] for tr, cst in zip(sr.devices, sc.devices)]
    pt = per_token(sr, sc)
    coord = pt.pop("_coordination") if pt else {}
    coord["connections"] = connections(sc, sr.system)
    net = network_table(sr, sc)
    dev_j = float(sum(f["energy_j"]["total"] for f in fulls))
    net_j = float(sum(n["energy_j"] for n in net))
    prov = dict(fulls[0]["provenance"]) if fulls else {}
    prov.update({"trace_format": sr.trace.manifest.get("version"), "system_file": sr.system.source_file,
                 "system_sha256": sr.system.source_sha256, "collective_algo": sr.collective_algo,
                 "slices": {"replayed_as": list(sr.replayed_as),
                            "twins": {str(d): b for d, b in sorted(sr.twin_of.items())}}})
    return {
        "system": sr.system.name,
        "chip": sr.system.chip.name,
        "n_devices": sr.trace.n_devices,
        "parallelism": parallelism(sr.trace),
        "per_token": pt,
        "prefill": prefill(sr, sc),
        "devices": [device_entry(d, f, c) for d, (f, c) in enumerate(zip(fulls, sc.devices))],
        "network": net,
        "collectives": collectives_table(sc),
        "coordination": coord,
        "energy_j": {"total": dev_j + net_j, "devices": dev_j, "network": net_j},
        "latency_s": sc.path(sr).latency_s,
        "provenance": prov,
    }


def summarise(d: dict) -> dict:
    """A system run's per-token figures in the shape of :func:`tierlab.analysis.compare.summarise`
    (so systems and chips line up in one comparison); ``energy_j`` adds ``network``."""
    pt = d.get("per_token")
    found: dict[str, list] = {}
    for dev in d["devices"]:          # found shares over all devices' requests
        for kind, v in dev["by_kind"].items():
            for tier, c in v["tiers"].items():
                f = found.setdefault(f"{tier} ({kind})", [0, 0])
                f[0] += c["hits"]
                f[1] += c["hits"] + c["misses"] + c["bypasses"]
    return summary_of(pt, {k: h / n for k, (h, n) in found.items() if n}, (*ENERGY_PARTS, "network"))


def compare_systems(trace, systems, options=None, *, extra_rules=(), collective_algo="auto", progress=None):
    """Replay ``trace`` on each system (names, files or System objects), in order; one
    :class:`tierlab.analysis.compare.ChipResult` each (its ``chip`` the system's name). A system
    whose chip cannot hold a device's slice, or cannot replay it, stays with the reason."""
    options = options or ReplayOptions()
    loaded = [s if isinstance(s, System) else load_system(s) for s in systems]
    if not isinstance(trace, Trace):
        trace = open_trace(trace)
    for s in loaded:
        check_fits(trace, s)
    out = []
    for s in loaded:
        if progress is not None:
            progress(s.name)
        try:
            sr = replay_system(trace, s, options, extra_rules=extra_rules, collective_algo=collective_algo)
        except (CapacityError, TraceError) as err:
            out.append(ChipResult(s.name, reason=str(err)))
            continue
        d = to_json(sr)
        out.append(ChipResult(s.name, result=d, summary=summarise(d)))
    return out
