"""A system of many chips as frozen data: which chip, how many, grouped into nodes, and the two
fabrics that join them.

Built from a system TOML by :mod:`emulator.system.systemfile` (which validates every field once, at
the edge); everything downstream (collective algorithms in :mod:`emulator.network`) trusts these
objects. Units live in names: ``_bytes_per_s`` (per direction), ``_s``, ``_j_per_byte``.

The **scale-up** fabric joins the chips of one node (NVLink through NVSwitch, SN40L's peer-to-peer
links); the **scale-out** fabric joins nodes (NICs into a switch). A fabric is a ``switch`` (every
chip has ``ports`` ports of ``bandwidth`` each into one non-blocking switch) or ``direct`` (every
pair of chips of a node has its own link of ``bandwidth``: a full mesh, so a chip has ``ports`` =
``chips_per_node - 1`` links, or a multiple of it when pairs are joined by several links; the
scale-up fabric only). A switch with
``in_network_reduction`` reduces in the network (NVLink SHARP inside a node; SHARP across nodes).
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.chip.hierarchy import Chip, Price

TOPOLOGIES = ("switch", "direct")


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
    #: the calibrated collective model (emulator.network.protocols): the class of link NCCL's per-step
    #: latencies are read for ("nvlink", "pci", "net"; "" = nvlink for scale-up, net for scale-out), and
    #: the fraction of ``bandwidth`` a collective's Simple protocol reaches (1: line rate)
    link_class: str = ""
    achievable: float = 1.0

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
    #: expected late arrival per collective (emulator.network.protocols)
    collective_library: str = "nccl"
    collective_skew_s: float = 0.0

    @property
    def n_nodes(self) -> int:
        return self.n_chips // self.chips_per_node

    def node_of(self, device: int) -> int:
        return device // self.chips_per_node
