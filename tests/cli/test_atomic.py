"""Outputs appear whole and as ordinary files: the umask, not the temporary file's 0600, decides
who may read them."""

from __future__ import annotations

import os
import stat

import pytest

from tierlab.common.atomic import atomic_path


@pytest.mark.parametrize("directory", [False, True])
def test_output_has_the_umask_mode_not_the_temporary_ones(tmp_path, directory):
    old = os.umask(0o022)
    try:
        out = tmp_path / ("d" if directory else "f.parquet")
        with atomic_path(out, directory=directory) as tmp:
            if not directory:
                tmp.write_bytes(b"x")
        mode = stat.S_IMODE(out.stat().st_mode)
        assert mode == (0o755 if directory else 0o644)
        os.umask(0o077)
        out2 = tmp_path / ("d2" if directory else "g.parquet")
        with atomic_path(out2, directory=directory) as tmp:
            if not directory:
                tmp.write_bytes(b"x")
        assert stat.S_IMODE(out2.stat().st_mode) == (0o700 if directory else 0o600)
    finally:
        os.umask(old)


def test_an_error_leaves_nothing(tmp_path):
    out = tmp_path / "r.parquet"
    with pytest.raises(RuntimeError):
        with atomic_path(out) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("interrupted")
    assert not out.exists() and list(tmp_path.iterdir()) == []
