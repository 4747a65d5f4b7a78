"""The files a replay also writes (:class:`tierlab.api.settings.Views`): the HTML report (with a
tier's miss-ratio curve), a Chrome trace-event timeline and the roofline plot. :func:`check_views`
runs before the replay (an output that may not be written, or matplotlib missing, fails before any
work); the writers run after it and return the paths they wrote."""

from __future__ import annotations

from tierlab.common.errors import UsageError

PLOT_SUFFIXES = ("png", "svg", "pdf")


def check_views(views, *, force: bool) -> None:
    """Before any work: each output may be written, and matplotlib is there if a figure is asked."""
    from tierlab.common.atomic import check_output

    for path in (views.html, views.timeline, views.plot):
        if path:
            check_output(path, force=force)
    suffix = str(views.plot or ".png").rsplit(".", 1)[-1].lower()
    if suffix not in PLOT_SUFFIXES:
        raise UsageError(f"expected an image file ending in .{', .'.join(PLOT_SUFFIXES)}, got {views.plot!r}",
                         field="plot")
    if views.mrc and not views.html:
        raise UsageError("adds a curve to the report: give --html FILE too", field="mrc")
    if views.html or views.plot:
        need_matplotlib("html" if views.html else "plot")


def need_matplotlib(parameter: str) -> None:
    """matplotlib is importable, or one line naming ``parameter`` and the plot extra."""
    from tierlab.present.plots import pyplot

    try:
        pyplot()
    except UsageError:
        what = "the report's figures need" if parameter == "html" else "plotting needs"
        raise UsageError(f"{what} matplotlib: pip install 'tierlab[plot]'", field=parameter) from None


def write_chip_views(views, d: dict, tr, cst, *, force: bool, progress: bool = True) -> list[str]:
    """The outputs asked for a chip replay ``tr`` costed as ``cst`` (``d`` its ``--json`` dict)."""
    written = []
    mrc = None
    if views.mrc:           # first: a tier the chip lacks fails before anything is written
        from tierlab.analysis.tier_mrc import tier_mrc
        from tierlab.present.figures import svg_of_plot
        from tierlab.present.mrc import format_mrc
        from tierlab.present.plots import plot_mrc
        from tierlab.present.progress import counting_bar

        names = [t.name for t in tr.chip.tiers]
        if views.mrc not in names:
            raise UsageError(f"unknown tier {views.mrc!r}; chip {tr.chip.name} has {', '.join(names)}", field="mrc")
        with counting_bar(tr.trace.n_accesses, unit="row", desc=f"mrc {views.mrc}", enabled=progress) as bar:
            result, curves = tier_mrc(tr.trace, tr.chip, views.mrc, progress=bar)
        mrc = (svg_of_plot(plot_mrc, result, curves), format_mrc(result))
    if views.timeline:
        from tierlab.present.timeline import chip_timeline, write_timeline

        write_timeline(chip_timeline(tr, cst), views.timeline, force=force)
        written.append(views.timeline)
    if views.plot:
        from tierlab.present import breakdown, figures

        fig = figures.roofline_figure(breakdown.roofline_points(tr, cst), breakdown.roofline_ceilings(tr.chip, cst),
                                      title=f"roofline on {tr.chip.name}")
        figures.save(fig, views.plot, force=force)
        written.append(views.plot)
    if views.html:
        from tierlab.present.html import chip_report, write_html

        write_html(chip_report(d, tr, cst, mrc=mrc), views.html, force=force)
        written.append(views.html)
    return written


def write_system_views(views, d: dict, sr, sc, *, force: bool) -> list[str]:
    """The outputs asked for a system replay ``sr`` costed as ``sc``; the roofline is device 0's."""
    written = []
    if views.mrc:
        raise UsageError("the miss-ratio curve applies to a --chip run (or tierlab mrc on the trace)", field="mrc")
    if views.timeline:
        from tierlab.present.timeline import system_timeline, write_timeline

        write_timeline(system_timeline(sr, sc), views.timeline, force=force)
        written.append(views.timeline)
    if views.plot:
        from tierlab.present import breakdown, figures

        tr, cst = sr.devices[0], sc.devices[0]
        fig = figures.roofline_figure(breakdown.roofline_points(tr, cst), breakdown.roofline_ceilings(tr.chip, cst),
                                      title=f"roofline of device 0 of {sr.system.name}")
        figures.save(fig, views.plot, force=force)
        written.append(views.plot)
    if views.html:
        from tierlab.present.html import system_report, write_html

        write_html(system_report(d, sr, sc), views.html, force=force)
        written.append(views.html)
    return written
