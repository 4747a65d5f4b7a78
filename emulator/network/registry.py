"""The collective algorithms, registered by name: one entry in :data:`ALGORITHMS` per module.

Each module (:mod:`~emulator.network.ring`, :mod:`~emulator.network.tree`,
:mod:`~emulator.network.direct`, :mod:`~emulator.network.hierarchical`,
:mod:`~emulator.network.in_network`) declares ``NAME``, ``SUMMARY``, ``KINDS``,
``supports(kind, group, system) -> reason | None`` and ``cost(kind, group, size_bytes, why)``.
Adding an algorithm is one module and one entry here (and, if ``auto`` should pick it, a line in
:mod:`emulator.network.auto`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from emulator.network import direct, hierarchical, in_network, ring, tree


@dataclass(frozen=True)
class Algorithm:
    name: str
    summary: str
    kinds: tuple[str, ...]
    supports: Callable
    cost: Callable


def from_module(mod) -> Algorithm:
    return Algorithm(mod.NAME, mod.SUMMARY, tuple(mod.KINDS), mod.supports, mod.cost)


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a for a in map(from_module, (ring, tree, direct, hierarchical, in_network))}
ALGORITHM_NAMES = tuple(ALGORITHMS)
