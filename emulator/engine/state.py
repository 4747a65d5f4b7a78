"""The layout of the walk's state: tier modes, the columns of ``tinfo``, and the named structures
the kernels take (:mod:`tierlab.engine.walk`, :mod:`tierlab.engine.setgroups`).

State of the hierarchy (``T`` tiers, all tiers' slots concatenated; tier ``t`` owns slots
``slot_off[t] .. slot_off[t] + n_sets[t] * n_ways[t]``, set ``s`` of it the ``n_ways[t]`` slots from
``slot_off[t] + s * n_ways[t]``):

``tag[slot]``    block number held (``address // block_bytes[t]``), -1 when empty
``dirty[slot]``  1 when the block was written since it was filled
``meta[slot]``   the replacement policy's per-block word (recency stamp, fill stamp, next use, ...)
``owner[slot]``  tensor id of the block (blocks never straddle tensors), for its kind and home tier

Per tier: ``block_bytes``, ``n_sets``, ``n_ways``, ``mode`` (:data:`MODE_CACHE` looks blocks up,
:data:`MODE_PASS` passes everything not homed there to the next tier), ``policy`` (an id of
:data:`tierlab.engine.policies.POLICY_IDS`), ``clock`` (lookups so far, the stamp source), ``rng``
(the random policy's xorshift64 state) and, for ``opt``, ``opt_next`` (next-use position of every
lookup the tier will see) with ``opt_pos`` (lookups consumed).

The compiled kernels take these as a few named tuples of arrays (Numba compiles a field access to a
constant offset): :class:`Descriptors`, :class:`Tensors`, :class:`Hierarchy`, :class:`TierState`,
:class:`OptFuture` and :class:`Rules`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

MODE_CACHE = 0
MODE_PASS = 1

# columns of ``tinfo[tier, :]`` (int64): log2 of the block, set mask (-1 when the set count is not
# a power of two), log2 of blocks per residency region, offset of the tier's regions in
# ``region_cnt``, the number of dirty blocks the tier holds whose home is not the next tier, and
# the requests the fast path served at the tier (a statistic)
TI_SHIFT, TI_SET_MASK, TI_REGION_SHIFT, TI_REGION_OFF, TI_DIRTY_FAR, TI_FAST_REQUESTS = range(6)
N_TINFO = 6


class Descriptors(NamedTuple):
    """A batch of access descriptors (int64 arrays but ``write``, bool): descriptor ``a`` covers
    ``count[a]`` chunks of ``nbytes[a]`` bytes at ``address[tid[a]] + offset[a] + j * stride[a]``,
    counted in row ``row[a]``; ``pim[a]`` > 0 marks an operand read in memory by its home's PIM unit."""

    row: np.ndarray
    tid: np.ndarray
    offset: np.ndarray
    nbytes: np.ndarray
    count: np.ndarray
    stride: np.ndarray
    write: np.ndarray
    pim: np.ndarray


def as_descriptors(batch) -> Descriptors:
    """A batch ``(row, tid, offset, nbytes, count, stride, write, pim)`` of any integer columns (a
    trace's uint32/uint64 as read) as the kernels take it: int64, ``write`` bool, C-contiguous (no
    copy of a column that already is)."""
    return Descriptors(*(np.ascontiguousarray(c, np.int64) for c in batch[:6]), np.ascontiguousarray(batch[6], np.bool_),
                       np.ascontiguousarray(batch[7], np.int64))


class Tensors(NamedTuple):
    """Per tensor (int64): byte address, home tier, index of its kind in the counter breakdown."""

    address: np.ndarray
    home: np.ndarray
    kind: np.ndarray


class Hierarchy(NamedTuple):
    """Per tier (int64, ``mode`` and ``policy`` int8): block bytes, sets, ways, mode, policy id and
    the offset of the tier's first slot."""

    block_bytes: np.ndarray
    n_sets: np.ndarray
    n_ways: np.ndarray
    mode: np.ndarray
    policy: np.ndarray
    slot_off: np.ndarray


class TierState(NamedTuple):
    """The emulated contents: per slot ``tag``, ``dirty``, ``meta``, ``owner``; per tier ``clock``,
    ``rng`` and ``tinfo`` (columns ``TI_*``); ``region_cnt``: resident blocks per residency region."""

    tag: np.ndarray
    dirty: np.ndarray
    meta: np.ndarray
    owner: np.ndarray
    clock: np.ndarray
    rng: np.ndarray
    tinfo: np.ndarray
    region_cnt: np.ndarray


class OptFuture(NamedTuple):
    """What the ``opt`` policy needs and the pre-pass records: ``next_use`` of every lookup of every
    opt tier (tier ``t``'s from ``next_off[t]``), lookups consumed ``pos``; the pre-pass records the
    blocks tier ``rec_tier`` looks up into ``rec_buf`` (``rec_pos[0]`` of them; -1: none)."""

    next_use: np.ndarray
    next_off: np.ndarray
    pos: np.ndarray
    rec_tier: int
    rec_buf: np.ndarray
    rec_pos: np.ndarray


class Rules(NamedTuple):
    """The count-changing options the walk obeys, and its tuning (which changes no count)."""

    store_hit_recency: bool
    fetch_on_write_miss: bool
    fetch_on_writeback_miss: bool
    inclusive: bool
    fast_path: bool
    fast_min_blocks: int
    lazy_max_runs: int


def no_descriptors() -> Descriptors:
    """An empty batch (what the flush passes where descriptors are unused)."""
    e = np.zeros(0, np.int64)
    return Descriptors(e, e, e, e, e, e, np.zeros(0, np.bool_), e)
