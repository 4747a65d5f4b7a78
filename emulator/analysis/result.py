"""A replay's results as a JSON-able dict: :func:`to_json`, the dict behind ``tierlab replay --json``
(and each chip's entry in ``tierlab compare``).

Top-level keys: ``chip``, ``tiers`` (list: ``name``, ``hits``, ``misses``, ``fills``,
``evictions``, ``writebacks``, ``bytes_read``, ``bytes_written`` and the other counters, ``hit_rate``,
``home_bytes``, ``lent_bytes``), ``links`` (list: ``from``, ``to``, ``bytes_down``, ``bytes_up``),
``energy_j`` (``total`` and splits), ``per_token`` (decode only, else null: ``bytes_by_link``,
``energy_j``, ``latency_s``, ``tokens_per_s``, ``bound``), ``prefill`` (the prompt's prefill, else
null: ``tokens``, ``latency_s``, ``bound``, ``latency_calibrated_s``, ``bound_calibrated``: the time
to first token), ``latency_s`` (whole run), ``by_kind``,
``flush``, ``placement``, ``counts`` (descriptors and tier-0 blocks replayed) and ``provenance``;
``per_turn`` (a conversation trace, else null: one entry per turn, see :mod:`tierlab.analysis.turns`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from tierlab.common.version import tierlab_version
from tierlab.cost.model import Cost, per_token, prefill
from tierlab.pipeline.pim_plan import summary as pim_summary
from tierlab.cost.trace_cost import cost_of
from tierlab.engine.counters import TIER_COUNTERS, link_bytes, tier_dict
from tierlab.pipeline.chip_replay import TraceReplay
from tierlab.analysis.turns import per_turn
from tierlab.traces.format.schema import FORMAT_VERSION
from tierlab.traces.model.families import defaulted_core_keys


def _hit_rate(d: dict) -> float | None:
    n = d["hits"] + d["misses"]
    return d["hits"] / n if n else None


def link_names(chip) -> list[str]:
    """``UPPER-LOWER`` for each link of ``chip``, in order."""
    return [f"{lk.upper}-{lk.lower}" for lk in chip.links]


def chip_per_token(tr: TraceReplay, cst: Cost) -> dict | None:
    """``per_token`` of the one-chip replay ``tr`` costed ``cst`` (decode only, else None): what
    :func:`to_json` holds, and all a serving step reads (:mod:`tierlab.analysis.figures`)."""
    r, ops = tr.result, tr.trace.ops
    run = tr.trace.manifest.get("run") or {}
    return per_token(cst, r.per_op, r.block_bytes, ops.column("step").to_numpy(),
                     np.asarray(ops.column("phase").to_pylist(), dtype=object), run.get("batch", 1),
                     link_names(tr.chip), r.tier_names)


def to_json(tr: TraceReplay, cst: Cost | None = None) -> dict:
    """The result dict behind ``--json``."""
    cst = cst or cost_of(tr)
    r, chip, pl = tr.result, tr.chip, tr.placement
    tiers = []
    for i, name in enumerate(r.tier_names):
        d = {"name": name, **tier_dict(r.tiers[i])}
        d["hit_rate"] = _hit_rate(d)
        d["managed"] = chip.tiers[i].managed
        d["home_bytes"] = int(pl.bytes_by_tier[i])
        d["lent_bytes"] = int(pl.lent_bytes[i])
        d["caching"] = bool(r.meta["geometry"]["caching"][i])
        tiers.append(d)
    lb = r.links
    links = [{"from": lk.upper, "to": lk.lower, "bytes_down": int(lb[i, 0]), "bytes_up": int(lb[i, 1])}
             for i, lk in enumerate(chip.links)]
    ops = tr.trace.ops
    run = tr.trace.manifest.get("run") or {}
    pt = chip_per_token(tr, cst)
    energy = cst.totals()
    energy["by_tier"] = dict(zip(r.tier_names, energy["by_tier"]))
    energy["by_link"] = dict(zip(link_names(chip), energy["by_link"]))
    energy["pim_by_tier"] = dict(zip(r.tier_names, energy["pim_by_tier"]))
    energy["flush"] = cst.flush_j
    by_kind = {}
    for k, kind in enumerate(r.kinds):
        if not r.by_kind[k].any():
            continue
        kl = link_bytes(r.by_kind[k], r.block_bytes)
        by_kind[kind] = {
            "tiers": {name: {c: int(r.by_kind[k, i, j]) for j, c in enumerate(TIER_COUNTERS)}
                      for i, name in enumerate(r.tier_names)},
            "links": {n: {"bytes_down": int(kl[i, 0]), "bytes_up": int(kl[i, 1])}
                      for i, n in enumerate(link_names(chip))},
        }
    fl = r.flush_links
    return {
        "chip": chip.name,
        "tiers": tiers,
        "links": links,
        "energy_j": energy,
        "per_token": pt,
        "prefill": prefill(cst, np.asarray(ops.column("phase").to_pylist(), dtype=object),
                           int(run.get("prompt", 0) or 0) * int(run.get("batch", 1) or 1)),
        "per_turn": per_turn(tr, cst),
        "pim": {"enabled": bool(tr.options.pim),
                "ops_in_memory": pim_summary(tr.pim, chip, ops.column("kind").to_pylist())},
        "latency_s": float(cst.latency_s.sum()),
        "by_kind": by_kind,
        "flush": None if not tr.options.flush else {
            "tiers": [{"name": n, **tier_dict(r.flush[i])} for i, n in enumerate(r.tier_names)],
            "links": [{"from": lk.upper, "to": lk.lower, "bytes_down": int(fl[i, 0]),
                       "bytes_up": int(fl[i, 1])} for i, lk in enumerate(chip.links)]},
        "placement": pl.summary(),
        "counts": {"descriptors": r.n_accesses, "tier0_blocks": r.n_blocks, "ops": int(ops.num_rows)},
        "provenance": {
            "tierlab": (tierlab_version() or "unknown"),
            "trace_format": tr.trace.manifest.get("version", FORMAT_VERSION),
            "trace": str(tr.trace.path),
            "trace_generator": tr.trace.manifest.get("generator"),
            "trace_run": tr.trace.manifest.get("run"),   # how the trace was made: lengths, dtypes, router, seed
            # which path lowered the model: {"path": "hand", "family": ...} or {"path": "capture", "why": ...}
            "trace_lowering": tr.trace.manifest.get("lowering"),
            # core dimensions the model's config left to a default (Transformers' config class, the family's)
            "model_defaults": defaulted_core_keys(tr.trace.manifest.get("model")),
            "trace_manifest_sha256": _manifest_sha256(tr.trace.path),
            "chip_sha256": chip.source_sha256,
            "chip_file": chip.source_file,
            "compute_dtype": cst.dtype,
            "options": tr.options.to_dict(),
            # which kernel counted, and why (tierlab.engine.dispatch); set groups that fell back to
            # the walk mid-stream say so
            "kernel": {**r.meta["kernel"],
                       **({"written_out": r.meta["set_groups_written_out"]}
                          if "set_groups_written_out" in r.meta else {})},
        },
    }


def _manifest_sha256(trace_path) -> str | None:
    """sha256 of the trace's manifest.json (its identity: row counts, model, run, generator)."""
    try:
        return hashlib.sha256((Path(trace_path) / "manifest.json").read_bytes()).hexdigest()
    except OSError:
        return None
