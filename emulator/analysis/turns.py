"""Per-turn results of a replayed conversation trace (``tierlab run --turns ...``).

A conversation trace records its turns in the manifest (``run.conversation``: per turn the op id
range ``[op_start, op_end)``, tokens per sequence prefilled and decoded, the KV positions already
cached, and the op ranges of its KV copies; see :mod:`tierlab.traces.lowering.generate`). This module sums a replay's
per-op counts and costs over each turn's ops:

- ``bytes_by_link``: bytes moved down and up each link (``{link: {"down", "up"}}``) and ``link_bytes``
  (all links, both directions), from the replay (so they depend on the chip);
- ``copy_link_bytes``: the part of ``link_bytes`` moved by the turn's KV offload/restore ops;
- ``kv_bytes``: bytes of KV-cache rows the turn's ops read and wrote (``{"read", "written"}``) and
  ``kv_offload_bytes``: bytes of the offload copies read and written — both as issued by the kernels
  (descriptor ``nbytes * count``, before any cache), so they are the same on every chip;
- ``energy_j`` (total, and ``tiers``/``links``/``compute``/``pim`` splits) and ``latency_s`` (sum of
  the ops' roofline latencies) from :mod:`tierlab.cost.model`;
- ``decode_latency_s_per_token``: the turn's decode-step latency averaged over its decode steps.

Bytes are bytes, energies joules, times seconds; the tokens are per sequence (a turn of a batch of B
conversations processes B times as many). The per-turn table is
:func:`tierlab.present.report.format_turns`.
"""

from __future__ import annotations

import numpy as np

from tierlab.cost.trace_cost import cost_of
from tierlab.engine.counters import link_bytes
from tierlab.common.errors import TraceError

KV_KINDS = ("kv", "kv_offload")
_TURN_KEYS = ("turn", "prompt_tokens", "answer_tokens", "history_positions", "prefill_tokens", "decode_tokens",
              "op_start", "op_end", "step_start", "step_end", "restore_ops", "offload_ops")


def conversation_of(trace) -> list[dict] | None:
    """The manifest's per-turn table (checked against the trace's op count), or None for a trace
    that is not a conversation."""
    run = trace.manifest.get("run") or {}
    conv = run.get("conversation")
    if conv is None:
        return None
    where = str(getattr(trace, "path", "manifest.json"))
    if not isinstance(conv, list) or not conv:
        raise TraceError("expected a non-empty list of turns", file=where, field="run.conversation")
    prev = 0
    for i, t in enumerate(conv):
        if not isinstance(t, dict) or any(k not in t for k in ("op_start", "op_end")):
            raise TraceError(f"turn {i}: expected an object with op_start and op_end", file=where,
                             field="run.conversation")
        lo, hi = t["op_start"], t["op_end"]
        if not (isinstance(lo, int) and isinstance(hi, int) and prev <= lo <= hi <= trace.n_ops):
            raise TraceError(f"turn {i}: op range [{lo}, {hi}) is not in order within the trace's "
                             f"{trace.n_ops} ops", file=where, field="run.conversation")
        prev = hi
    return conv


def _ranges(turns: list[dict], key: str) -> list[tuple[int, int]]:
    out = []
    for t in turns:
        r = t.get(key)
        out.append((int(r[0]), int(r[1])) if r else (0, 0))
    return out


def issued_kv_bytes(trace, turns: list[dict], batch_rows: int = 1 << 20) -> np.ndarray:
    """``[turn, kind, (read, written)]`` bytes issued to tensors of each kind in :data:`KV_KINDS`
    (descriptor ``nbytes * count``), streamed over the trace's accesses."""
    kinds = trace.tensors.column("kind").to_pylist()
    kind_code = np.array([KV_KINDS.index(k) if k in KV_KINDS else -1 for k in kinds], np.int64)
    turn_of_op = np.full(trace.n_ops, -1, np.int64)
    for i, t in enumerate(turns):
        turn_of_op[t["op_start"]:t["op_end"]] = i
    out = np.zeros((len(turns), len(KV_KINDS), 2), np.int64)
    for b in trace.iter_accesses(batch_rows):
        op = b.column("op_id").to_numpy().astype(np.int64)
        k = kind_code[b.column("tensor_id").to_numpy().astype(np.int64)]
        turn = turn_of_op[op]
        keep = (k >= 0) & (turn >= 0)
        if not keep.any():
            continue
        nbytes = b.column("nbytes").to_numpy().astype(np.int64) * b.column("count").to_numpy().astype(np.int64)
        w = b.column("is_write").to_numpy(zero_copy_only=False).astype(np.int64)
        np.add.at(out, (turn[keep], k[keep], w[keep]), nbytes[keep])
    return out


def per_turn(tr, cst=None) -> list[dict] | None:
    """Per-turn results of a :class:`tierlab.engine.door.TraceReplay` (see the module docstring), or
    None when its trace is not a conversation. ``cst``: its :class:`tierlab.cost.model.Cost` (computed
    if not given)."""
    turns = conversation_of(tr.trace)
    if turns is None:
        return None
    if cst is None:
        cst = cost_of(tr)
    r, chip = tr.result, tr.chip
    names = [f"{lk.upper}-{lk.lower}" for lk in chip.links]
    op_links = link_bytes(r.per_op, r.block_bytes)            # [op, link, (down, up)]
    cum_links = np.concatenate([np.zeros((1,) + op_links.shape[1:], np.int64), np.cumsum(op_links, axis=0)])
    kv = issued_kv_bytes(tr.trace, turns)
    ops = tr.trace.ops
    phase = np.asarray(ops.column("phase").to_pylist(), dtype=object)
    step = ops.column("step").to_numpy().astype(np.int64)

    def links_over(lo, hi):
        return cum_links[hi] - cum_links[lo]

    out = []
    for i, t in enumerate(turns):
        lo, hi = t["op_start"], t["op_end"]
        lb = links_over(lo, hi)
        copy = sum(int(links_over(a, b).sum()) for a, b in (_ranges([t], "restore_ops")[0],
                                                             _ranges([t], "offload_ops")[0]))
        e = cst.totals(slice(lo, hi))
        dec = np.nonzero(phase[lo:hi] == "decode")[0] + lo
        n_steps = len(np.unique(step[dec]))
        row = {k: t.get(k) for k in _TURN_KEYS}
        row.update({
            "bytes_by_link": {n: {"down": int(lb[j, 0]), "up": int(lb[j, 1])} for j, n in enumerate(names)},
            "link_bytes": int(lb.sum()),
            "copy_link_bytes": copy,
            "kv_bytes": {"read": int(kv[i, 0, 0]), "written": int(kv[i, 0, 1])},
            "kv_offload_bytes": {"read": int(kv[i, 1, 0]), "written": int(kv[i, 1, 1])},
            "energy_j": {k: e[k] for k in ("total", "tiers", "links", "compute", "pim")},
            "latency_s": float(cst.latency_s[lo:hi].sum()),
            "decode_latency_s_per_token": float(cst.latency_s[dec].sum() / n_steps) if n_steps else None,
        })
        out.append(row)
    return out
