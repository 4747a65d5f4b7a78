"""``tierlab compare MODEL --chips a,b,c [trace options] [--pim/--no-pim] [--json] [--csv FILE] [--plot FILE]``.

MODEL is a model (preset, config.json or directory), traced once with the trace options, or an
existing trace directory (then the trace options must be left at their defaults).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import click

from emulator.cli.options import force_option, json_option, kernel_option, place_option, placement_rules
from emulator.cli.trace import run_options, run_config_from_options
from common.errors import UsageError


def _chip_list(text: str) -> list[str]:
    names = [c.strip() for c in str(text).split(",")]
    if not names or any(not c for c in names):
        raise UsageError(f"expected a comma-separated list of chips such as sn40l,h100, got {text!r}",
                         field="--chips")
    if len(set(names)) != len(names):
        dup = next(c for c in names if names.count(c) > 1)
        raise UsageError(f"chip {dup!r} is listed twice", field="--chips")
    return names


def _is_trace(path: str) -> bool:
    from traces.format import MANIFEST

    p = Path(path)
    return p.is_dir() and (p / MANIFEST).is_file()


@click.command("compare")
@click.argument("model")
@click.option("--chips", "chips_text", required=True, help="Comma-separated chip presets or .toml files, e.g. sn40l,h100.")
@run_options
@click.option("--pim/--no-pim", default=True, show_default=True,
              help="Run PIM-eligible ops in the memory's PIM unit where a chip has one.")
@click.option("--csv", "csv_path", type=click.Path(), default=None, help="Also write one row per chip to this CSV file.")
@click.option("--plot", "plot_path", type=click.Path(), default=None,
              help="Also draw bytes and energy per token per chip to this image (needs matplotlib).")
@click.option("--keep-trace", type=click.Path(), default=None, help="Write the trace to this directory and keep it.")
@kernel_option
@place_option
@force_option
@json_option
def command(model, chips_text, pim, csv_path, plot_path, keep_trace, kernel, place, force, as_json, **kw):
    """Replay one trace of MODEL on every chip and show the per-token figures side by side."""
    from emulator.analysis.compare import compare, load_chips, to_json
    from emulator.present.compare import format_table, model_line, plot_title, write_csv
    from emulator.engine.options import ReplayOptions
    from common.atomic import check_output

    names = _chip_list(chips_text)
    rules = placement_rules(place)
    chips = load_chips(names)  # an unknown chip fails before any tracing
    for p in (csv_path, plot_path):
        if p:
            check_output(p, force=force)
    if plot_path:
        from emulator.present.plots import pyplot

        pyplot()  # no matplotlib: say so before the replays
    options = ReplayOptions(pim=pim, kernel=kernel)
    progress = (lambda name: click.echo(f"replaying on {name}", err=True)) if sys.stderr.isatty() else None

    def run(trace_path):
        from traces.reader import open_trace

        trace = open_trace(trace_path)
        rows = compare(trace, chips, options, extra_rules=rules, progress=progress)
        if csv_path:
            write_csv(rows, csv_path, force=force)
        if plot_path:
            from emulator.present.plots import plot_comparison

            plot_comparison(rows, plot_path, title=plot_title(trace, pim=pim), force=force)
        if as_json:
            click.echo(json.dumps(to_json(rows, trace, options), indent=2))
        else:
            click.echo(format_table(rows, title=f"{model_line(trace)[1]}\nPIM {'on' if pim else 'off'}"))

    if _is_trace(model):
        from click.core import ParameterSource

        if keep_trace:
            raise UsageError("MODEL is already a trace; --keep-trace applies when tracing a model", field="--keep-trace")
        ctx = click.get_current_context()
        given = [n for n in kw if ctx.get_parameter_source(n) not in (None, ParameterSource.DEFAULT)]
        if given:
            raise UsageError(f"MODEL is already a trace; trace options apply only when tracing a model "
                             f"(got --{given[0].replace('_', '-')})", field="MODEL")
        run(model)
        return
    from traces.lower import generate_trace
    from traces.spec import load_model

    spec = load_model(model)
    run_cfg = run_config_from_options(kw)
    if keep_trace:
        check_output(keep_trace, force=force, directory=True)
        run(generate_trace(spec, run_cfg, keep_trace, force=force))
        return
    with tempfile.TemporaryDirectory(prefix="tierlab-compare-") as tmp:
        run(generate_trace(spec, run_cfg, Path(tmp) / f"{spec.name}.trace"))
