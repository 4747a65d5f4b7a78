"""tierlab's Python API: the library whose shell is the ``tierlab`` command (``tierlab.trace``,
``tierlab.run``, ... re-export these). See ``docs/api.md``.

Each function takes explicit keyword parameters with types and defaults (the option groups of
:mod:`tierlab.api.settings`, whose defaults are written once) and returns a typed result
(:mod:`tierlab.api.results`): ``to_dict()`` is what the command prints with ``--json`` for the same
arguments, ``to_arrow()`` its rows, ``to_text()`` its table. The commands (``emulator/cli/``) parse
their options, call these functions and print. A value of the wrong type raises
:class:`tierlab.common.errors.UsageError` naming the parameter; bad files and values raise the
typed errors of :mod:`tierlab.common.errors`, which the CLI reports in one line naming the flag.
"""

from __future__ import annotations

import os  # noqa: F401  (annotations)
from typing import TYPE_CHECKING, Any, Mapping

from tierlab.common.errors import UsageError

if TYPE_CHECKING:
    from tierlab.api.comparing import compare
    from tierlab.api.replaying import replay, run
    from tierlab.api.serving_curve import throughput
    from tierlab.api.sweeping import sweep
    from tierlab.api.tier_curves import mrc
    from tierlab.api.tracing import trace
    from tierlab.chip.hierarchy import Chip
    from tierlab.system.model import System

__all__ = ["trace", "replay", "run", "compare", "sweep", "throughput", "mrc", "load_chip", "load_system"]

# Each function's module, imported on first use: a command imports tierlab.api.settings (its options'
# defaults), which runs this file, and needs only its own function of these (issue 42).
_FUNCTIONS = {"trace": "tierlab.api.tracing", "replay": "tierlab.api.replaying", "run": "tierlab.api.replaying",
              "compare": "tierlab.api.comparing", "sweep": "tierlab.api.sweeping",
              "throughput": "tierlab.api.serving_curve", "mrc": "tierlab.api.tier_curves"}


def __getattr__(name: str):
    if name in _FUNCTIONS:
        import importlib

        return getattr(importlib.import_module(_FUNCTIONS[name]), name)
    raise AttributeError(f"module 'tierlab.api' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


def load_chip(name_or_path: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None) -> Chip:
    """A chip: a preset name (``h100``; see ``tierlab chips``) or a chip ``.toml`` file, with
    ``overrides`` (what-if keys as in ``tierlab sweep --override``: ``{"tier.l2.capacity": "50 MiB"}``)
    written into its TOML before it is validated, so units and checks are those of chip files."""
    from tierlab.api.settings import check_value
    from tierlab.chip.chipfile import load_chip as load
    from tierlab.design_space.overrides import build_chip

    name = check_value("name_or_path", "text", name_or_path)
    if overrides is None:
        return load(name)
    return build_chip(name, _overrides(overrides))


def load_system(name_or_path: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None) -> System:
    """A system of many chips: a preset name (``dgx-h100``; see ``tierlab systems``) or a system
    ``.toml`` file, with ``overrides`` (``chips``, ``scale_up.KEY``, ``chip.tier.hbm.bandwidth``, ...)."""
    from tierlab.api.settings import check_value
    from tierlab.design_space.overrides import build_system
    from tierlab.system.systemfile import load_system as load

    name = check_value("name_or_path", "text", name_or_path)
    if overrides is None:
        return load(name)
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
