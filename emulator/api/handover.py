"""How a command hands its result to the Python API instead of printing it.

The API (:mod:`tierlab.api`) runs the very command functions the CLI runs; each calls
:func:`hand_over` where it would print, with its ``--json`` dict and the objects it was built from.
Outside the API (the ``tierlab`` command) there is no receiver and the command prints as before.
This module imports nothing, so the commands pay nothing for it.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Iterator

_RECEIVER: contextvars.ContextVar[Callable[[dict, dict], None] | None] = contextvars.ContextVar(
    "tierlab_api_receiver", default=None)


def hand_over(d: dict, **objects) -> bool:
    """Give ``d`` (a command's ``--json`` dict) and ``objects`` to the API's receiver, if one listens;
    True when handed over (the command then prints nothing), False in the CLI."""
    receiver = _RECEIVER.get()
    if receiver is None:
        return False
    receiver(d, objects)
    return True


@contextlib.contextmanager
def receiving(take: Callable[[dict, dict], object]) -> Iterator[list]:
    """Inside the block, commands hand their results over to ``take(d, objects)``, called at once
    (while a temporary trace still exists); the list holds what it returned, one per call."""
    got: list = []
    token = _RECEIVER.set(lambda d, objects: got.append(take(d, objects)))
    try:
        yield got
    finally:
        _RECEIVER.reset(token)
