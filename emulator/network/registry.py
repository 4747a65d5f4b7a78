"""The collective algorithms, registered by name: one entry in :data:`ALGORITHMS` per module.

Each module (:mod:`~tierlab.network.ring`, :mod:`~tierlab.network.tree`,
:mod:`~tierlab.network.direct`, :mod:`~tierlab.network.hierarchical`,
:mod:`~tierlab.network.in_network`, :mod:`~tierlab.network.two_shot`) declares ``NAME``, ``SUMMARY``, ``KINDS``,
``supports(kind, group, system) -> reason | None``, ``cost(kind, group, size_bytes, why)`` and
``stages(kind, group, size_bytes)``.
Adding an algorithm is one module and one entry here (and, if ``auto`` should pick it, a line in
:mod:`tierlab.network.auto`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tierlab.network import direct, hierarchical, in_network, ring, torus, tree, two_shot


@dataclass(frozen=True)
class Algorithm:
    name: str
    summary: str
    kinds: tuple[str, ...]
    supports: Callable
    cost: Callable
    stages: Callable          # stages(kind, group, size_bytes): what it moves, for other timing models


def from_module(mod) -> Algorithm:
    return Algorithm(mod.NAME, mod.SUMMARY, tuple(mod.KINDS), mod.supports, mod.cost, mod.stages)


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a for a in map(from_module, (ring, tree, direct, hierarchical, in_network, two_shot, torus))}
ALGORITHM_NAMES = tuple(ALGORITHMS)
