"""System files (TOML) to validated, frozen :class:`tierlab.system.model.System` objects.

Validated once, here, at the edge, in the style of :mod:`tierlab.chip.chipfile`: every problem is
a :class:`ConfigError` whose text is one line, ``FILE: FIELD: what was expected``, e.g.
``systems/x.toml: scale_up.bandwith: unknown key; did you mean 'bandwidth'?``. Quantities are
strings with units (:mod:`tierlab.chip.units`). Presets live in ``configs/systems/*.toml``.

Layout, with every key's default (``required`` where there is none)::

    name = "dgx-h100"          # required
    description = "..."        # default ""
    chip = "h100"              # required: a chip preset name, or a path to a chip .toml
                               #   (relative paths are taken from the system file's directory)
    chips = 8                  # required: how many chips, a positive integer
    chips_per_node = 8         # default: chips (one node); must divide chips

    [scale_up]                 # required: the fabric joining the chips of one node
    description = "..."        # default ""
    topology = "switch"        # default "switch"; "switch" | "direct" (a full mesh of the node) |
                               #   "torus" | "mesh" (neighbour links on a grid of dims; scale-up only)
    dims = [16, 16]            # torus / mesh only, required there: chips along each axis, multiplying
                               #   to chips_per_node; wraparound links close each axis of >= 3 on a torus
    bandwidth = "450 GB/s"     # required: per port (per link of a mesh), per direction
    ports = 1                  # default 1 on a switch; on "direct" chips_per_node - 1 (one link
                               #   per peer), and if given a multiple of it; on a torus / mesh a
                               #   chip's most links (2 per axis of >= 3, 1 per axis of 2)
    latency = "1.5 us"         # required: per message
    energy = "5.5 pJ/bit"      # required: per bit (or byte) carried over one link
    in_network_reduction = true  # default false; a "switch" only
    link_class = "nvlink"      # default nvlink (scale-up) / net (scale-out); "nvlink" | "pci" | "net":
                               #   whose per-step latencies the calibrated collectives take
    achievable = 0.82          # default 1: fraction of bandwidth a collective's Simple protocol reaches

    [collectives]              # optional: how collectives run, for the calibrated latency
    library = "nccl"           # default "nccl"; "custom" adds vLLM's one-shot / two-shot all-reduce
    skew = "0 us"              # default 0: the last rank's expected late arrival per collective

    [scale_out]                # optional; required when chips > chips_per_node. Same keys and
    topology = "switch"        #   defaults, except that it must be a "switch" (ports: NICs per chip)
    bandwidth = "400 Gb/s"
    ports = 1
    latency = "5 us"
    energy = "5.5 pJ/bit"
    in_network_reduction = false
    oversubscription = 1       # scale-out only, default 1 (non-blocking): the spine carries 1/ratio
                               #   of what the NICs below it send; a number >= 1
    rail_optimised = false     # scale-out only, default false: NIC j of every node on leaf j (rails)

    [sources]                  # default {}: TAG = "citation"
    S16 = "..."

    [price]                    # optional: rental price of the whole system (tierlab.cost.price)
    per_hour = "24.00 USD/h"   # required in [price]: a number, then USD/h (a bare number is refused)
    source = "https://..."     # required with per_hour
    date = "2026-05-01"        # required with per_hour: YYYY-MM-DD

Refused: an unknown key (with a did-you-mean), a missing required key (a fabric without bandwidth
among them), an unknown chip, ``chips`` not a multiple of ``chips_per_node``, a system of several
nodes without ``[scale_out]``, an unknown topology, a ``direct``, ``torus`` or ``mesh`` scale-out
fabric, ``in_network_reduction`` on a fabric without a switch, a torus / mesh without ``dims`` or
whose ``dims`` do not multiply to ``chips_per_node``, ``dims`` on a switch or direct fabric, and
``oversubscription`` below 1 or either scale-out key on the scale-up fabric.
"""

from __future__ import annotations

from pathlib import Path

from tierlab.common.paths import resolve_toml, toml_presets
from tierlab.common.suggest import closest, did_you_mean
from tierlab.chip.chipfile import list_presets as chip_presets
from tierlab.chip.chipfile import load_chip, price_from_table
from tierlab.chip.hierarchy import Chip
from tierlab.chip.tomlfile import FileReader, read_toml
from tierlab.system.model import COLLECTIVE_LIBRARIES, GRIDS, LINK_CLASSES, TOPOLOGIES, Fabric, System, grid_links_per_chip

_TOP_KEYS = {"name": True, "description": False, "chip": True, "chips": True, "chips_per_node": False,
             "scale_up": True, "scale_out": False, "sources": False, "price": False, "collectives": False}
_FABRIC_KEYS = {"description": False, "topology": False, "bandwidth": True, "ports": False, "latency": True,
                "energy": True, "in_network_reduction": False, "link_class": False, "achievable": False,
                "dims": False, "oversubscription": False, "rail_optimised": False}
_COLLECTIVE_KEYS = {"library": False, "skew": False}


def _fabric(r: FileReader, d, field: str, chips_per_node: int) -> Fabric:
    d = r.table(d, field, _FABRIC_KEYS)
    topology = d.get("topology", "switch")
    if not isinstance(topology, str) or topology not in TOPOLOGIES:
        raise r.error(f"{field}.topology", f"unknown topology {topology!r}; {did_you_mean(topology, TOPOLOGIES)}")
    if topology == "direct" and field == "scale_out":
        raise r.error(f"{field}.topology", "a 'direct' fabric is a full mesh of one node's chips; "
                                           "the scale-out fabric must be a 'switch'")
    inr = r.boolean(d.get("in_network_reduction", False), f"{field}.in_network_reduction")
    dims, oversubscription, rail = _grid_and_scale_out(r, d, field, topology, chips_per_node, inr)
    if inr and topology == "direct":
        raise r.error(f"{field}.in_network_reduction",
                      "a 'direct' fabric has no switch to reduce in; expected false (or topology = \"switch\")")
    peers = chips_per_node - 1
    if topology == "direct" and peers == 0:
        raise r.error(f"{field}.topology", "a 'direct' fabric needs at least 2 chips per node, got 1")
    grid_ports = grid_links_per_chip(dims, topology == "torus") if dims else 0
    if "ports" in d:
        ports = r.count(d["ports"], f"{field}.ports")
        if dims and ports % max(grid_ports, 1):
            raise r.error(f"{field}.ports", f"a {topology} of dims {list(dims)} gives a chip up to {grid_ports} links: "
                                            f"expected a multiple of {grid_ports}, got {ports}")
        if topology == "direct" and ports % peers:
            raise r.error(f"{field}.ports", f"a 'direct' fabric joins every pair of the node's {chips_per_node} chips: "
                                            f"expected a multiple of chips_per_node - 1 ({peers}), got {ports}")
    else:
        ports = peers if topology == "direct" else (max(grid_ports, 1) if dims else 1)
    link_class = d.get("link_class", "")
    if "link_class" in d and (not isinstance(link_class, str) or link_class not in LINK_CLASSES):
        raise r.error(f"{field}.link_class", f"unknown link class {link_class!r}; expected one of "
                                             f"{', '.join(LINK_CLASSES)}")
    achievable = 1.0
    if "achievable" in d:
        achievable = d["achievable"]
        if isinstance(achievable, bool) or not isinstance(achievable, (int, float)) or not 0 < achievable <= 1:
            raise r.error(f"{field}.achievable", f"expected a fraction of the bandwidth in (0, 1], got {achievable!r}")
    return Fabric(
        link_class=link_class, achievable=float(achievable),
        name=field, topology=topology,
        bandwidth_bytes_per_s=r.quantity(d["bandwidth"], "bandwidth", f"{field}.bandwidth"),
        latency_s=r.quantity(d["latency"], "time", f"{field}.latency", positive=False),
        energy_j_per_byte=r.quantity(d["energy"], "energy_per_byte", f"{field}.energy", positive=False),
        ports=ports, in_network_reduction=inr,
        description=r.string(d.get("description", ""), f"{field}.description", empty=True),
        dims=dims, oversubscription=oversubscription, rail_optimised=rail,
    )


def _grid_and_scale_out(r: FileReader, d, field: str, topology: str, chips_per_node: int, inr: bool):
    """``(dims, oversubscription, rail_optimised)`` of a fabric table: ``dims`` only on a ``torus`` /
    ``mesh`` scale-up fabric, multiplying to the node's chips; the other two only on the scale-out
    switch (``oversubscription`` a ratio >= 1)."""
    if topology in GRIDS:
        if field == "scale_out":
            raise r.error(f"{field}.topology", f"a '{topology}' joins one node's chips; the scale-out fabric "
                                               "must be a 'switch'")
        if inr:
            raise r.error(f"{field}.in_network_reduction",
                          f"a '{topology}' has no switch to reduce in; expected false (or topology = \"switch\")")
        if "dims" not in d:
            raise r.error(f"{field}.dims", f"missing: a '{topology}' needs dims = [..], the chips along each axis "
                                           f"(multiplying to chips_per_node, {chips_per_node})")
        raw = d["dims"]
        if (not isinstance(raw, list) or not raw
                or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in raw)):
            raise r.error(f"{field}.dims", f"expected a non-empty array of positive integers, e.g. [16, 16], got {raw!r}")
        product = 1
        for k in raw:
            product *= k
        if product != chips_per_node:
            raise r.error(f"{field}.dims", f"{raw} make {product} chips; expected a grid of the node's "
                                           f"{chips_per_node} chips (chips_per_node)")
        dims = tuple(raw)
    elif "dims" in d:
        raise r.error(f"{field}.dims", f"dims apply to a 'torus' or 'mesh' fabric, not a '{topology}'")
    else:
        dims = ()
    oversubscription, rail = 1.0, False
    for key in ("oversubscription", "rail_optimised"):
        if key in d and field != "scale_out":
            raise r.error(f"{field}.{key}", f"{key} applies to the scale-out fabric (a switch of NICs), not {field}")
    if "oversubscription" in d:
        v = d["oversubscription"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 1:
            raise r.error(f"{field}.oversubscription", f"expected a ratio >= 1 (1 = non-blocking, 4 = 4:1), got {v!r}")
        oversubscription = float(v)
    if "rail_optimised" in d:
        rail = r.boolean(d["rail_optimised"], f"{field}.rail_optimised")
    return dims, oversubscription, rail


def _chip(r: FileReader, value) -> Chip:
    text = r.string(value, "chip")
    if text.endswith(".toml") or "/" in text:
        p = Path(text)
        if not p.is_absolute() and r.file is not None:
            p = Path(r.file).parent / p
        if not p.is_file():
            raise r.error("chip", f"chip file not found: {p}")
        return load_chip(p)
    presets = chip_presets()
    if text not in presets:
        near = closest(text, presets)
        hint = (f"did you mean {near!r}?" if near
                else f"expected a chip preset ({', '.join(presets)}) or a path to a chip .toml")
        raise r.error("chip", f"unknown chip {text!r}; {hint}")
    return load_chip(text)


def system_from_dict(d, *, file=None, sha256: str | None = None, chip: Chip | None = None) -> System:
    """Validate a parsed system file (a dict as tomllib returns it) and build the :class:`System`.
    A chip given as a relative path is read relative to ``file``'s directory (else the cwd);
    ``chip``, when given, is the chip already built from ``d['chip']`` (a sweep's what-if chip)."""
    r = FileReader(file)
    d = r.table(d, "", _TOP_KEYS)
    name = r.string(d["name"], "name")
    description = r.string(d.get("description", ""), "description", empty=True)
    n_chips = r.count(d["chips"], "chips")
    per_node = r.count(d["chips_per_node"], "chips_per_node") if "chips_per_node" in d else n_chips
    if n_chips % per_node:
        raise r.error("chips", f"must be a multiple of chips_per_node ({per_node}), got {n_chips}")
    n_nodes = n_chips // per_node
    scale_up = _fabric(r, d["scale_up"], "scale_up", per_node)
    scale_out = None
    if "scale_out" in d:
        scale_out = _fabric(r, d["scale_out"], "scale_out", per_node)
    elif n_nodes > 1:
        raise r.error("scale_out", f"missing: {n_chips} chips in nodes of {per_node} make {n_nodes} nodes, "
                                   "which need a [scale_out] fabric")
    sources = d.get("sources", {})
    if not isinstance(sources, dict) or any(not isinstance(v, str) for v in sources.values()):
        raise r.error("sources", "expected a table of TAG = \"citation\" strings")
    if chip is None:
        chip = _chip(r, d["chip"])
    else:
        r.string(d["chip"], "chip")
    price = None
    if "price" in d:
        price = price_from_table(d["price"], r.error, r.table)
    library, skew = "nccl", 0.0
    if "collectives" in d:
        c = r.table(d["collectives"], "collectives", _COLLECTIVE_KEYS)
        library = c.get("library", "nccl")
        if not isinstance(library, str) or library not in COLLECTIVE_LIBRARIES:
            raise r.error("collectives.library", f"unknown collective library {library!r}; expected one of "
                                                 f"{', '.join(COLLECTIVE_LIBRARIES)}")
        if "skew" in c:
            skew = r.quantity(c["skew"], "time", "collectives.skew", positive=False)
    return System(collective_library=library, collective_skew_s=skew,
                  name=name, chip=chip, n_chips=n_chips, chips_per_node=per_node, scale_up=scale_up,
                  scale_out=scale_out, description=description, sources=tuple(sources.items()),
                  source_file=r.file, source_sha256=sha256, price=price)


def list_presets() -> list[str]:
    """Names of the shipped system presets (``configs/systems/*.toml``), sorted."""
    return toml_presets("systems")


def _resolve(name_or_path) -> Path:
    return resolve_toml(name_or_path, "systems", "system")


def read_system_toml(name_or_path) -> tuple[dict, Path, str]:
    """The parsed system file of a preset name or path, its path and the sha256 of its bytes."""
    path = _resolve(name_or_path)
    d, sha256 = read_toml(path)
    return d, path, sha256


def chip_path(d: dict, path: Path) -> str:
    """The chip a system file names, as :func:`tierlab.chip.chipfile.load_chip` takes it (a path
    relative to the system file is made absolute)."""
    text = str(d.get("chip", ""))
    if (text.endswith(".toml") or "/" in text) and not Path(text).is_absolute():
        return str(path.parent / text)
    return text


def file_keys(section: str) -> tuple[str, ...]:
    """The keys a system file's top level (``""``) or a fabric (``scale_up``, ``scale_out``) may hold."""
    return tuple(_TOP_KEYS if section == "" else _FABRIC_KEYS)


def load_system(name_or_path) -> System:
    """Load a system: a preset name (``dgx-h100``) or a path to a ``.toml`` file (a System is returned as it is)."""
    if isinstance(name_or_path, System):
        return name_or_path
    d, path, sha256 = read_system_toml(name_or_path)
    return system_from_dict(d, file=str(path), sha256=sha256)
