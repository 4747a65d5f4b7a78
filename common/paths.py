"""Where the shipped presets live: the package ``tierlab.configs`` (``configs/`` of the checkout)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from tierlab.common.errors import ConfigError, UsageError
from tierlab.common.suggest import closest


def configs_dir(sub: str) -> Path:
    """Directory of preset files (``sub`` is ``"chips"``, ``"systems"``, ``"models"`` or
    ``"collectives"``): ``SUB`` of the package ``tierlab.configs``, found one way, with
    :mod:`importlib.resources` (an editable install maps it to the checkout's ``configs/``, a wheel
    carries the files as package data)."""
    return Path(str(files("tierlab.configs") / sub))


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
