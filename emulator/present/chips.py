"""A chip for people and for JSON (``tierlab chips``): :func:`chip_to_dict`, :func:`format_chip` (one
hierarchy as tables) and :func:`format_chip_list` (the presets, one line each)."""

from __future__ import annotations

from tierlab.chip.chipfile import chip_hash
from tierlab.chip.hierarchy import Chip
from tierlab.present.format import format_quantity, format_size, table


def chip_to_dict(chip: Chip) -> dict:
    """JSON-able description of a chip, SI base units with the unit in every key."""
    tiers = []
    for t in chip.tiers:
        d = {
            "name": t.name, "managed": t.managed, "capacity_bytes": t.capacity_bytes, "block_bytes": t.block_bytes,
            "ways": t.ways, "sets": t.n_sets, "policy": t.policy, "bandwidth_bytes_per_s": t.bandwidth_bytes_per_s,
            "read_energy_j_per_byte": t.read_energy_j_per_byte, "write_energy_j_per_byte": t.write_energy_j_per_byte,
            "lend": t.lend, "pim": None,
        }
        if t.pim is not None:
            d["pim"] = {
                "internal_bandwidth_bytes_per_s": t.pim.internal_bandwidth_bytes_per_s,
                "flop_per_s": t.pim.flop_per_s, "read_energy_j_per_byte": t.pim.read_energy_j_per_byte,
                "energy_j_per_flop": t.pim.energy_j_per_flop, "ops": list(t.pim.op_kinds),
            }
        tiers.append(d)
    return {
        "name": chip.name,
        "description": chip.description,
        "file": chip.source_file,
        "sha256": chip_hash(chip),
        "compute": {"flop_per_s": dict(chip.compute.flop_per_s), "energy_j_per_flop": dict(chip.compute.energy_j_per_flop)},
        "tiers": tiers,
        "links": [{"from": k.upper, "to": k.lower, "bandwidth_bytes_per_s": k.bandwidth_bytes_per_s,
                   "energy_j_per_byte": k.energy_j_per_byte} for k in chip.links],
        "placement": [{"tier": r.tier, "kind": r.kind, "name": r.name,
                       "layers": list(r.layers) if r.layers else None, "spill": r.spill} for r in chip.placement],
        "sources": dict(chip.sources),
    }


def _table(rows: list[tuple], right: set[int] = frozenset()) -> str:
    """Aligned columns, the first row a header with no rule under it; columns in ``right`` right-aligned."""
    if not rows:
        return ""
    align = "".join(">" if c in right else "<" for c in range(len(rows[0])))
    return table(rows[0], rows[1:], align=align, rule=False)


def format_chip_list(chips: list[Chip]) -> str:
    """One line per chip: its name and its tiers, nearest first."""
    return _table([tuple(_one_line(c).split("\t")) for c in chips])


def _one_line(chip: Chip) -> str:
    tiers = " > ".join(f"{t.name} {format_size(t.capacity_bytes)} {t.managed}{'+pim' if t.pim else ''}"
                       for t in chip.tiers)
    return f"{chip.name}\t{tiers}"


def format_chip(chip: Chip) -> str:
    """The human view of one hierarchy: tiers, links, compute, placement rules, sources."""
    q = format_quantity
    parts = [f"{chip.name}: {chip.description}", f"file: {chip.source_file}  sha256: {chip_hash(chip)[:16]}", ""]
    rows = [("tier", "managed", "capacity", "block", "ways", "policy", "bandwidth", "read", "write", "lend")]
    for t in chip.tiers:
        caches = t.managed == "cache" or t.lend   # ways and policy mean nothing on a pure home tier
        ways = ("full" if t.ways is None else str(t.ways)) if caches else "-"
        rows.append((t.name, t.managed, format_size(t.capacity_bytes), format_size(t.block_bytes),
                     ways, t.policy if caches else "-", q(t.bandwidth_bytes_per_s, "bandwidth"),
                     q(t.read_energy_j_per_byte, "energy_per_byte"), q(t.write_energy_j_per_byte, "energy_per_byte"),
                     "yes" if t.lend else "-"))
    parts += [_table(rows, right={2, 3, 4, 6, 7, 8}), ""]
    pims = [t for t in chip.tiers if t.pim is not None]
    if pims:
        rows = [("pim tier", "internal bandwidth", "peak", "in-bank read", "energy/FLOP", "ops")]
        for t in pims:
            p = t.pim
            rows.append((t.name, q(p.internal_bandwidth_bytes_per_s, "bandwidth"), q(p.flop_per_s, "rate"),
                         q(p.read_energy_j_per_byte, "energy_per_byte"), q(p.energy_j_per_flop, "energy"),
                         ", ".join(p.op_kinds)))
        parts += [_table(rows, right={1, 2, 3, 4}), ""]
    if chip.links:
        rows = [("link", "bandwidth", "energy")]
        for k in chip.links:
            rows.append((f"{k.upper} <-> {k.lower}", q(k.bandwidth_bytes_per_s, "bandwidth"),
                         q(k.energy_j_per_byte, "energy_per_byte")))
        parts += [_table(rows, right={1, 2}), ""]
    rows = [("dtype", "peak", "energy/FLOP")]
    for dtype, rate in chip.compute.flop_per_s.items():
        rows.append((dtype, q(rate, "rate"), q(chip.compute.energy_j_per_flop[dtype], "energy")))
    parts += [_table(rows, right={1, 2}), ""]
    if chip.placement:
        rows = [("rule", "home tier", "kind", "name", "layers", "spill")]
        for i, r in enumerate(chip.placement):
            rows.append((str(i), r.tier, r.kind or "*", r.name or "*",
                         f"{r.layers[0]}-{r.layers[1]}" if r.layers else "*", "yes" if r.spill else "-"))
        parts += [_table(rows), "(first matching rule wins; other tensors go first-fit in tier order)", ""]
    if chip.sources:
        parts.append("sources:")
        parts += [f"  [{tag}] {text}" for tag, text in chip.sources.items()]
    return "\n".join(parts).rstrip()
