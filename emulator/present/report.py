"""Results as a JSON-able dict (stable top-level keys), aligned text tables, and per-op Parquet.

Top-level JSON keys: ``chip``, ``tiers`` (list: ``name``, ``hits``, ``misses``, ``fills``,
``evictions``, ``writebacks``, ``bytes_read``, ``bytes_written`` and the other counters, ``hit_rate``,
``home_bytes``, ``lent_bytes``), ``links`` (list: ``from``, ``to``, ``bytes_down``, ``bytes_up``),
``energy_j`` (``total`` and splits), ``per_token`` (decode only, else null: ``bytes_by_link``,
``energy_j``, ``latency_s``, ``tokens_per_s``, ``bound``), ``latency_s`` (whole run), ``by_kind``,
``flush``, ``placement``, ``counts`` (descriptors and tier-0 blocks replayed) and ``provenance``;
``per_turn`` (a conversation trace, else null: one entry per turn, see :mod:`emulator.analysis.turns`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from emulator.cost.model import Cost, cost, per_token
from emulator.engine.counters import TIER_COUNTERS, link_bytes, tier_dict
from emulator.pipeline import TraceReplay
from emulator.cost.pim import summary as pim_summary
from emulator.analysis.turns import format_turns, per_turn
from common.atomic import atomic_path
from traces.format import FORMAT_VERSION


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tierlab")
    except Exception:  # noqa: BLE001 - an uninstalled checkout still reports
        return "unknown"


def cost_of(tr: TraceReplay) -> Cost:
    r = tr.result
    flops = tr.trace.ops.column("flops").to_numpy().astype(np.float64)
    return cost(tr.chip, r.per_op, r.block_bytes, flops, tr.trace.manifest,
                r.flush if tr.options.flush else None)


def _hit_rate(d: dict) -> float | None:
    n = d["hits"] + d["misses"]
    return d["hits"] / n if n else None


def link_names(chip) -> list[str]:
    return [f"{lk.upper}-{lk.lower}" for lk in chip.links]


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
    pt = per_token(cst, r.per_op, r.block_bytes, ops.column("step").to_numpy(),
                   np.asarray(ops.column("phase").to_pylist(), dtype=object), run.get("batch", 1),
                   link_names(chip), r.tier_names)
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
            "tierlab": _version(),
            "trace_format": tr.trace.manifest.get("version", FORMAT_VERSION),
            "trace": str(tr.trace.path),
            "trace_generator": tr.trace.manifest.get("generator"),
            "trace_run": tr.trace.manifest.get("run"),   # how the trace was made: lengths, dtypes, router, seed
            "trace_manifest_sha256": _manifest_sha256(tr.trace.path),
            "chip_sha256": chip.source_sha256,
            "chip_file": chip.source_file,
            "compute_dtype": cst.dtype,
            "options": tr.options.to_dict(),
            # which kernel counted, and why (emulator.engine.dispatch); set groups that fell back to
            # the walk mid-stream say so
            "kernel": {**r.meta["kernel"],
                       **({"written_out": r.meta["set_groups_written_out"]}
                          if "set_groups_written_out" in r.meta else {})},
        },
    }


def _manifest_sha256(trace_path) -> str | None:
    """sha256 of the trace's manifest.json (its identity: row counts, model, run, generator)."""
    import hashlib
    from pathlib import Path

    try:
        return hashlib.sha256((Path(trace_path) / "manifest.json").read_bytes()).hexdigest()
    except OSError:
        return None


def _fmt_bytes(n: float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n}"


def _fmt_si(x: float, unit: str) -> str:
    if x == 0:
        return f"0 {unit}"
    for p, s in ((1e-12, "p"), (1e-9, "n"), (1e-6, "µ"), (1e-3, "m"), (1, ""), (1e3, "k"), (1e6, "M"),
                 (1e9, "G")):
        if abs(x) < p * 1000:
            return f"{x / p:.3g} {s}{unit}"
    return f"{x:.3g} {unit}"


def table(headers: list[str], rows: list[list], title: str | None = None) -> str:
    """An aligned text table (first column left-aligned, the rest right-aligned)."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[j]) for r in cells) for j in range(len(headers))]
    lines = [title] if title else []
    for k, r in enumerate(cells):
        lines.append("  ".join(c.ljust(widths[j]) if j == 0 else c.rjust(widths[j]) for j, c in enumerate(r)))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_text(d: dict) -> str:
    """Human output: placement, tiers, links, per token, by tensor kind."""
    out = []
    out.append(table(["tier", "managed", "home", "lent"],
                     [[t["name"], t["managed"], _fmt_bytes(t["home_bytes"]), _fmt_bytes(t["lent_bytes"])]
                      for t in d["tiers"]], title=f"chip {d['chip']}: placement"))
    out.append(table(["tier", "hits", "misses", "hit rate", "bypasses", "evictions", "writebacks",
                      "read", "written", "pim"],
                     [[t["name"], t["hits"], t["misses"],
                       "-" if t["hit_rate"] is None else f"{100 * t['hit_rate']:.2f}%", t["bypasses"],
                       t["evictions"], t["writebacks"], _fmt_bytes(t["bytes_read"]),
                       _fmt_bytes(t["bytes_written"]), _fmt_bytes(t["pim_bytes"])] for t in d["tiers"]],
                     title="tiers"))
    out.append(table(["link", "down", "up", "energy"],
                     [[f"{lk['from']}->{lk['to']}", _fmt_bytes(lk["bytes_down"]), _fmt_bytes(lk["bytes_up"]),
                       _fmt_si(d["energy_j"]["by_link"][f"{lk['from']}-{lk['to']}"], "J")]
                      for lk in d["links"]], title="links"))
    e = d["energy_j"]
    out.append(table(["energy", "joules"],
                     [["total", _fmt_si(e["total"], "J")], ["tiers", _fmt_si(e["tiers"], "J")],
                      ["links", _fmt_si(e["links"], "J")], ["compute", _fmt_si(e["compute"], "J")],
                      ["pim", _fmt_si(e["pim"], "J")]], title=f"whole run (latency {_fmt_si(d['latency_s'], 's')})"))
    pt = d["per_token"]
    if pt:
        rows = [[f"bytes {n}", _fmt_bytes(v)] for n, v in pt["bytes_by_link"].items()]
        rows += [[f"in memory {n} (PIM)", _fmt_bytes(v)] for n, v in pt.get("in_memory_bytes_by_tier", {}).items()]
        rows += [["energy", _fmt_si(pt["energy_j"], "J")], ["latency (per step)", _fmt_si(pt["latency_s"], "s")],
                 ["tokens/s", f"{pt['tokens_per_s']:.4g}"], ["bound", pt["bound"]]]
        out.append(table(["per decode token", "value"], rows,
                         title=f"per token ({pt['steps']} decode steps, batch {pt['batch']})"))
    if d.get("per_turn"):
        out.append(format_turns(d["per_turn"]))
    rows = []
    for kind, v in d["by_kind"].items():
        for name, c in v["tiers"].items():
            if c["hits"] + c["misses"] + c["bypasses"] + c["writethroughs"] + c["pim_bytes"] == 0:
                continue
            n = c["hits"] + c["misses"]
            rows.append([kind, name, c["hits"], c["misses"], f"{100 * c['hits'] / n:.2f}%" if n else "-",
                         _fmt_bytes(c["bytes_read"]), _fmt_bytes(c["bytes_written"])])
    out.append(table(["kind", "tier", "hits", "misses", "hit rate", "read", "written"], rows,
                     title="by tensor kind"))
    return "\n\n".join(out)


def per_op_table(tr: TraceReplay, cst: Cost) -> pa.Table:
    """One row per op: identity columns, counters per tier and link, energy and latency."""
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
    return pa.table(cols)


def write_parquet(tr: TraceReplay, cst: Cost, path, *, force: bool = False) -> None:
    """Write the per-op breakdown atomically."""
    tbl = per_op_table(tr, cst)
    with atomic_path(path, force=force) as tmp:
        pq.write_table(tbl, tmp)
