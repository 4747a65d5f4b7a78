"""tierlab's Python API: the commands as functions returning results (``tierlab.trace``,
``tierlab.run``, ... re-export these). See ``docs/api.md``.

Each function runs the same command function as the ``tierlab`` command (``emulator/cli/``) with
the same option checks and defaults; where the command would print, it hands its ``--json`` dict
and the objects behind it to the function (:mod:`tierlab.api.handover`), so ``result.to_dict()``
is what ``--json`` prints for the same arguments and the two cannot drift. Keyword options are the
command's long options with ``_`` for ``-`` (``policy_seed=``, ``pim=False``, ``html="r.html"``);
an unknown name or a wrong type raises :class:`tierlab.common.errors.UsageError` naming it; bad files and
values raise the typed errors of :mod:`tierlab.common.errors`, as the CLI reports them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence, Union

from tierlab.common.errors import UsageError

if TYPE_CHECKING:
    from tierlab.api.results import ComparisonResult, CurveResult, ReplayResult, SweepResult, TraceResult
    from tierlab.chip.hierarchy import Chip
    from tierlab.system.model import System

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["trace", "replay", "run", "compare", "sweep", "throughput", "load_chip", "load_system"]


def _text(v, field: str, *, allow=()) -> Any:
    """A name or path (or one of ``allow``), as a string; else a UsageError naming ``field``."""
    if allow and isinstance(v, allow):
        return v
    if isinstance(v, (str, os.PathLike)) and str(v):
        return os.fspath(v)
    raise UsageError(f"expected a name or path{', or a loaded object' if allow else ''}, "
                     f"got {type(v).__name__} {v!r}", field=field)


def _loaded():
    from tierlab.chip.hierarchy import Chip
    from tierlab.system.model import System

    return Chip, System


def _take_replay(system: bool):
    from tierlab.api.results import ReplayResult

    return lambda d, o: ReplayResult(d, o["replay"], o["cost"], system=system)


def _replay_result(got: list):
    if len(got) != 1:                        # every replay hands over exactly once
        raise RuntimeError(f"expected one replay result, got {len(got)}")
    return got[0]


def trace(model: PathLike, *, context: int, generate: int, prompt: int = 0, batch: int = 1, tp: int = 1,
          pp: int = 1, ep: int = 1, dp: int = 1, weights: str | None = None, kv: str | None = None,
          path: PathLike | None = None, **options) -> "TraceResult":
    """Lower ``model`` (a preset name, a ``config.json`` or a directory holding one) into a trace:
    ``context`` tokens already in the KV cache, ``prompt`` prefilled and ``generate`` decode steps
    per sequence, ``batch`` sequences, on ``tp x pp x ep x dp`` devices; ``weights``/``kv`` dtypes
    (default: the model's, bf16). Written to ``path`` (a new directory) or, without it, to a
    temporary directory that lives as long as the result. ``options``: the other options of
    ``tierlab trace`` (``router=``, ``seed=``, ``attention=``, ``turns=``, ``force=``, ...).
    Returns a :class:`~tierlab.api.results.TraceResult` (``to_dict()`` is ``tierlab trace --json``)."""
    from tierlab.api.handover import receiving
    from tierlab.api.options import call
    from tierlab.api.results import TraceResult
    from tierlab.cli.trace import command

    model = _text(model, "model")
    given = dict(options, context=context, generate=generate, prompt=prompt, batch=batch, tp=tp, pp=pp, ep=ep,
                 dp=dp, weights=weights, kv=kv)
    if "output" in given:
        raise UsageError("is path= here", field="output")
    keep = None
    if path is None:
        keep = tempfile.TemporaryDirectory(prefix="tierlab-trace-")
        out = str(Path(keep.name) / f"{Path(model).name or 'model'}.trace")
    else:
        out = _text(path, "path")
    with receiving(lambda d, o: TraceResult(d, o["trace"], keep)) as got:
        call(command, given, {"model": model, "output": out}, function="trace", also=("path",))
    return _replay_result(got)


def replay(trace: "TraceResult | PathLike", chip: "str | Chip | None" = None, system: "str | System | None" = None,
           **options) -> "ReplayResult":
    """Replay ``trace`` (a :func:`trace` result or a trace directory) on ``chip`` (a preset name, a
    chip ``.toml`` or a :func:`load_chip` result) or on ``system`` (likewise, :func:`load_system`).
    ``options``: those of ``tierlab replay`` (``pim=``, ``flush=``, ``kernel=``, ``place=[...]``,
    ``fusion=``, ``output="ops.parquet"``, ``html="report.html"``, ``collective_algo=``, ...).
    Returns a :class:`~tierlab.api.results.ReplayResult` (``to_dict()`` is ``tierlab replay --json``)."""
    from tierlab.api.handover import receiving
    from tierlab.api.options import call
    from tierlab.cli.replay import command

    Chip, System = _loaded()
    path = _text(trace, "trace")
    fixed = {"trace": path}
    given = dict(options, chip=chip, system=system)
    with receiving(_take_replay(system is not None)) as got:
        call(command, given, fixed, passthrough={"chip": (Chip,), "system": (System,)}, function="replay", also=("trace",))
    return _replay_result(got)


def run(model: PathLike, chip: "str | Chip | None" = None, system: "str | System | None" = None,
        **options) -> "ReplayResult":
    """Trace ``model`` and replay it on ``chip`` or ``system`` in one go, as ``tierlab run``:
    ``options`` are the trace options (``context=``, ``generate=``, ``batch=``, ``tp=``, ...), the
    replay options (as :func:`replay`) and ``keep_trace="DIR"``.
    Returns a :class:`~tierlab.api.results.ReplayResult` (``to_dict()`` is ``tierlab run --json``)."""
    from tierlab.api.handover import receiving
    from tierlab.api.options import call
    from tierlab.cli.run import command

    Chip, System = _loaded()
    model = _text(model, "model")
    given = dict(options, chip=chip, system=system)
    with receiving(_take_replay(system is not None)) as got:
        call(command, given, {"model": model}, passthrough={"chip": (Chip,), "system": (System,)}, function="run")
    return _replay_result(got)


def _names(v, field: str, allow) -> list | None:
    if v is None or (isinstance(v, (list, tuple)) and not v):
        return None
    if isinstance(v, (str, os.PathLike)):
        v = [x for x in os.fspath(v).split(",")]
    if not isinstance(v, (list, tuple)):
        raise UsageError(f"expected a list of names, paths or loaded objects, got {type(v).__name__} {v!r}",
                         field=field)
    return [_text(x, field, allow=allow) for x in v]


def compare(model: "TraceResult | PathLike", chips: "Sequence[str | Chip]" = (),
            systems: "Sequence[str | System]" = (), **options) -> "ComparisonResult":
    """Replay one trace of ``model`` (a model, traced once with the trace options, or an existing
    trace) on every chip and system, as ``tierlab compare``. ``options``: the trace options, ``pim=``,
    ``kernel=``, ``place=``, ``fusion=``..., ``collective_algo=``, ``csv=``, ``plot=``, ``html=``,
    ``keep_trace=``. Returns a :class:`~tierlab.api.results.ComparisonResult` (``to_dict()`` is
    ``tierlab compare --json``; ``to_arrow()`` one row per chip and system)."""
    from tierlab.api.handover import receiving
    from tierlab.api.options import call
    from tierlab.api.results import ComparisonResult
    from tierlab.cli.compare import command

    Chip, System = _loaded()
    model = _text(model, "model")
    for k in ("chips", "systems"):
        if k in options:      # cannot happen through the signature; guards the option names below
            raise UsageError("given twice", field=k)
    fixed = {"model": model, "chips_text": _names(chips, "chips", (Chip,)),
             "systems_text": _names(systems, "systems", (System,))}
    with receiving(lambda d, o: ComparisonResult(d, o["rows"])) as got:
        call(command, options, fixed, exclude=("chips_text", "systems_text"), function="compare",
             also=("chips", "systems"))
    return _replay_result(got)


def sweep(grid: "PathLike | Mapping[str, Any]", scheduler: str | None = None, workers: int | None = None,
          **options) -> "SweepResult":
    """Sweep a design-space grid on Dask, as ``tierlab sweep``: ``grid`` is a grid ``.toml`` file or
    a dict of axes (``{"model": ["gpt2"], "chip": ["h100", "a100"], "batch": [1, 4], "context": 64,
    "generate": 2, "overrides": {"tier.l2.capacity": ["25 MiB", "50 MiB"]}, "cost": {...}}``).
    ``scheduler``: a running Dask scheduler's address (default: an embedded LocalCluster of
    ``workers`` processes). ``options``: ``output="sweep.parquet"`` (default: a temporary file, its
    rows kept in the result), ``max_points=``, ``connect_timeout=``, ``price=``, ``usd_per_kwh=``,
    ``utilisation=``, ``plot=``, ``html=``. Returns a :class:`~tierlab.api.results.SweepResult`
    (``to_dict()`` is ``tierlab sweep --json``; ``to_arrow()`` one row per point)."""
    from tierlab.api.handover import receiving
    from tierlab.api.options import call
    from tierlab.cli.sweep import command
    from tierlab.design_space.grid import AXES, economics_from_table, grid_from_dict, load_grid

    if isinstance(grid, Mapping):
        d = dict(grid)
        overrides = d.pop("overrides", {})
        if not isinstance(overrides, Mapping):
            raise UsageError("expected a dict of chip-file keys", field="overrides")
        cost = d.pop("cost", {})
        g = grid_from_dict(d, dict(overrides))
        g.economics = economics_from_table(dict(cost) if isinstance(cost, Mapping) else cost)
    else:
        g = load_grid(_text(grid, "grid"))
    options = dict(options, scheduler=scheduler, workers=workers)
    keep = None
    if options.get("output") is None:
        keep = tempfile.TemporaryDirectory(prefix="tierlab-sweep-")
        options["output"] = str(Path(keep.name) / "sweep.parquet")

    def take(d, o):
        from tierlab.api.results import SweepResult
        from tierlab.design_space.store import read_rows
        import pyarrow as pa

        wanted = {p.hash for p in o["grid"].points(o["max_points"])}
        rows = [r for r in read_rows(d["output"]) if r["point_hash"] in wanted]
        return SweepResult(d, pa.Table.from_pylist(rows))

    try:
        with receiving(take) as got:
            call(command, options, {"grid": g, "overrides": ()}, exclude=(*AXES, "overrides"), function="sweep", also=("grid",))
        return _replay_result(got)
    finally:
        if keep is not None:
            keep.cleanup()


def throughput(model: PathLike, chip: "str | Chip | None" = None, system: "str | System | None" = None, *,
               input: int, output: int, concurrency: "str | Sequence[int]" = "auto", chips: Sequence[str] = (),
               systems: Sequence[str] = (), **options) -> "CurveResult":
    """The serving curve of continuous batching, as ``tierlab throughput``: requests of ``input``
    prompt and ``output`` generated tokens at each ``concurrency`` (a list of requests in flight, or
    ``"auto"``: powers of two up to the paged-KV limit) on ``chip`` or ``system`` (or overlaid on
    ``chips`` / ``systems``, names or files). ``options``: ``tp=``, ``pp=``, ``ep=``, ``dp=``,
    ``weights=``, ``kv=``, ``activations=``, ``max_batch_tokens=``, ``memory_utilisation=``,
    ``slo_tpot=`` and ``slo_ttft=`` (ms), ``collective_algo=``, ``plot=``, ``html=``, ``parquet=``,
    ``force=``. Returns a :class:`~tierlab.api.results.CurveResult` (``to_dict()`` is
    ``tierlab throughput --json``; ``to_arrow()`` one row per point of each curve); see docs/serving.md."""
    from tierlab.api.handover import receiving
    from tierlab.api.options import call
    from tierlab.api.results import CurveResult
    from tierlab.cli.throughput import command

    Chip, System = _loaded()
    model = _text(model, "model")
    if not isinstance(concurrency, str):
        if not isinstance(concurrency, (list, tuple)) or not concurrency or any(
                isinstance(c, bool) or not isinstance(c, int) for c in concurrency):
            raise UsageError(f"expected 'auto' or a list of integers, got {concurrency!r}", field="concurrency")
        concurrency = ",".join(map(str, concurrency))
    given = dict(options, chip=chip, system=system, input=input, output=output, concurrency=concurrency,
                 chips=",".join(_names(chips, "chips", ()) or []) or None,
                 systems=",".join(_names(systems, "systems", ()) or []) or None)
    with receiving(lambda d, o: CurveResult(d, o["curves"])) as got:
        call(command, given, {"model": model}, passthrough={"chip": (Chip,), "system": (System,)},
             function="throughput")
    return _replay_result(got)


def load_chip(name_or_path: PathLike, overrides: Mapping[str, Any] | None = None) -> "Chip":
    """A chip: a preset name (``h100``; see ``tierlab chips``) or a chip ``.toml`` file, with
    ``overrides`` (what-if keys as in ``tierlab sweep --override``: ``{"tier.l2.capacity": "50 MiB"}``)
    written into its TOML before it is validated, so units and checks are those of chip files."""
    from tierlab.chip.chipfile import load_chip as _load
    from tierlab.design_space.overrides import build_chip

    name = _text(name_or_path, "name_or_path")
    if overrides is None:
        return _load(name)
    return build_chip(name, _overrides(overrides))


def load_system(name_or_path: PathLike, overrides: Mapping[str, Any] | None = None) -> "System":
    """A system of many chips: a preset name (``dgx-h100``; see ``tierlab systems``) or a system
    ``.toml`` file, with ``overrides`` (``chips``, ``scale_up.KEY``, ``chip.tier.hbm.bandwidth``, ...)."""
    from tierlab.design_space.overrides import build_system
    from tierlab.system.systemfile import load_system as _load

    name = _text(name_or_path, "name_or_path")
    if overrides is None:
        return _load(name)
    return build_system(name, _overrides(overrides))


def _overrides(overrides) -> dict:
    if not isinstance(overrides, Mapping):
        raise UsageError(f"expected a dict of what-if keys, got {type(overrides).__name__} {overrides!r}",
                         field="overrides")
    out = {}
    for k, v in overrides.items():
        if not isinstance(k, str):
            raise UsageError(f"expected string keys such as 'tier.l2.capacity', got {k!r}", field="overrides")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise UsageError(f"expected a string or number, got {type(v).__name__} {v!r}", field=f"overrides.{k}")
        out[k] = v
    return out
