"""Progress bars: the engine and analyses report progress through callbacks; these draw them.

A bar is drawn on stderr, and only when stderr is a terminal (pipes and tests get nothing). tqdm
is a declared dependency of tierlab.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator



@contextlib.contextmanager
def counting_bar(total: int | None, *, unit: str, desc: str,
                 enabled: bool = True) -> Iterator[Callable[[int], None] | None]:
    """A callback ``advance(n)`` that moves a bar of ``total`` by ``n`` (None when stderr is no terminal,
    or not ``enabled``)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from tqdm import tqdm       # only with a terminal to draw on (a declared dependency)
    bar = tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, leave=False)
    try:
        yield bar.update
    finally:
        bar.close()


@contextlib.contextmanager
def fraction_bar(*, unit: str, desc: str, enabled: bool = True) -> Iterator[Callable[[int, int], None] | None]:
    """A callback ``report(done, total)`` that sets a bar to ``done`` of ``total`` (None when stderr
    is no terminal, or not ``enabled``)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from tqdm import tqdm
    bar = tqdm(total=None, unit=unit, desc=desc, file=sys.stderr, leave=False)

    def report(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        yield report
    finally:
        bar.close()
