"""One serving step of continuous batching as a trace: a prefill chunk (or a few) and decodes, each
sequence at its own context length.

:class:`tierlab.traces.workload.run.RunConfig` gives every sequence of a batch the same context; a step of a serving
engine (vLLM, SGLang) does not: the running decodes are each at their own position and the step's
token budget is shared with chunks of prompts being prefilled. :class:`MixedStep` describes one
such step and :func:`lower_step` writes it as a trace of one decode step (``phase`` ``decode``,
``step`` 0, every op of the step), on one device or sharded (``run.tp``/``pp``/``ep``/``dp``,
through :func:`tierlab.traces.lowering.sharded.lower_parallel`). Either way the lowering
(:class:`~tierlab.traces.lowering.device.Lowering`, or each sharded device's) is given a :class:`ServingStep` as
a part (``serving``): it takes the step's sequences and rows from it, lowers its :attr:`ServingStep.kernel_seg`,
and leaves it the KV layout, the rewriting of each attention block's KV append and attention, and the writing of
the ops.

What differs from the lowering of a decode step (:mod:`tierlab.traces.lowering.device`, reused for every op not
named here):

- **Tokens.** The step's ``T`` tokens (decodes first, then the chunks in order) go through every
  linear layer, norm and MLP as one batch of ``T`` rows, as a serving engine runs them. With a
  prefill chunk the GEMMs are tiled as in prefill (``tile_m`` tokens a tile); without one they are
  the weight-streaming GEMMs of decode. So a step of decodes alone is lowered as ``tierlab run``
  lowers its decode step.
- **KV, paged.** Each sequence holds only its own positions (``capacity``: its positions after the
  step; a sliding-window or chunked layer a ring of at most its window), the sequences of a layer's
  cache laid out one after another. A paged cache's 16-token blocks scattered over memory would
  change no byte count and, blocks being far larger than a cache line, next to no line count.
- **Attention** is one op per layer (a varlen kernel, as FlashAttention's serves vLLM): the query
  rows of the decodes, each decode's keys and values ``[0, position]`` (its window where it has
  one), each chunk's tiles of ``attn_tile`` queries against their causal keys, the output rows.
  FLOPs as :mod:`tierlab.kernels.attention` counts them, per sequence. It is ``pim_eligible`` only in a
  step of decodes alone. ``kv_append`` writes each sequence's new rows at its own positions.
- **Logits** for the sequences that sample a token: every decode, and each chunk that ends its
  prompt (``sample``).

Flash attention only (``naive`` is refused).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.kernels import attention as attn
from tierlab.kernels.base import Op, Ten
from tierlab.traces.model.dtypes import nbytes_of
from tierlab.traces.lowering.device import Lowering
from tierlab.traces.lowering.sharded import DeviceLowering, lower_parallel
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.workload.segments import Segment
from tierlab.traces.model.spec import ModelSpec
from tierlab.traces.format.writer import TraceWriter


@dataclass(frozen=True)
class MixedStep:
    """A serving step. ``decode``: the KV position of each decoding sequence's new token (its
    context: positions already in its cache). ``prefill``: ``(start, tokens, last)`` of each prompt
    chunk (``start`` positions of the prompt already in the cache; ``last``: the chunk ends the
    prompt, so the step samples that sequence's first token)."""

    decode: tuple = ()
    prefill: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "decode", tuple(int(c) for c in self.decode))
        object.__setattr__(self, "prefill", tuple((int(s), int(t), bool(x)) for s, t, x in self.prefill))
        if any(c < 0 for c in self.decode):
            raise UsageError("a decode's position must not be negative", field="decode")
        if any(s < 0 or t < 1 for s, t, _ in self.prefill):
            raise UsageError("a prefill chunk needs a start >= 0 and at least 1 token", field="prefill")
        if not self.decode and not self.prefill:
            raise UsageError("an empty step: no decode and no prefill chunk", field="step")

    @property
    def tokens(self) -> int:
        """Tokens the step processes: one per decode plus every chunk's."""
        return len(self.decode) + sum(t for _, t, _ in self.prefill)

    @property
    def sequences(self) -> int:
        return len(self.decode) + len(self.prefill)

    @property
    def sample(self) -> int:
        """Sequences sampling a token in this step."""
        return len(self.decode) + sum(1 for *_, last in self.prefill if last)

    @functools.cached_property
    def capacity(self) -> list[int]:
        """KV positions each sequence holds after the step (decodes first, then the chunks)."""
        return [c + 1 for c in self.decode] + [s + t for s, t, _ in self.prefill]

    @property
    def positions(self) -> int:
        return max(self.capacity)

    def to_dict(self) -> dict:
        return {"decode": list(self.decode), "prefill": [list(c) for c in self.prefill]}


def lower_step(spec: ModelSpec, run: RunConfig, step: MixedStep, out_dir, *, force: bool = False) -> Path:
    """Write the trace of ``step`` on ``spec`` to ``out_dir`` (atomically, as every trace). ``run``
    gives the dtypes, tiles and parallelism; its lengths and batch are replaced by the step's."""
    if run.attention != "flash":
        raise UsageError("a serving step is lowered with flash attention only", field="attention")
    if spec.gemma4:     # its layers differ in heads and KV (tierlab.traces.lowering.gemma4_layer): not in a mixed step
        raise UsageError("a serving step of Gemma 4 is not lowered (tierlab trace, run and compare take it)", field="model")
    if run.pp_microbatches != 1:
        raise UsageError("a serving step is one microbatch (--pp-microbatches 1)", field="pp_microbatches")
    if step.positions > spec.max_position_embeddings:
        raise UsageError(f"a sequence reaches {step.positions} positions, past the model's "
                         f"max_position_embeddings {spec.max_position_embeddings}", field="input")
    run = RunConfig(**{**run.__dict__, "prompt": 0, "context": step.positions - 1, "generate": 1, "batch": 1,
                       "turns": (), "kv_reuse": True, "kv_offload": False})
    label = Segment("decode", 0, step.tokens, 0)
    serving = functools.partial(ServingStep, step=step)
    if run.sharded:
        return Path(lower_parallel(spec, run, [label], out_dir, force=force,
                                   device_lowering=functools.partial(DeviceLowering, serving=serving)))
    extra = {"spec": spec.to_dict(), "segments": [label.to_dict()], "mixed_step": step.to_dict()}
    with TraceWriter(out_dir, model=spec.config or None, run=run, force=force, alignment=run.alignment,
                     extra=extra) as w:
        Lowering(spec, run, w, [label], serving=serving).segment(label)
    return Path(out_dir)


BULK_MIN = 64


class ServingStep:
    """What a mixed step changes in a lowering (see the module docstring): a part the lowering ``low`` makes of
    itself, given ``step``. The lowering calls :meth:`declare_kv` for its KV, :meth:`attention` on each
    attention block's ops and :meth:`emit` to write its ops."""

    def __init__(self, low, step: MixedStep):
        self.low, self.step = low, step
        # the segment the kernels see: prefill tiling when the step has a chunk
        self.kernel_seg = Segment("prefill" if step.prefill else "decode", 0, step.tokens, 0)
        self.seq_layout: dict[int, tuple] = {}     # layer -> (each sequence's first byte, its rows, any ring)
        self._pairs_memo: dict[tuple, int] = {}    # (window, chunk) -> query-key pairs of the step

    def declare_kv(self) -> None:
        """The lowering's KV caches, paged (``low.caches``; no recurrent state, no indexer keys: refused)."""
        low = self.low
        spec, run = low.spec, low.run
        kv_row = nbytes_of(spec.kv_row_elements, run.kv)
        low.caches, low.states, low.index_caches = {}, {}, {}
        caps = np.asarray(self.step.capacity, np.int64)
        parts = ["latent"] if spec.attention == "mla" else ["k", "v"]
        row = kv_row // len(parts)
        layouts: dict[tuple, tuple] = {}
        if spec.index_head_dim:
            raise UsageError(f"{spec.name} has a sparse-attention indexer (its own cached keys); serving steps are "
                             "lowered for models without one", field="model")
        for i in low.layers:
            if spec.keeps_state(i):
                raise UsageError(f"{spec.name} has recurrent (Mamba / DeltaNet) layers; serving steps are "
                                 "lowered for attention models only", field="model")
            if not spec.attends(i):       # Nemotron-H's MLP and MoE blocks: no KV
                continue
            kind, span = spec.layer_span(i)
            if (kind, span) not in layouts:    # rows as ModelSpec.kv_rows keeps them: all, or a ring of the span
                rows = caps.copy() if kind == "full" else np.minimum(caps, span)
                base = np.concatenate([[0], np.cumsum(rows * row)[:-1]]).astype(np.int64)
                layouts[kind, span] = (base, rows, bool((rows < caps).any()), int((rows * row).sum()))
            base, rows, ringed, total = layouts[kind, span]
            low.caches[i] = [attn.Cache(Ten(low.w.add_tensor(f"layers.{i}.kv.{p}", "kv", total, run.kv, i,
                                                             device=low.device), total), row, 0, 0)
                             for p in parts]
            self.seq_layout[i] = (base, rows, ringed)
        low.positions = self.step.positions

    def _seq(self, i: int, c, j: int):
        """Sequence ``j``'s part of cache ``c`` of layer ``i`` (a ring where it keeps fewer rows than positions)."""
        base, rows, _ = self.seq_layout[i]
        r = int(rows[j])
        return attn.Cache(c.ten, c.row_bytes, r * c.row_bytes, r if r < self.step.capacity[j] else 0)

    def attention(self, i: int, ops: list[Op]) -> list[Op]:
        """Layer ``i``'s attention block with its KV append and attention rewritten for the step."""
        out = []
        for op in ops:
            if op.kind == "kv_append":
                out.append(self._append(i, op))
            elif op.kind == "attention":
                out.append(self._attention(i, op))
            else:
                out.append(op)
        return out

    def _cache_reads(self, i: int, write: bool):
        """Bulk descriptors of every decode's keys and values (``write``: its new row) in layer ``i``,
        cache by cache (all keys, then all values, as the decode kernel reads them), as one set of
        columns; the rings of windowed layers one sequence at a time."""
        low, s = self.low, self.low.spec
        kind, span = s.layer_span(i)
        window = span if kind == "sliding" else None
        chunk = span if kind == "chunked" else None
        base, _, ringed = self.seq_layout[i]
        ctx = np.asarray(self.step.decode, np.int64)
        D = len(ctx)
        if not D:
            return []
        if write:
            lo = ctx
        elif window or chunk:
            lo = np.array([attn.key_range(int(x), window, chunk)[0] for x in ctx], np.int64)
        else:
            lo = np.zeros(D, np.int64)
        hi = ctx + 1
        if not ringed:
            n = len(low.caches[i])
            return [(np.repeat([c.ten.id for c in low.caches[i]], D),
                     np.concatenate([base[:D] + lo * c.row_bytes for c in low.caches[i]]),
                     np.tile((hi - lo) * low.caches[i][0].row_bytes, n))]
        op = Op("ring", "kv", 0, 0)
        for c in low.caches[i]:
            for j in range(D):
                attn.read_positions(op, self._seq(i, c, j), int(base[j]), int(lo[j]), int(hi[j]), write=write)
        return [(np.array([a.tensor for a in op.accesses]), np.array([a.offset for a in op.accesses]),
                 np.array([a.nbytes for a in op.accesses]))]

    def _chunks(self, i: int, op: Op, q, o, qrow: int, orow: int, write: bool) -> None:
        """Each prefill chunk's accesses (``write``: its new KV rows; else its attention tiles)."""
        low, s = self.low, self.low.spec
        kind, span = s.layer_span(i)
        window = span if kind == "sliding" else None
        chunk = span if kind == "chunked" else None
        base = self.seq_layout[i][0]
        D = len(self.step.decode)
        row0 = D                               # the chunk's first row among the step's tokens
        for n, (start, t, _) in enumerate(self.step.prefill):
            j = D + n
            seqs = [self._seq(i, c, j) for c in low.caches[i]]
            if write:
                for c in seqs:
                    attn.read_positions(op, c, int(base[j]), start, start + t, write=True)
            else:
                for q0 in range(0, t, low.run.attn_tile):
                    q1 = min(t, q0 + low.run.attn_tile)
                    lo = attn.key_range(start + q0, window, chunk)[0]
                    op.read(q, (row0 + q0) * qrow, (q1 - q0) * qrow)
                    for c in seqs:
                        attn.read_positions(op, c, int(base[j]), lo, start + q1)
                    op.write(o, (row0 + q0) * orow, (q1 - q0) * orow)
            row0 += t

    def _append(self, i: int, parent: Op) -> Op:
        kv_ids = {c.ten.id for c in self.low.caches[i]}
        op = BulkOp(parent.name, parent.kind, self.step.tokens, 0)
        op.accesses = [a for a in parent.accesses if a.tensor not in kv_ids]      # the k/v activation rows
        op.bulk = self._cache_reads(i, write=True)
        self._chunks(i, op.tail, None, None, 0, 0, write=True)
        return op

    def _attention(self, i: int, parent: Op) -> Op:
        low = self.low
        s, ab = low.spec, low.ab
        kind, span = s.layer_span(i)
        window = span if kind == "sliding" else None
        chunk = span if kind == "chunked" else None
        if s.attention == "mla":
            sd, vd = s.kv_lora_rank + s.qk_rope_head_dim, s.kv_lora_rank
        else:
            sd, vd = s.head_dim, s.head_dim
        per_pair = 2 * s.num_heads * (sd + vd)
        absorb = parent.flops - per_pair * attn.causal_pairs(0, self.step.tokens, window, chunk)
        pairs = self._pairs(window, chunk)
        q, o = low.act["q"], low.act["attn"]
        qrow, orow = low.q_width * ab, low.o_width * ab
        skip = {c.ten.id for c in low.caches[i]} | {q.id, o.id}
        op = BulkOp(parent.name, parent.kind, self.step.tokens, per_pair * pairs + absorb,
                    pim_eligible=not self.step.prefill)
        op.accesses = [a for a in parent.accesses if a.tensor not in skip]        # extra reads (MLA's kv_b, sinks)
        D = len(self.step.decode)
        if D:
            op.read(q, 0, D * qrow)
        op.bulk = self._cache_reads(i, write=False)
        if D:
            op.tail.write(o, 0, D * orow)
        self._chunks(i, op.tail, q, o, qrow, orow, write=False)
        return op

    def _positions_at_their_own_rows(self, op: Op) -> None:
        """The token embedding of a model with learned positions reads, per token, the row of its
        own position (the one-run lowering reads the segment's rows as one run per sequence, which a
        step of sequences at different positions does not have)."""
        low, s = self.low, self.low.spec
        pos = low.weights["embed_positions"][0].id
        row = nbytes_of(s.hidden_size, low.wdtype["embed_positions"])
        at = next((k for k, a in enumerate(op.accesses) if a.tensor == pos), None)
        if at is None:
            return
        op.accesses[at:at + 1] = _position_rows(self.step, pos, row, s.learned_positions - s.max_position_embeddings)

    def _pairs(self, window, chunk) -> int:
        """Query-key pairs of the step's attention in a layer of this window / chunk (kept per kind)."""
        memo = self._pairs_memo
        if (window, chunk) not in memo:
            if window is None and not chunk:
                dec = sum(self.step.decode) + len(self.step.decode)       # causal_pairs(c, 1) = c + 1
            else:
                dec = sum(attn.causal_pairs(c, 1, window, chunk) for c in self.step.decode)
            memo[window, chunk] = dec + sum(attn.causal_pairs(st, t, window, chunk) for st, t, _ in self.step.prefill)
        return memo[window, chunk]

    def emit(self, ops: list[Op] | Op, layer: int, collective: int = -1) -> None:
        """The lowering's ``ops``, every one labelled as the step (phase decode, step 0). The ops of one call
        are declared first, then all their descriptors in op order (as the writer allows) as one set of columns:
        the rows :class:`~tierlab.traces.format.writer.TraceWriter` gets are those of writing them one by one. (No
        access is moved: a serving step is one microbatch, and attention models keep no state.)"""
        low = self.low
        w, parts = low.w, []
        for op in ops if isinstance(ops, list) else [ops]:
            if op.kind == "embedding" and low.spec.learned_positions and "embed_positions" in low.weights:
                self._positions_at_their_own_rows(op)
            oid = w.add_op(op.name, op.kind, layer, "decode", 0, op.tokens, op.flops, op.expert, op.pim_eligible,
                           device=low.device, collective=collective)
            if op.accesses:
                parts.append(_columns(oid, op.accesses))
            if isinstance(op, BulkOp):
                wr = op.kind == "kv_append"
                for tid, off, nb in op.bulk:
                    n = len(tid)
                    parts.append(np.stack([np.full(n, oid), tid, off, nb, np.ones(n, np.int64), np.zeros(n, np.int64),
                                           np.full(n, int(wr))], axis=1))
                if op.tail.accesses:
                    parts.append(_columns(oid, op.tail.accesses))
        if not parts:
            return
        c = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if len(c) < BULK_MIN:     # the writer's bulk call checks against every tensor: dearer for a few
            for r in c.tolist():
                w.add_access(*r[:6], bool(r[6]))
            return
        w.add_accesses(c[:, 0], c[:, 1], c[:, 2], c[:, 3], c[:, 4], c[:, 5], c[:, 6].astype(bool))


def _position_rows(step: MixedStep, pos_id: int, row: int, shift: int) -> list:
    """The learned position rows a step's tokens read: each decode its own position's row, each
    prompt chunk its run of rows (``shift``: the table's rows before position 0, OPT's 2)."""
    from tierlab.kernels.base import Access

    return ([Access(pos_id, (c + shift) * row, row) for c in step.decode]
            + [Access(pos_id, (st + shift) * row, t * row) for st, t, _ in step.prefill])


def _columns(oid: int, accesses) -> np.ndarray:
    """Rows ``(op, tensor, offset, nbytes, count, stride, is_write)`` of ``accesses``."""
    a = np.array(accesses, dtype=np.int64).reshape(-1, 6)
    return np.concatenate([np.full((len(a), 1), oid, np.int64), a], axis=1)


class BulkOp(Op):
    """An op whose middle accesses are arrays (``bulk``: ``(tensor, offset, nbytes)`` columns), between
    its ``accesses`` (issued first) and ``tail`` (issued last)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.bulk = []
        self.tail = Op(self.name, self.kind, 0, 0)
