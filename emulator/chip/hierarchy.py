"""A memory hierarchy as frozen data: tiers, links, compute and optional PIM units.

Built from a chip TOML by :mod:`tierlab.chip.chipfile` (which validates every field once, at the edge);
everything downstream trusts these objects. Units live in names: ``_bytes``, ``_bytes_per_s``,
``_j_per_byte``, ``_flop_per_s``, ``_j_per_flop``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MANAGED = ("cache", "memory", "scratchpad")
POLICIES = ("lru", "fifo", "random", "opt")
FUSIONS = ("none", "layer")          # kernels: one per op, or one per decoder layer (tierlab.cost.organisation)
OVERLAPS = ("none", "independent")   # consecutive kernels that share no tensor run concurrently, or not


@dataclass(frozen=True)
class Price:
    """A rental price (``[price]`` of a chip or system file): US dollars per hour of the whole chip
    or system, with where the figure comes from and the date it was read."""

    usd_per_hour: float
    source: str
    date: str            # YYYY-MM-DD


@dataclass(frozen=True)
class Power:
    """A chip's board power (``[power]`` of a chip file), in watts: the measured ``idle_w`` and the
    vendor's ``tdp_w``; ``static_w``, the power the busy board draws that the dynamic energy does not
    count (board energy = dynamic + ``static_w`` x modelled time; ``idle_w`` where not given); and,
    where published, the memory's background power ``memory_background_w`` (included in the others)."""

    idle_w: float
    tdp_w: float
    static_w: float | None = None
    memory_background_w: float | None = None

    @property
    def static_power_w(self) -> float:
        """The watts charged over the modelled time."""
        return self.idle_w if self.static_w is None else self.static_w


@dataclass(frozen=True)
class Reserve:
    """The memory a runtime keeps for itself on one device (``[reserve]`` of a chip file), in bytes:
    ``context_bytes``, the CUDA context and the libraries' handles and modules (memory the framework's
    allocator never sees); ``workspace_bytes``, the framework's own fixed buffers (CUDA graphs' pools,
    GEMM workspaces, the sampler's); ``fragmentation``, the share of the memory left after those that
    the allocator holds but cannot hand out. The activation peak of the largest step is not here: it
    is counted from the model at the chosen step size (``tierlab.serving.capacity``)."""

    context_bytes: int = 0
    workspace_bytes: int = 0
    fragmentation: float = 0.0

    def bytes_of(self, capacity_bytes: int) -> int:
        """What the runtime keeps of ``capacity_bytes``: context + workspace + fragmentation x the rest."""
        fixed = self.context_bytes + self.workspace_bytes
        return int(fixed + self.fragmentation * max(0, capacity_bytes - fixed))


@dataclass(frozen=True)
class PimUnit:
    """A processing-in-memory unit carried by a tier (issue 5)."""

    internal_bandwidth_bytes_per_s: float
    flop_per_s: float
    read_energy_j_per_byte: float      # in-bank read, no PHY crossing
    energy_j_per_flop: float
    op_kinds: tuple[str, ...]          # op kinds it can run (e.g. "linear", "attention")


@dataclass(frozen=True)
class Tier:
    """One level, nearest-to-compute first in :attr:`Chip.tiers`.

    ``ways`` is None for fully associative. ``managed``: ``cache`` holds copies filled on demand;
    ``memory`` is the home of tensors placed there and, if ``lend`` is true, caches tensors homed
    farther away in the capacity left after placement; ``scratchpad`` holds only tensors placed or
    pinned there (others pass through without a fill).
    """

    name: str
    capacity_bytes: int
    block_bytes: int
    ways: int | None
    policy: str
    managed: str
    bandwidth_bytes_per_s: float
    read_energy_j_per_byte: float
    write_energy_j_per_byte: float
    lend: bool = False
    pim: PimUnit | None = None
    achievable: float = 1.0            # fraction of ``bandwidth`` a kernel reaches (calibrated latency only)
    # a memory-side cache (a GPU's L2) forwards a read miss's block to the reader as it fills it: the
    # block crosses the tier's port once, so the tier's busy time counts the fill, not fill + read
    forward_misses: bool = False

    @property
    def n_blocks(self) -> int:
        return self.capacity_bytes // self.block_bytes

    @property
    def n_ways(self) -> int:
        return self.n_blocks if self.ways is None else self.ways

    @property
    def n_sets(self) -> int:
        return self.n_blocks // self.n_ways


@dataclass(frozen=True)
class Link:
    """The link between tier ``upper`` (nearer) and tier ``upper + 1``."""

    upper: str
    lower: str
    bandwidth_bytes_per_s: float
    energy_j_per_byte: float
    achievable: float = 1.0            # fraction of ``bandwidth`` reached (calibrated latency only)


@dataclass(frozen=True)
class Compute:
    """Peak compute by dtype (e.g. ``{"bf16": 989e12}``) and energy per FLOP by dtype;
    ``achievable``: the fraction of peak a kernel reaches (calibrated latency only)."""

    flop_per_s: dict[str, float]
    energy_j_per_flop: dict[str, float]
    achievable: float = 1.0


@dataclass(frozen=True)
class Execution:
    """How a chip runs a trace's ops as kernels (a chip file's ``[execution]``; the calibrated
    latency of :mod:`tierlab.cost.organisation`, never the roofline).

    ``kernel_overhead_s``: fixed time per kernel, launch plus synchronisation. ``fusion``: ``none``
    (each op a kernel) or ``layer`` (a run of one decoder layer's ops in one step is one kernel).
    ``overlap``: ``none`` or ``independent`` (consecutive kernels sharing no written tensor run
    concurrently). ``gemv``: (weight format, fraction) pairs, the fraction of the memory tier's peak
    bandwidth a decode GEMV of that weight format reaches (dequantisation included), applied to the
    weight-streaming ops only (:mod:`tierlab.cost.gemv`). The defaults add nothing: the calibrated
    latency is then the roofline.
    """

    kernel_overhead_s: float = 0.0
    fusion: str = "none"
    overlap: str = "none"
    gemv: tuple = ()


@dataclass(frozen=True)
class PlacementRule:
    """Home tier for tensors matching all given conditions (None = any).

    ``kind`` matches the tensor kind, ``name`` is an fnmatch pattern on the tensor name, ``layers``
    an inclusive (first, last) range. Rules are tried in order; the first that matches wins.
    ``spill``: if the tier has no room left, the tensor goes first-fit to the farther home tiers
    instead of raising CapacityError (e.g. "KV in SRAM where it fits").
    """

    tier: str
    kind: str | None = None
    name: str | None = None
    layers: tuple[int, int] | None = None
    spill: bool = False


@dataclass(frozen=True)
class Chip:
    name: str
    tiers: tuple[Tier, ...]
    links: tuple[Link, ...]
    compute: Compute
    placement: tuple[PlacementRule, ...] = ()
    description: str = ""
    source_file: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    source_sha256: str | None = None   # hash of the chip file's bytes at load time (provenance)
    price: Price | None = None         # optional [price] table: rental USD per hour
    execution: Execution = Execution()  # optional [execution] table: kernels, fusion, overlap
    power: Power | None = None         # optional [power] table: board power (board energy)
    reserve: Reserve | None = None     # optional [reserve] table: the memory the runtime keeps

    def tier_index(self, name: str) -> int:
        for i, t in enumerate(self.tiers):
            if t.name == name:
                return i
        raise KeyError(name)
