"""The project's single set of Numba options.

Every compiled function in tierlab is decorated with :data:`njit` from here: ``cache=True`` (compiled
code is stored next to the module and reused across processes) and no ``fastmath`` (the engine
counts; it never trades exactness for speed). Tunables are always passed as arguments, never read
from module globals inside compiled code (Numba would freeze them at compile time).
"""

from __future__ import annotations

import functools

import numba

njit = functools.partial(numba.njit, cache=True, fastmath=False)
