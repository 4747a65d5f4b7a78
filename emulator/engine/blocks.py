"""Access descriptors expanded into a block-address stream, in compiled code.

A descriptor (tensor, offset, nbytes, count, stride, is_write) covers ``count`` chunks of ``nbytes``
bytes at ``tensor address + offset + k*stride``. For a block size ``block_bytes`` each chunk touches
the blocks ``start // block_bytes .. (start + nbytes - 1) // block_bytes``, emitted in address order,
chunk after chunk, descriptor after descriptor: the order in which a tier of that block size would
see them. A chunk repeated (stride 0, count > 1) is emitted once per repetition.

The expansion writes into a fixed-size buffer and resumes where it stopped, so a trace of any length
is turned into a stream in bounded memory. :class:`BlockExpander` (any block size, tensors left out
by a mask) serves miss-ratio curves, sweeps and benchmarks; :func:`expand_rows` (power-of-two
blocks, the trace's columns as read) feeds the door's cache-stream kernels. The walk and set-group
kernels expand in their own loops, each descriptor's chunks as :func:`chunks_of` gives them.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
from tierlab.engine.jit import helper, njit

from tierlab.common.errors import UsageError

DEFAULT_BUFFER_BLOCKS = 1 << 20


@helper
def chunks_of(base, nbytes, count, stride, block_bytes):
    """The chunks a descriptor at ``base`` is served as: ``(count, nbytes)``, or ``(1, count x nbytes)``
    when its repetitions follow each other back to back (``stride == nbytes``) on block boundaries
    (a batch's KV read, sequence after sequence): the same blocks in the same order, one run, which a
    kernel may serve at once (a sweep of a cache it covers). Off block boundaries two repetitions
    share a block, which each requests: they stay apart."""
    if count > 1 and stride == nbytes and ((base | nbytes) & (block_bytes - 1)) == 0:
        return 1, count * nbytes
    return count, nbytes


@njit
def _expand(tensor_addr, tensor_id, offset, nbytes, count, stride, is_write, include,
            block_bytes, state, out_block, out_write):
    """Fill ``out_block``/``out_write`` from row ``state[0]``, chunk ``state[1]``, block ``state[2]``.

    ``state[2] < 0`` means the chunk has not started. Returns the number of blocks written; the
    state is left pointing at the first block not written (``state[0] == len(rows)`` when done).
    """
    n_rows = tensor_id.shape[0]
    cap = out_block.shape[0]
    n = 0
    row = state[0]
    k = state[1]
    blk = state[2]
    while row < n_rows:
        tid = tensor_id[row]
        if not include[tid]:
            row += 1
            k = 0
            blk = -1
            continue
        base = tensor_addr[tid] + offset[row]
        w = is_write[row]
        cnt = count[row]
        nb = nbytes[row]
        st = stride[row]
        while k < cnt:
            start = base + k * st
            last = (start + nb - 1) // block_bytes
            if blk < 0:
                blk = start // block_bytes
            while blk <= last:
                if n == cap:
                    state[0] = row
                    state[1] = k
                    state[2] = blk
                    return n
                out_block[n] = blk
                out_write[n] = w
                n += 1
                blk += 1
            k += 1
            blk = -1
        row += 1
        k = 0
    state[0] = row
    state[1] = 0
    state[2] = -1
    return n


@njit(nogil=True)
def expand_rows(tensor_addr, tensor_id, offset, nbytes, count, stride, is_write, shift, state,
                out_block, out_write):
    """The rows' tier-0 block numbers (blocks of ``1 << shift`` bytes) into ``out_block`` (their
    write flags into ``out_write``), resuming at row ``state[0]``, chunk ``state[1]``, block
    ``state[2]`` (``< 0``: the chunk has not started) as :func:`_expand` does; returns (blocks
    written, whether any of them is a write). The columns may be of any integer type (a trace's
    uint32 and uint64 columns as they are read: no copy to int64 first); every value is taken as
    int64 (the reader keeps every access inside its tensor, below ``2**62``)."""
    n_rows = tensor_id.shape[0]
    cap = out_block.shape[0]
    n = 0
    wrote = False
    row = state[0]
    k = state[1]
    blk = state[2]
    while row < n_rows:
        if blk < 0 and k == 0:
            # rows of one chunk that fit the buffer whole: no resume state to keep
            while row < n_rows and np.int64(count[row]) == 1:
                start = tensor_addr[np.int64(tensor_id[row])] + np.int64(offset[row])
                first = start >> shift
                last = (start + np.int64(nbytes[row]) - 1) >> shift
                if last - first >= cap - n:
                    break
                w = is_write[row]
                for b in range(first, last + 1):
                    out_block[n] = b
                    out_write[n] = w
                    n += 1
                wrote |= w
                row += 1
            if row == n_rows:
                break
        base = tensor_addr[np.int64(tensor_id[row])] + np.int64(offset[row])
        w = is_write[row]
        cnt = np.int64(count[row])
        nb = np.int64(nbytes[row])
        st = np.int64(stride[row])
        while k < cnt:
            start = base + k * st
            last = (start + nb - 1) >> shift
            if blk < 0:
                blk = start >> shift
            stop = min(last + 1, blk + cap - n)
            for b in range(blk, stop):
                out_block[n] = b
                out_write[n] = w
                n += 1
            if stop > blk:
                wrote |= w
            blk = stop
            if blk <= last:            # the buffer is full
                state[0] = row
                state[1] = k
                state[2] = blk
                return n, wrote
            k += 1
            blk = -1
        row += 1
        k = 0
    state[0] = row
    state[1] = 0
    state[2] = -1
    return n, wrote


@njit
def _count(tensor_addr, tensor_id, offset, nbytes, count, stride, include, block_bytes):
    """Number of blocks the rows expand to (same rule as :func:`_expand`, nothing written)."""
    total = 0
    for row in range(tensor_id.shape[0]):
        tid = tensor_id[row]
        if not include[tid]:
            continue
        base = tensor_addr[tid] + offset[row]
        for k in range(count[row]):
            start = base + k * stride[row]
            total += (start + nbytes[row] - 1) // block_bytes - start // block_bytes + 1
    return total


def _check_block(block_bytes: int) -> int:
    if int(block_bytes) != block_bytes or block_bytes < 1:
        raise UsageError(f"block size must be a positive whole number of bytes, got {block_bytes!r}",
                         field="block_bytes")
    return int(block_bytes)


class BlockExpander:
    """Expand descriptor rows into block numbers through one reusable buffer.

    ``tensor_addr`` is the base address (bytes) of every tensor, indexed by tensor id; ``include``
    (optional, bool per tensor) drops the accesses of tensors marked False (e.g. tensors homed in a
    nearer tier, which never reach the tier being studied).
    """

    def __init__(self, tensor_addr, block_bytes: int, *, include=None,
                 buffer_blocks: int = DEFAULT_BUFFER_BLOCKS):
        self.block_bytes = _check_block(block_bytes)
        self.tensor_addr = np.ascontiguousarray(tensor_addr, dtype=np.int64)
        if include is None:
            include = np.ones(self.tensor_addr.shape[0], dtype=np.bool_)
        self.include = np.ascontiguousarray(include, dtype=np.bool_)
        if self.include.shape != self.tensor_addr.shape:
            raise UsageError("include mask must have one entry per tensor", field="include")
        if buffer_blocks < 1:
            raise UsageError("buffer must hold at least one block", field="buffer_blocks")
        self._blocks = np.empty(int(buffer_blocks), dtype=np.int64)
        self._writes = np.empty(int(buffer_blocks), dtype=np.bool_)

    def expand(self, tensor_id, offset, nbytes, count, stride, is_write) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(blocks int64, writes bool)`` views of the buffer, valid until the next step."""
        cols = _columns(tensor_id, offset, nbytes, count, stride, is_write)
        state = np.array([0, 0, -1], dtype=np.int64)
        n_rows = cols[0].shape[0]
        while state[0] < n_rows:
            n = _expand(self.tensor_addr, *cols, self.include, self.block_bytes, state,
                        self._blocks, self._writes)
            if n:
                yield self._blocks[:n], self._writes[:n]

    def expand_batch(self, batch) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Same as :meth:`expand` for an accesses ``pyarrow.RecordBatch`` (trace format v1)."""
        return self.expand(*(batch.column(name).to_numpy(zero_copy_only=False)
                             for name in ("tensor_id", "offset", "nbytes", "count", "stride", "is_write")))

    def count(self, tensor_id, offset, nbytes, count, stride) -> int:
        """Number of blocks these rows expand to."""
        cols = _columns(tensor_id, offset, nbytes, count, stride, np.zeros(len(tensor_id), np.bool_))
        return int(_count(self.tensor_addr, *cols[:5], self.include, self.block_bytes))


def _columns(tensor_id, offset, nbytes, count, stride, is_write):
    return (np.ascontiguousarray(tensor_id, dtype=np.int64),
            np.ascontiguousarray(offset, dtype=np.int64),
            np.ascontiguousarray(nbytes, dtype=np.int64),
            np.ascontiguousarray(count, dtype=np.int64),
            np.ascontiguousarray(stride, dtype=np.int64),
            np.ascontiguousarray(is_write, dtype=np.bool_))


def tensor_addresses(tensors) -> np.ndarray:
    """Base address (bytes, int64) per tensor id from a trace's tensors table."""
    tid = tensors.column("tensor_id").to_numpy(zero_copy_only=False).astype(np.int64)
    addr = tensors.column("address").to_numpy(zero_copy_only=False).astype(np.int64)
    out = np.zeros(int(tid.max()) + 1 if tid.size else 0, dtype=np.int64)
    out[tid] = addr
    return out


def iter_trace_blocks(trace, block_bytes: int, *, include=None, batch_rows: int = 1 << 18,
                      buffer_blocks: int = DEFAULT_BUFFER_BLOCKS) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Stream a trace's accesses as ``(blocks, writes)`` buffers for ``block_bytes``-byte blocks.

    ``trace`` is a :func:`tierlab.traces.format.reader.open_trace` result; accesses are read ``batch_rows`` rows
    at a time, so memory stays bounded whatever the trace length. Each yielded pair is a view of a
    reused buffer: consume (or copy) it before the next step.
    """
    expander = BlockExpander(tensor_addresses(trace.tensors), block_bytes, include=include,
                             buffer_blocks=buffer_blocks)
    for batch in trace.iter_accesses(batch_rows):
        yield from expander.expand_batch(batch)


def block_stream(chunks) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``(blocks, writes)`` chunks into two arrays (copies; for tests and small traces)."""
    blocks, writes = [], []
    for b, w in chunks:
        blocks.append(b.copy())
        writes.append(w.copy())
    if not blocks:
        return np.empty(0, np.int64), np.empty(0, np.bool_)
    return np.concatenate(blocks), np.concatenate(writes)
