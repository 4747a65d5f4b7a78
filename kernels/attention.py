"""Attention kernels over a KV cache laid out ``[sequence, position, row]`` per layer.

Each cache tensor (K and V for MHA/GQA/MQA; the single latent cache for MLA) holds ``batch``
sequences of ``max_positions`` rows, ``seq_stride`` bytes apart. A query at absolute position p
attends to keys ``[max(0, p - window + 1), p]`` (``window`` None: ``[0, p]``; ``chunk``: from the
start of p's chunk, ``[p - p mod chunk, p]``). Both kernels read the K and V of every position in
context for each sequence — for a sliding window or a chunk, only those. A windowed or chunked
layer's cache is a ring of at most window (chunk) rows (:class:`Cache`, ``ring``): position p is row
``p mod ring``, so a read that wraps is two descriptors, and a prefill tile whose keys span more than
the ring reads the whole ring once (the rest of its keys are the tile's own, fresh in registers).

- ``flash``: per sequence and tile of ``attn_tile`` queries, read the query tile, read the K and V
  rows the tile needs (causal), write the output tile. Scores never leave the chip.
- ``naive``: scores ``S = Q K^T`` of the whole (masked) rectangle are written to an activation
  buffer, read and rewritten by softmax, and read again for ``S V`` — three ops.

FLOPs count each (query, key) pair once per head: ``2 * score_dim`` for the score,
``2 * value_dim`` for the value (MLA absorbed: ``score_dim = kv_lora + rope``, ``value_dim =
kv_lora``), plus 5 per score for softmax in the naive kernel. Decode attention is ``pim_eligible``.

Sparse attention (``topk``: DeepSeek-V3.2's DSA) attends each query to at most ``topk`` of its keys,
the ones a lightning indexer picked (:func:`index_scores`): pairs and FLOPs count ``min(keys, topk)``
per query. Which keys it picks depends on the values; a decode query reads ``min(keys, topk)`` rows,
the latest of its range (the count exact, the rows' places a stand-in), and a prefill tile reads its
whole causal range once (its queries' picks together may be any of those keys).
"""

from __future__ import annotations

from typing import NamedTuple

from tierlab.kernels.base import Op, Ten


class Cache(NamedTuple):
    """One KV-cache tensor: handle, bytes per position row, bytes between sequences, and ``ring``:
    0 for a cache holding every position, else the rows of a ring buffer (a sliding-window or chunked
    layer keeps at most its window or chunk; position p lives in row ``p mod ring``)."""

    ten: Ten
    row_bytes: int
    seq_stride: int
    ring: int = 0


def key_range(p: int, window: int | None, chunk: int | None = None) -> tuple[int, int]:
    """Keys ``[lo, hi)`` the query at position ``p`` reads (``chunk``: from the start of p's chunk)."""
    if chunk:
        return p - p % chunk, p + 1
    return (0 if window is None else max(0, p - window + 1)), p + 1


def causal_pairs(start: int, t: int, window: int | None, chunk: int | None = None, topk: int | None = None) -> int:
    """Number of (query, key) pairs for queries at positions ``start .. start+t-1`` (``topk``: at most that
    many keys per query)."""
    if topk:
        return sum(min(hi - lo, topk) for lo, hi in (key_range(p, window, chunk) for p in range(start, start + t)))
    if window is None and not chunk:
        return t * start + t * (t + 1) // 2
    if chunk:
        return sum(p % chunk + 1 for p in range(start, start + t))
    return sum(min(p + 1, window) for p in range(start, start + t))


def cache_spans(c: Cache, lo: int, hi: int) -> list[tuple[int, int]]:
    """(first row, rows) of positions ``[lo, hi)`` in cache ``c``: one span, or two where a ring wraps.
    A ring holds at most ``ring`` positions, so only the last ``ring`` of the range are there."""
    if not c.ring:
        return [(lo, hi - lo)] if hi > lo else []
    n = min(hi - lo, c.ring)
    a = (hi - n) % c.ring
    first = min(n, c.ring - a)
    return [x for x in ((a, first), (0, n - first)) if x[1] > 0]


def read_positions(op: Op, c: Cache, base: int, lo: int, hi: int, *, count: int = 1, write: bool = False,
                   stride: int | None = None) -> None:
    """Read (or write) positions ``[lo, hi)`` of ``count`` sequences from the sequence at byte ``base``
    (sequences ``stride`` bytes apart, by default the cache's). A read of a ring gets the last ``ring``
    positions of the range; a write writes every position, going round the ring as often as needed."""
    step = c.ring if (write and c.ring) else max(1, hi - lo)   # writes wrap the ring as often as they go round
    for a in range(lo, hi, step):
        for row, n in cache_spans(c, a, min(hi, a + step)):
            (op.write if write else op.read)(c.ten, base + row * c.row_bytes, n * c.row_bytes, count=count,
                                             stride=c.seq_stride if stride is None else stride)


def flash_attention(name: str, q: Ten, o: Ten, key_caches: list[Cache], value_caches: list[Cache], *,
                    batch: int, start: int, t: int, window: int | None, heads: int, score_dim: int, value_dim: int,
                    q_row_bytes: int, o_row_bytes: int, act_bytes: int, attn_tile: int, phase: str,
                    scores: Ten | None = None, extra_reads: tuple[Ten, ...] = (), chunk: int | None = None,
                    topk: int | None = None) -> list[Op]:
    """Tiled attention for ``t`` new queries per sequence starting at position ``start``.
    A cache that is both key and value (MLA's latent) is read once per tile."""
    caches = list(dict.fromkeys([*key_caches, *value_caches]))
    pairs = causal_pairs(start, t, window, chunk, topk) * batch
    op = Op(name, "attention", batch * t, 2 * heads * pairs * (score_dim + value_dim),
            pim_eligible=(phase == "decode"))
    for w in extra_reads:
        op.read_all(w)
    if t == 1:
        lo, hi = key_range(start, window, chunk)
        lo = max(lo, hi - topk) if topk else lo
        op.read(q, 0, batch * q_row_bytes)
        for c in caches:
            read_positions(op, c, 0, lo, hi, count=batch)
        op.write(o, 0, batch * o_row_bytes)
        return [op]
    for b in range(batch):
        for q0 in range(0, t, attn_tile):
            q1 = min(t, q0 + attn_tile)
            lo = key_range(start + q0, window, chunk)[0]
            hi = start + q1
            op.read(q, (b * t + q0) * q_row_bytes, (q1 - q0) * q_row_bytes)
            for c in caches:
                read_positions(op, c, b * c.seq_stride, lo, hi, stride=0)
            op.write(o, (b * t + q0) * o_row_bytes, (q1 - q0) * o_row_bytes)
    return [op]


def naive_attention(name: str, q: Ten, o: Ten, key_caches: list[Cache], value_caches: list[Cache], *,
                    batch: int, start: int, t: int, window: int | None, heads: int, score_dim: int,
                    value_dim: int, q_row_bytes: int, o_row_bytes: int, act_bytes: int, phase: str,
                    scores: Ten | None = None, attn_tile: int = 0, extra_reads: tuple[Ten, ...] = (),
                    chunk: int | None = None, topk: int | None = None) -> list[Op]:
    """Unfused attention: scores, softmax, and score-times-V, with the score matrix in memory.

    In decode all sequences go together (scores ``batch x heads x keys``); in prefill one sequence
    at a time (scores ``heads x t x keys``, the rectangle ``[lo(start), start + t)``)."""
    if scores is None:
        raise ValueError("naive attention needs a scores buffer")   # a lowering bug, not bad input
    pim = phase == "decode"
    lo, _ = key_range(start, window, chunk)
    hi = start + t
    if topk and t == 1:        # sparse decode: the picked rows only (see the module docstring)
        lo = max(lo, hi - topk)
    keys = hi - lo
    groups = [(0, batch)] if t == 1 else [(b, 1) for b in range(batch)]
    ops: list[Op] = []
    for b, nseq in groups:
        rect = nseq * heads * t * keys
        s_bytes = rect * act_bytes
        sc = Op(f"{name}.scores", "attention", nseq * t, 2 * rect * score_dim, pim_eligible=pim)
        for w in extra_reads:
            sc.read_all(w)
        sc.read(q, b * t * q_row_bytes, nseq * t * q_row_bytes)
        for c in key_caches:
            read_positions(sc, c, b * c.seq_stride, lo, hi, count=nseq)
        sc.write(scores, 0, s_bytes)
        sm = Op(f"{name}.softmax", "attention", nseq * t, 5 * rect, pim_eligible=pim)
        sm.read(scores, 0, s_bytes).write(scores, 0, s_bytes)
        pv = Op(f"{name}.pv", "attention", nseq * t, 2 * rect * value_dim, pim_eligible=pim)
        pv.read(scores, 0, s_bytes)
        for c in value_caches:
            read_positions(pv, c, b * c.seq_stride, lo, hi, count=nseq)
        pv.write(o, b * t * o_row_bytes, nseq * t * o_row_bytes)
        ops += [sc, sm, pv]
    return ops


def kv_append(name: str, sources: list[tuple[Ten, int]], caches: list[Cache], *, batch: int, start: int,
              t: int) -> Op:
    """Write the K/V rows of ``t`` new positions per sequence (read from activation buffers holding
    ``batch * t`` rows of the given row bytes) into the caches at positions ``start..start+t-1``."""
    op = Op(name, "kv_append", batch * t, 0)
    for src, row in sources:
        op.read(src, 0, batch * t * row)
    for c in caches:
        read_positions(op, c, 0, start, start + t, count=batch, write=True)
    return op


def index_scores(name: str, q: Ten, weights: Ten, cache: Cache, *, batch: int, start: int, t: int, heads: int,
                 dim: int, act_bytes: int) -> Op:
    """A sparse-attention indexer's scoring (DeepSeek-V3.2's lightning indexer): each of the ``t`` new
    queries of a sequence, ``heads`` heads of ``dim``, scores every cached index key of its sequence
    (positions ``0 .. start + t``, the whole cache ``cache``: tensor kind ``kv_index``), ReLU, and sums the
    heads by the per-head weights (``weights``), which choose the KV rows attention reads. FLOPs: the two
    matrix products, ``2 * heads * (dim + 1)`` per (query, key) of the segment's keys."""
    keys = start + t
    op = Op(name, "attention", batch * t, 2 * batch * t * keys * heads * (dim + 1))
    op.read(q, 0, batch * t * heads * dim * act_bytes).read(weights, 0, batch * t * heads * act_bytes)
    read_positions(op, cache, 0, 0, keys, count=batch)
    return op


# The attention kernels by name; all share one signature:
# kernel(name, q, o, key_caches, value_caches, *, scores=..., attn_tile=..., ...)
ATTENTION = {"flash": flash_attention, "naive": naive_attention}
