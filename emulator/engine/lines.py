"""An address trace's line stream on the stream kernels: the door's entry for address traces.

An address trace (:mod:`tierlab.traces.format.addresses`) is one op over one stream of lines, each word
``line << 1 | is_write``. Where the dispatch table gives the replay to a stream kernel and tier 0's
blocks are at least a line, the words go to :class:`tierlab.engine.stream_driver.StreamReplayer`
as they are read (zero-copy views of the trace's file): ``word >> (1 + log2(block / line))`` is the
tier-0 block; no descriptor is built. Elsewhere the door replays the trace's descriptor view.

``once_rows`` (the manifest's ``straddle`` ``"once"``): rows whose line continues the access of
the row before. Such an access is counted once at tier 0 (cachegrind's convention): one request,
a miss if any of its lines missed. Its lines are fed one at a time to see which missed, and tier 0's
hits and misses so counted are returned beside the counters (``stats["straddle_once"]``); the
counters themselves count lines, so every law of :mod:`tierlab.engine.invariants` holds (each line
of a straddling access is really looked up and filled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

from tierlab.common import background
from tierlab.engine.counters import HITS, MISSES
from tierlab.engine.geometry import Geometry, partition_bit
from tierlab.engine.options import ReplayOptions

if TYPE_CHECKING:       # the stream kernels load when a replay runs on them (start-up, issue 42)
    from tierlab.engine.stream_driver import StreamReplayer


@dataclass(frozen=True)
class LineStream:
    """An address trace's stream: ``chunks()`` yields int64 word arrays (``line << 1 |
    is_write``, ``line_bytes``-byte lines) in order; ``writes``: whether any word writes (None: not
    known); ``once_rows``: rows continuing an access, counted once at tier 0 (empty: every line
    counts); ``n_lines``: the words in all."""

    line_bytes: int
    chunks: Callable[[], Iterable[np.ndarray]]
    writes: bool | None
    once_rows: np.ndarray
    n_lines: int
    check: Callable[[np.ndarray, int], None] | None = None
    release: Callable[[list], None] | None = None     # lets go of the chunks (emptying the list) after the replay


def of_trace(trace) -> LineStream:
    """The stream of an address trace (:class:`tierlab.traces.format.addresses.AddressTrace`) as the door takes it:
    its words unchecked here (each chunk checked beside the kernel), its straddling rows."""
    from tierlab.traces.format.ipc import release_mapped

    return LineStream(line_bytes=trace.line_bytes, chunks=lambda: trace.iter_lines(check=False),
                      writes=trace.writes, once_rows=trace.once_rows(), n_lines=trace.n_lines,
                      check=trace.check_lines, release=release_mapped)


def serves(geo: Geometry, stream: LineStream) -> bool:
    """Whether tier 0's blocks hold whole lines (the words feed the kernels as they are)."""
    return int(geo.block_bytes[0]) >= stream.line_bytes


def _tier0_misses(r: StreamReplayer) -> int:
    n = sum(int(c[0, MISSES]) for _, c in r.states)
    if r.reqs is not None:
        n += int(r.reqs[:, 0, 1].sum())
    return n


def replay_lines(geo: Geometry, n_caches: int, chain: bool, stream: LineStream, options: ReplayOptions,
                 progress=None) -> tuple[np.ndarray, dict]:
    """Replay ``stream`` on the stream kernels (the chain when ``chain``); return the counts
    ``[tier, counter]`` and the replayer's stats (with ``straddle_once``: tier 0's accesses, hits
    and misses counting each straddling access once, when the stream has ``once_rows``)."""
    from tierlab.engine.stream_driver import StreamReplayer

    sh0 = int(geo.block_bytes[0]).bit_length() - 1
    shift = 1 + sh0 - (stream.line_bytes.bit_length() - 1)
    once = np.asarray(stream.once_rows, np.int64)
    bit = partition_bit(geo, n_caches) if options.threads > 1 and stream.n_lines > 1 and not len(once) else None
    if chain and n_caches == 1:
        bit = None      # one tier is less work per block than splitting the stream (as replay_blocks)
    # every chunk's view first (reading the file's index, no words), then every chunk's check on
    # the other core, in order, ahead of the kernel: the check is the first to read each page of
    # the mapped words, so the kernel finds them mapped (the replay of 10 M lines on an AMD EPYC,
    # 2 vCPUs: 15 ms against 20 ms with each chunk checked as the kernel reached it)
    chunks = [w for w in stream.chunks() if len(w)]
    bits = {w.dtype.itemsize * 8 for w in chunks}
    r = StreamReplayer(geo, n_caches, options, chain=chain, bit=bit, hand_over=chain and stream.writes is None,
                       words=(bits.pop(), shift) if len(bits) == 1 else None)
    checks: list = []
    try:
        if stream.check is not None:
            row = 0
            for words in chunks:
                checks.append(background.submit(stream.check, words, row))
                row += len(words)
        counts, stats = _replay(r, chunks, geo, shift, once, progress)
    finally:
        for c in checks:                # the first failing check raises (its TraceError names the row)
            c.result()
    if stream.release is not None:
        stream.release(chunks)
    return counts, stats


def _replay(r: StreamReplayer, chunks: list, geo: Geometry, shift: int, once: np.ndarray,
            progress) -> tuple[np.ndarray, dict]:
    hits_off = misses_off = 0
    row = 0
    g = 0                                   # next once-row group
    for words in chunks:
        n = len(words)
        # the groups of rows (an access's first line, then its continuations) starting in this chunk
        lo = 0
        while g < len(once) and once[g] - 1 < row + n:
            first = int(once[g]) - 1
            end = first + 1
            while g < len(once) and once[g] == end:
                end += 1
                g += 1
            a = max(first - row, 0)
            if a > lo:
                _feed(r, words[lo:a], shift)
            missed = 0
            for k in range(first, end):        # the group's lines one at a time (may run into the next chunk:
                if k - row >= n:              # then it is fed there, uncorrected; the writer keeps groups whole)
                    break
                before = _tier0_misses(r)
                _feed(r, words[k - row:k - row + 1], shift)
                missed += _tier0_misses(r) - before
            lines = min(end, row + n) - first
            # counted once: one request, a miss if any line missed
            misses_off -= missed - (1 if missed else 0)
            hits_off -= (lines - missed) - (0 if missed else 1)
            lo = min(end, row + n) - row
        if lo < n:
            _feed(r, words[lo:], shift)
        row += n
        if progress is not None:
            progress(n)
    counts = r.counts()
    stats = r.stats()
    if len(once):
        stats["straddle_once"] = {"tier": geo.names[0], "accesses": int(counts[0, HITS] + counts[0, MISSES]
                                                                          + hits_off + misses_off),
                                  "hits": int(counts[0, HITS] + hits_off), "misses": int(counts[0, MISSES] + misses_off),
                                  "continuation_lines": int(len(once))}
    return counts, stats


def _feed(r: StreamReplayer, words: np.ndarray, shift: int) -> None:
    if len(words) == 0:
        return
    if r.chain and not r.hand_over:
        r.feed(words, shift)
    else:
        w = (words & 1).astype(np.bool_)
        r.feed(words, shift, w)
