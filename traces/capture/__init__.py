"""Capture of any Transformers model: build it from its config on PyTorch's meta device, record a
run's operators (:mod:`tierlab.traces.capture.record`), map them to tierlab's operator kinds
(:mod:`tierlab.traces.capture.opmap`) and lower them through ``kernels/`` into a trace
(:mod:`tierlab.traces.capture.lower`; :func:`capture_trace` is the door). Needs the ``capture`` extra.
"""

from __future__ import annotations

import os
from pathlib import Path

from tierlab.common.errors import ConfigError, UsageError
from tierlab.common.paths import configs_dir
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.workload.segments import plan_segments
from tierlab.traces.model.spec import read_config_json


def read_config(name_or_path: str) -> tuple[dict, str, str]:
    """A preset name, a ``config.json`` or a directory holding one -> (config dict, name, file).
    Any family Transformers knows is accepted here; nothing is read into a tierlab ModelSpec."""
    p = Path(name_or_path)
    if p.is_dir():
        p = p / "config.json"
    elif not p.is_file() and (configs_dir("models") / f"{name_or_path}.json").is_file():
        p = configs_dir("models") / f"{name_or_path}.json"
    if not p.is_file():
        raise ConfigError("no such model preset, config file or directory holding a config.json",
                          file=str(name_or_path))
    config = read_config_json(p)
    if not isinstance(config, dict):
        raise ConfigError("expected a JSON object", file=str(p))
    return config, (p.parent.name if p.name == "config.json" else p.stem), str(p)


def without_hand_lowering(err) -> str:
    """The capture path for a config whose family has no hand lowering (``err``, a
    :class:`tierlab.traces.model.families.UnknownFamily`): the reason the provenance gives, or, without the capture
    extra, a ConfigError in one line naming the extra to install."""
    import importlib.util

    what = err.family if isinstance(err.family, str) else "this model"
    if any(importlib.util.find_spec(m) is None for m in ("torch", "transformers")):
        raise ConfigError(f"{what} has no hand lowering; tracing it through Transformers needs the optional extra "
                          "'capture' (PyTorch and Transformers): pip install -e '.[capture]'",
                          file=err.file, field=err.field) from None
    return f"no hand lowering of {what}"


def capture_trace(config: dict, run: RunConfig, out_dir: str | os.PathLike, *, name: str = "model",
                  file: str | None = None, force: bool = False, why: str = "") -> Path:
    """Record ``run`` on the Transformers model of ``config`` and write its trace to ``out_dir``; ``why``
    says why the capture made it (``--capture``, or no hand lowering of the family), in the provenance."""
    if run.turns or run.sharded:
        who = "--capture" if why in ("", "--capture") else f"{why}: its capture"
        raise UsageError(f"{who} traces one device's --prompt/--context/--generate run (no --turns, --tp, --pp, "
                         "--ep, --dp or microbatches)", field="capture")
    if run.attention != "flash":
        raise UsageError("--capture lowers attention with the flash kernel only", field="attention")
    segments = [s for s in plan_segments(run) if s.action == "compute"]
    if not segments:
        raise UsageError("nothing to trace: no prefill or decode segment", field="segments")
    from tierlab.traces.capture.record import record, require_extra

    require_extra()
    from tierlab.traces.capture.lower import CaptureLowering
    from tierlab.traces.format.writer import TraceWriter

    cap = record(config, segments, run.batch, run.context, file=file)
    positions = run.max_positions
    extra = {"capture": {"model_type": cap.model_type, "aten_ops_recorded": cap.ops_recorded,
                         "versions": cap.info.get("versions", {}), "name": name},
             "segments": [s.to_dict() for s in segments]}
    with TraceWriter(out_dir, model=config, run=run, force=force, alignment=run.alignment, extra=extra) as w:
        low = CaptureLowering(cap, run, w, positions)
        w.extra["capture"]["params"] = low.params
        w.extra["spec"] = {"name": name, "params": low.params}
        for seg, events in cap.segments:
            low.segment(seg, events)
        w.extra["capture"]["unmapped_ops"] = low.unmapped_ops()
        w.extra["capture"]["unread_weights"] = low.unread_weights()
        w.extra["lowering"] = {"path": "capture", "why": why} if why else {"path": "capture"}
    return Path(out_dir)
