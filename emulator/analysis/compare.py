"""One trace replayed on several chips, side by side.

Each chip's result is exactly what ``tierlab replay TRACE --chip NAME --json`` gives (the same
:func:`tierlab.pipeline.chip_replay.replay_trace` and :func:`tierlab.analysis.result.to_json`); this module only
lines the per-token figures up (their text table is :mod:`tierlab.present.compare`). A chip that
cannot hold the model (placement raises CapacityError) or cannot replay this trace (TraceError: e.g. the trace's alignment is below a tier's block) stays in the
comparison with the reason; any other error stops the comparison.

Per-token figures are for decode (a decode step makes one token per sequence; see :mod:`tierlab.cost.model`):

* ``bytes per token`` on each link (down + up), and ``in memory`` bytes per token read by a PIM unit;
* ``found at TIER (KIND)``: the share of the requests for blocks of that tensor kind arriving at the
  tier that were found there (hits / (hits + misses + bypasses)), over the whole run;
* energy per token split into tiers, links, compute and PIM; latency per token (a decode step),
  tokens/s, tokens per joule (1 / energy per token) and the resource that bounds the step, by the
  roofline and by the calibrated latency.

:func:`cache_notes` says which tier binds each chip and flags a result where a cache tier binds the
decode, so that the memory behind it does not show: two chips whose memories differ (bandwidth or
capacity by more than 10 %) and whose decode is bound by a cache come out alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from tierlab.analysis.result import to_json as replay_json
from tierlab.chip.chipfile import load_chip
from tierlab.chip.hierarchy import Chip
from tierlab.cost.trace_cost import cost_of
from tierlab.engine.options import ReplayOptions
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.common.errors import CapacityError, TraceError
from tierlab.traces.model.dtypes import DTYPE_BITS
from tierlab.traces.format.reader import Trace, open_trace

ENERGY_PARTS = ("tiers", "links", "compute", "pim")


@dataclass
class ChipResult:
    """One chip's outcome: ``result`` is the replay's JSON dict, or ``reason`` why there is none."""

    chip: str
    result: dict | None = None
    reason: str | None = None
    summary: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)    # the chip's first memory tier: name, bandwidth, capacity

    @property
    def ok(self) -> bool:
        return self.result is not None


def load_chips(names: Sequence[str | Chip]) -> list[Chip]:
    """Every chip, loaded before any replay (an unknown name fails at once, naming it)."""
    return [c if isinstance(c, Chip) else load_chip(c) for c in names]


def hit_shares(result: dict) -> dict[str, float]:
    """``"TIER (KIND)" -> found share`` for every tier and tensor kind that saw requests."""
    out = {}
    for kind, v in result["by_kind"].items():
        for tier, c in v["tiers"].items():
            n = c["hits"] + c["misses"] + c["bypasses"]
            if n:
                out[f"{tier} ({kind})"] = c["hits"] / n
    return out


def summarise(result: dict) -> dict:
    """The per-token figures of one replay dict (empty values when the trace has no decode)."""
    return summary_of(result.get("per_token"), hit_shares(result))


def summary_of(pt: dict | None, found: dict, parts=ENERGY_PARTS) -> dict:
    """A comparison row from a run's ``per_token`` dict, its found shares and its energy parts (a
    chip's, or a system's, which add ``network``)."""
    s = {"found": found, "bytes_by_link": {}, "in_memory_bytes": {}, "energy_j": {},
         "energy_per_token_j": None, "latency_per_token_s": None, "tokens_per_s": None,
         "tokens_per_j": None, "bound": None, "bound_calibrated": None, "j_per_token": None,
         "j_per_token_dynamic": None}
    if not pt:
        return s
    s["bytes_by_link"] = dict(pt["bytes_by_link"])
    s["in_memory_bytes"] = dict(pt.get("in_memory_bytes_by_tier", {}))
    s["energy_j"] = {k: pt["energy_split_j"][k] for k in parts}
    s["energy_per_token_j"] = pt["energy_j"]
    s["latency_per_token_s"] = pt["latency_s"]
    s["tokens_per_s"] = pt["tokens_per_s"]
    s["tokens_per_j"] = 1.0 / pt["energy_j"] if pt["energy_j"] > 0 else None
    s["bound"] = pt["bound"]
    s["bound_calibrated"] = pt.get("bound_calibrated")
    # board energy (dynamic + static power x modelled time); energy_per_token_j stays the dynamic
    s["j_per_token"] = pt.get("j_per_token", pt["energy_j"])
    s["j_per_token_dynamic"] = pt["energy_j"]
    return s


def compare(trace, chips: Sequence[str | Chip], options=None, *, extra_rules=(), progress=None) -> list[ChipResult]:
    """Replay ``trace`` (a path or an opened Trace) on each chip, in the order given.

    ``progress(name)`` is called before each chip's replay.
    """
    options = options or ReplayOptions()
    loaded = load_chips(chips)
    if not isinstance(trace, Trace):
        trace = open_trace(trace)
    out = []
    for chip in loaded:
        if progress is not None:
            progress(chip.name)
        try:
            tr = replay_trace(trace, chip, options, extra_rules=extra_rules)
        except (CapacityError, TraceError) as err:
            out.append(ChipResult(chip.name, reason=str(err)))
            continue
        d = replay_json(tr, cost_of(tr))
        out.append(ChipResult(chip.name, result=d, summary=summarise(d), memory=memory_of(chip)))
    return out


def memory_of(chip: Chip) -> dict:
    """The chip's first ``memory`` tier (HBM on a GPU): its name, peak bandwidth and capacity ({} if none)."""
    for t in chip.tiers:
        if t.managed == "memory":
            return {"tier": t.name, "bandwidth_bytes_per_s": float(t.bandwidth_bytes_per_s),
                    "capacity_bytes": int(t.capacity_bytes)}
    return {}


MEMORY_DIFFERS = 0.10     # memories this far apart (bandwidth or capacity) should not come out alike
ALIKE = 0.02              # tokens/s this close is "alike"


def _cache_bound(r: ChipResult, key: str) -> str | None:
    """The cache tier that binds ``r``'s decode by ``key`` (``bound`` or ``bound_calibrated``), or None."""
    b = r.summary.get(key) or ""
    if not b.startswith("tier:"):
        return None
    name = b[len("tier:"):]
    tiers = r.result.get("tiers")
    managed = {t["name"]: t.get("managed") for t in tiers if isinstance(t, dict) and "name" in t} \
        if isinstance(tiers, list) else {}
    return name if managed.get(name) == "cache" else None


def cache_notes(rows: list[ChipResult]) -> list[str]:
    """One line per chip whose decode a cache tier binds (the memory behind it sets no figure), and one
    per pair of such chips whose memories differ by more than 10 % but whose tokens/s (roofline or
    calibrated) agree within 2 %: the cache hides the memory difference."""
    notes, hidden = [], []
    ok = [r for r in rows if r.ok and r.summary.get("bound")]
    for r in ok:
        by = [(k, _cache_bound(r, k)) for k in ("bound", "bound_calibrated")]
        by = [(k, c) for k, c in by if c]
        if by:
            what = " and ".join(f"{'calibrated' if k == 'bound_calibrated' else 'roofline'}" for k, _ in by)
            mem = r.memory.get("tier", "its memory")
            notes.append(f"{r.chip}: decode bound by its cache tier {by[0][1]} ({what}); {mem} behind it does "
                         f"not set the speed")
    for i, a in enumerate(ok):
        for b in ok[i + 1:]:
            if not (a.memory and b.memory):
                continue
            diffs = [f"{k.split('_')[0]} {_fmt(a.memory[k], k)} vs {_fmt(b.memory[k], k)}"
                     for k in ("bandwidth_bytes_per_s", "capacity_bytes")
                     if abs(a.memory[k] - b.memory[k]) > MEMORY_DIFFERS * max(a.memory[k], b.memory[k])]
            if not diffs:
                continue
            for key, tps, label in (("bound", "tokens_per_s", "roofline"),
                                    ("bound_calibrated", None, "calibrated")):
                if not (_cache_bound(a, key) or _cache_bound(b, key)):
                    continue
                ta, tb = (_tps(a, tps), _tps(b, tps))
                if ta and tb and abs(ta - tb) <= ALIKE * max(ta, tb):
                    hidden.append(f"{a.chip} = {b.chip} ({label} {ta:.4g} vs {tb:.4g} tok/s) though their memories "
                                  f"differ ({', '.join(diffs)}): a cache tier binds the decode and hides the "
                                  f"difference")
    return notes + ["warning: " + h for h in hidden]


def _tps(r: ChipResult, key: str | None) -> float | None:
    if key:
        return r.summary.get(key)
    pt = r.result.get("per_token") or {}
    lat = pt.get("latency_calibrated_s")
    return pt.get("batch", 1) / lat if lat else None


def _fmt(v: float, key: str) -> str:
    return f"{v / 1e12:.3g} TB/s" if key.startswith("bandwidth") else f"{v / 1e9:.4g} GB"


def model_info(trace) -> dict:
    """The model's parameters and those one token activates (MoE: the routed experts), in count and
    (``active_weight_bytes``) in bytes of the trace's weights dtype (excluding quantisation scales)."""
    spec = trace.manifest.get("spec") or {}
    run = trace.manifest.get("run") or {}
    wd = run.get("weights", "bf16")
    d = {"name": spec.get("name"), "params": spec.get("params"), "active_params": spec.get("active_params"),
         "weights": wd}
    if d["params"] is None or d["active_params"] is None or wd not in DTYPE_BITS:
        return d
    d["active_weight_bytes"] = d["active_params"] * DTYPE_BITS[wd] // 8
    return d


def to_json(rows: list[ChipResult], trace, options) -> dict:
    """``--json``: the run, then per chip its summary and its full replay dict (or the reason)."""
    return {
        "model": model_info(trace),
        "run": trace.manifest.get("run"),
        "pim": bool(options.pim),
        "chips": [{"chip": r.chip, "fits": r.ok, "reason": r.reason, "summary": r.summary or None,
                   "memory": r.memory or None, "replay": r.result} for r in rows],
        "notes": cache_notes(rows),
    }


def union_keys(rows: list[ChipResult], key: str) -> list[str]:
    """The names under ``summary[key]`` of every chip, in order of first appearance."""
    names: list[str] = []
    for r in rows:
        for n in r.summary.get(key, {}):
            if n not in names:
                names.append(n)
    return names


def table_rows(rows: list[ChipResult]) -> list[tuple[str, list]]:
    """(metric, value per chip) in display order; None where a chip has no such value."""
    out: list[tuple[str, list]] = []
    ok = [r.summary if r.ok else None for r in rows]

    def row(label, get):
        out.append((label, [None if s is None else get(s) for s in ok]))

    for n in union_keys(rows, "bytes_by_link"):
        row(f"bytes/token {n}", lambda s, n=n: s["bytes_by_link"].get(n))
    for n in union_keys(rows, "in_memory_bytes"):
        row(f"bytes/token in memory {n} (PIM)", lambda s, n=n: s["in_memory_bytes"].get(n))
    for n in union_keys(rows, "found"):
        row(f"found at {n}", lambda s, n=n: s["found"].get(n))
    for p in ENERGY_PARTS:
        row(f"energy/token {p}", lambda s, p=p: s["energy_j"].get(p))
    row("energy/token total", lambda s: s["energy_per_token_j"])
    row("energy/token board", lambda s: s["j_per_token"])
    row("latency/token", lambda s: s["latency_per_token_s"])
    row("tokens/s", lambda s: s["tokens_per_s"])
    row("tokens/J", lambda s: s["tokens_per_j"])
    row("bound", lambda s: s["bound"])
    row("bound calibrated", lambda s: s.get("bound_calibrated"))
    return out


def csv_rows(rows: list[ChipResult]) -> tuple[list[str], list[list]]:
    """One CSV row per chip: ``chip``, ``fits``, ``reason``, then every metric (raw SI numbers)."""
    metrics = table_rows(rows)
    header = ["chip", "fits", "reason"] + [label for label, _ in metrics]
    body = [[r.chip, r.ok, r.reason or ""] + ["" if vals[i] is None else vals[i] for _, vals in metrics]
            for i, r in enumerate(rows)]
    return header, body
