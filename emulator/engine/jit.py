"""The project's single set of Numba options.

Every compiled function in tierlab is decorated with :func:`njit` from here: ``cache=True`` (compiled
code is stored next to the module and reused across processes), no ``fastmath`` (the engine
counts; it never trades exactness for speed) and no C-callable wrapper (nothing takes a kernel's
address). A function only compiled code calls is decorated with :func:`helper`: no wrapper for
Python either, which Numba would otherwise build at every compile. Tunables are always passed as arguments, never read
from module globals inside compiled code (Numba would freeze them at compile time).

A compiled function also holds what it calls from other modules (helpers, intrinsics, the counter
indices it reads as constants), but Numba checks a cached function only against its own source
file: after a change to ``simd.py`` alone, ``engine.py``'s cached code would still load, built
against the old ``simd.py`` — also after upgrading tierlab over an install whose ``__pycache__``
was left in place. So each cached function's stamp here also carries :func:`package_stamp`, a hash
of every module of the compiled rooms: any change to any of them recompiles, and nothing stale loads.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numba

_OPTIONS = {"cache": True, "fastmath": False, "no_cfunc_wrapper": True}


# the rooms of the package that hold compiled code (their modules call each other's compiled helpers)
COMPILED_ROOMS = ("engine", "analysis")
# compiled modules of rooms that are mostly Python (kvstream's server and its tiers are not compiled: an
# edit there must not make every kernel of the engine compile again)
COMPILED_MODULES = ("kvstream/blockstore.py", "kvstream/hitcurve.py", "kvstream/synthetic.py", "kvstream/trace.py")


def read_rooms(root: str | None = None) -> tuple[tuple[str, str, str], ...]:
    """The compiled rooms' modules as they are now: (name relative to ``emulator/``, absolute path,
    SHA-256 of the contents), in name order; ``root``: a directory standing in for ``emulator/``."""
    base = Path(root) if root else Path(__file__).parent.parent
    files = sorted([q for room in COMPILED_ROOMS for q in (base / room).glob("*.py")]
                   + [base / m for m in COMPILED_MODULES if (base / m).is_file()])
    return tuple((q.relative_to(base).as_posix(), str(q.resolve()), hashlib.sha256(q.read_bytes()).hexdigest())
                 for q in files)


_snapshot = functools.lru_cache(maxsize=None)(read_rooms)     # read once per process


def stamp_of(rooms: tuple[tuple[str, str, str], ...]) -> str:
    """SHA-256 of the modules' names and contents (:func:`read_rooms`)."""
    h = hashlib.sha256()
    for name, _, digest in rooms:
        h.update(name.encode() + b"\0" + digest.encode() + b"\0")
    return h.hexdigest()


def module_digests(root: str | None = None) -> dict[str, str]:
    """SHA-256 of each module of the compiled rooms as :func:`package_stamp` saw it: absolute path
    -> digest; ``root``: a directory standing in for ``emulator/``."""
    return {path: digest for _, path, digest in _snapshot(root)}


@functools.lru_cache(maxsize=None)
def package_stamp(root: str | None = None) -> str:
    """SHA-256 of the modules of the compiled rooms (``emulator/engine``, ``emulator/analysis``:
    relative names and contents, in name order, read once per process); ``root``: a directory
    standing in for ``emulator/``."""
    return stamp_of(_snapshot(root))


def source_changed_since_stamp(func) -> bool:
    """Whether ``func``'s module file differs now from what :func:`package_stamp` hashed.

    The stamp is taken once per process, at the first compiled function; a module imported later
    was read later. Had it been edited in between, its code (the older or newer text) would be
    cached under a stamp describing other text, and a later process could load it for the wrong
    source. Such a function is compiled without the on-disk cache instead."""
    path = str(Path(func.__code__.co_filename).resolve())
    recorded = module_digests().get(path)
    if recorded is None:        # outside the compiled rooms (a test's or a benchmark's helper)
        return False
    return _digest_at_import(path) != recorded


@functools.lru_cache(maxsize=None)
def _digest_at_import(path: str) -> str | None:
    """SHA-256 of a module file when its first compiled function is decorated (its functions are
    decorated as the module runs, from the text Python read then); None if it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _load_without_refresh(cache):
    """``cache.load_overload`` without Numba's ``target_context.refresh()`` before each load.

    The refresh imports and installs Numba's typing and lowering registries (about 0.1 s of a fresh
    process, most of a tiny replay's start-up after the imports) so that a *compile* can find every
    implementation. Loading machine code from the cache needs none of them: it needs the runtime
    (``rtsys.initialize``, which the refresh also does first and which is called here), and the
    code's own ``reload_init`` (the threading layer), which the rebuild runs. A compile in the same
    process still refreshes (``numba.core.compiler.CompilerBase`` does so itself), so a cache miss
    is compiled exactly as before. Where the Numba version has not the two methods used, the cache
    is left as Numba made it."""
    load, guard = getattr(cache, "_load_overload", None), getattr(cache, "_guard_against_spurious_io_errors", None)
    if load is None or guard is None:
        return

    def load_overload(sig, target_context):
        from numba.core.runtime import rtsys

        rtsys.initialize(target_context)
        with guard():
            return load(sig, target_context)

    cache.load_overload = load_overload


def _bind_to_package(dispatcher):
    """Make ``dispatcher``'s on-disk cache stale whenever any module of the package changes.

    Numba keeps the stamp it checks the cache index against in the cache file object; it is
    extended with :func:`package_stamp`. Where a Numba version keeps it elsewhere, the function is
    left with Numba's own check (its own file only)."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    own = getattr(cache_file, "_source_stamp", None)
    if own is not None:
        cache_file._source_stamp = (own, package_stamp())
        _load_without_refresh(dispatcher._cache)
    return dispatcher


def njit(func=None, **options):
    """``numba.njit`` with the project's options (overridable), bound to :func:`package_stamp`.

    Used as ``@njit`` or ``@njit(nogil=True)`` (no explicit signatures: functions compile lazily)."""
    options = {**_OPTIONS, **options}

    def wrap(f):
        package_stamp()            # taken before the module's text is compared with it
        opts = options if not (options["cache"] and source_changed_since_stamp(f)) else {**options, "cache": False}
        d = numba.njit(**opts)(f)
        return _bind_to_package(d) if opts["cache"] else d

    return wrap(func) if func is not None else wrap


def helper(func):
    """:func:`njit` for a function only compiled code calls (``nogil``): no wrapper to call it from
    Python is built. Numba builds one at every compile, and for arguments that are tuples of arrays
    it is a large function of its own; the callers take the helper's code into theirs."""
    return njit(func, nogil=True, no_cpython_wrapper=True)
