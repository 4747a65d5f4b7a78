"""Replays on a system of many chips, shared by ``tierlab run`` and ``tierlab replay``: ``--system``
(instead of ``--chip``) replays every device's slice of a trace on the system's chip and costs the
collectives on its network (:mod:`tierlab.pipeline.system_replay`, :mod:`tierlab.cost.system_cost`);
``--collective-algo`` picks the collective algorithm.
"""

from __future__ import annotations

import json

import click

from tierlab.common.errors import UsageError
from tierlab.cli.options import placement_rules
from tierlab.cli.views import write_system_views
from tierlab.network.algorithm_names import ALGORITHM_NAMES


def chip_optional(cmd):
    """``--chip`` of :func:`replay_options` made optional (``--system`` is its alternative)."""
    for p in cmd.params:
        if p.name == "chip":
            p.required = False
            p.help = "Chip preset name (see `tierlab chips`) or a chip .toml file (or --system)."
    return cmd


def system_options(f):
    """``--system``, ``--collective-algo`` and how collectives run for the calibrated latency
    (``--collective-lib``, ``--protocol``, ``--comm-overlap``, ``--no-overheads``)."""
    from tierlab.network.choices import LIBRARIES, OVERLAPS, PROTOCOLS

    f = click.option("--no-overheads", "no_overheads", is_flag=True, default=False,
                     help="Calibrated latency with every overhead off (peak rates, no kernel or collective "
                          "launch and latency, the roofline's collectives): it then equals the roofline.")(f)
    f = click.option("--comm-overlap", type=click.Choice(OVERLAPS), default="none", show_default=True,
                     help="Calibrated latency: run tensor-parallel collectives (tp) or EP dispatch/combine "
                          "(ep) beside the next ops instead of waiting for them.")(f)
    f = click.option("--protocol", type=click.Choice(["auto", *PROTOCOLS]), default="auto", show_default=True,
                     help="Calibrated latency: the NCCL protocol collectives use (auto: the fastest per "
                          "message, as NCCL's tuner picks).")(f)
    f = click.option("--collective-lib", "collective_lib", type=click.Choice(LIBRARIES), default=None,
                     help="Calibrated latency: nccl (ring, tree, NVLS) or custom (adds vLLM's one-shot and "
                          "two-shot all-reduce on one node); default the system file's [collectives] (nccl).")(f)
    f = click.option("--collective-algo", type=click.Choice(["auto", *ALGORITHM_NAMES]), default="auto",
                     show_default=True,
                     help="Collective algorithm where it serves the collective's kind (others: auto); one "
                          "the fabric cannot run is an error.")(f)
    return click.option("--system", default=None,
                        help="System preset (see `tierlab systems`) or a system .toml file: replay every "
                             "device of the trace on its chip and cost the collectives on its network.")(f)


def check_target(kw: dict) -> None:
    """Exactly one of ``--chip`` and ``--system``."""
    if bool(kw.get("chip")) == bool(kw.get("system")):
        raise UsageError("give exactly one of --chip and --system" if kw.get("chip") else
                         "give --chip NAME or --system NAME", field="--chip")


def check_algorithm(system, algo: str) -> None:
    """An algorithm the system's scale-up fabric cannot run at all fails before any tracing."""
    from tierlab.network.collective import Group, refusal
    from tierlab.network.registry import ALGORITHMS

    if algo == "auto" or system.n_chips < 2:
        return
    group = Group(tuple(range(min(2, system.chips_per_node))), system) if system.chips_per_node >= 2 else \
        Group((0, system.chips_per_node), system)
    kind = ALGORITHMS[algo].kinds[0]
    why = refusal(algo, kind, group)
    if why is not None:
        raise UsageError(f"{algo!r} cannot run on {system.name}: {why}", field="--collective-algo")


def system_of(kw: dict):
    """The system of ``--system``, its fabric checked against ``--collective-algo`` (before any work),
    its chip with the calibrated latency's settings (``--fusion``, ``--overlap``,
    ``--kernel-overhead``, ``--no-achievable``) where given."""
    from dataclasses import replace

    from tierlab.cli.execution import apply_execution
    from tierlab.system.systemfile import load_system

    system = load_system(kw["system"])
    check_algorithm(system, kw.get("collective_algo", "auto"))
    ex = {k: kw.get(k) for k in ("fusion", "overlap", "kernel_overhead", "achievable")}
    if kw.get("no_overheads"):
        ex.update(fusion="none", overlap="none", kernel_overhead="0 s", achievable=False)
    if any(v is not None for k, v in ex.items() if k != "achievable") or ex.get("achievable") is False:
        system = replace(system, chip=apply_execution(system.chip, ex))
    return system


def collective_settings(kw: dict, system):
    """The :class:`tierlab.network.protocols.Settings` of the options (the system file's library and
    skew, the chip's kernel overhead as the launch, unless overridden)."""
    from tierlab.network.protocols import Settings

    return Settings(library=kw.get("collective_lib") or system.collective_library,
                    protocol=kw.get("protocol") or "auto",
                    launch_s=system.chip.execution.kernel_overhead_s, skew_s=system.collective_skew_s,
                    overheads=not kw.get("no_overheads")).check()


def check_system_run(kw: dict) -> None:
    """What applies to a ``--chip`` run only is refused with ``--system`` (before any work)."""
    if kw.get("output"):
        raise UsageError("-o/--output (the per-op Parquet) applies to a --chip run", field="--output")
    placement_rules(kw.get("place"))


def check_chip_run(kw: dict) -> None:
    """The options of how collectives run apply to a ``--system`` run only."""
    for name, default in (("collective_lib", None), ("protocol", "auto"), ("comm_overlap", "none"),
                          ("no_overheads", False)):
        if kw.get(name, default) != default:
            raise UsageError("applies to a --system run (collectives), not one chip",
                             field=f"--{name.replace('_', '-')}")


def system_replay_and_report(trace, system, kw: dict, options, *, as_json: bool) -> dict:
    """Replay ``trace`` on ``system`` (:func:`system_of`) with ``options`` (:class:`ReplayOptions`);
    print the tables or JSON."""
    from tierlab.analysis.system_result import to_json
    from tierlab.cli.progress import counting_bar
    from tierlab.cost.system_cost import cost_system
    from tierlab.present.system_report import format_system_text
    from tierlab.pipeline.system_replay import check_fits, replay_system
    from tierlab.traces.format.reader import open_trace

    rules = placement_rules(kw.get("place"))
    trace = open_trace(trace)
    check_fits(trace, system)
    with counting_bar(trace.n_accesses, unit="desc", desc="replay") as progress:
        sr = replay_system(trace, system, options, extra_rules=rules,
                           collective_algo=kw.get("collective_algo", "auto"), progress=progress)
    sc = cost_system(sr)
    d = to_json(sr, sc, collectives=collective_settings(kw, system), overlap=kw.get("comm_overlap") or "none")
    write_system_views(kw, d, sr, sc, force=kw.get("force", False))
    from tierlab.api.handover import hand_over

    if hand_over(d, replay=sr, cost=sc):       # the Python API (tierlab.api) takes it instead
        return d
    click.echo(json.dumps(d, indent=2) if as_json else format_system_text(d))
    return d
