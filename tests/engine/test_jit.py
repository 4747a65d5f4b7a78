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
