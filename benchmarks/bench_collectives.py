"""tierlab's modelled all-reduce against published measurements, per system preset.

Prints one JSON object: for every system preset, the calibrated all-reduce time, algorithm,
protocol and bus bandwidth from 1 KiB to 8 GiB over one node (and the roofline's time), as
``tierlab collectives`` shows them; and the published nccl-tests curves
(:data:`tierlab.analysis.collective_curve.MEASURED`: 8 x H200 NVLS, 4 x GB200 ring) beside the
model on their systems, with the ratio per size. Nothing is timed on this machine: the figures are
the model's, the same on every run.

    python benchmarks/bench_collectives.py
"""

from __future__ import annotations

from _common import emit

from tierlab.common.errors import TierlabError
from tierlab.analysis.collective_curve import MEASURED, against_measured, curve
from tierlab.system.systemfile import list_presets, load_system


def main():
    systems = []
    for name in list_presets():
        s = load_system(name)
        if s.n_chips < 2:
            continue
        systems.append({"system": name, "ranks": s.chips_per_node, "rows": curve(s)})
    measured = []
    for mc in MEASURED:
        try:
            measured.append(against_measured(mc))
        except TierlabError as err:       # a curve whose system has no preset here says so
            measured.append({"id": mc.id, "system": mc.system, "error": str(err)})
    emit("bench_collectives", {"systems": systems, "measured": measured})


if __name__ == "__main__":
    main()
