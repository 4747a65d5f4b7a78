"""The installed tierlab's version, for provenance (None when running from an uninstalled checkout)."""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version


@lru_cache(maxsize=1)      # reading the installed metadata costs ~1-3 ms a call
def tierlab_version() -> str | None:
    try:
        return version("tierlab")
    except PackageNotFoundError:
        return None
