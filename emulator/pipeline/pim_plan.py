"""Processing-in-memory: which ops a tier's PIM unit runs, and which of their accesses stay in memory.

The rule (``docs/design.md``, accounting rules: PIM), decided once per trace and chip before the replay:

* An op's **operands** are the ``weight`` and ``kv`` tensors it reads. Its **dominant operand** is the
  one it reads the most bytes of (``nbytes x count`` summed over its read descriptors; ties go to the
  lowest tensor id). For a decode linear that is the weight matrix (not its scales or bias); for
  decode attention, the K (or the MLA latent) cache.
* The op **runs in memory** at tier ``T`` when it is marked ``pim_eligible`` in the trace, its
  dominant operand is homed in ``T``, ``T`` carries a PIM unit, and the unit's ``op_kinds`` include
  the op's kind. Otherwise it runs on the chip's compute as usual.
* An op running in memory at ``T`` reads every operand tensor homed in ``T`` inside the memory: those
  read descriptors are flagged for the engine, which counts their tier-0 blocks as ``pim_bytes`` at
  ``T`` (at the unit's internal bandwidth and in-bank read energy, see :mod:`tierlab.cost.model`); they
  cross no link and fill no cache. Everything else the op touches (its input activations, its
  output, operands homed in another tier, any write) travels through the hierarchy as in a plain
  replay. Its FLOPs are costed at the PIM unit's rate and energy.
* With PIM off (``ReplayOptions.pim = False``), or on a chip without PIM units, nothing is flagged
  and the replay is exactly the plain one.

Conservation (tested): for every op, bytes read in memory + bytes requested from the hierarchy at
tier 0 = the tier-0 bytes the op requests in a plain replay. Units: bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Iterable

import numpy as np

from tierlab.chip.hierarchy import Chip
from tierlab.traces.format.columns import string_in

OPERAND_KINDS = ("weight", "kv")


@dataclass(frozen=True)
class PimPlan:
    """Where each op runs and what its operands are, as arrays indexed by op id / tensor id."""

    op_tier: np.ndarray      # int64 per op: the tier whose PIM unit runs it, -1 for the chip's compute
    dominant: np.ndarray     # int64 per op: its dominant operand's tensor id, -1 if it reads none
    home: np.ndarray         # int64 per tensor: home tier
    operand: np.ndarray      # bool per tensor: a weight or KV tensor

    @property
    def n_pim_ops(self) -> int:
        return int((self.op_tier >= 0).sum())

    @cached_property
    def _operand_home(self) -> np.ndarray:
        """Per tensor: its home tier if it is an operand, else -2 (no op's tier)."""
        return np.where(self.operand, self.home, -2)

    def flags(self, op: np.ndarray, tid: np.ndarray, is_write: np.ndarray) -> np.ndarray:
        """1 for each descriptor read inside memory by a PIM unit, else 0 (int64, for the engine)."""
        t = self.op_tier[op]
        hit = self._operand_home[tid] == t         # an operand homed where its op runs (t = -1: never)
        hit &= ~np.asarray(is_write, bool)
        return hit.astype(np.int64)


def pim_tiers(chip: Chip) -> list[int]:
    """Indices of the chip's tiers that carry a PIM unit."""
    return [i for i, t in enumerate(chip.tiers) if t.pim is not None]


def _sum_by_key(k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys of ``k`` (sorted) and the sum of ``v`` over each, exactly (int64)."""
    if len(k) == 0:
        return k, v
    order = np.argsort(k, kind="stable")
    k, v = k[order], v[order]
    starts = np.flatnonzero(np.concatenate([[True], k[1:] != k[:-1]]))
    return k[starts], np.add.reduceat(v, starts)


def dominant_operands(n_ops: int, operand: np.ndarray, candidate_op: np.ndarray,
                      accesses: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
                      ) -> np.ndarray:
    """Tensor id of each op's dominant operand (-1 if none), for the ops where ``candidate_op`` holds.

    ``accesses`` yields ``(op, tid, nbytes, count, is_write)`` arrays in any batching. Vectorised per
    batch; the (op, tensor) byte sums are reduced as they come, so memory grows with the number of
    distinct candidate (op, operand) pairs, not with the accesses.
    """
    n_t = max(len(operand), 1)
    keys, vals = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for op, tid, nbytes, count, write in accesses:
        op, tid = np.asarray(op), np.asarray(tid)          # any integer type: gathered, then cast
        sel = candidate_op[op]
        sel &= operand[tid]
        sel &= ~np.asarray(write, bool)
        idx = np.flatnonzero(sel)
        if len(idx) == 0:
            continue
        u, s = _sum_by_key(op[idx].astype(np.int64) * n_t + tid[idx].astype(np.int64),
                           np.asarray(nbytes)[idx].astype(np.int64) * np.asarray(count)[idx].astype(np.int64))
        keys.append(u)
        vals.append(s)
    # one batch's sums are distinct and sorted already
    u, v = (keys[1], vals[1]) if len(keys) == 2 else _sum_by_key(np.concatenate(keys), np.concatenate(vals))
    out = np.full(n_ops, -1, np.int64)
    if len(u):
        op, tid = u // n_t, u % n_t
        # u is sorted by op, then tensor: within each op's run the largest byte count wins, on ties
        # the first (lowest tensor id)
        starts = np.flatnonzero(np.concatenate([[True], op[1:] != op[:-1]]))
        best = np.maximum.reduceat(v, starts)
        top = np.flatnonzero(v == np.repeat(best, np.diff(np.append(starts, len(v)))))
        first = top[np.concatenate([[True], op[top][1:] != op[top][:-1]])]
        out[op[first]] = tid[first]
    return out


def plan_pim(chip: Chip, op_kind, eligible: np.ndarray, home: np.ndarray, tensor_kind,
             accesses: Callable[[], Iterable[tuple]], *, enabled: bool = True) -> PimPlan | None:
    """The PIM plan of a trace on ``chip`` (None when nothing can run in memory).

    ``op_kind``: op kind strings per op (a sequence of str or an Arrow string column); ``eligible``:
    the trace's ``pim_eligible`` per op; ``home``: home tier per tensor; ``tensor_kind``: kind
    strings per tensor (likewise); ``accesses()``: a fresh iterable of
    ``(op, tid, nbytes, count, is_write)`` batches (read only if some op could run in memory).
    """
    tiers = pim_tiers(chip)
    eligible = np.asarray(eligible, bool)
    if not enabled or not tiers or not eligible.any():
        return None
    home = np.asarray(home, np.int64)
    operand = string_in(tensor_kind, OPERAND_KINDS)
    if not operand.any():
        return None
    # runs[op, tier]: the unit of ``tier`` would run ``op`` if its dominant operand lived there
    runs = np.zeros((len(op_kind), len(chip.tiers)), bool)
    for i in tiers:
        runs[:, i] = eligible & string_in(op_kind, chip.tiers[i].pim.op_kinds)
    candidate = runs.any(axis=1)
    if not candidate.any():
        return None
    dom = dominant_operands(len(op_kind), operand, candidate, accesses())
    op_tier = np.full(len(op_kind), -1, np.int64)
    has = dom >= 0
    t = home[dom[has]]
    idx = np.nonzero(has)[0]
    ok = runs[idx, t]
    op_tier[idx[ok]] = t[ok]
    if not (op_tier >= 0).any():
        return None
    return PimPlan(op_tier=op_tier, dominant=dom, home=home, operand=operand)


def plan_for_trace(chip: Chip, trace, home: np.ndarray, *, enabled: bool = True,
                   batch_rows: int = 1 << 16, held: list | None = None) -> PimPlan | None:
    """:func:`plan_pim` for an opened :class:`tierlab.traces.format.reader.Trace` (``held``: its access batches,
    already read and checked, else they are read here)."""
    ops = trace.ops
    if not enabled or not pim_tiers(chip):
        return None

    def accesses():
        for rb in (trace.iter_accesses(batch_rows) if held is None else held):
            yield (rb.column("op_id").to_numpy(), rb.column("tensor_id").to_numpy(), rb.column("nbytes").to_numpy(),
                   rb.column("count").to_numpy(), rb.column("is_write").to_numpy(zero_copy_only=False))

    return plan_pim(chip, ops.column("kind"), ops.column("pim_eligible").to_numpy(zero_copy_only=False),
                    home, trace.tensors.column("kind"), accesses, enabled=enabled)


def summary(plan: PimPlan | None, chip: Chip, op_kind) -> dict:
    """JSON-able: how many ops run in each tier's PIM unit, by op kind."""
    out = {}
    if plan is None:
        return out
    op_kind = np.asarray(op_kind, dtype=object)
    for i in pim_tiers(chip):
        sel = plan.op_tier == i
        if sel.any():
            kinds, n = np.unique(op_kind[sel].astype(str), return_counts=True)
            out[chip.tiers[i].name] = {str(k): int(c) for k, c in zip(kinds, n)}
    return out
