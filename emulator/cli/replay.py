"""``tierlab replay TRACE --chip NAME|FILE.toml [--json] [-o results.parquet] [--force] [options]``.

The replay options are one decorator, :data:`replay_options`, reused by ``tierlab run``.
"""

from __future__ import annotations

import json

import click

from tierlab.common.errors import UsageError

from tierlab.cli.execution import apply_execution, execution_options
from tierlab.cli.on_system import (check_chip_run, check_system_run, check_target, chip_optional, system_of, system_options,
                                    system_replay_and_report)
from tierlab.cli.options import force_option, json_option, kernel_option, place_option, placement_rules
from tierlab.cli.progress import counting_bar
from tierlab.cli.views import check_views, view_options, write_chip_views


def replay_options(f):
    """Decorator adding ``--chip`` and every count-changing replay option to a click command."""
    opts = [
        click.option("--chip", required=True, help="Chip preset name (see `tierlab chips`) or a chip .toml file."),
        click.option("--pim/--no-pim", default=True, show_default=True,
                     help="Run PIM-eligible ops in the memory's PIM unit where the chip has one."),
        click.option("--flush/--no-flush", default=False, show_default=True,
                     help="Write dirty blocks back at the end (reported separately)."),
        click.option("--store-hit-recency/--no-store-hit-recency", default=True, show_default=True,
                     help="A store hit counts as a use for LRU."),
        click.option("--fetch-on-write-miss/--no-fetch-on-write-miss", default=True, show_default=True,
                     help="A store missing a whole tier-0 block still fetches it."),
        click.option("--fetch-on-writeback-miss/--no-fetch-on-writeback-miss", default=True, show_default=True,
                     help="A whole-block write from a nearer tier that misses still fetches the block."),
        click.option("--inclusive/--no-inclusive", default=False, show_default=True,
                     help="Inclusive caching tiers: an eviction back-invalidates nearer tiers' copies."),
        click.option("--policy-seed", type=int, default=0, show_default=True, help="Seed of the random policy."),
        kernel_option,
        click.option("--fast-path/--no-fast-path", default=True, show_default=True,
                     help="Use the exact fast paths (identical counts; --no-fast-path is --kernel walk)."),
        click.option("--set-groups/--no-set-groups", default=True, show_default=True,
                     help="Replay a lone LRU/FIFO caching tier as groups of sets that hold alike "
                          "(identical counts; off for checking)."),
        click.option("--threads", type=int, default=1, show_default=True,
                     help="Threads for an address trace's stream on the stream kernels: 2 serve half of "
                          "the sets each (identical counts; other replays use one)."),
        click.option("-o", "--output", type=click.Path(), default=None,
                     help="Write the per-op breakdown to this Parquet file."),
    ]
    for o in reversed(opts):
        f = o(f)
    return execution_options(place_option(f))


def options_from(kw: dict):
    from tierlab.engine.options import ReplayOptions

    return ReplayOptions(store_hit_recency=kw["store_hit_recency"], fetch_on_write_miss=kw["fetch_on_write_miss"],
                         fetch_on_writeback_miss=kw["fetch_on_writeback_miss"], flush=kw["flush"],
                         seed=kw["policy_seed"], pim=kw["pim"], fast_path=kw["fast_path"],
                         set_groups=kw.get("set_groups", True), kernel=kw.get("kernel", "auto"),
                         inclusive=kw.get("inclusive", False), threads=kw.get("threads", 1))


def replay_and_report(trace, kw: dict, *, as_json: bool, force: bool) -> dict:
    """Replay ``trace`` with the options in ``kw``; print the tables or JSON; write Parquet if asked."""
    from tierlab.chip.chipfile import load_chip
    from tierlab.pipeline.chip_replay import replay_trace
    from tierlab.analysis.result import to_json
    from tierlab.cost.trace_cost import cost_of
    from tierlab.present.report import format_text, write_parquet
    from tierlab.common.atomic import check_output

    chip = apply_execution(load_chip(kw["chip"]), kw)
    placement_rules(kw.get("place"))  # a malformed rule fails before the replay
    if kw.get("output"):
        check_output(kw["output"], force=force)
    check_views(kw, force=force)
    from tierlab.traces.format.reader import open_trace

    trace = open_trace(trace)
    if trace.n_devices > 1:     # each device has its own address space: one chip cannot hold them as one
        raise UsageError(f"{trace.path} is a trace of {trace.n_devices} devices; replay it on a system "
                         "(--system NAME) or trace it for one device", field="--chip")
    with counting_bar(trace.n_accesses, unit="desc", desc="replay") as progress:
        tr = replay_trace(trace, chip, options_from(kw), extra_rules=placement_rules(kw.get("place")),
                          progress=progress)
    cst = cost_of(tr)
    d = to_json(tr, cst)
    if kw.get("output"):
        write_parquet(tr, cst, kw["output"], force=force)
    write_chip_views(kw, d, tr, cst, force=force)
    from tierlab.api.handover import hand_over

    if hand_over(d, replay=tr, cost=cst):      # the Python API (tierlab.api) takes it instead
        return d
    if as_json:
        click.echo(json.dumps(d, indent=2))
    else:
        click.echo(format_text(d))
    return d


@chip_optional
@click.command("replay")
@click.argument("trace", type=click.Path())
@replay_options
@system_options
@view_options
@force_option
@json_option
def command(trace, force, as_json, **kw):
    """Replay TRACE on a chip, or a trace of several devices on a system: bytes per tier and link,
    hits, energy and latency per token."""
    check_target(kw)
    if kw.get("system"):
        system = system_of(kw)
        check_system_run(kw)
        check_views(kw, force=force)
        kw["force"] = force
        system_replay_and_report(trace, system, kw, options_from(kw), as_json=as_json)
        return
    check_chip_run(kw)
    replay_and_report(trace, kw, as_json=as_json, force=force)
