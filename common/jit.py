"""Numba's options for compiled code outside the engine: the same as :mod:`tierlab.engine.jit`'s
(``cache=True``, no ``fastmath``, no C-callable wrapper; :func:`helper` without a Python wrapper),
for the rooms that may not import the emulator (``traces/``: the address-trace parsers and checks).

The engine's :func:`tierlab.engine.jit.njit` adds one thing: its cached code is stamped with a hash
of every module of the engine's rooms, because engine functions call each other's compiled helpers
across files. The functions compiled with these options call only helpers of their own module, whose
own source Numba's cache already checks.
"""

from __future__ import annotations

import numba

OPTIONS = {"cache": True, "fastmath": False, "no_cfunc_wrapper": True}


def njit(func=None, **options):
    """``numba.njit`` with :data:`OPTIONS` (overridable): ``@njit`` or ``@njit(nogil=True)``."""
    opts = {**OPTIONS, **options}
    return numba.njit(**opts)(func) if func is not None else numba.njit(**opts)


def helper(func):
    """:func:`njit` for a function only compiled code calls (``nogil``, no Python wrapper)."""
    return njit(func, nogil=True, no_cpython_wrapper=True)
