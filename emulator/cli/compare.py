"""``tierlab compare MODEL --chips a,b,c [--systems x,y] [trace options] [--pim/--no-pim] [--json] [--csv FILE] [--plot FILE]``.

``--systems`` (comma-separated system presets or files) replays the trace on each system too
(:func:`tierlab.analysis.system_result.compare_systems`): systems and chips side by side in one
table, the systems after the chips; ``--json`` lists them under ``systems``.

MODEL is a model (preset, config.json or directory), traced once with the trace options, or an
existing trace directory (then the trace options must be left at their defaults).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import click

from tierlab.cli.execution import apply_execution, execution_from, execution_options
from tierlab.cli.options import force_option, json_option, kernel_option, place_option, placement_rules
from tierlab.cli.trace import capture_option, plan_trace, run_options, write_trace
from tierlab.common.errors import UsageError
from tierlab.network.collective import ALGORITHM_NAMES


def _chip_list(text: str, what: str = "chip", example: str = "sn40l,h100", field: str = "--chips") -> list[str]:
    names = ([c.strip() if isinstance(c, str) else c for c in text] if isinstance(text, (list, tuple))  # the API's
             else [c.strip() for c in str(text).split(",")])
    if not names or any(not c for c in names):
        raise UsageError(f"expected a comma-separated list of {what}s such as {example}, got {text!r}",
                         field=field)
    if len(set(map(repr, names))) != len(names):       # repr: the API's Chip and System objects too
        dup = next(c for c in names if names.count(c) > 1)
        raise UsageError(f"{what} {dup!r} is listed twice", field=field)
    return names


def _is_trace(path: str) -> bool:
    from tierlab.traces.format.schema import MANIFEST

    p = Path(path)
    return p.is_dir() and (p / MANIFEST).is_file()


@click.command("compare")
@click.argument("model")
@click.option("--chips", "chips_text", default=None, help="Comma-separated chip presets or .toml files, e.g. sn40l,h100.")
@click.option("--systems", "systems_text", default=None,
              help="Comma-separated system presets or .toml files, e.g. dgx-h100,sn40l-16 (see `tierlab systems`).")
@click.option("--collective-algo", type=click.Choice(["auto", *ALGORITHM_NAMES]), default="auto", show_default=True,
              help="Collective algorithm of the --systems runs where it serves the collective's kind.")
@run_options
@click.option("--pim/--no-pim", default=True, show_default=True,
              help="Run PIM-eligible ops in the memory's PIM unit where a chip has one.")
@click.option("--csv", "csv_path", type=click.Path(), default=None, help="Also write one row per chip to this CSV file.")
@click.option("--plot", "plot_path", type=click.Path(), default=None,
              help="Also draw bytes and energy per token per chip to this image (needs matplotlib).")
@click.option("--html", "html_path", type=click.Path(), default=None,
              help="Also write a self-contained HTML report of the comparison (needs the plot extra).")
@click.option("--keep-trace", type=click.Path(), default=None, help="Write the trace to this directory and keep it.")
@capture_option
@kernel_option
@place_option
@execution_options
@force_option
@json_option
def command(model, chips_text, systems_text, collective_algo, pim, csv_path, plot_path, html_path, keep_trace, kernel,
            place, force, as_json, capture, **kw):
    """Replay one trace of MODEL on every chip (and system) and show the per-token figures side by side."""
    from tierlab.analysis.compare import compare, load_chips, to_json
    from tierlab.analysis.system_result import compare_systems
    from tierlab.present.compare import format_table, model_line, plot_title, write_csv
    from tierlab.engine.options import ReplayOptions
    from tierlab.system.systemfile import load_system
    from tierlab.common.atomic import check_output

    if not chips_text and not systems_text:
        raise UsageError("give --chips a,b and/or --systems x,y", field="--chips")
    names = _chip_list(chips_text) if chips_text else []
    snames = _chip_list(systems_text, "system", "dgx-h100,sn40l-16", "--systems") if systems_text else []
    rules = placement_rules(place)
    execution = execution_from(kw)
    chips = [apply_execution(c, execution) for c in load_chips(names)]  # an unknown chip fails before any tracing
    systems = [load_system(n) for n in snames]  # so does an unknown system
    for p in (csv_path, plot_path, html_path):
        if p:
            check_output(p, force=force)
    if plot_path or html_path:
        from tierlab.cli.views import need_matplotlib

        need_matplotlib("--plot" if plot_path else "--html")  # no matplotlib: say so before the replays
    options = ReplayOptions(pim=pim, kernel=kernel)
    progress = (lambda name: click.echo(f"replaying on {name}", err=True)) if sys.stderr.isatty() else None

    def run(trace_path):
        from tierlab.traces.format.reader import open_trace

        trace = open_trace(trace_path)
        rows = compare(trace, chips, options, extra_rules=rules, progress=progress) if chips else []
        srows = compare_systems(trace, systems, options, extra_rules=rules, collective_algo=collective_algo,
                                progress=progress) if systems else []
        if csv_path:
            write_csv(rows + srows, csv_path, force=force)
        if plot_path:
            from tierlab.present.plots import plot_comparison

            plot_comparison(rows + srows, plot_path, title=plot_title(trace, pim=pim), force=force)
        if html_path:
            from tierlab.present.html import compare_report, write_html

            write_html(compare_report(rows + srows, trace, pim=pim), html_path, force=force)
        if as_json:
            d = to_json(rows, trace, options)
            if systems:
                d["systems"] = [{"system": r.chip, "fits": r.ok, "reason": r.reason, "summary": r.summary or None,
                                 "replay": r.result} for r in srows]
            from tierlab.api.handover import hand_over

            if hand_over(d, rows=rows + srows, trace=trace):   # the Python API (tierlab.api) takes it
                return
            click.echo(json.dumps(d, indent=2))
        else:
            click.echo(format_table(rows + srows, title=f"{model_line(trace)[1]}\nPIM {'on' if pim else 'off'}"))

    if _is_trace(model):
        from click.core import ParameterSource

        if keep_trace or capture:
            flag = "--keep-trace" if keep_trace else "--capture"
            raise UsageError(f"MODEL is already a trace; {flag} applies when tracing a model", field=flag)
        ctx = click.get_current_context()
        given = [n for n in kw if ctx.get_parameter_source(n) not in (None, ParameterSource.DEFAULT)]
        if given:
            raise UsageError(f"MODEL is already a trace; trace options apply only when tracing a model "
                             f"(got --{given[0].replace('_', '-')})", field="MODEL")
        run(model)
        return
    plan = plan_trace(model, kw, capture=capture)
    if keep_trace:
        run(write_trace(plan, keep_trace, force=force))
        return
    with tempfile.TemporaryDirectory(prefix="tierlab-compare-") as tmp:
        run(write_trace(plan, Path(tmp) / f"{plan.name}.trace"))
