"""All-reduce time and bus bandwidth across message sizes, modelled (the calibrated collectives of
:mod:`tierlab.network.protocols` and the roofline's) beside published nccl-tests curves: the
table behind ``tierlab collectives`` and ``benchmarks/bench_collectives.py``.

Bus bandwidth is nccl-tests' convention: ``algbw x 2(n-1)/n`` with ``algbw = size / time``, kept for
NVLS as nccl-tests keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tierlab.network.collective import Group, plan_collective
from tierlab.network.protocols import Settings, time_collective

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = tuple(KiB << (2 * i) for i in range(12)) + (8 * GiB,)    # 1 KiB .. 4 GiB by 4x, then 8 GiB


@dataclass(frozen=True)
class MeasuredCurve:
    """One published all_reduce_perf curve: ``busbw`` (GB/s) at ``sizes`` (bytes), in place."""

    id: str
    system: str               # the tierlab system preset it is compared on
    ranks: int
    algorithm: str            # what the measurement ran: "auto" (NCCL's choice) or one algorithm
    sizes: tuple
    busbw_gb_s: tuple
    source: str
    url: str
    note: str = ""


CURVE_SIZES = (KiB, MiB, 16 * MiB, 64 * MiB, 256 * MiB, GiB, 8 * GiB)
MEASURED = (
    MeasuredCurve(
        "h200x8-nvls", "hgx-h200", 8, "in_network", CURVE_SIZES,
        (0.06, 52.96, 240.41, 368.11, 432.24, 467.58, 479.98),
        "Azure AI-benchmarking-guide, 'Azure ND H200 v5 Benchmark Results' (Azure_Results/ND_H200_v5_results.md): "
        "8 x H200, NCCL 2.20.5, NVLS, all_reduce_perf in place (chips-2026.md 2c, S33a)",
        "https://github.com/Azure/AI-benchmarking-guide",
        "NVLS forced: the measurement's algorithm, not auto's"),
    MeasuredCurve(
        "gb200x4-ring", "gb200-nvl72", 4, "ring", CURVE_SIZES,
        (0.10, 80.48, 331.09, 550.73, 593.53, 646.87, 679.61),
        "Azure AI-benchmarking-guide, 'Azure ND GB200 v6 Benchmark Results' (Azure_Results/ND_GB200_v6_results.md): "
        "4 x GB200 of one host in an NVL72 rack, NCCL 2.25.1, Ring, all_reduce_perf in place (chips-2026.md 2c, S33)",
        "https://github.com/Azure/AI-benchmarking-guide"),
)


def bus_bandwidth(n: int, size_bytes: float, time_s: float) -> float:
    """nccl-tests' bus bandwidth (bytes/s) of an all-reduce of ``size_bytes`` taking ``time_s``."""
    return size_bytes / time_s * 2 * (n - 1) / n if time_s > 0 else float("inf")


def curve(system, ranks: int | None = None, sizes=SIZES, settings: Settings | None = None,
          algorithm: str = "auto") -> list[dict]:
    """One row per size: the calibrated time, algorithm and protocol, bus bandwidth, and the
    roofline's time, for an all-reduce over the first ``ranks`` devices (default: one node)."""
    n = ranks or system.chips_per_node
    g = Group(tuple(range(n)), system)
    st = settings or Settings(library=system.collective_library, launch_s=system.chip.execution.kernel_overhead_s,
                              skew_s=system.collective_skew_s)
    out = []
    for s in sizes:
        t = time_collective("all_reduce", g, float(s), st, algorithm=algorithm)
        r = plan_collective("all_reduce", g, float(s), algorithm)
        out.append({"size_bytes": int(s), "time_s": t.time_s, "algorithm": t.algorithm, "protocol": t.protocol,
                    "bus_bandwidth_gb_s": bus_bandwidth(n, s, t.time_s) / 1e9, "roofline_time_s": r.time_s,
                    "roofline_algorithm": r.algorithm,
                    "roofline_bus_bandwidth_gb_s": bus_bandwidth(n, s, r.time_s) / 1e9})
    return out


def against_measured(mc: MeasuredCurve, system=None) -> dict:
    """A measured curve beside the model's on its system (loaded by name unless given)."""
    from tierlab.system.systemfile import load_system

    system = system or load_system(mc.system)
    rows = curve(system, mc.ranks, mc.sizes, algorithm=mc.algorithm)
    for r, bw in zip(rows, mc.busbw_gb_s):
        r["measured_bus_bandwidth_gb_s"] = bw
        r["measured_time_s"] = r["size_bytes"] * 2 * (mc.ranks - 1) / mc.ranks / (bw * 1e9)
        r["ratio"] = r["bus_bandwidth_gb_s"] / bw
    return {"id": mc.id, "system": system.name, "ranks": mc.ranks, "algorithm": mc.algorithm,
            "source": mc.source, "url": mc.url, "note": mc.note, "rows": rows}
