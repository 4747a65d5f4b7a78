"""Lowering: a model spec and a run become an ordered list of operators written as a trace.

A run is a list of :class:`Segment` s — a prefill of ``tokens`` positions per sequence, or one
decode step, or a KV copy between conversation turns — each starting at a KV-cache position.
:func:`tierlab.traces.workload.segments.plan_segments` builds the list for a :class:`~tierlab.traces.workload.run.RunConfig`;
:func:`lower_segments` writes any list (multi-turn runs, whose later turns keep or re-prefill
earlier KV, are another list of segments over the same tensors).

Per segment, the execution order is: embedding gather; per layer: input norm, attention block
(q/k/v projections, optional q/k norms, rotary, KV append, attention, output projection), residual
add, post-attention norm, MLP or MoE block, residual add; final norm; LM head over the last token
of each sequence. Tensors (trace kinds):

- ``weight``: every tensor of :meth:`ModelSpec.weight_shapes`, in the weights dtype (vectors in
  :func:`tierlab.traces.model.dtypes.vector_dtype`), plus a ``<name>.scales`` tensor per matrix when the weights
  are group-quantised (int8/int4).
- ``kv``: per layer ``layers.i.kv.k`` and ``layers.i.kv.v`` (MLA: ``layers.i.kv.latent``), each
  ``batch x positions x row`` in the KV dtype, sequences ``positions * row`` bytes apart
  (``positions`` = context + prompt + generate, or the furthest position any segment reaches).
- ``activation``: scratch buffers (``act.*``) in the activations dtype, sized for the largest
  segment and reused by every layer (layer -1).

MLA is lowered in its weight-absorbed form in both phases: the attention op reads ``kv_b_proj``
(once per op) and the latent cache; its FLOPs include the absorption.

Conversations (``run.turns``, :func:`plan_turns`): turn t is a prefill then ``answer`` decode steps
(decode steps are numbered across the whole conversation). With KV reuse the prefill covers the new
prompt only, starting after the history; without, it re-prefills history + prompt from position
``context`` (rewriting the same KV rows). With ``kv_offload``, after every turn but the last a
``kv_offload`` op per layer reads the live rows (``context`` + history positions of every sequence)
of each KV tensor and writes them to its twin ``layers.i.kv_offload.{k,v,latent}`` (kind
``kv_offload``, same layout, so a placement rule decides where it lives); before the next turn a
``kv_restore`` op per layer reads them back and rewrites the KV rows. Copy ops are in phase
``prefill`` with step -1 (they belong to no decode token), 0 tokens and 0 FLOPs. The manifest's
``run.conversation`` lists per turn its op id range and tokens; prefill segments of every turn draw
token ids and MoE routing from the same (seed, step -1) streams, so a re-prefill routes the tokens
a reusing turn routes, and more.

A run over several devices (``run.sharded``: tensor, pipeline, expert or data parallelism, or
microbatches) is lowered by :mod:`tierlab.traces.lowering.sharded` into one format-v2 trace; the class doing
the one-device work is :class:`tierlab.traces.lowering.device.Lowering` (with its parts: the recurrent mixers,
DeepSeek-V3.2's indexer, Gemma 4's layer for a Gemma 4 spec, the KV copies between turns).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from tierlab.common.errors import UsageError
from tierlab.traces.lowering.device import Lowering
from tierlab.traces.workload.routing import ROUTING_FILE, ROUTING_SCHEMA
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.workload.segments import COPY_ACTIONS, Segment, conversation_table, plan_segments, plan_turns  # noqa: F401
from tierlab.traces.model.spec import ModelSpec
from tierlab.traces.format.writer import TraceWriter


def generate_trace(spec: ModelSpec, run: RunConfig, out_dir: str | os.PathLike, *, force: bool = False,
                   progress: Callable[[int, int], None] | None = None, record_routing: bool = False) -> Path:
    """Write the trace of ``run`` on ``spec`` to ``out_dir`` atomically; return its path.

    ``progress(done, total)`` is called after each segment (prefill, or one decode step). With
    ``record_routing`` (MoE models) every token's experts are also written to ``routing.arrow`` in
    the trace, in the routing-table format (``--router table:DIR/routing.arrow`` replays them)."""
    if run.max_positions > spec.max_position_embeddings:
        what = "context + every turn's prompt and answer" if run.turns else "context + prompt + generate"
        raise UsageError(f"{what} = {run.max_positions} exceeds the model's "
                         f"max_position_embeddings {spec.max_position_embeddings}",
                         field="turns" if run.turns else "generate")
    segments = plan_segments(run)
    return lower_segments(spec, run, segments, out_dir, force=force, progress=progress,
                          record_routing=record_routing)


def lower_segments(spec: ModelSpec, run: RunConfig, segments: list[Segment], out_dir, *, force: bool = False,
                   progress=None, record_routing: bool = False) -> Path:
    """Write a trace of ``segments`` (see :func:`plan_segments`). Segments of conversation turns
    (``turn >= 0``) are summarised per turn in the manifest's ``run.conversation``."""
    if not any(s.action == "compute" for s in segments):
        raise UsageError("nothing to trace: no prefill or decode segment", field="segments")
    if run.sharded:   # several devices (or microbatches): tierlab.traces.lowering.sharded, format v2
        from tierlab.traces.lowering.sharded import lower_parallel

        return Path(lower_parallel(spec, run, segments, out_dir, force=force, progress=progress,
                                   record_routing=record_routing))
    extra = {"spec": spec.to_dict(), "segments": [s.to_dict() for s in segments],
             "lowering": {"path": "hand", "family": spec.family}}
    with TraceWriter(out_dir, model=spec.config or None, run=run, force=force, alignment=run.alignment,
                     extra=extra) as w:
        low = Lowering(spec, run, w, segments)      # Gemma 4's layer in place of the generic one by its spec
        if record_routing and spec.num_experts:
            low.routing_log = w.add_extra_table("routing", ROUTING_FILE, ROUTING_SCHEMA)
        op_ranges = []
        for i, seg in enumerate(segments):
            first = w.n_ops
            low.segment(seg)
            op_ranges.append((first, w.n_ops))
            if progress is not None:
                progress(i + 1, len(segments))
        if run.turns:
            w.run["conversation"] = conversation_table(run, segments, op_ranges)
    return Path(out_dir)
