"""A stream of inference requests with their prefix blocks: :class:`RequestTrace`.

A request has an arrival time, a prompt (``input_tokens``), an answer (``output_tokens``), an
optional session and the ids of its prompt's blocks of ``block_tokens`` tokens (Mooncake's
``hash_ids``: equal ids mean equal prefixes; the trailing partial block has its own id). The block
ids of all requests are held as one CSR pair: request ``i`` owns ``blocks[block_offsets[i]:
block_offsets[i + 1]]``. Ids are renumbered densely, ``0 .. n_unique_blocks - 1`` in order of first
appearance, so a block store can size its arrays by ``n_unique_blocks`` and no id is 32-bit-unsafe.
A trace read without hash ids (Azure, a CSV without the column) has no blocks at all
(``has_hash_ids`` False); :meth:`RequestTrace.with_unique_blocks` gives every request blocks of its
own (nothing shared), for the caches that still need them to take room.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from tierlab.common.errors import UsageError
from tierlab.engine.jit import njit


@njit
def _first_appearance(blocks, n_ids):
    """Renumber ids ``0 .. n_ids - 1`` densely by first appearance; returns (new ids, distinct)."""
    new_of = np.full(n_ids, -1, np.int64)
    out = np.empty(blocks.shape[0], np.int64)
    k = 0
    for i in range(blocks.shape[0]):
        b = blocks[i]
        if new_of[b] < 0:
            new_of[b] = k
            k += 1
        out[i] = new_of[b]
    return out, k


def dense_block_ids(raw: np.ndarray) -> tuple[np.ndarray, int]:
    """Any int64 ids renumbered ``0, 1, ...`` in order of first appearance; returns (ids, distinct)."""
    raw = np.ascontiguousarray(raw, dtype=np.int64)
    if raw.size == 0:
        return raw.copy(), 0
    lo, hi = int(raw.min()), int(raw.max())
    if lo >= 0 and hi < 4 * raw.size + (1 << 16):            # small ids: an array map
        ids, k = _first_appearance(raw, hi + 1)
        return ids, int(k)
    if lo >= 0:                                              # large ids: the analysis room's hash table
        from tierlab.analysis.mrc_opt import dense_ids
        return dense_ids(raw)
    _, first, inverse = np.unique(raw, return_index=True, return_inverse=True)
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.reshape(-1)], int(first.size)


def _gather_rows(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR rows ``rows`` (an index array) of (offsets, values), as a new CSR pair."""
    lengths = (offsets[1:] - offsets[:-1])[rows]
    new_off = np.zeros(rows.size + 1, np.int64)
    np.cumsum(lengths, out=new_off[1:])
    idx = np.repeat(offsets[:-1][rows] - new_off[:-1], lengths) + np.arange(new_off[-1], dtype=np.int64)
    return new_off, values[idx]


@dataclass(frozen=True)
class RequestTrace:
    """Requests in arrival order, as numpy arrays (one entry per request unless said otherwise).

    Attributes
    ----------
    arrival_s : float64, seconds, non-decreasing.
    input_tokens, output_tokens : int64 (input >= 1, output >= 0).
    session : int64, -1 where the request belongs to no session.
    block_offsets : int64, length ``n + 1``: request ``i``'s blocks are ``blocks[block_offsets[i]:block_offsets[i+1]]``.
    blocks : int64, dense ids ``0 .. n_unique_blocks - 1`` numbered in order of first appearance.
    block_tokens : tokens per block; a request with ids has ``ceil(input_tokens / block_tokens)`` of them.
    n_unique_blocks : distinct ids.
    source : where the requests came from (a path, or a description of a synthetic stream).
    format : ``mooncake``, ``azure``, ``csv``, ``parquet`` or ``synthetic``.
    lines : int64 or None: each request's 1-based line in ``source`` (its row, for Parquet), kept
        through sorting and slicing, so that an error names the request where a person finds it
        (:meth:`request_error`); None for a synthetic stream.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    session: np.ndarray
    block_offsets: np.ndarray
    blocks: np.ndarray
    block_tokens: int
    n_unique_blocks: int
    source: str
    format: str
    lines: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def has_hash_ids(self) -> bool:
        """Whether the requests carry block ids (False for Azure, or a CSV without ``hash_ids``)."""
        return self.blocks.shape[0] > 0 or len(self) == 0

    @property
    def n_blocks(self) -> np.ndarray:
        """Blocks per request (int64)."""
        return np.diff(self.block_offsets)

    def request_blocks(self, i: int) -> np.ndarray:
        """Block ids of request ``i`` (a view)."""
        return self.blocks[self.block_offsets[i]:self.block_offsets[i + 1]]

    def block_token_counts(self) -> np.ndarray:
        """Tokens of each entry of :attr:`blocks`: ``block_tokens``, and the remainder for a
        request's last block (its ``input_tokens - (n - 1) x block_tokens``)."""
        w = np.full(self.blocks.shape[0], self.block_tokens, np.int64)
        nb = self.n_blocks
        has = nb > 0
        last = self.block_offsets[1:][has] - 1
        w[last] = self.input_tokens[has] - (nb[has] - 1) * self.block_tokens
        return w

    def where(self, i: int) -> str:
        """Where request ``i`` came from, as a person finds it: ``line N`` of the file (``row N``
        of a Parquet file), or ``request i`` (its index in arrival order) of a synthetic stream."""
        if self.lines is None:
            return f"request {int(i)}"
        return f"{'row' if self.format == 'parquet' else 'line'} {int(self.lines[i])}"

    def request_error(self, i: int, message: str) -> UsageError:
        """A :class:`UsageError` about request ``i``, one line naming its file and line:
        ``FILE: line N: message`` (a synthetic stream's: ``trace: request i: message``)."""
        if self.lines is None:
            return UsageError(f"{self.where(i)}: {message}", field="trace")
        return UsageError(message, file=self.source, field=self.where(i))

    def slice(self, start: int, stop: int | None = None) -> RequestTrace:
        """Requests ``start:stop`` (block ids renumbered densely again)."""
        start, stop, _ = slice(start, stop).indices(len(self))
        stop = max(stop, start)
        lo, hi = int(self.block_offsets[start]), int(self.block_offsets[stop])
        blocks, n_unique = dense_block_ids(self.blocks[lo:hi])
        return replace(self, arrival_s=self.arrival_s[start:stop].copy(),
                       input_tokens=self.input_tokens[start:stop].copy(),
                       output_tokens=self.output_tokens[start:stop].copy(),
                       session=self.session[start:stop].copy(),
                       block_offsets=self.block_offsets[start:stop + 1] - lo, blocks=blocks,
                       n_unique_blocks=n_unique,
                       lines=None if self.lines is None else self.lines[start:stop].copy())

    def head(self, n: int) -> RequestTrace:
        """The first ``n`` requests."""
        return self.slice(0, max(0, int(n)))

    def scaled(self, rate_scale: float) -> RequestTrace:
        """The same requests arriving ``rate_scale`` times as fast (arrival times divided by it)."""
        if not (rate_scale > 0 and np.isfinite(rate_scale)):
            raise UsageError(f"rate scale must be a positive number, got {rate_scale}", field="rate_scale")
        return replace(self, arrival_s=self.arrival_s / float(rate_scale))

    def with_unique_blocks(self) -> RequestTrace:
        """A trace without hash ids given ``ceil(input / block_tokens)`` fresh ids per request
        (nothing shared); a trace with ids is returned as it is."""
        if self.has_hash_ids:
            return self
        nb = -(-self.input_tokens // self.block_tokens)
        off = np.zeros(len(self) + 1, np.int64)
        np.cumsum(nb, out=off[1:])
        return replace(self, block_offsets=off, blocks=np.arange(off[-1], dtype=np.int64),
                       n_unique_blocks=int(off[-1]))

    def reordered(self, order: np.ndarray) -> RequestTrace:
        """The requests in the order of the index array ``order`` (ids renumbered by first appearance)."""
        off, raw = _gather_rows(self.block_offsets, self.blocks, order)
        blocks, n_unique = dense_block_ids(raw)
        return replace(self, arrival_s=self.arrival_s[order], input_tokens=self.input_tokens[order],
                       output_tokens=self.output_tokens[order], session=self.session[order],
                       block_offsets=off, blocks=blocks, n_unique_blocks=n_unique,
                       lines=None if self.lines is None else self.lines[order])

    def to_arrow(self) -> pa.Table:
        """One row per request: ``arrival_s, input_tokens, output_tokens, session, hash_ids``
        (a list column; the plain Parquet format :func:`tierlab.kvstream.reader.read_requests` reads back)."""
        if self.blocks.size < 2**31:
            ids = pa.ListArray.from_arrays(pa.array(self.block_offsets.astype(np.int32)), pa.array(self.blocks))
        else:
            ids = pa.LargeListArray.from_arrays(pa.array(self.block_offsets), pa.array(self.blocks))
        return pa.table({"arrival_s": self.arrival_s, "input_tokens": self.input_tokens,
                         "output_tokens": self.output_tokens, "session": self.session, "hash_ids": ids})
