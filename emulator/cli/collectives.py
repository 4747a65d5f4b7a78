"""``tierlab collectives [SYSTEM ...] [--ranks N] [--measured] [--json]``: the modelled all-reduce
time and bus bandwidth from 1 KiB to 8 GiB on each system (every preset if none is named), as the
calibrated latency runs collectives (:mod:`tierlab.network.protocols`) and as the roofline does;
``--measured`` sets the published nccl-tests curves beside the model on their systems
(:mod:`tierlab.analysis.collective_curve`)."""

from __future__ import annotations

import json

import click

from tierlab.common.errors import UsageError
from tierlab.cli.options import json_option


@click.command("collectives")
@click.argument("systems", nargs=-1)
@click.option("--ranks", type=int, default=None, help="Ranks of the all-reduce (default: one node of each system).")
@click.option("--collective-lib", "library", type=click.Choice(["nccl", "custom"]), default=None,
              help="The library (default: the system file's).")
@click.option("--protocol", type=click.Choice(["auto", "LL", "LL128", "Simple"]), default="auto", show_default=True)
@click.option("--measured", is_flag=True, default=False,
              help="The published nccl-tests curves beside the model, on the systems they were measured on.")
@json_option
def command(systems, ranks, library, protocol, measured, as_json):
    """All-reduce time and bus bandwidth by message size, modelled (and measured with --measured)."""
    from tierlab.analysis.collective_curve import MEASURED, against_measured, curve
    from tierlab.network.protocols import Settings
    from tierlab.present.format import format_si, table
    from tierlab.system.systemfile import list_presets, load_system

    if measured:
        out = [against_measured(mc) for mc in MEASURED]
        if as_json:
            click.echo(json.dumps({"measured": out}, indent=2))
            return
        for m in out:
            click.echo(table(["size", "model", "protocol", "busbw model", "busbw measured", "ratio"],
                             [[_size(r["size_bytes"]), r["algorithm"], r["protocol"],
                               f"{r['bus_bandwidth_gb_s']:.2f} GB/s", f"{r['measured_bus_bandwidth_gb_s']:.2f} GB/s",
                               f"{r['ratio']:.2f}"] for r in m["rows"]],
                             title=f"{m['id']}: {m['ranks']} x {m['system']}, {m['algorithm']} ({m['source']})"))
            click.echo("")
        return
    names = list(systems) or list_presets()
    result = []
    for name in names:
        s = load_system(name)
        if not systems and s.n_chips < 2:      # every preset: a one-chip system (cs-3) has no all-reduce
            continue
        n = ranks or s.chips_per_node
        if not 2 <= n <= s.n_chips:
            raise UsageError(f"an all-reduce on {s.name} takes 2 to {s.n_chips} ranks, got {n}", field="--ranks")
        st = Settings(library=library or s.collective_library, protocol=protocol,
                      launch_s=s.chip.execution.kernel_overhead_s, skew_s=s.collective_skew_s).check()
        result.append({"system": s.name, "ranks": n, "library": st.library, "rows": curve(s, n, settings=st)})
    if as_json:
        click.echo(json.dumps({"systems": result}, indent=2))
        return
    for r in result:
        click.echo(table(["size", "algorithm", "protocol", "time", "bus bandwidth", "roofline time"],
                         [[_size(x["size_bytes"]), x["algorithm"], x["protocol"], format_si(x["time_s"], "s"),
                           f"{x['bus_bandwidth_gb_s']:.2f} GB/s", format_si(x["roofline_time_s"], "s")]
                          for x in r["rows"]],
                         title=f"{r['system']}: all-reduce over {r['ranks']} ranks ({r['library']})"))
        click.echo("")


def _size(b: int) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << k:
            return f"{b / (1 << k):g} {unit}"
    return f"{b} B"
