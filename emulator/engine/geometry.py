"""The hierarchy as the kernels see it: per tier its block, sets, ways, mode and policy.

:func:`build_geometry` turns the chip's tiers (and the capacity a lending memory tier offers after
placement) into :class:`Geometry`; :func:`partition_bit` finds a set-index bit every caching tier
shares, which splits a block stream into two independent halves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from tierlab.common.errors import CapacityError, UsageError
from tierlab.chip.hierarchy import Tier
from tierlab.engine.options import ReplayOptions
from tierlab.engine.policies import POLICY_IDS
from tierlab.engine.state import MODE_CACHE, MODE_PASS, Hierarchy
from tierlab.traces.format.schema import TENSOR_KINDS

KINDS = TENSOR_KINDS  # breakdown order; unknown kinds count as "other"


def kind_index(kinds: Iterable[str]) -> np.ndarray:
    """Index into :data:`KINDS` of each tensor kind (unknown kinds -> "other")."""
    index = {k: i for i, k in enumerate(KINDS)}
    other = index["other"]
    return np.array([index.get(k, other) for k in kinds], np.int64)


@dataclass
class Geometry:
    """The arrays describing the hierarchy to the engine (one entry per tier)."""

    names: tuple[str, ...]
    block_bytes: np.ndarray
    n_sets: np.ndarray
    n_ways: np.ndarray
    mode: np.ndarray
    policy: np.ndarray
    slot_off: np.ndarray
    space_bytes: int = 1 << 20   # addresses replayed lie below this (sizes the residency regions)

    @property
    def n_slots(self) -> int:
        return int(self.slot_off[-1] + self.n_sets[-1] * self.n_ways[-1])

    @property
    def caching(self) -> np.ndarray:
        """Whether each tier looks blocks up (a cache, or a memory lending capacity)."""
        return self.mode == MODE_CACHE

    def hierarchy(self, policy: np.ndarray | None = None) -> Hierarchy:
        """The kernels' view (:class:`tierlab.engine.state.Hierarchy`), optionally with other policies."""
        return Hierarchy(self.block_bytes, self.n_sets, self.n_ways, self.mode,
                         self.policy if policy is None else policy, self.slot_off)


def check_blocks(tiers: Sequence[Tier]) -> None:
    """Blocks are powers of two, each a multiple of the nearer tier's; every policy is known."""
    for i, t in enumerate(tiers):
        if t.block_bytes <= 0 or t.block_bytes & (t.block_bytes - 1):
            raise UsageError(f"block of {t.block_bytes} B is not a power of two", field=f"tier[{i}].block")
        if i and t.block_bytes % tiers[i - 1].block_bytes:
            raise UsageError(f"block {t.block_bytes} B is not a multiple of the nearer tier's "
                             f"{tiers[i - 1].block_bytes} B", field=f"tier[{i}].block")
        if t.policy not in POLICY_IDS:
            raise UsageError(f"unknown policy {t.policy!r}; expected one of {sorted(POLICY_IDS)}",
                             field=f"tier[{i}].policy")


def build_geometry(tiers: Sequence[Tier], lent_bytes: Sequence[int], below_blocks: Sequence[int],
                   options: ReplayOptions) -> Geometry:
    """Caching geometry of each tier.

    ``lent_bytes[i]``: capacity a lending memory tier offers as a cache; ``below_blocks[i]``: tier-i
    blocks of the tensors homed farther than tier ``i`` (the most a fully associative tier there can
    ever hold; its state is clamped to that, which changes no count since it then never evicts).
    """
    check_blocks(tiers)
    n = len(tiers)
    blk = np.array([t.block_bytes for t in tiers], np.int64)
    sets = np.ones(n, np.int64)
    ways = np.ones(n, np.int64)
    mode = np.full(n, MODE_PASS, np.int8)
    pol = np.zeros(n, np.int8)
    for i, t in enumerate(tiers):
        pol[i] = POLICY_IDS[t.policy]
        if t.managed == "cache":
            cap = t.capacity_bytes
        elif t.managed == "memory" and t.lend and lent_bytes[i] > 0:
            cap = int(lent_bytes[i])
        else:
            continue
        n_blocks = cap // t.block_bytes
        w = n_blocks if t.ways is None else min(t.ways, n_blocks)
        if w <= 0:
            continue
        s = n_blocks // w
        if t.ways is None:
            w = max(1, min(w, int(below_blocks[i])))
        sets[i], ways[i], mode[i] = s, w, MODE_CACHE
    off = np.zeros(n, np.int64)
    off[1:] = np.cumsum(sets * ways)[:-1]
    geo = Geometry(tuple(t.name for t in tiers), blk, sets, ways, mode, pol, off)
    if geo.n_slots > options.max_slots:
        raise CapacityError(f"emulating this hierarchy needs {geo.n_slots} block slots, more than "
                            f"max_slots={options.max_slots}; use larger blocks or fewer ways",
                            field="tier")
    return geo


def partition_bit(geo: Geometry, n_caching: int | None = None) -> int | None:
    """A bit of the tier-0 block number that is also a set-index bit at each of the first
    ``n_caching`` tiers (all caching; default: every caching tier), or None.

    Blocks differing in that bit never share a set at any of those tiers, so the two halves of a
    block stream are independent: each set still sees its own requests in order, writebacks stay in
    their half. Needs lru/fifo/opt (random draws one sequence per tier across all sets).
    """
    n = int(np.count_nonzero(geo.caching)) if n_caching is None else n_caching
    if n == 0 or not geo.caching[:n].all() or (geo.policy[:n] == POLICY_IDS["random"]).any():
        return None
    sh0 = int(geo.block_bytes[0]).bit_length() - 1
    lo, hi = 0, 1 << 62
    for i in range(n):
        d = int(geo.block_bytes[i]).bit_length() - 1 - sh0
        s = int(geo.n_sets[i])
        low_bits = (s & -s).bit_length() - 1  # set index bits equal to block bits
        lo, hi = max(lo, d), min(hi, d + low_bits)
    return lo if lo < hi else None
