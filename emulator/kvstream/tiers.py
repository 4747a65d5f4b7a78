"""KV-cache tiers as hardware: HBM, host memory, local NVMe and a remote pool, each with a capacity,
a load bandwidth, a per-transfer latency, an energy per byte and where the figures come from.

Every figure is **per replica** (one instance of ``tp x pp`` devices serving requests):

- ``capacity_bytes``: the tier's bytes for this replica's KV (all its devices together).
- ``bandwidth_bytes_per_s``: per device and per direction (each device loads its own KV shard over
  its own link, so a load of ``b`` bytes per device takes ``b / bandwidth + latency_s``).
- ``energy_j_per_byte``: the tier's read energy plus its link's, per byte moved.

Tiers, nearest first (the names of ``--kv-tier NAME=CAPACITY``):

- ``hbm``: what the device memory leaves after weights and activations
  (:func:`tierlab.serving.capacity.device_terms`, the same terms as ``throughput``'s KV limit).
- ``dram``: host memory per device. From the chip file's farther ``ddr``/``lpddr`` tier and its link
  from HBM where it has one (DDR5 behind PCIe Gen5 x16 on H100/B200; Grace LPDDR5X behind
  NVLink-C2C on GH200/GB200; the SN40L's own DDR); else :data:`TABLE`.
- ``ssd``: the node's local NVMe, shared by its devices (:data:`TABLE`).
- ``remote``: a pool reached over the node's RDMA NICs (the system's ``[scale_out]`` NIC where it
  has one, else :data:`TABLE`); a pool shared by replicas, like Mooncake Store.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from tierlab.common.errors import UsageError
from tierlab.common.suggest import did_you_mean

TIER_NAMES = ("hbm", "dram", "ssd", "remote")
LOWER_TIERS = TIER_NAMES[1:]

#: Figures where a chip or system file has none. Sources: /work/shared/reference/kv-tiers.md.
TABLE = {
    "dram": dict(
        capacity_per_device=256e9,   # DGX H100/H200/B200: 2 TB DDR5 for 8 GPUs (DGX BasePOD RA; DGX B200 user guide)
        bandwidth=64e9,              # PCIe Gen5 x16: ~64 GB/s per direction (secondary pages; ~54 GB/s H2D measured on H20)
        latency=10e-6,               # estimate: a cudaMemcpyAsync / DMA of a batch of blocks, launch and completion
        energy=(11.8 + 11.4) * 8 * 1e-12,   # estimate: DDR5 11.8 pJ/bit + PCIe 5.0 PHY 11.4 pJ/bit (chip files' [S54]), per byte
        source="DGX H100 2 TB DDR5 / 8 GPUs; PCIe Gen5 x16 64 GB/s per direction (kv-tiers.md); latency, energy estimate"),
    "ssd": dict(
        capacity_per_node=8 * 3.84e12,   # DGX H100/H200/B200: 8 x 3.84 TB U.2 NVMe (DGX BasePOD RA; DGX B200 guide)
        bandwidth_per_node=8 * 7e9,      # ~7 GB/s per Gen4 drive (flashgenius, secondary); NVIDIA gives no DGX figure
        latency=100e-6,                  # estimate: NVMe read latency ~100 us with the file system (GDS) path
        energy=25.0 / 7e9 + 11.4 * 8 * 1e-12,   # estimate: ~25 W per active Gen4 drive at 7 GB/s (3.6 nJ/B), plus a PCIe hop
        source="8 x 3.84 TB NVMe per DGX node, ~7 GB/s per Gen4 drive (kv-tiers.md); latency, energy estimate"),
    "remote": dict(
        capacity_per_device=0.0,     # no default: a pool's size is the deployment's choice (give remote=CAPACITY)
        bandwidth=50e9,              # ConnectX-7 400 Gb/s per GPU (DGX BasePOD RA) = 50 GB/s per direction
        latency=20e-6,               # estimate: RDMA read of a batch of blocks plus the store's lookup (Transfer Engine)
        energy=(5.5 * 2 + 11.8) * 8 * 1e-12,   # estimate: NIC SerDes 5.5 pJ/bit at both ends + remote DDR5 11.8 pJ/bit, per byte
        source="one CX-7 400 Gb/s NIC per GPU (kv-tiers.md; Mooncake Transfer Engine 190 GB/s over 8 x 400 Gbps); "
               "latency, energy estimate"),
}

_UNITS = {"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15,
          "KIB": 2 ** 10, "MIB": 2 ** 20, "GIB": 2 ** 30, "TIB": 2 ** 40, "PIB": 2 ** 50,
          "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


@dataclass(frozen=True)
class KvTier:
    """One tier of a replica's KV cache (module docstring for the units)."""

    name: str
    capacity_bytes: float
    bandwidth_bytes_per_s: float
    latency_s: float
    energy_j_per_byte: float
    source: str
    shared: bool = False      # one pool for every replica (the remote tier, as Mooncake Store)

    def load_time(self, bytes_per_device: float) -> float:
        """Seconds to load ``bytes_per_device`` bytes into each device's HBM (0 for nothing)."""
        if bytes_per_device <= 0 or self.name == "hbm":
            return 0.0
        return bytes_per_device / self.bandwidth_bytes_per_s + self.latency_s

    def to_dict(self) -> dict:
        return asdict(self)


def parse_size(text: str | float | int, *, field: str = "kv_tiers") -> float:
    """Bytes in ``1TB``, ``512 GiB``, ``2e12`` (decimal and binary units). Zero or negative: an error."""
    if isinstance(text, bool):
        raise UsageError(f"expected a size such as 1TB, got {text!r}", field=field)
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _SIZE.match(str(text))
        unit = m.group(2).upper() if m else None
        if not m or unit not in _UNITS:
            raise UsageError(f"expected a size such as 1TB or 512GiB, got {text!r}", field=field)
        value = float(m.group(1)) * _UNITS[unit]
    if not value > 0:
        raise UsageError(f"a tier's capacity must be positive, got {text!r}", field=field)
    return value


def parse_kv_tier(text: str) -> tuple[str, float]:
    """``"dram=1TB"`` -> ``("dram", 1e12)``. Unknown names get a did-you-mean; capacity must be > 0."""
    name, sep, cap = str(text).partition("=")
    name = name.strip().lower()
    if not sep:
        raise UsageError(f"expected NAME=CAPACITY (e.g. dram=1TB), got {text!r}", field="kv_tiers")
    check_tier_name(name)
    return name, parse_size(cap)


def check_tier_name(name: str) -> None:
    """One-line error for a tier name that is not ``dram``, ``ssd`` or ``remote``."""
    if name not in LOWER_TIERS:
        extra = " (hbm is what the weights leave; it is not set by hand)" if name == "hbm" else ""
        raise UsageError(f"unknown KV tier {name!r}{extra}; {did_you_mean(name, LOWER_TIERS)}", field="kv_tiers")


def _host_tier(chip):
    """The chip's farther memory (``ddr``/``lpddr``) and the link from HBM to it, or (None, None)."""
    names = [t.name for t in chip.tiers]
    for t in chip.tiers:
        if t.managed == "memory" and t.name in ("ddr", "lpddr", "dram") and names.index(t.name) > 0:
            link = next((ln for ln in chip.links if ln.lower == t.name), None)
            return t, link
    return None, None


def default_tier(name: str, chip, system, devices: int, capacity: float | None = None) -> KvTier:
    """Tier ``name`` of a replica of ``devices`` devices of ``chip`` (in ``system``, or alone)."""
    check_tier_name(name)
    per_node = system.chips_per_node if system is not None else max(devices, 1)
    if name == "dram":
        t, link = _host_tier(chip)
        if t is not None:
            bw = link.bandwidth_bytes_per_s if link is not None else t.bandwidth_bytes_per_s
            e = t.read_energy_j_per_byte + (link.energy_j_per_byte if link is not None else 0.0)
            src = (f"{chip.name} chip file: tier {t.name} ({t.capacity_bytes / 1e9:g} GB per device), link "
                   f"{bw / 1e9:g} GB/s; latency estimate")
            cap = t.capacity_bytes * devices
        else:
            row = TABLE["dram"]
            bw, e, src, cap = row["bandwidth"], row["energy"], row["source"], row["capacity_per_device"] * devices
        return KvTier("dram", capacity if capacity is not None else cap, bw, TABLE["dram"]["latency"], e, src)
    if name == "ssd":
        row = TABLE["ssd"]
        share = devices / per_node
        cap = capacity if capacity is not None else row["capacity_per_node"] * min(share, 1.0)
        return KvTier("ssd", cap, row["bandwidth_per_node"] / per_node, row["latency"], row["energy"], row["source"])
    row = TABLE["remote"]
    bw, src = row["bandwidth"], row["source"]
    if system is not None and system.scale_out is not None:
        bw = system.scale_out.chip_bandwidth_bytes_per_s
        src = f"{system.name} [scale_out] NIC {bw / 1e9:g} GB/s per device; " + src
    if capacity is None:
        raise UsageError("the remote tier has no default size; give it one (remote=CAPACITY)", field="kv_tiers")
    return KvTier("remote", capacity, bw, row["latency"], row["energy"], src, shared=True)


def build_tiers(kv_tiers: dict | None, chip, system, devices: int, hbm_bytes: float) -> list[KvTier]:
    """The replica's tiers, nearest first: HBM (``hbm_bytes``, from the KV limit) then each tier named
    in ``kv_tiers`` (name -> capacity in bytes, or a size string, or None for the file's default),
    in the order ``dram``, ``ssd``, ``remote``."""
    out = [KvTier("hbm", hbm_bytes, float("inf"), 0.0, 0.0, "device memory left by weights and workspace "
                  "(emulator/serving/capacity.py)")]
    given = dict(kv_tiers or {})
    for name in given:
        check_tier_name(str(name).lower())
    for name in LOWER_TIERS:
        if name in given:
            cap = given[name]
            cap = None if cap is None else parse_size(cap, field="kv_tiers")
            out.append(default_tier(name, chip, system, devices, cap))
    return out
