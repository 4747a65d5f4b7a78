"""What a trace holds, in totals: row counts, parameters, FLOPs, and bytes by phase, tensor kind and step.

Bytes are bytes *issued* by the kernels (``nbytes * count`` per descriptor), before any cache: the
replay engine decides which tier serves them. Computed streaming, batch by batch, in exact int64.
"""

from __future__ import annotations

import numpy as np

from tierlab.common.errors import TraceError
from tierlab.traces.format.schema import KV_CACHE_KINDS, PHASES, TENSOR_KINDS
from tierlab.traces.format.reader import Trace

RW = ("read", "write")


def _codes(values: np.ndarray) -> tuple[list[str], np.ndarray]:
    names, codes = np.unique(values.astype(str), return_inverse=True)
    return [str(n) for n in names], codes.astype(np.int64)


def params_of(trace: Trace) -> int | None:
    """Parameter count: the manifest's spec, else the model config, else None (synthetic trace)."""
    spec = trace.manifest.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("params"), int):
        return spec["params"]
    if isinstance(trace.manifest.get("model"), dict):
        from tierlab.traces.model.spec import spec_from_config

        try:
            return spec_from_config(trace.manifest["model"]).param_count()
        except Exception:
            return None
    return None


def summarize(trace: Trace, batch_rows: int = 1 << 20) -> dict:
    """Totals of a trace as plain JSON-able data (see the module docstring)."""
    ops = trace.op_arrays()
    tens = trace.tensor_arrays()
    # Stable keys: both phases and the generator's kinds always appear (zeros if absent).
    phases, phase_code = _codes(np.concatenate([np.array(PHASES, dtype=object), ops["phase"]]))
    phase_code = phase_code[len(PHASES):]
    kinds, kind_code = _codes(np.concatenate([np.array(TENSOR_KINDS[:3], dtype=object), tens["kind"]]))
    kind_code = kind_code[3:]
    step = ops["step"].astype(np.int64)
    decode = np.array([p == "decode" for p in ops["phase"]], dtype=bool)
    steps = np.unique(step[decode]) if decode.any() else np.zeros(0, np.int64)
    if len(steps) and steps.min() < 0:
        raise TraceError("decode op with a negative step", file=str(trace.path), field="step")
    n_steps = int(steps.max()) + 1 if len(steps) else 0
    nk, npz = max(1, len(kinds)), max(1, len(phases))
    by_phase = np.zeros((npz, nk, 2), np.int64)
    by_step = np.zeros((max(1, n_steps), nk, 2), np.int64)
    n_access = 0
    for batch in trace.iter_accesses(batch_rows):
        op = batch.column("op_id").to_numpy().astype(np.int64)
        tid = batch.column("tensor_id").to_numpy().astype(np.int64)
        nbytes = (batch.column("nbytes").to_numpy().astype(np.int64) *
                  batch.column("count").to_numpy().astype(np.int64))
        w = batch.column("is_write").to_numpy(zero_copy_only=False).astype(np.int64)
        k = kind_code[tid]
        np.add.at(by_phase, (phase_code[op], k, w), nbytes)
        dec = decode[op]
        if dec.any():
            np.add.at(by_step, (step[op[dec]], k[dec], w[dec]), nbytes[dec])
        n_access += len(op)
    flops = ops["flops"].astype(np.int64)
    flops_by_phase = {p: int(flops[phase_code == i].sum()) for i, p in enumerate(phases)}
    step_flops = np.zeros(n_steps, np.int64)
    step_ops = np.zeros(n_steps, np.int64)
    if n_steps:
        np.add.at(step_flops, step[decode], flops[decode])
        np.add.at(step_ops, step[decode], 1)
    weight_bytes = int(sum(int(n) for n, kd in zip(tens["nbytes"], tens["kind"]) if kd == "weight"))
    out = {
        "path": str(trace.path),
        "model": (trace.manifest.get("spec") or {}).get("name"),
        "run": trace.manifest.get("run"),
        "tables": dict(trace.manifest["tables"]),
        "params": params_of(trace),
        "weight_bytes": weight_bytes,
        # the KV cache: its rows and a sparse-attention indexer's keys beside them
        "kv_bytes": int(sum(int(n) for n, kd in zip(tens["nbytes"], tens["kind"]) if kd in KV_CACHE_KINDS)),
        "flops": {"total": int(flops.sum()), **flops_by_phase},
        "bytes": {p: {kd: {rw: int(by_phase[i, j, r]) for r, rw in enumerate(RW)} for j, kd in enumerate(kinds)}
                  for i, p in enumerate(phases)},
        "decode_steps": n_steps,
        "steps": [{"step": s, "ops": int(step_ops[s]), "flops": int(step_flops[s]),
                   "bytes": {kd: {rw: int(by_step[s, j, r]) for r, rw in enumerate(RW)} for j, kd in enumerate(kinds)}}
                  for s in range(n_steps)],
    }
    out["devices"] = device_totals(trace, tens, ops)
    out["collectives"] = collective_totals(trace)
    return out


def device_totals(trace: Trace, tens: dict | None = None, ops: dict | None = None) -> list[dict]:
    """Per device (a one-device trace has one): its tensors' bytes by kind, its ops and FLOPs."""
    tens = trace.tensor_arrays() if tens is None else tens
    ops = trace.op_arrays() if ops is None else ops
    n = max(1, trace.n_devices)
    tdev, odev = trace.tensor_device.astype(np.int64), trace.op_device.astype(np.int64)
    kinds, code = _codes(np.concatenate([np.array(TENSOR_KINDS[:3], dtype=object), tens["kind"]]))
    code = code[3:]
    by_kind = np.zeros((n, max(1, len(kinds))), np.int64)
    np.add.at(by_kind, (tdev, code), tens["nbytes"].astype(np.int64))
    n_ops = np.bincount(odev, minlength=n)
    flops = np.zeros(n, np.int64)
    np.add.at(flops, odev, ops["flops"].astype(np.int64))
    coll = np.bincount(odev[trace.op_collective >= 0], minlength=n) if len(odev) else np.zeros(n, np.int64)
    return [{"device": d, "tensor_bytes": {k: int(by_kind[d, j]) for j, k in enumerate(kinds)},
             "ops": int(n_ops[d]), "collective_ops": int(coll[d]), "flops": int(flops[d])} for d in range(n)]


def collective_totals(trace: Trace) -> dict:
    """Per collective kind: how many and their total size S (bytes, see tierlab.traces.format.schema.COLLECTIVE_KINDS)."""
    out: dict = {}
    c = trace.collectives
    if c.num_rows:
        for kind, size in zip(c.column("kind").to_pylist(), c.column("size_bytes").to_pylist()):
            e = out.setdefault(kind, {"count": 0, "bytes": 0})
            e["count"] += 1
            e["bytes"] += int(size)
    return out
