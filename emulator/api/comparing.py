"""One trace of a model replayed on every chip and system, side by side (:func:`tierlab.compare`,
``tierlab compare``). MODEL is a model, traced once under the workload, or an existing trace
directory (then the workload must be left at its defaults)."""

from __future__ import annotations

import os  # noqa: F401  (annotations)
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from tierlab.api.settings import Collectives, Execution, ReplaySettings, Workload, check_value, documented
from tierlab.common.errors import UsageError

if TYPE_CHECKING:
    from tierlab.api.results import ComparisonResult
    from tierlab.chip.hierarchy import Chip
    from tierlab.system.model import System


def name_list(v, what: str, example: str, field: str) -> list:
    """A comma-separated text or a list of names, paths (or loaded objects); no empty name, none twice."""
    if isinstance(v, (str, os.PathLike)):
        names = [c.strip() for c in os.fspath(v).split(",")]
    elif isinstance(v, (list, tuple)):
        names = [os.fspath(c).strip() if isinstance(c, (str, os.PathLike)) else c for c in v]
    else:
        raise UsageError(f"expected a list of {what}s, got {type(v).__name__} {v!r}", field=field)
    from tierlab.api.targets import target_argument

    names = [target_argument(c, field, optional=False) for c in names]
    if not names or any(isinstance(c, str) and not c for c in names):
        raise UsageError(f"expected a comma-separated list of {what}s such as {example}, got {v!r}", field=field)
    if len(set(map(repr, names))) != len(names):       # repr: loaded Chip and System objects too
        dup = next(c for c in names if names.count(c) > 1)
        raise UsageError(f"{what} {dup!r} is listed twice", field=field)
    return names


def is_trace(path: str) -> bool:
    from tierlab.traces.format.schema import MANIFEST

    p = Path(path)
    return p.is_dir() and (p / MANIFEST).is_file()


def compare_on(model: str, chips: list, systems: list, workload: Workload, replay: ReplaySettings,
               execution: Execution, *, collective_algo: str = "auto", csv=None, plot=None, html=None,
               keep_trace=None, capture: bool = False, force: bool = False, progress: bool = True):
    """The work of :func:`compare` on checked arguments."""
    from tierlab.analysis.compare import compare as compare_chips, load_chips, to_json
    from tierlab.analysis.system_result import compare_systems
    from tierlab.api.results import ComparisonResult
    from tierlab.api.tracing import plan_trace, write_trace
    from tierlab.common.atomic import check_output
    from tierlab.present.compare import model_line, plot_title
    from tierlab.system.model import System
    from tierlab.system.systemfile import load_system

    if not chips and not systems:
        raise UsageError("give --chips a,b and/or --systems x,y", field="chips")
    rules = replay.rules()
    loaded = load_chips([c for c in chips])       # an unknown chip fails before any tracing
    loaded = [execution.apply(c) for c in loaded]
    loaded_systems = [s if isinstance(s, System) else load_system(s) for s in systems]   # so does a system
    for p in (csv, plot, html):
        if p:
            check_output(p, force=force)
    if plot or html:
        from tierlab.present.views import need_matplotlib

        need_matplotlib("plot" if plot else "html")    # no matplotlib: say so before the replays
    options = replay.options()
    say = (lambda name: print(f"replaying on {name}", file=sys.stderr)) if progress and sys.stderr.isatty() else None

    def on(trace_path):
        from tierlab.traces.format.reader import open_trace

        trace = open_trace(trace_path)
        rows = compare_chips(trace, loaded, options, extra_rules=rules, progress=say) if loaded else []
        srows = compare_systems(trace, loaded_systems, options, extra_rules=rules, collective_algo=collective_algo,
                                progress=say) if loaded_systems else []
        written = []
        if csv:
            from tierlab.present.compare import write_csv

            write_csv(rows + srows, csv, force=force)
            written.append(csv)
        if plot:
            from tierlab.present.plots import plot_comparison

            plot_comparison(rows + srows, plot, title=plot_title(trace, pim=replay.pim), force=force)
            written.append(plot)
        if html:
            from tierlab.present.html import compare_report, write_html

            write_html(compare_report(rows + srows, trace, pim=replay.pim), html, force=force)
            written.append(html)
        d = to_json(rows, trace, options)
        if loaded_systems:
            d["systems"] = [{"system": r.chip, "fits": r.ok, "reason": r.reason, "summary": r.summary or None,
                             "replay": r.result} for r in srows]
        title = (f"{model_line(trace)[1]}\n" + ("PIM on: eligible ops run in memory on chips with PIM units"
                                                if replay.pim else "PIM off: every op runs on the compute units"))
        return ComparisonResult(d, rows + srows, title, written)

    if is_trace(model):
        if keep_trace or capture:
            name = "keep_trace" if keep_trace else "capture"
            raise UsageError(f"MODEL is already a trace; --{name.replace('_', '-')} applies when tracing a model",
                             field=name)
        changed = workload.changed()
        if changed:
            raise UsageError(f"MODEL is already a trace; trace options apply only when tracing a model "
                             f"(got --{changed[0].replace('_', '-')})", field="model")
        return on(model)
    plan = plan_trace(model, workload, capture=capture)
    if keep_trace:
        return on(write_trace(plan, keep_trace, force=force, progress=progress))
    with tempfile.TemporaryDirectory(prefix="tierlab-compare-") as tmp:
        return on(write_trace(plan, Path(tmp) / f"{plan.name}.trace", progress=progress))


@documented(Workload, ReplaySettings, Execution,
            intro_returns="ComparisonResult\n    ``to_dict()`` is ``tierlab compare --json``; ``to_arrow()`` one row "
                          "per chip and system.",
            model="A model (preset, ``config.json`` or directory), traced once, or an existing trace directory.",
            chips="Chip presets, chip ``.toml`` files or :func:`tierlab.load_chip` results (a list, or names "
                  "separated by commas).",
            systems="System presets, files or :func:`tierlab.load_system` results, after the chips.",
            collective_algo="Collective algorithm of the systems' runs where it serves the collective's kind.",
            csv="Also write one row per chip to this CSV file.",
            plot="Also draw bytes and energy per token per chip to this image (needs matplotlib).",
            html="Also write a self-contained HTML report of the comparison (needs the plot extra).",
            keep_trace="Write the trace to this directory and keep it.",
            capture="Build the model with Transformers on the meta device (docs/capture.md).",
            force="Replace existing outputs.", progress="Say which chip is replaying, on a terminal's stderr.")
def compare(model: str | os.PathLike[str], chips: str | Sequence[str | Chip] = (),
            systems: str | Sequence[str | System] = (), *, prompt: int = 0, context: int = 0, generate: int = 0,
            batch: int = 1, weights: str | None = None, kv: str = "bf16", activations: str = "bf16",
            router: str = "uniform", seed: int = 0, attention: str = "flash", tile_m: int = 256, tile_n: int = 256,
            attn_tile: int = 128, align: str | int = "65536", quant_group: int = 128, turns: int | None = None,
            turn_prompt: int | None = None, turn_answer: int | None = None, turn_lengths: str | None = None,
            kv_reuse: bool = True, kv_offload: bool = False, tp: int = 1, pp: int = 1, pp_layers: str | None = None,
            pp_microbatches: int = 1, ep: int = 1, dp: int = 1, collective_buffers: str = "in_place",
            pim: bool = True, kernel: str = "auto", place: Sequence[str] = (), fusion: str | None = None,
            overlap: str | None = None, kernel_overhead: str | None = None, achievable: bool = True,
            collective_algo: str = "auto", csv: str | None = None, plot: str | None = None, html: str | None = None,
            keep_trace: str | None = None, capture: bool = False, force: bool = False,
            progress: bool = True) -> ComparisonResult:
    """Replay one trace of ``model`` on every chip and system and show the per-token figures side by
    side (``tierlab compare``)."""
    given = locals()
    name = check_value("model", "text", model)
    chip_names = name_list(chips, "chip", "sn40l,h100", "chips") if chips else []
    system_names = name_list(systems, "system", "dgx-h100,sn40l-16", "systems") if systems else []
    for flag in ("capture", "force", "progress"):
        check_value(flag, "bool", given[flag])
    for text in ("csv", "plot", "html", "keep_trace"):
        check_value(text, "text", given[text], nullable=True)
    replay = ReplaySettings(pim=pim, kernel=kernel, place=place)
    Collectives(collective_algo=collective_algo)      # checked as the group checks it
    return compare_on(name, chip_names, system_names, Workload.take(given), replay, Execution.take(given),
                      collective_algo=collective_algo, csv=csv, plot=plot, html=html, keep_trace=keep_trace,
                      capture=capture, force=force, progress=progress)
