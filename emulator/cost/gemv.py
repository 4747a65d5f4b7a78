"""Kernel efficiency by weight format: the fraction of the memory's peak bandwidth a decode GEMV
reaches, per weight format, from the chip's ``[execution] gemv`` table (issue 39).

A decode linear layer streams its weights once per step; the kernel that does it (cuBLAS's GEMV, a
dequantising Marlin or TensorRT-LLM weight-only kernel, an FP8 CUTLASS GEMM with a skinny M) reaches
a fraction of HBM's peak that depends on the weight format, measured by kernel microbenchmarks and
cited in the chip file. The calibrated latency (:mod:`tierlab.cost.organisation`) charges **every
linear op** its memory time at that fraction in place of the tier's ``achievable``; every other op,
and the roofline, is unchanged. The microbenchmarks are of skinny GEMMs (M up to 16-64): a decode
step's GEMV and a mixed step's short GEMM stream their weights alike, and a long prefill GEMM is
bound by its arithmetic, where the memory's fraction no longer decides its time. Charging all of
them keeps a step's time monotone in its tokens: with the fraction on decode ops of at most 16
tokens only, a step of 8 decodes and a 128-token chunk ran faster than 8 decodes alone.

The format of an op is the dtype of the largest weight tensor it reads; ``int8``/``int4`` look up
``int4-g{quant_group}`` first, then ``int4``. A format absent from the table keeps the tier's
``achievable``.
"""

from __future__ import annotations

import numpy as np



def gemv_table(chip) -> dict[str, float]:
    return dict(chip.execution.gemv)


def lookup(table: dict[str, float], dtype: str, group: int | None) -> float:
    """The fraction for weight dtype ``dtype`` (0.0 when absent)."""
    if dtype in ("int8", "int4") and group:
        f = table.get(f"{dtype}-g{int(group)}")
        if f is not None:
            return f
    return table.get(dtype, 0.0)


def op_weight_dtypes(trace) -> np.ndarray:
    """Per op of ``trace``, the dtype of the largest weight tensor it reads ('' for none)."""
    ten = trace.tensors
    kinds = np.asarray(ten.column("kind").to_pylist(), dtype=object)
    dtypes = np.asarray(ten.column("dtype").to_pylist(), dtype=object)
    nbytes = ten.column("nbytes").to_numpy().astype(np.int64)
    tid = ten.column("tensor_id").to_numpy().astype(np.int64)
    is_weight = np.zeros(int(tid.max()) + 1 if len(tid) else 0, bool)
    size = np.zeros_like(is_weight, dtype=np.int64)
    is_weight[tid] = kinds == "weight"
    size[tid] = nbytes
    dt_of = np.empty(len(is_weight), dtype=object)
    dt_of[tid] = dtypes
    n = trace.ops.num_rows
    ops, tens = [], []
    for b in trace.iter_accesses():
        op = b.column("op_id").to_numpy().astype(np.int64)
        t = b.column("tensor_id").to_numpy().astype(np.int64)
        wr = b.column("is_write").to_numpy(zero_copy_only=False)
        keep = is_weight[t] & ~wr
        ops.append(op[keep])
        tens.append(t[keep])
    out = np.full(n, "", dtype=object)
    if not ops or not sum(len(o) for o in ops):
        return out
    op, t = np.concatenate(ops), np.concatenate(tens)
    # per op, its largest weight read (the first read of that size, in trace order)
    order = np.lexsort((np.arange(len(op)), -size[t], op))
    first = np.unique(op[order], return_index=True)[1]
    best = order[first]
    out[op[best]] = dt_of[t[best]]
    return out


def gemv_fractions(chip, trace) -> np.ndarray | None:
    """Per op of ``trace``, the GEMV fraction on ``chip`` (0 = not a weight-streaming op or no entry),
    or None when the chip has no ``gemv`` table (nothing to do)."""
    table = gemv_table(chip)
    if not table:
        return None
    ops = trace.ops
    kind = np.asarray(ops.column("kind").to_pylist(), dtype=object)
    streaming = kind == "linear"
    out = np.zeros(ops.num_rows)
    if not streaming.any():
        return out
    group = (trace.manifest.get("run") or {}).get("quant_group")
    dts = op_weight_dtypes(trace)
    for i in np.flatnonzero(streaming):
        out[i] = lookup(table, dts[i], group) if dts[i] else 0.0
    return out


def memory_resources(chip, resources: tuple[str, ...]) -> np.ndarray:
    """Mask of ``resources`` a GEMV fraction applies to: the tiers that home tensors (not caches) and
    the links into them."""
    homes = {t.name for t in chip.tiers if t.managed != "cache"}
    names = {f"tier:{h}" for h in homes} | {f"link:{lk.upper}-{lk.lower}" for lk in chip.links if lk.lower in homes}
    return np.array([r in names for r in resources], bool)
