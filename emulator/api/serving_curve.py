"""The serving curve of continuous batching (:func:`tierlab.throughput`, ``tierlab throughput``):
requests of ``input`` prompt and ``output`` generated tokens at each concurrency, on a chip or a
system (or overlaid on several); see docs/serving.md."""

from __future__ import annotations

import os  # noqa: F401  (annotations)
from typing import TYPE_CHECKING, Sequence

from tierlab.api.settings import check_value
from tierlab.common.errors import UsageError

if TYPE_CHECKING:
    from tierlab.api.results import CurveResult
    from tierlab.chip.hierarchy import Chip
    from tierlab.system.model import System


def _names(v, field: str) -> list:
    if v is None or v == () or v == []:
        return []
    if isinstance(v, (str, os.PathLike)):
        return [x.strip() for x in os.fspath(v).split(",") if x.strip()]
    if isinstance(v, (list, tuple)):
        from tierlab.api.targets import target_argument

        return [target_argument(x, field, optional=False) for x in v]
    raise UsageError(f"expected a list of names or paths, got {type(v).__name__} {v!r}", field=field)


def _concurrency(v):
    if isinstance(v, str):
        return v
    if not isinstance(v, (list, tuple)) or not v or any(isinstance(c, bool) or not isinstance(c, int) for c in v):
        raise UsageError(f"expected 'auto' or a list of integers, got {v!r}", field="concurrency")
    return ",".join(map(str, v))


def throughput(model: str | os.PathLike[str], chip: str | Chip | None = None, system: str | System | None = None, *,
               input: int, output: int, concurrency: str | Sequence[int] = "auto",
               chips: str | Sequence[str | Chip] = (), systems: str | Sequence[str | System] = (), tp: int = 1,
               pp: int = 1, ep: int = 1, dp: int = 1, weights: str = "bf16", kv: str = "bf16",
               activations: str = "bf16", max_batch_tokens: int | None = None,
               memory_utilisation: float | None = None, slo_tpot: float | None = None, slo_ttft: float | None = None,
               collective_algo: str = "auto", workers: int | None = None, plot: str | None = None,
               html: str | None = None, parquet: str | None = None, force: bool = False) -> CurveResult:
    """The serving curve of ``model``: output tokens/s against tokens/s per user, from continuous
    batching whose representative steps are replayed exactly (``tierlab throughput``).

    Parameters
    ----------
    model : str
        A preset name, a ``config.json`` or a directory holding one.
    chip, system : str, Chip or System, optional
        One chip serves the model, or a system (with ``tp``/``pp``/``ep``/``dp``).
    input, output : int
        Prompt tokens (ISL) and output tokens (OSL) of each request.
    concurrency : "auto" or list of int, default "auto"
        Requests in flight: a list, or powers of two up to the paged-KV limit, and the limit.
    chips, systems : list, optional
        Chips or systems to overlay (instead of ``chip``/``system``).
    tp, pp, ep, dp : int, default 1
        Tensor-parallel ranks, pipeline stages, expert-parallel ranks, data-parallel replicas.
    weights, kv, activations : str, default "bf16"
        Dtypes (``activations="fp8"``: FP8 GEMMs, as TensorRT-LLM's FP8 recipe).
    max_batch_tokens : int, optional
        Tokens a step may process (chunked prefill's budget); default 8192.
    memory_utilisation : float, optional
        Share of the memory tier the engine takes (vLLM's ``gpu_memory_utilization``); default 0.9.
    slo_tpot, slo_ttft : float, optional
        Time per output token and time to first token limits, ms.
    collective_algo : str, default "auto"
        Collective algorithm (systems).
    workers : int, optional
        Processes replaying the representative steps (default 1; identical figures with more).
    plot, html, parquet : str, optional
        Draw the curve (PNG, SVG, PDF); write one self-contained HTML page; write the rows to Parquet.
    force : bool, default False
        Replace existing outputs.

    Returns
    -------
    CurveResult
        ``to_dict()`` is ``tierlab throughput --json``; ``to_arrow()`` one row per point of each curve.
    """
    from tierlab.api.results import CurveResult
    from tierlab.api.settings import Collectives, Execution
    from tierlab.api.targets import load_target_system
    from tierlab.common.atomic import check_output
    from tierlab.serving.capacity import UTILISATION
    from tierlab.serving.throughput import MAX_BATCH_TOKENS, throughput as curve
    from tierlab.traces.model.spec import load_model

    model = check_value("model", "text", model)
    for name, v in (("input", input), ("output", output), ("tp", tp), ("pp", pp), ("ep", ep), ("dp", dp)):
        check_value(name, "int", v)
    for name, v in (("weights", weights), ("kv", kv), ("activations", activations)):
        check_value(name, "text", v)
    check_value("max_batch_tokens", "int", max_batch_tokens, nullable=True)
    for name, v in (("memory_utilisation", memory_utilisation), ("slo_tpot", slo_tpot), ("slo_ttft", slo_ttft)):
        check_value(name, "float", v, nullable=True)
    if workers is not None and (check_value("workers", "int", workers) < 1):
        raise UsageError(f"expected at least 1, got {workers}", field="workers")
    collectives = Collectives(collective_algo=collective_algo)
    concurrency = _concurrency(concurrency)
    chip_list, system_list = _names(chips, "chips"), _names(systems, "systems")
    given = [n for n, v in (("chip", chip), ("system", system), ("chips", chip_list), ("systems", system_list)) if v]
    if len(given) != 1:
        raise UsageError("give exactly one of --chip, --system, --chips and --systems" if given else
                         "give --chip NAME or --system NAME", field="chip")
    if parquet and not str(parquet).endswith(".parquet"):
        raise UsageError(f"expected a .parquet file, got {parquet!r}", field="parquet")
    for p in (plot, html, parquet):
        if p:
            check_output(p, force=force)
    if plot or html:
        from tierlab.present.views import need_matplotlib

        need_matplotlib("plot" if plot else "html")       # matplotlib missing fails before the work
    if chip or chip_list:
        from tierlab.chip.chipfile import load_chip
        from tierlab.chip.hierarchy import Chip

        targets = [dict(chip=c if isinstance(c, Chip) else load_chip(c)) for c in (chip_list or [chip])]
    else:
        targets = [dict(system=load_target_system(s, collectives, Execution()))
                   for s in (system_list or [system])]
    spec = load_model(model)
    kw = dict(isl=input, osl=output, concurrency=concurrency, weights=weights, kv=kv, activations=activations,
              max_batch_tokens=MAX_BATCH_TOKENS if max_batch_tokens is None else max_batch_tokens,
              tp=tp, pp=pp, ep=ep, dp=dp, slo_tpot_s=None if slo_tpot is None else slo_tpot / 1e3,
              slo_ttft_s=None if slo_ttft is None else slo_ttft / 1e3,
              utilisation=UTILISATION if memory_utilisation is None else memory_utilisation,
              collective_algo=collective_algo, workers=workers)
    curves = [curve(spec, **t, **kw) for t in targets]
    from tierlab.present import serving as view

    written = []
    if plot:
        view.draw(curves, plot)
        written.append(plot)
    if html:
        view.write_html(curves, html, force=force)
        written.append(html)
    if parquet:
        view.write_parquet(curves, parquet, force=force)
        written.append(parquet)
    return CurveResult(curves, written)
