"""The installed tierlab's version, for provenance (None when running from an uninstalled checkout)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def tierlab_version() -> str | None:
    try:
        return version("tierlab")
    except PackageNotFoundError:
        return None
