"""The project's single set of Numba options.

Every compiled function in tierlab is decorated with :func:`njit` from here: ``cache=True`` (compiled
code is stored next to the module and reused across processes) and no ``fastmath`` (the engine
counts; it never trades exactness for speed). Tunables are always passed as arguments, never read
from module globals inside compiled code (Numba would freeze them at compile time).

A compiled function also holds what it calls from other modules (helpers, intrinsics, the counter
indices it reads as constants), but Numba checks a cached function only against its own source
file: after a change to ``simd.py`` alone, ``engine.py``'s cached code would still load, built
against the old ``simd.py`` — also after upgrading tierlab over an install whose ``__pycache__``
was left in place. So each cached function's stamp here also carries :func:`package_stamp`, a hash
of every module of the package: any change to any of them recompiles, and nothing stale loads.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numba

_OPTIONS = {"cache": True, "fastmath": False}


@functools.lru_cache(maxsize=None)
def package_stamp(root: str | None = None) -> str:
    """SHA-256 of the package's modules (``emulator/*.py``: names and contents, in name order)."""
    base = Path(root) if root else Path(__file__).parent
    h = hashlib.sha256()
    for p in sorted(base.glob("*.py")):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _bind_to_package(dispatcher):
    """Make ``dispatcher``'s on-disk cache stale whenever any module of the package changes.

    Numba keeps the stamp it checks the cache index against in the cache file object; it is
    extended with :func:`package_stamp`. Where a Numba version keeps it elsewhere, the function is
    left with Numba's own check (its own file only)."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    own = getattr(cache_file, "_source_stamp", None)
    if own is not None:
        cache_file._source_stamp = (own, package_stamp())
    return dispatcher


def njit(func=None, **options):
    """``numba.njit`` with the project's options (overridable), bound to :func:`package_stamp`.

    Used as ``@njit`` or ``@njit(nogil=True)`` (no explicit signatures: functions compile lazily)."""
    options = {**_OPTIONS, **options}

    def wrap(f):
        d = numba.njit(**options)(f)
        return _bind_to_package(d) if options["cache"] else d

    return wrap(func) if func is not None else wrap
