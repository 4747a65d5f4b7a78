"""Where the shipped presets live: ``configs/`` of the checkout, or the installed copy of it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from common.errors import ConfigError, UsageError
from common.suggest import closest


def configs_dir(sub: str) -> Path:
    """Directory of preset files (``sub`` is ``"chips"``, ``"systems"`` or ``"models"``).

    From a checkout (or an editable install) it is ``configs/SUB`` beside the packages; a wheel
    install carries the same files as the data-only package ``tierlab_configs.SUB``.
    """
    here = Path(__file__).resolve().parent.parent / "configs" / sub
    if here.is_dir():
        return here
    spec = importlib.util.find_spec(f"tierlab_configs.{sub}")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            if Path(loc).is_dir():
                return Path(loc)
    return here  # missing: callers report "no such preset" against the expected place


def toml_presets(sub: str) -> list[str]:
    """Names of the shipped TOML presets in ``configs/SUB`` (e.g. chips, systems), sorted."""
    return sorted(p.stem for p in configs_dir(sub).glob("*.toml"))


def resolve_toml(name_or_path, sub: str, noun: str) -> Path:
    """The file a ``noun`` (``"chip"``, ``"system"``) names: a path to a ``.toml`` file, or a preset
    of ``configs/SUB`` (an unknown one is a one-line error with a did-you-mean and the presets)."""
    text = str(name_or_path)
    p = Path(text)
    if text.endswith(".toml") or "/" in text or p.is_file():
        if p.is_dir():
            raise ConfigError(f"is a directory, expected a {noun} .toml file", file=text)
        if not p.is_file():
            raise ConfigError(f"{noun} file not found", file=text)
        return p
    preset = configs_dir(sub) / f"{text}.toml"
    if not preset.is_file():
        presets = toml_presets(sub)
        near = closest(text, presets)
        hint = f"did you mean {near!r}? " if near else ""
        raise UsageError(f"unknown {noun} preset {text!r}; {hint}(presets: {', '.join(presets)})")
    return preset
