"""A cached compiled function is stale when any module of the package changes, not only its own file."""

from __future__ import annotations

import shutil
from pathlib import Path

from tierlab.engine import jit, setgroups, walk


def test_package_stamp_follows_every_module(tmp_path):
    src = Path(jit.__file__).parent.parent
    for room in jit.COMPILED_ROOMS:
        shutil.copytree(src / room, tmp_path / room, ignore=shutil.ignore_patterns("__pycache__"))
    before = jit.package_stamp(str(tmp_path))
    assert before == jit.stamp_of(jit.read_rooms(str(tmp_path)))        # deterministic
    (tmp_path / "engine" / "simd.py").write_text((tmp_path / "engine" / "simd.py").read_text() + "\n# changed\n")
    changed = jit.stamp_of(jit.read_rooms(str(tmp_path)))
    assert changed != before
    assert jit.package_stamp(str(tmp_path)) == before                   # read once per process
    (tmp_path / "analysis" / "new_helper.py").write_text("X = 1\n")
    assert jit.stamp_of(jit.read_rooms(str(tmp_path))) not in (before, changed)


def test_a_module_edited_after_the_stamp_compiles_without_the_cache(monkeypatch):
    """A module read after the stamp was taken, and edited in between, would cache its code under
    a stamp of other text: it compiles without the on-disk cache instead."""
    f = walk.replay_batch.py_func
    assert not jit.source_changed_since_stamp(f)
    real = jit.module_digests()
    path = str(Path(f.__code__.co_filename).resolve())
    monkeypatch.setattr(jit, "module_digests", lambda root=None: {**real, path: "0" * 64})
    assert jit.source_changed_since_stamp(f)
    d = jit.njit(f)
    assert not hasattr(getattr(d, "_cache", None), "_cache_file")      # no on-disk cache
    helper = jit.njit(lambda x: x + 1)                                 # outside the compiled rooms
    assert not jit.source_changed_since_stamp(helper.py_func)


def test_cached_functions_carry_the_package_stamp():
    for f in (walk.replay_batch, setgroups.replay_groups):
        stamp = f._cache._cache_file._source_stamp
        assert isinstance(stamp, tuple) and stamp[1] == jit.package_stamp()


def test_uncached_functions_are_left_alone():
    f = jit.njit(cache=False)(lambda x: x + 1)
    assert f(1) == 2
    assert not hasattr(getattr(f, "_cache", None), "_cache_file")


def test_the_stamp_covers_kvstreams_compiled_modules_only():
    """kvstream's compiled modules are in the stamp; its Python-only ones (the server) are not, so an
    edit to the server does not recompile the engine."""
    names = {name for name, _, _ in jit.read_rooms()}
    for m in jit.COMPILED_MODULES:
        assert m in names
    assert "kvstream/server.py" not in names and "kvstream/tiers.py" not in names
    kv = Path(jit.__file__).parent.parent / "kvstream"
    compiled = {f"kvstream/{p.name}" for p in kv.glob("*.py") if "njit" in p.read_text() or "@helper" in p.read_text()}
    assert compiled <= set(jit.COMPILED_MODULES)


_CACHED_MODULE = '''
import sys
import numpy as np
from tierlab.engine.jit import njit


@njit
def squares(n):
    a = np.empty(n, np.int64)      # allocated by Numba's runtime, returned to Python
    for i in range(n):
        a[i] = i * i
    return a, a.sum()


a, total = squares(1000)
print(int(total), int(a[-1]), squares.stats.cache_hits.get(squares.signatures[0], 0),
      "numba.misc.gdb_hook" in sys.modules)   # imported by the registries' refresh only
'''


def test_a_cached_function_loads_without_numbas_registries_and_computes_the_same(tmp_path):
    """The first process compiles (a cache miss: the compiler refreshes Numba's registries itself);
    the second loads the machine code from the cache without them (no registry module imported,
    ``jit._load_without_refresh``) and computes the same: an array the runtime allocated, and its sum."""
    import os
    import subprocess
    import sys

    (tmp_path / "cached_squares.py").write_text(_CACHED_MODULE)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(tmp_path)}
    out = [subprocess.run([sys.executable, "-c", "import cached_squares"], env=env, capture_output=True, text=True,
                          check=True, cwd=tmp_path).stdout.split() for _ in range(2)]
    expected = str(sum(i * i for i in range(1000)))
    assert out[0] == [expected, "998001", "0", "True"]          # compiled: the compiler loaded the registries
    assert out[1] == [expected, "998001", "1", "False"]         # loaded from the cache, none imported
