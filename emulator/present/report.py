"""Results for people and for files: the aligned text report (:func:`format_text`, with the per-turn
table :func:`format_turns`) and the per-op Parquet breakdown (:func:`per_op_table`, :func:`write_parquet`).

The JSON-able dict they start from is :func:`tierlab.analysis.result.to_json` (its keys are listed
there); it and :func:`tierlab.cost.trace_cost.cost_of` are re-exported here for callers of this module.
"""

from __future__ import annotations

import pyarrow as pa

from tierlab.cost.model import Cost
from tierlab.cost.trace_cost import cost_of
from tierlab.engine.counters import TIER_COUNTERS, link_bytes
from tierlab.pipeline.chip_replay import TraceReplay
from tierlab.analysis.result import link_names, to_json
from tierlab.present.format import format_bytes, format_percent, format_si, format_size, table
from tierlab.common.atomic import atomic_path

__all__ = ["cost_of", "to_json", "link_names", "format_text", "format_turns", "per_op_table", "write_parquet"]


def format_text(d: dict) -> str:
    """Human output: placement, tiers, links, per token, by tensor kind."""
    out = []
    out.append(table(["tier", "managed", "homes (tensors placed)", "lent (caching farther tensors)"],
                     [[t["name"], t["managed"], format_bytes(t["home_bytes"]), format_bytes(t["lent_bytes"])]
                      for t in d["tiers"]], title=f"chip {d['chip']}: placement"))
    out.append(table(["tier", "hits", "misses", "hit rate", "bypasses", "evictions", "writebacks",
                      "read", "written", "pim"],
                     [[t["name"], t["hits"], t["misses"],
                       format_percent(t["hit_rate"]), t["bypasses"],
                       t["evictions"], t["writebacks"], format_bytes(t["bytes_read"]),
                       format_bytes(t["bytes_written"]), format_bytes(t["pim_bytes"])] for t in d["tiers"]],
                     title="tiers"))
    out.append(table(["link", "down", "up", "energy"],
                     [[f"{lk['from']}->{lk['to']}", format_bytes(lk["bytes_down"]), format_bytes(lk["bytes_up"]),
                       format_si(d["energy_j"]["by_link"][f"{lk['from']}-{lk['to']}"], "J")]
                      for lk in d["links"]], title="links"))
    e = d["energy_j"]
    out.append(table(["energy", "joules"],
                     [["total", format_si(e["total"], "J")], ["tiers", format_si(e["tiers"], "J")],
                      ["links", format_si(e["links"], "J")], ["compute", format_si(e["compute"], "J")],
                      ["pim", format_si(e["pim"], "J")]], title=f"whole run (latency {format_si(d['latency_s'], 's')})"))
    pt = d["per_token"]
    if pt:
        rows = [[f"bytes {n}", format_bytes(v)] for n, v in pt["bytes_by_link"].items()]
        rows += [[f"in memory {n} (PIM)", format_bytes(v)] for n, v in pt.get("in_memory_bytes_by_tier", {}).items()]
        rows += [["energy", format_si(pt["energy_j"], "J")], ["latency (per step)", format_si(pt["latency_s"], "s")],
                 ["tokens/s", f"{pt['tokens_per_s']:.4g}"], ["bound", pt["bound"]]]
        if "latency_calibrated_s" in pt:     # the calibrated latency beside the roofline (tierlab.cost.organisation)
            cal = pt["calibration"]
            rows += [["latency calibrated (per step)", format_si(pt["latency_calibrated_s"], "s")],
                     ["tokens/s calibrated", f"{pt['tokens_per_s_calibrated']:.4g}"],
                     ["kernels (per step)", f"{pt['kernels']:.4g} (fusion {cal['fusion']}, overlap {cal['overlap']})"],
                     ["kernel overhead (per step)", f"{format_si(pt['overhead_s'], 's')} "
                                                    f"({format_si(cal['kernel_overhead_s'], 's')} per kernel)"],
                     ["bound calibrated", pt["bound_calibrated"]]]
        out.append(table(["per decode token", "value"], rows,
                         title=f"per token ({pt['steps']} decode steps, batch {pt['batch']})"))
    if d.get("prefill"):
        from tierlab.present.system_report import format_prefill

        out.append(format_prefill(d["prefill"]))
    if d.get("per_turn"):
        out.append(format_turns(d["per_turn"]))
    rows = []
    for kind, v in d["by_kind"].items():
        for name, c in v["tiers"].items():
            if c["hits"] + c["misses"] + c["bypasses"] + c["writethroughs"] + c["pim_bytes"] == 0:
                continue
            n = c["hits"] + c["misses"]
            rows.append([kind, name, c["hits"], c["misses"], f"{100 * c['hits'] / n:.2f}%" if n else "-",
                         format_bytes(c["bytes_read"]), format_bytes(c["bytes_written"])])
    out.append(table(["kind", "tier", "hits", "misses", "hit rate", "read", "written"], rows,
                     title="by tensor kind"))
    return "\n\n".join(out)


def format_turns(rows: list[dict], *, title: str | None = None) -> str:
    """An aligned table: one line per turn, then the conversation's total (the KV-copy columns only
    when the conversation offloads)."""
    links = list(rows[0]["bytes_by_link"]) if rows else []
    offload = any(r["offload_ops"] or r["restore_ops"] for r in rows)
    head = (["turn", "prefill", "decode", "KV read", "KV written"]
            + (["KV copies", "copies on links"] if offload else [])
            + [f"{n} (down+up)" for n in links] + ["energy", "latency"])
    body = []

    def line(label, rs):
        copies = sum(r["kv_offload_bytes"]["read"] + r["kv_offload_bytes"]["written"] for r in rs)
        return ([label, sum(r["prefill_tokens"] for r in rs), sum(r["decode_tokens"] for r in rs),
                 format_size(sum(r["kv_bytes"]["read"] for r in rs)),
                 format_size(sum(r["kv_bytes"]["written"] for r in rs))]
                + ([format_size(copies), format_size(sum(r["copy_link_bytes"] for r in rs))] if offload else [])
                + [format_size(sum(r["bytes_by_link"][n]["down"] + r["bytes_by_link"][n]["up"] for r in rs))
                   for n in links]
                + [format_si(sum(r["energy_j"]["total"] for r in rs), "J", 4),
                   format_si(sum(r["latency_s"] for r in rs), "s", 4)])

    for r in rows:
        body.append(line(str(r["turn"]), [r]))
    body.append(line("total", rows))
    return table(head, body, title=title or "per turn (tokens per sequence)")


def per_op_table(tr: TraceReplay, cst: Cost) -> pa.Table:
    """One row per op: identity columns, counters per tier and link, energy and latency (the
    roofline), and the calibrated latency's ``kernel_id`` and ``group_id`` (ops sharing one ran as
    one kernel / one concurrent group, :mod:`tierlab.cost.organisation`)."""
    r, ops = tr.result, tr.trace.ops
    cols = {n: ops.column(n) for n in ("op_id", "name", "kind", "layer", "phase", "step", "tokens", "flops")}
    for i, name in enumerate(r.tier_names):
        for j, c in enumerate(TIER_COUNTERS):
            cols[f"{name}.{c}"] = pa.array(r.per_op[:, i, j])
    lb = link_bytes(r.per_op, r.block_bytes)
    for i, n in enumerate(link_names(tr.chip)):
        cols[f"{n}.bytes_down"] = pa.array(lb[:, i, 0])
        cols[f"{n}.bytes_up"] = pa.array(lb[:, i, 1])
    cols["energy_j"] = pa.array(cst.energy_j)
    cols["compute_energy_j"] = pa.array(cst.compute_j)
    cols["pim_energy_j"] = pa.array(cst.pim_j.sum(1))
    names = list(r.tier_names)
    cols["ran_in_memory_of"] = pa.array([None] * len(cst.compute_j) if tr.pim is None else
                                        [names[t] if t >= 0 else None for t in tr.pim.op_tier], pa.string())
    cols["latency_s"] = pa.array(cst.latency_s)
    cols["bound"] = pa.array([cst.resources[b] for b in cst.bound])
    if cst.organisation is not None:   # the calibrated latency's kernels and concurrent groups of ops
        cols["kernel_id"] = pa.array(cst.organisation.kernel)
        cols["group_id"] = pa.array(cst.organisation.group)
    return pa.table(cols)


def write_parquet(tr: TraceReplay, cst: Cost, path, *, force: bool = False) -> None:
    """Write the per-op breakdown atomically."""
    import pyarrow.parquet as pq      # here: Parquet and its filesystems cost every replay 10 ms to import
    tbl = per_op_table(tr, cst)
    with atomic_path(path, force=force) as tmp:
        pq.write_table(tbl, tmp)
