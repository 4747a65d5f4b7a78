"""A model and a workload into a trace: by its hand lowering, or by capture through Transformers
(``--capture``, or a family with no hand lowering). Used by :func:`tierlab.trace`, :func:`tierlab.run`
and :func:`tierlab.compare` alike."""

from __future__ import annotations

import os  # noqa: F401  (annotations)
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tierlab.api.settings import Workload, documented
from tierlab.common.errors import UsageError

if TYPE_CHECKING:
    from tierlab.api.results import TraceResult


def trace_unmapped(manifest: dict) -> str:
    """One line naming the operators a capture ran that no tierlab op maps, and the weights no op reads, or ''."""
    cap = manifest.get("capture") or {}
    ops, unread = cap.get("unmapped_ops") or [], cap.get("unread_weights") or []
    parts = []
    if ops:
        named = ", ".join(f"{o['op']} in {o['module']} x{o['count']}" for o in ops[:8])
        more = f" and {len(ops) - 8} more" if len(ops) > 8 else ""
        parts.append(f"{len(ops)} operator(s) ran that tierlab does not map (their bytes are not in the trace): "
                     f"{named}{more}")
    if unread:
        more = f" and {len(unread) - 4} more" if len(unread) > 4 else ""
        parts.append(f"{len(unread)} weight(s) no op reads: {', '.join(unread[:4])}{more}")
    return "capture: " + "; ".join(parts) if parts else ""


class CaptureWarning(UserWarning):
    """A captured trace leaves out operators or weights (named in the message)."""


@dataclass(frozen=True)
class TracePlan:
    """How MODEL's trace is made: by its hand lowering (``spec``), or by capture (``spec`` None:
    ``capture``, or a family with no hand lowering, ``why`` saying which)."""

    model: str
    spec: object
    run: object
    why: str

    @property
    def captured(self) -> bool:
        return self.spec is None

    @property
    def name(self) -> str:
        if self.spec is not None:
            return self.spec.name
        from tierlab.traces.capture import read_config

        return read_config(self.model)[1]


def plan_trace(model: str, workload: Workload, *, capture: bool = False) -> TracePlan:
    """Read MODEL and the workload; a family with no hand lowering goes through Transformers
    (docs/capture.md), or, without the capture extra, fails in one line naming it."""
    from tierlab.traces.model.families import UnknownFamily

    why, spec = ("--capture" if capture else ""), None
    if not capture:
        from tierlab.traces.model.spec import load_model

        try:
            spec = load_model(model)
        except UnknownFamily as err:
            from tierlab.traces.capture import without_hand_lowering

            why = without_hand_lowering(err)
    return TracePlan(model, spec, workload.run_config(spec), why)


def write_trace(plan: TracePlan, output, *, force: bool = False, record_routing: bool = False,
                progress: bool = False) -> Path:
    """Write ``plan``'s trace to ``output`` (a directory; refused if it exists, unless ``force``) and
    return its path. A capture that leaves operators out says so in a :class:`CaptureWarning`."""
    from tierlab.common.atomic import check_output

    if plan.captured:
        from tierlab.traces.capture import capture_trace, read_config

        if record_routing:
            raise UsageError("not available with --capture (its routing is tierlab's --router, replayable as is)",
                             field="record_routing")
        config, name, file = read_config(plan.model)
        check_output(output, force=force, directory=True)
        path = capture_trace(config, plan.run, output, name=name, file=file, force=force, why=plan.why)
        from tierlab.traces.format.reader import open_trace

        unmapped = trace_unmapped(open_trace(path).manifest)
        if unmapped:
            warnings.warn(unmapped, CaptureWarning, stacklevel=2)
        return Path(path)
    from tierlab.present.progress import fraction_bar
    from tierlab.traces.lowering.generate import generate_trace

    check_output(output, force=force, directory=True)
    with fraction_bar(unit="seg", desc="trace", enabled=progress) as bar:
        return Path(generate_trace(plan.spec, plan.run, output, force=force, progress=bar,
                                   record_routing=record_routing))


def trace_info(plan: TracePlan, trace) -> dict:
    """``tierlab trace --json``: where the trace is, its tables and size, and how it was lowered."""
    path = Path(trace.path)
    info = {"path": str(path), "model": plan.name, "tables": trace.manifest["tables"],
            "bytes_on_disk": sum(f.stat().st_size for f in path.iterdir()),
            "lowering": trace.manifest.get("lowering", {"path": "hand"})}
    if plan.captured:
        info["capture"] = trace.manifest.get("capture")
    return info


def make_trace(model: str, workload: Workload, output, *, force: bool = False, record_routing: bool = False,
               capture: bool = False, progress: bool = True, keep=None):
    """Lower ``model`` under ``workload`` into the trace directory ``output``; a
    :class:`~tierlab.api.results.TraceResult` (``keep``: a temporary directory it keeps alive)."""
    from tierlab.api.results import TraceResult
    from tierlab.traces.format.reader import open_trace

    plan = plan_trace(model, workload, capture=capture)
    path = write_trace(plan, output, force=force, record_routing=record_routing, progress=progress)
    trace = open_trace(path)
    return TraceResult(trace_info(plan, trace), trace, keep)


@documented(Workload, intro_returns="TraceResult\n    ``to_dict()`` is ``tierlab trace --json``; ``path`` the trace directory.",
            model="A preset name (``tierlab models``), a ``config.json`` or a directory holding one.",
            path="The trace directory to write (new); without it, a temporary directory that lives as long as "
                 "the result.",
            record_routing="MoE: also write every token's experts to routing.arrow in the trace.",
            capture="Build the model with Transformers on the meta device and record its operators "
                    "(docs/capture.md); a family with no hand lowering takes this path by itself.",
            force="Replace an existing ``path``.", progress="Draw a progress bar on a terminal's stderr.")
def trace(model: str | os.PathLike[str], *, prompt: int = 0, context: int = 0, generate: int = 0, batch: int = 1,
          weights: str | None = None, kv: str = "bf16", activations: str = "bf16", router: str = "uniform",
          seed: int = 0, attention: str = "flash", tile_m: int = 256, tile_n: int = 256, attn_tile: int = 128,
          align: str | int = "65536", quant_group: int = 128, turns: int | None = None,
          turn_prompt: int | None = None, turn_answer: int | None = None, turn_lengths: str | None = None,
          kv_reuse: bool = True, kv_offload: bool = False, tp: int = 1, pp: int = 1, pp_layers: str | None = None,
          pp_microbatches: int = 1, ep: int = 1, dp: int = 1, collective_buffers: str = "in_place",
          path: str | os.PathLike[str] | None = None, record_routing: bool = False, capture: bool = False,
          force: bool = False, progress: bool = True) -> TraceResult:
    """Lower ``model`` into a trace: ``context`` tokens already in the KV cache, ``prompt`` prefilled
    and ``generate`` decode steps per sequence, ``batch`` sequences, on ``tp x pp x ep x dp`` devices."""
    import tempfile

    from tierlab.api.settings import check_value

    model = check_value("model", "text", model)
    workload = Workload.take(locals())
    keep = None
    if path is None:
        keep = tempfile.TemporaryDirectory(prefix="tierlab-trace-")
        out = str(Path(keep.name) / f"{Path(model).name or 'model'}.trace")
    else:
        out = check_value("path", "text", path)
    for name in ("record_routing", "capture", "force", "progress"):
        check_value(name, "bool", locals()[name])
    return make_trace(model, workload, out, force=force, record_routing=record_routing, capture=capture,
                      progress=progress, keep=keep)
