"""Presets are found one way: :mod:`importlib.resources` on the ``tierlab.configs`` package (the
checkout's ``configs/`` in an editable install, package data in a wheel; tests/house/test_wheel.py installs one)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import tierlab.common.paths as paths


def test_presets_found_in_the_package():
    assert (paths.configs_dir("chips") / "h100.toml").is_file()
    assert (paths.configs_dir("models") / "llama-3.1-8b.json").is_file()
    assert (paths.configs_dir("systems") / "dgx-h100.toml").is_file()


def test_configs_dir_is_the_package_resource():
    for sub in ("chips", "models", "systems", "collectives"):
        assert paths.configs_dir(sub) == Path(str(files("tierlab.configs") / sub))
    # an editable install maps tierlab.configs to the checkout's configs/ folder
    assert paths.configs_dir("chips").resolve() == (Path(__file__).resolve().parents[2] / "configs" / "chips")


def test_toml_presets_lists_every_file():
    names = paths.toml_presets("chips")
    assert "h100" in names and names == sorted(names)
    assert len(names) == len(list(paths.configs_dir("chips").glob("*.toml")))
