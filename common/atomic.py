"""Outputs are written under a temporary name and renamed into place when complete.

An interrupted run never leaves a file or directory that looks valid: the temporary sibling is
either removed on error/interrupt or, after a SIGKILL, left with a ``.tmp-`` name no reader opens.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Iterator

from tierlab.common.errors import UsageError


def check_output(path: str | os.PathLike, *, force: bool = False, directory: bool = False) -> Path:
    """Validate an output path before any work starts: parent writable, no clobber without force."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise UsageError(f"parent directory {parent} {what}", file=str(p))
    if not os.access(parent, os.W_OK) or not _can_create_in(parent):
        raise UsageError(f"directory {parent} is not writable", file=str(p))
    if p.exists():
        if not force:
            raise UsageError("output exists; pass --force to replace it", file=str(p))
        if directory and p.is_file():
            raise UsageError("output exists as a file, expected a directory", file=str(p))
        if not directory and p.is_dir():
            raise UsageError("output exists as a directory, expected a file", file=str(p))
    return p


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait while the block runs (a short write and rename) and are delivered
    after it: an interrupt lands before a temporary exists or after the rename, never between them,
    whatever the machine's load. Outside the main thread (or without ``pthread_sigmask``) a no-op."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _can_create_in(parent: Path) -> bool:
    """Whether a file can really be created in ``parent`` (os.access says yes to root everywhere,
    even on read-only or pseudo file systems); the probe file is removed at once."""
    try:
        fd, name = tempfile.mkstemp(prefix=".tmp-probe-", dir=parent)
    except OSError:
        return False
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)
    return True


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, directory: bool = False, force: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling of ``path``; on success move it into place, else remove it."""
    final = check_output(path, force=force, directory=directory)
    parent = final.parent if str(final.parent) else Path(".")
    prefix = f".tmp-{final.name}-"
    try:
        if directory:
            tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        else:
            fd, name = tempfile.mkstemp(prefix=prefix, dir=parent)
            os.close(fd)
            tmp = Path(name)
    except OSError as err:
        raise UsageError(f"cannot create a temporary output in {parent}: {err.strerror}", file=str(final)) from None
    # mkstemp/mkdtemp make it private (0600/0700); an output is an ordinary file: the umask decides
    umask = os.umask(0)
    os.umask(umask)
    with contextlib.suppress(OSError):
        os.chmod(tmp, (0o777 if directory else 0o666) & ~umask)
    try:
        yield tmp
    except BaseException:
        _remove(tmp)
        raise
    if final.exists():
        _remove(final)
    os.replace(tmp, final)
