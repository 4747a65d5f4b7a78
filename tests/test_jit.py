"""A cached compiled function is stale when any module of the package changes, not only its own file."""

from __future__ import annotations

import shutil
from pathlib import Path

from emulator.engine import jit, setgroups, walk


def test_package_stamp_follows_every_module(tmp_path):
    src = Path(jit.__file__).parent.parent
    for room in jit.COMPILED_ROOMS:
        shutil.copytree(src / room, tmp_path / room, ignore=shutil.ignore_patterns("__pycache__"))
    before = jit.package_stamp(str(tmp_path))
    assert before == jit.package_stamp.__wrapped__(str(tmp_path))       # deterministic
    (tmp_path / "engine" / "simd.py").write_text((tmp_path / "engine" / "simd.py").read_text() + "\n# changed\n")
    changed = jit.package_stamp.__wrapped__(str(tmp_path))
    assert changed != before
    (tmp_path / "analysis" / "new_helper.py").write_text("X = 1\n")
    assert jit.package_stamp.__wrapped__(str(tmp_path)) not in (before, changed)


def test_cached_functions_carry_the_package_stamp():
    for f in (walk.replay_batch, setgroups.replay_groups):
        stamp = f._cache._cache_file._source_stamp
        assert isinstance(stamp, tuple) and stamp[1] == jit.package_stamp()


def test_uncached_functions_are_left_alone():
    f = jit.njit(cache=False)(lambda x: x + 1)
    assert f(1) == 2
    assert not hasattr(getattr(f, "_cache", None), "_cache_file")
