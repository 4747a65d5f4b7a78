"""The viewing outputs of ``tierlab run`` and ``replay``: ``--html`` (the report), ``--timeline``
(a Chrome trace-event file) and ``--plot`` (the roofline), as one decorator and two calls: check
the outputs before the replay, write them after it."""

from __future__ import annotations

import click

PLOT_SUFFIXES = ("png", "svg", "pdf")


def view_options(f):
    """``--html FILE`` (with ``--mrc TIER``), ``--timeline FILE.json``, ``--plot FILE``."""
    f = click.option("--mrc", "mrc_tier", default=None, metavar="TIER",
                     help="With --html: add TIER's miss-ratio curve (as `tierlab mrc` draws it) to the report.")(f)
    f = click.option("--plot", "plot_path", type=click.Path(), default=None, metavar="FILE.png",
                     help="Draw the roofline (each op kind at its arithmetic intensity against the compute "
                          "peak and each tier's bandwidth) to this image (needs the plot extra).")(f)
    f = click.option("--timeline", "timeline_path", type=click.Path(), default=None, metavar="FILE.json",
                     help="Write a Chrome trace-event timeline (one track per resource; opens in "
                          "ui.perfetto.dev or chrome://tracing).")(f)
    return click.option("--html", "html_path", type=click.Path(), default=None, metavar="FILE.html",
                        help="Write a self-contained HTML report (figures embedded; needs the plot extra).")(f)


def check_views(kw: dict, *, force: bool) -> None:
    """Before any work: each output may be written, and matplotlib is there if a figure is asked."""
    from tierlab.common.atomic import check_output

    for key in ("html_path", "timeline_path", "plot_path"):
        if kw.get(key):
            check_output(kw[key], force=force)
    suffix = str(kw.get("plot_path") or ".png").rsplit(".", 1)[-1].lower()
    if suffix not in PLOT_SUFFIXES:
        from tierlab.common.errors import UsageError

        raise UsageError(f"expected an image file ending in .{', .'.join(PLOT_SUFFIXES)}, got {kw['plot_path']!r}",
                         field="--plot")
    if kw.get("mrc_tier") and not kw.get("html_path"):
        from tierlab.common.errors import UsageError

        raise UsageError("adds a curve to the report: give --html FILE too", field="--mrc")
    if kw.get("html_path") or kw.get("plot_path"):
        need_matplotlib("--html" if kw.get("html_path") else "--plot")


def need_matplotlib(option: str) -> None:
    """matplotlib is importable, or one line naming ``option`` and the plot extra."""
    from tierlab.common.errors import UsageError
    from tierlab.present.plots import pyplot

    try:
        pyplot()
    except UsageError:
        what = "the report's figures" if option == "--html" else "plotting"
        raise UsageError(f"{what} need{'' if option == '--html' else 's'} matplotlib: pip install 'tierlab[plot]'",
                         field=option) from None


def wrote(path) -> None:
    """``wrote FILE`` on stderr, as ``tierlab trace`` says it: each output a user asked for is named."""
    click.echo(f"wrote {path}", err=True)


def write_chip_views(kw: dict, d: dict, tr, cst, *, force: bool) -> None:
    """The outputs asked for a chip replay ``tr`` costed as ``cst`` (``d`` its ``--json`` dict)."""
    mrc = None
    if kw.get("mrc_tier"):           # first: a tier the chip lacks fails before anything is written
        from tierlab.analysis.tier_mrc import tier_mrc
        from tierlab.present.figures import svg_of_plot
        from tierlab.present.mrc import format_mrc
        from tierlab.present.plots import plot_mrc

        names = [t.name for t in tr.chip.tiers]
        if kw["mrc_tier"] not in names:
            from tierlab.common.errors import UsageError

            raise UsageError(f"unknown tier {kw['mrc_tier']!r}; chip {tr.chip.name} has {', '.join(names)}",
                             field="--mrc")
        from tierlab.cli.progress import counting_bar

        with counting_bar(tr.trace.n_accesses, unit="row", desc=f"mrc {kw['mrc_tier']}") as progress:
            result, curves = tier_mrc(tr.trace, tr.chip, kw["mrc_tier"], progress=progress)
        mrc = (svg_of_plot(plot_mrc, result, curves), format_mrc(result))
    if kw.get("timeline_path"):
        from tierlab.present.timeline import chip_timeline, write_timeline

        write_timeline(chip_timeline(tr, cst), kw["timeline_path"], force=force)
        wrote(kw["timeline_path"])
    if kw.get("plot_path"):
        from tierlab.present import breakdown, figures

        fig = figures.roofline_figure(breakdown.roofline_points(tr, cst), breakdown.roofline_ceilings(tr.chip, cst),
                                      title=f"roofline on {tr.chip.name}")
        figures.save(fig, kw["plot_path"], force=force)
        wrote(kw["plot_path"])
    if kw.get("html_path"):
        from tierlab.present.html import chip_report, write_html

        write_html(chip_report(d, tr, cst, mrc=mrc), kw["html_path"], force=force)
        wrote(kw["html_path"])


def write_system_views(kw: dict, d: dict, sr, sc, *, force: bool) -> None:
    """The outputs asked for a system replay ``sr`` costed as ``sc``; the roofline is device 0's."""
    if kw.get("mrc_tier"):
        from tierlab.common.errors import UsageError

        raise UsageError("the miss-ratio curve applies to a --chip run (or tierlab mrc on the trace)", field="--mrc")
    if kw.get("timeline_path"):
        from tierlab.present.timeline import system_timeline, write_timeline

        write_timeline(system_timeline(sr, sc), kw["timeline_path"], force=force)
        wrote(kw["timeline_path"])
    if kw.get("plot_path"):
        from tierlab.present import breakdown, figures

        tr, cst = sr.devices[0], sc.devices[0]
        fig = figures.roofline_figure(breakdown.roofline_points(tr, cst), breakdown.roofline_ceilings(tr.chip, cst),
                                      title=f"roofline of device 0 of {sr.system.name}")
        figures.save(fig, kw["plot_path"], force=force)
        wrote(kw["plot_path"])
    if kw.get("html_path"):
        from tierlab.present.html import system_report, write_html

        write_html(system_report(d, sr, sc), kw["html_path"], force=force)
        wrote(kw["html_path"])
