"""A system of many chips as frozen data: which chip, how many, grouped into nodes, and the two
fabrics that join them.

Built from a system TOML by :mod:`tierlab.system.systemfile` (which validates every field once, at
the edge); everything downstream (collective algorithms in :mod:`tierlab.network`) trusts these
objects. Units live in names: ``_bytes_per_s`` (per direction), ``_s``, ``_j_per_byte``.

The **scale-up** fabric joins the chips of one node (NVLink through NVSwitch, SN40L's peer-to-peer
links); the **scale-out** fabric joins nodes (NICs into a switch). A fabric is a ``switch`` (every
chip has ``ports`` ports of ``bandwidth`` each into one non-blocking switch) or ``direct`` (every
pair of chips of a node has its own link of ``bandwidth``: a full mesh, so a chip has ``ports`` =
``chips_per_node - 1`` links, or a multiple of it when pairs are joined by several links; the
scale-up fabric only). A switch with
``in_network_reduction`` reduces in the network (NVLink SHARP inside a node; SHARP across nodes).

A scale-up fabric may also be a ``torus`` or a ``mesh`` of ``dims`` (TPU ICI, Trainium's NeuronLink):
a node's chips sit on a grid of ``dims`` (chip ``i`` of the node at ``numpy.unravel_index(i, dims)``,
the last axis fastest) and each is linked to its neighbours along every axis, with a wraparound link
closing each axis of 3 or more chips on a ``torus`` only (a 2-chip axis has one link either way);
``ports`` is a chip's most links (:func:`grid_links_per_chip`), ``bandwidth`` one link's, per
direction. A scale-out switch may be ``oversubscribed`` (spine capacity 1/ratio of the NICs' below
it) and ``rail_optimised`` (NIC ``j`` of every node on leaf ``j``, so traffic between chips of the
same index stays under one leaf; :meth:`System.crosses_spine`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tierlab.chip.hierarchy import Chip, Price

TOPOLOGIES = ("switch", "direct", "torus", "mesh")
GRIDS = ("torus", "mesh")         # topologies of neighbour links on a grid of ``dims``
# how a system's collectives run (its file's [collectives] library, a fabric's link_class): the names
# tierlab.network.protocols reads its constants by
COLLECTIVE_LIBRARIES = ("nccl", "custom")
LINK_CLASSES = ("nvlink", "pci", "net")


def grid_links_per_chip(dims, wrap: bool) -> int:
    """The most links a chip of a ``dims`` grid has: per axis of k chips, 2 (k >= 3; on a mesh an
    inner chip's), 1 (k = 2) or 0 (k = 1)."""
    return sum(2 if k >= 3 else (1 if k == 2 else 0) for k in dims)


def grid_neighbours(coord, dims, wrap: bool) -> list[tuple[int, ...]]:
    """The grid coordinates linked to ``coord``: one step along each axis, wrapping around only on
    a torus (``wrap``) axis of 3 or more chips."""
    out = []
    for a, k in enumerate(dims):
        for step in (1, -1):
            c = coord[a] + step
            if 0 <= c < k:
                pass
            elif wrap and k >= 3:
                c %= k
            else:
                continue
            n = tuple(c if i == a else x for i, x in enumerate(coord))
            if n != tuple(coord) and n not in out:
                out.append(n)
    return out


@dataclass(frozen=True)
class Fabric:
    """One fabric. ``bandwidth_bytes_per_s``: per port (a chip's link into the switch, or one link of
    the mesh, or one NIC) and per direction; ``ports``: ports per chip (NICs per chip on a scale-out
    fabric, 1 for a scale-up switch whose bandwidth is the chip's whole share); ``latency_s``: per
    message (software and hops, as measured for small messages); ``energy_j_per_byte``: per byte
    carried over one link."""

    name: str
    topology: str
    bandwidth_bytes_per_s: float
    latency_s: float
    energy_j_per_byte: float
    ports: int = 1
    in_network_reduction: bool = False
    description: str = ""
    #: the calibrated collective model (tierlab.network.protocols): the class of link NCCL's per-step
    #: latencies are read for ("nvlink", "pci", "net"; "" = nvlink for scale-up, net for scale-out), and
    #: the fraction of ``bandwidth`` a collective's Simple protocol reaches (1: line rate)
    link_class: str = ""
    achievable: float = 1.0
    #: topologies beyond one switch (issue 24; the defaults leave every other fabric as it was):
    #: ``dims`` of a ``torus`` / ``mesh``; a scale-out switch's ``oversubscription`` (>= 1: the
    #: spine carries 1/ratio of what the NICs below it can send) and ``rail_optimised`` NICs
    dims: tuple[int, ...] = ()
    oversubscription: float = 1.0
    rail_optimised: bool = False

    @property
    def is_grid(self) -> bool:
        """A ``torus`` or ``mesh``: links join grid neighbours only."""
        return self.topology in GRIDS

    @property
    def wraps(self) -> bool:
        return self.topology == "torus"

    @property
    def chip_bandwidth_bytes_per_s(self) -> float:
        """A chip's whole bandwidth into this fabric, per direction."""
        return self.bandwidth_bytes_per_s * self.ports


@dataclass(frozen=True)
class System:
    """``n_chips`` copies of ``chip`` in nodes of ``chips_per_node``; chip ``d`` is in node
    ``d // chips_per_node``. ``scale_out`` is None for a single node."""

    name: str
    chip: Chip
    n_chips: int
    chips_per_node: int
    scale_up: Fabric
    scale_out: Fabric | None = None
    description: str = ""
    sources: tuple[tuple[str, str], ...] = ()
    source_file: str | None = None
    source_sha256: str | None = None
    price: Price | None = None      # optional [price]: rental USD per hour of the whole system
    #: [collectives]: the library whose algorithms run them ("nccl" | "custom") and the last rank's
    #: expected late arrival per collective (tierlab.network.protocols)
    collective_library: str = "nccl"
    collective_skew_s: float = 0.0

    @property
    def n_nodes(self) -> int:
        return self.n_chips // self.chips_per_node

    def node_of(self, device: int) -> int:
        return device // self.chips_per_node

    def grid_coord(self, device: int) -> tuple[int, ...]:
        """Device ``device``'s coordinates on its node's ``torus`` / ``mesh`` (scale-up ``dims``)."""
        dims = self.scale_up.dims
        if not dims:
            raise ValueError(f"{self.name!r}: the scale-up fabric is a {self.scale_up.topology}, not a grid")
        i, out = device % self.chips_per_node, []
        for k in reversed(dims):
            out.append(i % k)
            i //= k
        return tuple(reversed(out))

    def grid_device(self, node: int, coord) -> int:
        """The device at ``coord`` on node ``node``'s grid (the inverse of :meth:`grid_coord`)."""
        i = 0
        for c, k in zip(coord, self.scale_up.dims):
            i = i * k + c
        return node * self.chips_per_node + i

    def crosses_spine(self, src: int, dst: int) -> bool:
        """Whether bytes from ``src`` to ``dst`` (in different nodes) cross the scale-out spine: with
        ``rail_optimised`` NICs not when both are the same index in their nodes (one leaf joins that
        rail); otherwise always (a node's NICs share leaves with other nodes only through the spine).
        The contention model divides the spine's share by ``oversubscription``."""
        if self.node_of(src) == self.node_of(dst):
            return False
        out = self.scale_out
        return not (out is not None and out.rail_optimised
                    and src % self.chips_per_node == dst % self.chips_per_node)
