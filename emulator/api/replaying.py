"""A trace replayed on a chip or on a system, costed, and its ``--json`` dict and views built: the
work behind :func:`tierlab.replay` and :func:`tierlab.run` (and ``tierlab replay`` / ``run``).

Every check that can fail on the arguments alone runs before the (long) tracing or replay
(:mod:`tierlab.api.targets`); then outputs that may not be written.
"""

from __future__ import annotations

import os  # noqa: F401  (annotations)
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from tierlab.api.settings import Collectives, Execution, ReplaySettings, Views, Workload, documented
from tierlab.api.targets import (check_options, check_target, collective_settings, load_target_chip,
                                 load_target_system, target_argument)
from tierlab.common.errors import UsageError

if TYPE_CHECKING:
    from tierlab.api.results import ReplayResult
    from tierlab.chip.hierarchy import Chip
    from tierlab.system.model import System


def replay_on_chip(trace, chip, replay: ReplaySettings, views: Views, *, output=None, force: bool = False,
                   progress: bool = True):
    """Replay ``trace`` (a path or an opened trace) on ``chip`` (loaded); a :class:`ReplayResult`."""
    from tierlab.analysis.result import to_json
    from tierlab.api.results import ReplayResult
    from tierlab.common.atomic import check_output
    from tierlab.cost.trace_cost import cost_of
    from tierlab.pipeline.chip_replay import replay_trace
    from tierlab.present.progress import counting_bar
    from tierlab.present.report import write_parquet
    from tierlab.present.views import check_views, write_chip_views
    from tierlab.traces.format.reader import open_trace

    rules = replay.rules()
    if output:
        check_output(output, force=force)
    check_views(views, force=force)
    trace = open_trace(trace)
    if trace.n_devices > 1:     # each device has its own address space: one chip cannot hold them as one
        raise UsageError(f"{trace.path} is a trace of {trace.n_devices} devices; replay it on a system "
                         "(--system NAME) or trace it for one device", field="chip")
    with counting_bar(trace.n_accesses, unit="desc", desc="replay", enabled=progress) as bar:
        tr = replay_trace(trace, chip, replay.options(), extra_rules=rules, progress=bar)
    cst = cost_of(tr)
    d = to_json(tr, cst)
    written = []
    if output:
        write_parquet(tr, cst, output, force=force)
    written += write_chip_views(views, d, tr, cst, force=force, progress=progress)
    return ReplayResult(d, tr, cst, system=False, written=written)


def replay_on_system(trace, system, replay: ReplaySettings, collectives: Collectives, views: Views, *,
                     force: bool = False, progress: bool = True):
    """Replay ``trace`` on ``system`` (from :func:`load_target_system`); a system :class:`ReplayResult`."""
    from tierlab.analysis.system_result import to_json
    from tierlab.api.results import ReplayResult
    from tierlab.cost.system_cost import cost_system
    from tierlab.pipeline.system_replay import check_fits, replay_system
    from tierlab.present.progress import counting_bar
    from tierlab.present.views import check_views, write_system_views
    from tierlab.traces.format.reader import open_trace

    check_views(views, force=force)
    rules = replay.rules()
    trace = open_trace(trace)
    check_fits(trace, system)
    with counting_bar(trace.n_accesses, unit="desc", desc="replay", enabled=progress) as bar:
        sr = replay_system(trace, system, replay.options(), extra_rules=rules,
                           collective_algo=collectives.collective_algo, progress=bar)
    sc = cost_system(sr)
    d = to_json(sr, sc, collectives=collective_settings(collectives, system), overlap=collectives.comm_overlap)
    written = write_system_views(views, d, sr, sc, force=force)
    return ReplayResult(d, sr, sc, system=True, written=written)


def replay_trace_on(trace, chip, system, replay: ReplaySettings, execution: Execution, collectives: Collectives,
                    views: Views, *, output=None, force: bool = False, progress: bool = True):
    """``tierlab replay``: ``trace`` on exactly one of ``chip`` and ``system``."""
    check_target(chip, system)
    check_options(system=bool(system), replay=replay, collectives=collectives, output=output)
    if system:
        s = load_target_system(system, collectives, execution)
        return replay_on_system(trace, s, replay, collectives, views, force=force, progress=progress)
    return replay_on_chip(trace, load_target_chip(chip, execution), replay, views, output=output, force=force,
                          progress=progress)


def run_model(model: str, chip, system, workload: Workload, replay: ReplaySettings, execution: Execution,
              collectives: Collectives, views: Views, *, keep_trace=None, output=None, force: bool = False,
              capture: bool = False, strict_dtype: bool = False, progress: bool = True):
    """``tierlab run``: trace ``model`` and replay it on ``chip`` or ``system``; every check first."""
    from tierlab.api.tracing import plan_trace, write_trace
    from tierlab.common.atomic import check_output
    from tierlab.present.views import check_views

    check_target(chip, system)
    target_system = load_target_system(system, collectives, execution) if system else None  # before the tracing
    plan = plan_trace(model, workload, capture=capture)
    run = plan.run
    devices = getattr(run, "devices", 1)
    check_options(system=bool(system), replay=replay, collectives=collectives, output=output)
    if target_system is not None:
        if devices > target_system.n_chips:
            raise UsageError(f"the trace needs {devices} devices; {target_system.name} has {target_system.n_chips} "
                             "chips", field="system or tp")
        target_chip = None
    else:
        target_chip = load_target_chip(chip, execution)    # a bad chip or kernel overhead fails before the tracing
        if devices > 1:
            raise UsageError(f"--tp/--pp/--ep/--dp make {devices} devices; replay them on a system "
                             "(--system NAME), not one chip", field="chip")
    if strict_dtype:     # an FP4 format the chip cannot run fails before the tracing, as a bad chip does
        from tierlab.chip.compute import resolve_compute_dtype

        resolve_compute_dtype(target_system.chip if target_system is not None else target_chip, run.activations,
                              run.weights, strict=True)
    if output:          # so does an output that may not be written: nothing is left half-done
        check_output(output, force=force)
    check_views(views, force=force)

    def replay_it(path):
        if target_system is not None:
            return replay_on_system(path, target_system, replay, collectives, views, force=force, progress=progress)
        return replay_on_chip(path, target_chip, replay, views, output=output, force=force, progress=progress)

    if keep_trace:
        return replay_it(write_trace(plan, keep_trace, force=force, progress=progress))
    with tempfile.TemporaryDirectory(prefix="tierlab-run-") as tmp:
        return replay_it(write_trace(plan, Path(tmp) / f"{plan.name}.trace", progress=progress))


_TARGET_DOCS = dict(
    chip="A chip preset name (``tierlab chips``), a chip ``.toml`` file or a :func:`tierlab.load_chip` result.",
    system="A system preset name (``tierlab systems``), a system ``.toml`` or a :func:`tierlab.load_system` "
           "result: every device of the trace replays on its chip, collectives on its network (instead of chip).",
    output="Write the per-op breakdown to this Parquet file (a chip run).",
    force="Replace existing outputs.", progress="Draw progress bars on a terminal's stderr.")
_RETURNS = "ReplayResult\n    ``to_dict()`` is the command's ``--json``; ``to_arrow()`` one row per op."


@documented(ReplaySettings, Execution, Collectives, Views, intro_returns=_RETURNS, **_TARGET_DOCS,
            trace="A trace directory, or a :func:`tierlab.trace` result.")
def replay(trace: str | os.PathLike[str], chip: str | Chip | None = None, system: str | System | None = None, *,
           pim: bool = True, flush: bool = False, store_hit_recency: bool = True, fetch_on_write_miss: bool = True,
           fetch_on_writeback_miss: bool = True, inclusive: bool = False, policy_seed: int = 0,
           kernel: str = "auto", fast_path: bool = True, set_groups: bool = True, threads: int = 1,
           place: Sequence[str] = (), fusion: str | None = None, overlap: str | None = None,
           kernel_overhead: str | None = None, achievable: bool = True, collective_algo: str = "auto",
           collective_lib: str | None = None, protocol: str = "auto", comm_overlap: str = "none",
           no_overheads: bool = False, html: str | None = None, timeline: str | None = None,
           plot: str | None = None, mrc: str | None = None, output: str | None = None, force: bool = False,
           progress: bool = True) -> ReplayResult:
    """Replay ``trace`` on ``chip``, or a trace of several devices on ``system``: bytes per tier and
    link, hits, energy and latency per token (``tierlab replay``)."""
    from tierlab.api.settings import check_value

    given = locals()
    path = check_value("trace", "text", trace)
    check_value("output", "text", output, nullable=True)
    return replay_trace_on(path, target_argument(chip, "chip"), target_argument(system, "system"), ReplaySettings.take(given),
                           Execution.take(given), Collectives.take(given), Views.take(given), output=output,
                           force=check_value("force", "bool", force), progress=check_value("progress", "bool", progress))


@documented(Workload, ReplaySettings, Execution, Collectives, Views, intro_returns=_RETURNS, **_TARGET_DOCS,
            model="A preset name (``tierlab models``), a ``config.json`` or a directory holding one.",
            keep_trace="Write the trace to this directory and keep it (default: a temporary directory).",
            capture="Build the model with Transformers on the meta device and record its operators "
                    "(docs/capture.md).",
            strict_dtype="Refuse an FP4 activations format the chip has no compute for (default: a note, and "
                         "the next supported dtype).")
def run(model: str | os.PathLike[str], chip: str | Chip | None = None, system: str | System | None = None, *,
        prompt: int = 0, context: int = 0, generate: int = 0, batch: int = 1, weights: str | None = None,
        kv: str = "bf16", activations: str = "bf16", router: str = "uniform", seed: int = 0, attention: str = "flash",
        tile_m: int = 256, tile_n: int = 256, attn_tile: int = 128, align: str | int = "65536",
        quant_group: int = 128, turns: int | None = None, turn_prompt: int | None = None,
        turn_answer: int | None = None, turn_lengths: str | None = None, kv_reuse: bool = True,
        kv_offload: bool = False, tp: int = 1, pp: int = 1, pp_layers: str | None = None, pp_microbatches: int = 1,
        ep: int = 1, dp: int = 1, collective_buffers: str = "in_place",
        pim: bool = True, flush: bool = False, store_hit_recency: bool = True, fetch_on_write_miss: bool = True,
        fetch_on_writeback_miss: bool = True, inclusive: bool = False, policy_seed: int = 0,
        kernel: str = "auto", fast_path: bool = True, set_groups: bool = True, threads: int = 1,
        place: Sequence[str] = (), fusion: str | None = None, overlap: str | None = None,
        kernel_overhead: str | None = None, achievable: bool = True, collective_algo: str = "auto",
        collective_lib: str | None = None, protocol: str = "auto", comm_overlap: str = "none",
        no_overheads: bool = False, html: str | None = None, timeline: str | None = None,
        plot: str | None = None, mrc: str | None = None, output: str | None = None,
        keep_trace: str | None = None, capture: bool = False, strict_dtype: bool = False, force: bool = False,
        progress: bool = True) -> ReplayResult:
    """Trace ``model`` and replay it on ``chip`` or ``system`` in one go (``tierlab run``)."""
    from tierlab.api.settings import check_value

    given = locals()
    name = check_value("model", "text", model)
    for flag in ("capture", "strict_dtype", "force", "progress"):
        check_value(flag, "bool", given[flag])
    for text in ("output", "keep_trace"):
        check_value(text, "text", given[text], nullable=True)
    return run_model(name, target_argument(chip, "chip"), target_argument(system, "system"), Workload.take(given),
                     ReplaySettings.take(given), Execution.take(given), Collectives.take(given), Views.take(given),
                     keep_trace=keep_trace, output=output, force=force, capture=capture, strict_dtype=strict_dtype,
                     progress=progress)
