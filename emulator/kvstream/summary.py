"""What serving a request stream counted: one row per request (a pyarrow table, written to Parquet)
and a summary dict with stable keys (:data:`SUMMARY_KEYS`).

Per request: ``arrival_s``, ``admitted_s``, ``first_token_s``, ``finish_s``, ``ttft_s``, ``tpot_s``
(null for one output token), ``e2e_s``, ``input_tokens``, ``output_tokens``, ``tokens_computed``
(prefilled), ``tokens_<tier>`` (prompt tokens served from each tier: held in HBM, or loaded),
``recomputed_<tier>`` (tokens a tier held but recomputing was estimated faster), ``bytes_<tier>``
(bytes loaded from each lower tier: ``tokens x KV bytes per token`` of the replica), ``replica``;
disaggregated, also ``decode_replica``, ``transfer_bytes`` (the prompt's KV sent to it),
``transfer_s`` (the handover's time) and ``transfer_wait_s`` (prefill done to the handover's start).

Summary (seconds, bytes, joules, US dollars):

- ``ttft_s``, ``tpot_s``, ``e2e_s``: ``p50``, ``p90``, ``p99``, ``mean``.
- ``goodput_rps``: requests meeting every SLO given (``slo``) per second of the run
  (first arrival to last finish); ``slo_met`` their share.
- ``output_tokens_per_s`` and ``output_tokens_per_s_per_chip`` (over ``dp x tp x pp`` chips).
- ``hit_ratio``: per tier, prompt tokens served from it over all prompt tokens; ``total``.
- ``load_or_recompute``: per lower tier, tokens loaded and tokens recomputed instead.
- ``tier_bytes``: per tier, ``loaded`` and ``written`` bytes and ``evicted_blocks``;
  ``bytes_moved_per_output_token`` (loads and writes between tiers over output tokens).
- ``energy``: ``steps_j`` (the replayed steps), ``tiers_j`` (bytes moved x each tier's energy per
  byte), ``transfer_j`` (the KV handover's, disaggregated), ``j_per_output_token`` (all).
- ``kv_transfer``: null co-located; disaggregated, :meth:`tierlab.kvstream.transfer.KvHandover.to_dict`
  (``transfers``, ``bytes``, ``link_bytes_by_fabric``, ``time_s``, ``energy_j``) and the handover's
  time per request, ``per_request_s`` (p50/p90/p99/mean), and its wait, ``wait_s``.
- ``usd_per_mtok``: the hardware's price per hour (the system's pro rata, or the chip's;
  :func:`tierlab.cost.price.usd_per_mtok`) over output tokens per second; null without a price.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SUMMARY_KEYS = ("model", "target", "parallelism", "requests", "duration_s", "input_tokens", "output_tokens",
                "ttft_s", "tpot_s", "e2e_s", "slo", "goodput_rps", "slo_met", "output_tokens_per_s",
                "output_tokens_per_s_per_chip", "hit_ratio", "load_or_recompute", "tier_bytes",
                "bytes_moved_per_output_token", "energy", "usd_per_mtok", "kv_bytes_per_token", "hbm_kv_tokens",
                "tiers", "steps", "step_surface", "settings", "kv_transfer")


@dataclass
class RequestsResult:
    """The table of requests (module docstring) and the summary dict."""

    table: pa.Table
    summary: dict
    tiers: list = field(default_factory=list)

    def to_dict(self) -> dict:
        """The summary: exactly ``tierlab requests --json``."""
        return self.summary

    def to_arrow(self) -> pa.Table:
        """One row per request (module docstring)."""
        return self.table

    def to_parquet(self, path) -> None:
        """Write the table to ``path`` (through a temporary file in the same directory, renamed)."""
        write_parquet(self.table, path)


def write_parquet(table: pa.Table, path) -> None:
    """Write ``table`` to ``path`` atomically: a temporary name beside it, then a rename."""
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _pcts(x: np.ndarray) -> dict:
    x = x[np.isfinite(x)]
    if not x.size:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    p = np.percentile(x, [50, 90, 99])
    return {"p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2]), "mean": float(x.mean())}


def _price(chip, system, chips: int) -> float | None:
    if system is not None:
        return None if system.price is None else system.price.usd_per_hour * chips / system.n_chips
    return None if chip.price is None else chip.price.usd_per_hour


def build_result(sim, *, spec, chip, system, tiers, devices: int, dp: int, arrival: np.ndarray,
                 slo_ttft_s, slo_tpot_s, surface, settings: dict) -> RequestsResult:
    """The table and summary of a finished simulation (``sim.Sim``)."""
    names = [t.name for t in tiers]
    inp, out = sim.inp, sim.out
    ttft = sim.first - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (sim.finish - sim.first) / np.maximum(out - 1, 1), np.nan)
    e2e = sim.finish - arrival
    cols = {"request": np.arange(len(inp)), "replica": sim.replica_of, "arrival_s": arrival,
            "admitted_s": sim.admitted, "first_token_s": sim.first, "finish_s": sim.finish, "ttft_s": ttft,
            "tpot_s": tpot, "e2e_s": e2e, "input_tokens": inp, "output_tokens": out,
            "tokens_computed": sim.computed}
    loaded = {}
    for j, n in enumerate(names):
        cols[f"tokens_{n}"] = sim.tok_from[:, j]
        if j:
            cols[f"recomputed_{n}"] = sim.tok_recomputed[:, j]
            b = sim.tok_from[:, j].astype(np.float64) * sim.kv_tok
            cols[f"bytes_{n}"] = b
            loaded[n] = float(b.sum())
    ho = getattr(sim, "handover", None)
    if ho is not None:
        cols |= {"decode_replica": sim.decode_replica_of, "transfer_bytes": sim.transfer_bytes,
                 "transfer_s": sim.transfer_s, "transfer_wait_s": sim.transfer_wait_s}
    table = pa.table({k: pa.array(v) for k, v in cols.items()})
    chips = devices * dp
    t0, t1 = float(np.min(arrival)), float(np.nanmax(sim.finish))
    dur = max(t1 - t0, 1e-12)
    n_out = int(out.sum())
    ok = np.isfinite(ttft)
    if slo_ttft_s is not None:
        ok &= ttft <= slo_ttft_s
    if slo_tpot_s is not None:
        ok &= (out <= 1) | (tpot <= slo_tpot_s)
    block_bytes = sim.kv_tok * sim.bt
    tier_bytes, tier_j = {}, 0.0
    for j, t in enumerate(tiers):
        written = float(sim.written_blocks[j]) * block_bytes
        ld = loaded.get(t.name, 0.0)
        tier_bytes[t.name] = {"loaded": ld, "written": written, "evicted_blocks": int(sim.evicted_blocks[j]),
                              "written_blocks": int(sim.written_blocks[j])}
        tier_j += (ld + written) * t.energy_j_per_byte
    moved = sum(v["loaded"] + v["written"] for v in tier_bytes.values())
    total_in = float(inp.sum())
    hit = {n: float(sim.tok_from[:, j].sum()) / total_in for j, n in enumerate(names)}
    hit["total"] = float(sim.tok_from.sum()) / total_in
    lor = {n: {"loaded_tokens": int(sim.tok_from[:, j].sum()), "recomputed_tokens": int(sim.tok_recomputed[:, j].sum())}
           for j, n in enumerate(names) if j}
    ops = n_out / dur
    price = _price(chip, system, chips)
    usd = None
    if price is not None and ops > 0:
        from tierlab.cost.price import usd_per_mtok

        usd = usd_per_mtok(price, ops)[0]
    xfer_j = ho.energy_j if ho is not None else 0.0
    energy = {"steps_j": sim.step_energy_j, "tiers_j": tier_j, "transfer_j": xfer_j,
              "j_per_output_token": (sim.step_energy_j + tier_j + xfer_j) / max(n_out, 1)}
    target = {"system": system.name, "chip": system.chip.name} if system is not None else {"chip": chip.name}
    summary = {
        "model": spec.name, "target": target,
        "parallelism": {k: settings[k] for k in ("tp", "pp", "ep", "dp")} | {"chips": chips},
        "requests": int(len(inp)), "duration_s": dur, "input_tokens": int(inp.sum()), "output_tokens": n_out,
        "ttft_s": _pcts(ttft), "tpot_s": _pcts(tpot), "e2e_s": _pcts(e2e),
        "slo": {"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s},
        "goodput_rps": float(ok.sum()) / dur, "slo_met": float(ok.mean()),
        "output_tokens_per_s": ops, "output_tokens_per_s_per_chip": ops / chips,
        "hit_ratio": hit, "load_or_recompute": lor, "tier_bytes": tier_bytes,
        "bytes_moved_per_output_token": moved / max(n_out, 1), "energy": energy, "usd_per_mtok": usd,
        "kv_bytes_per_token": sim.kv_tok, "hbm_kv_tokens": int(sim.replicas[0].cap * sim.bt),
        "tiers": [t.to_dict() for t in tiers], "steps": sim.steps,
        "step_surface": {"replays": surface.replays, "decode_nodes": list(surface.dec_nodes),
                         "mixed_nodes": list(surface.mix_nodes), "source": "kvstream steptime (exact replays, "
                         "interpolated)"},
        "settings": settings,
        "kv_transfer": None if ho is None else ho.to_dict() | {"per_request_s": _pcts(sim.transfer_s),
                                                               "wait_s": _pcts(sim.transfer_wait_s)},
    }
    return RequestsResult(table=table, summary=summary, tiers=list(tiers))
