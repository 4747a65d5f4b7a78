"""A system for people and for JSON (``tierlab systems``): :func:`system_to_dict`,
:func:`format_system` (one system in detail) and :func:`format_system_list` (the presets, one line
each)."""

from __future__ import annotations

from dataclasses import asdict

from tierlab.present.format import format_quantity, table
from tierlab.system.model import Fabric, System


def fabric_to_dict(f: Fabric | None) -> dict | None:
    """JSON-able description of a fabric (None for a missing one), SI base units in every key."""
    if f is None:
        return None
    return {
        "topology": f.topology, "description": f.description,
        "bandwidth_bytes_per_s": f.bandwidth_bytes_per_s, "ports": f.ports,
        "chip_bandwidth_bytes_per_s": f.chip_bandwidth_bytes_per_s,
        "latency_s": f.latency_s, "energy_j_per_byte": f.energy_j_per_byte,
        "in_network_reduction": f.in_network_reduction,
    }


def system_to_dict(s: System) -> dict:
    """JSON-able description of a system with stable keys."""
    return {
        "name": s.name, "description": s.description, "file": s.source_file, "sha256": s.source_sha256,
        "chip": s.chip.name, "chip_file": s.chip.source_file,
        "chips": s.n_chips, "chips_per_node": s.chips_per_node, "nodes": s.n_nodes,
        "scale_up": fabric_to_dict(s.scale_up), "scale_out": fabric_to_dict(s.scale_out),
        "sources": dict(s.sources),
        "kv_tiers": [{k: v for k, v in asdict(t).items() if k != "shared"} | {"shared": t.shared}
                     for t in kv_tiers(s)],
    }


def kv_tiers(s: System) -> list:
    """The KV-cache tiers below HBM of one device of ``s`` (``tierlab requests --kv-tier``): host
    memory, the node's NVMe, a remote pool (no default size: capacity 0 until given)."""
    from tierlab.kvstream.tiers import LOWER_TIERS, default_tier

    return [default_tier(name, s.chip, s, 1, 0.0 if name == "remote" else None) for name in LOWER_TIERS]


def _per_chip(f: Fabric | None) -> str:
    return "-" if f is None else format_quantity(f.chip_bandwidth_bytes_per_s, "bandwidth")


def _reduction(s: System) -> str:
    where = [n for n, f in (("scale-up", s.scale_up), ("scale-out", s.scale_out)) if f and f.in_network_reduction]
    return ", ".join(where) or "-"


def format_system_list(systems: list[System]) -> str:
    """One line per system: chip, chips, nodes, a chip's bandwidth into each fabric (per direction),
    and where the network reduces."""
    rows = [(s.name, s.chip.name, str(s.n_chips), str(s.n_nodes), _per_chip(s.scale_up), _per_chip(s.scale_out),
             _reduction(s)) for s in systems]
    return table(("system", "chip", "chips", "nodes", "scale-up/chip/dir", "scale-out/chip/dir", "in-network reduction"),
                 rows, align="<<>>>><", rule=False)


def _fabric_column(f: Fabric | None, n_per_node: int) -> list[str]:
    if f is None:
        return ["none (one node)"] + [""] * 8
    q = format_quantity
    return [
        f.topology + (f" (full mesh of {n_per_node})" if f.topology == "direct" else ""),
        f.description or "-",
        q(f.bandwidth_bytes_per_s, "bandwidth") + (" per link to each peer" if f.topology == "direct" else " per port"),
        str(f.ports),
        q(f.chip_bandwidth_bytes_per_s, "bandwidth"),
        q(f.latency_s, "time"),
        q(f.energy_j_per_byte, "energy_per_byte"),
        "yes" if f.in_network_reduction else "no",
    ]


_FABRIC_ROWS = ("topology", "fabric", "bandwidth (per direction)", "ports per chip", "per chip (per direction)",
                "latency per message", "energy per link crossed", "in-network reduction")


def format_system(s: System) -> str:
    """The human view of one system: its chip and nodes, both fabrics with every number, sources."""
    parts = [f"{s.name}: {s.description}"]
    if s.source_file:
        parts.append(f"file: {s.source_file}" + (f"  sha256: {s.source_sha256[:16]}" if s.source_sha256 else ""))
    nodes = f"{s.n_nodes} node{'s' if s.n_nodes != 1 else ''} of {s.chips_per_node}"
    chip = s.chip.name + (f" ({s.chip.source_file})" if s.chip.source_file else "")
    parts += [f"chip: {chip}", f"chips: {s.n_chips} in {nodes}", ""]
    up, out = _fabric_column(s.scale_up, s.chips_per_node), _fabric_column(s.scale_out, s.chips_per_node)
    rows = list(zip(_FABRIC_ROWS, up, out))
    parts += [table(("", "scale-up (within a node)", "scale-out (between nodes)"), rows, align="<<<", rule=False), ""]
    q = format_quantity
    kv = [(t.name, q(t.capacity_bytes, "size") if t.capacity_bytes else "give one (remote=SIZE)",
           q(t.bandwidth_bytes_per_s, "bandwidth"), q(t.latency_s, "time"), q(t.energy_j_per_byte, "energy_per_byte"),
           t.source) for t in kv_tiers(s)]
    parts += ["KV-cache tiers below HBM, per device (tierlab requests --kv-tier NAME=CAPACITY overrides the size):",
              table(("tier", "capacity", "load bandwidth", "latency", "energy", "from"), kv, align="<>>>><",
                    rule=False), ""]
    if s.sources:
        parts.append("sources:")
        parts += [f"  [{tag}] {text}" for tag, text in s.sources]
    return "\n".join(parts).rstrip()
