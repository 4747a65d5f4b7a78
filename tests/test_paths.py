"""Presets are found from a checkout and from an installed copy (the ``tierlab_configs`` package)."""

from __future__ import annotations

import common.paths as paths


def test_presets_found_in_the_checkout():
    assert (paths.configs_dir("chips") / "h100.toml").is_file()
    assert (paths.configs_dir("models") / "llama-3.1-8b.json").is_file()


def test_presets_found_as_installed_package_data(monkeypatch):
    # As in a wheel install: no configs/ beside the packages, only the tierlab_configs package.
    monkeypatch.setattr(paths, "__file__", "/nonexistent/site-packages/traces/paths.py")
    chips = paths.configs_dir("chips")
    assert not str(chips).startswith("/nonexistent")
    assert (chips / "sn40l.toml").is_file()
    assert (paths.configs_dir("models") / "mixtral-8x7b.json").is_file()


def test_traces_and_kernels_never_import_the_emulator():
    # docs/design.md: data flows one way; a trace is chip-independent.
    import ast
    from pathlib import Path

    root = Path(paths.__file__).resolve().parent.parent
    for pkg in ("traces", "kernels"):
        for f in (root / pkg).glob("*.py"):
            for node in ast.walk(ast.parse(f.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                assert not any(n == "emulator" or n.startswith("emulator.") for n in names), f
