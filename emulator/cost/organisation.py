"""The organisation cost: what a measured latency adds to the roofline (kernels, fusion, overlap,
achievable fractions of peak), from the per-op roofline times and the chip's ``[execution]``.

The roofline (:mod:`tierlab.cost.model`) charges each op the largest of its resources' busy times
at peak. The **calibrated latency** is built from the same per-resource times in four documented
steps; every setting is optional and at its default adds nothing, so with all defaults the
calibrated latency *is* the roofline (tested):

1. **Achievable fractions.** Each resource's time is divided by the fraction of its peak a kernel
   reaches: ``[compute] achievable`` for ``compute``, a tier's ``achievable`` for ``tier:NAME``, a
   link's for ``link:A-B`` (default 1; PIM resources keep 1). Published microbenchmarks (BabelStream,
   reduction kernels) give HBM's fraction; the presets cite theirs.
2. **Kernels** (``fusion``). ``none``: every op is one kernel. ``layer``: a maximal run of
   consecutive ops with the same phase, decode step and layer is one kernel, so a decode step of a
   model with L decoder layers is L + 2 kernels (the embedding, the L layers, the final norm with
   the LM head). Ops of one kernel are pipelined, as a dataflow chip streams a fused layer: the
   kernel's time is its busiest resource's time summed over its ops, max_r Σ_op t[op, r]. One op
   alone gives its roofline.
3. **Overlap** (``overlap``). ``none``: kernels run one after another. ``independent``: a kernel
   joins the concurrent group before it when it reads no tensor the group writes and writes no
   tensor the group reads or writes, in the same phase and step (q/k/v projections, gate and up):
   the group's time is max_r Σ over its ops of t[op, r], the resources shared as in a kernel.
   **By weight format** (``gemv``): a weight-streaming op (a decode linear layer) takes its memory
   tiers' and links' fraction from the chip's ``[execution] gemv`` table for its weight format
   instead (:mod:`tierlab.cost.gemv`: what a decode GEMV of bf16, fp8, int8, int4 ... reaches).
4. **Kernel overhead** (``kernel_overhead``). Each kernel adds its fixed launch and
   synchronisation time once, also inside a concurrent group (launches are issued one after
   another): overhead per step = kernels per step x ``kernel_overhead``.

A step's calibrated latency = Σ over its groups of the group's time + its kernels x overhead.
It is still a model: no queueing, no cache effects beyond the counts, no host time; the benchmark
``benchmarks/validate.py`` sets it beside published measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.chip.hierarchy import FUSIONS, OVERLAPS, Chip


def with_execution(chip: Chip, *, fusion: str | None = None, overlap: str | None = None,
                   kernel_overhead_s: float | None = None, achievable: bool = True) -> Chip:
    """``chip`` with its ``[execution]`` settings replaced where given (None keeps the chip's);
    ``achievable=False`` sets every fraction of peak to 1 (peak rates, as the roofline), the
    ``gemv`` table's included."""
    ex = chip.execution
    if fusion is not None:
        if fusion not in FUSIONS:
            raise UsageError(f"unknown fusion {fusion!r}; expected one of {', '.join(FUSIONS)}", field="fusion")
        ex = replace(ex, fusion=fusion)
    if overlap is not None:
        if overlap not in OVERLAPS:
            raise UsageError(f"unknown overlap {overlap!r}; expected one of {', '.join(OVERLAPS)}", field="overlap")
        ex = replace(ex, overlap=overlap)
    if kernel_overhead_s is not None:
        ex = replace(ex, kernel_overhead_s=float(kernel_overhead_s))
    if not achievable:
        ex = replace(ex, gemv=())
    chip = replace(chip, execution=ex)
    if not achievable:
        chip = replace(chip, compute=replace(chip.compute, achievable=1.0),
                       tiers=tuple(replace(t, achievable=1.0) for t in chip.tiers),
                       links=tuple(replace(lk, achievable=1.0) for lk in chip.links))
    return chip


def fractions(chip: Chip, resources: tuple[str, ...]) -> np.ndarray:
    """The achievable fraction of each resource of a :class:`~tierlab.cost.model.Cost`."""
    by_name = {"compute": chip.compute.achievable}
    by_name.update({f"tier:{t.name}": t.achievable for t in chip.tiers})
    by_name.update({f"link:{lk.upper}-{lk.lower}": lk.achievable for lk in chip.links})
    return np.array([by_name.get(r, 1.0) for r in resources], np.float64)


def kernels_of(layer: np.ndarray, phase: np.ndarray, step: np.ndarray, fusion: str,
               segment: np.ndarray | None = None) -> np.ndarray:
    """Kernel id of each op (ids increase in trace order; a kernel is a run of consecutive ops).
    ``segment`` (optional, per op): a kernel never spans a change of it (a system's device ops on
    either side of a collective)."""
    n = len(layer)
    if fusion == "none" or n == 0:
        return np.arange(n, dtype=np.int64)
    layer, step = np.asarray(layer), np.asarray(step)
    phase = np.asarray(phase, dtype=object)
    new = np.ones(n, bool)
    new[1:] = (layer[1:] != layer[:-1]) | (step[1:] != step[:-1]) | (phase[1:] != phase[:-1])
    if segment is not None:
        segment = np.asarray(segment)
        new[1:] |= segment[1:] != segment[:-1]
    return np.cumsum(new) - 1


def groups_of(kernel: np.ndarray, phase: np.ndarray, step: np.ndarray, overlap: str,
              tensors: Callable[[], Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]] | None,
              segment: np.ndarray | None = None) -> np.ndarray:
    """Concurrent group id of each op (see the module docstring, step 3). ``tensors()`` yields
    batches of (op_id, tensor_id, is_write) arrays, the trace's accesses; only read for
    ``independent``."""
    if overlap == "none" or tensors is None or len(kernel) == 0:
        return kernel.copy()
    n_k = int(kernel[-1]) + 1
    reads: list[set] = [set() for _ in range(n_k)]
    writes: list[set] = [set() for _ in range(n_k)]
    for op, tid, wr in tensors():
        k = kernel[np.asarray(op, np.int64)]
        trip = np.unique(np.stack([k, np.asarray(tid, np.int64), np.asarray(wr, np.int64)], 1), axis=0)
        for kk, t, w in trip.tolist():
            (writes if w else reads)[kk].add(t)
    first = np.searchsorted(kernel, np.arange(n_k))           # first op of each kernel
    phase, step = np.asarray(phase, dtype=object), np.asarray(step)
    seg = np.zeros(len(kernel), np.int64) if segment is None else np.asarray(segment)
    group = np.zeros(n_k, np.int64)
    g, g_reads, g_writes = 0, set(reads[0]), set(writes[0])
    for k in range(1, n_k):
        same_step = (phase[first[k]] == phase[first[k - 1]] and step[first[k]] == step[first[k - 1]]
                     and seg[first[k]] == seg[first[k - 1]])
        if same_step and not (reads[k] & g_writes) and not (writes[k] & (g_reads | g_writes)):
            g_reads |= reads[k]
            g_writes |= writes[k]
        else:
            g, g_reads, g_writes = g + 1, set(reads[k]), set(writes[k])
        group[k] = g
    return group[kernel]


@dataclass
class Organisation:
    """The calibrated latency's parts. Per op: ``kernel`` and ``group`` ids (consecutive ops share
    them). Per group: ``group_s`` (its time without overhead) and ``group_bound`` (index into the
    Cost's resources). ``kernel_overhead_s`` per kernel; ``fusion``, ``overlap`` and
    ``achievable`` (fraction per resource) as used."""

    kernel: np.ndarray
    group: np.ndarray
    group_s: np.ndarray
    group_bound: np.ndarray
    kernel_overhead_s: float
    fusion: str
    overlap: str
    achievable: dict[str, float]

    def latency_s(self, ops: np.ndarray) -> float:
        """Calibrated latency of the ops ``ops`` (whole groups; overhead included)."""
        ops = np.asarray(ops, np.int64)
        if not len(ops):
            return 0.0
        return float(self.group_s[np.unique(self.group[ops])].sum()) + self.overhead_s(ops)

    def kernels(self, ops: np.ndarray) -> int:
        """Kernels among ``ops``."""
        return int(len(np.unique(self.kernel[np.asarray(ops, np.int64)])))

    def overhead_s(self, ops: np.ndarray) -> float:
        return self.kernels(ops) * self.kernel_overhead_s

    def op_latency_s(self) -> np.ndarray:
        """Per op its share of the calibrated latency: each group's time and its kernels' overhead
        on the group's last op, 0 on the others, so that summing any whole groups' ops gives
        :meth:`latency_s` of them (a critical path walks ops one after another)."""
        n = len(self.group)
        out = np.zeros(n)
        if not n:
            return out
        last = np.flatnonzero(np.r_[self.group[1:] != self.group[:-1], True])
        k_first = np.r_[True, self.kernel[1:] != self.kernel[:-1]]
        kernels = np.add.reduceat(k_first.astype(np.int64), np.r_[0, last[:-1] + 1])
        out[last] = self.group_s + kernels * self.kernel_overhead_s
        return out


def organise(chip: Chip, resources: tuple[str, ...], time_s: np.ndarray, layer, phase, step,
             tensors=None, segment=None, gemv: np.ndarray | None = None) -> Organisation:
    """The :class:`Organisation` of a trace's ops on ``chip`` from their per-resource roofline
    times ``time_s[op, resource]`` (module docstring); ``segment`` as :func:`kernels_of` takes it
    (``tensors()``' op ids index these ops); ``gemv`` (optional, per op) the fraction of a
    weight-streaming op's memory bandwidth (0: the tiers' own), :func:`tierlab.cost.gemv.gemv_fractions`."""
    ex = chip.execution
    frac = fractions(chip, resources)
    t = np.asarray(time_s, np.float64) / frac
    if gemv is not None and len(t) and (np.asarray(gemv) > 0).any():
        from tierlab.cost.gemv import memory_resources

        g = np.asarray(gemv, np.float64)
        rows = np.flatnonzero(g > 0)
        cols = np.flatnonzero(memory_resources(chip, resources))
        if len(cols):
            t[np.ix_(rows, cols)] = np.asarray(time_s, np.float64)[np.ix_(rows, cols)] / g[rows, None]
    kernel = kernels_of(layer, phase, step, ex.fusion, segment)
    group = groups_of(kernel, phase, step, ex.overlap, tensors, segment)
    if len(group):
        starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        per_group = np.add.reduceat(t, starts, axis=0) if t.shape[1] else np.zeros((len(starts), 0))
        group_s = per_group.max(axis=1) if t.shape[1] else np.zeros(len(starts))
        group_bound = per_group.argmax(axis=1) if t.shape[1] else np.zeros(len(starts), np.int64)
    else:
        group_s, group_bound = np.zeros(0), np.zeros(0, np.int64)
    return Organisation(kernel=kernel, group=group, group_s=group_s, group_bound=group_bound,
                        kernel_overhead_s=ex.kernel_overhead_s, fusion=ex.fusion, overlap=ex.overlap,
                        achievable={r: float(f) for r, f in zip(resources, frac) if f != 1.0})
