"""The one door to the engine: validate, build the arrays once, choose the kernel, name the results.

Two entries, one path: :func:`replay_arrays` (access descriptors, given each tensor's address,
size, home and kind: what a trace replay hands over) and :func:`replay_blocks` (a raw stream of
byte addresses on cache tiers over an unbounded memory). Both describe the replay as a
:class:`tierlab.engine.dispatch.Request`, let the dispatch table choose the kernel, run its driver
and record the choice and its reason in ``result.meta["kernel"]`` (``provenance.kernel`` in
``--json``). The accounting rules every kernel follows are in ``docs/design.md``.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import numpy as np

from tierlab.common.errors import TraceError, UsageError
from tierlab.chip.hierarchy import Tier
from tierlab.engine.counters import N_COUNTERS, ReplayResult
from tierlab.engine.dispatch import BY_NAME, Choice, Request, choose
from tierlab.engine.geometry import KINDS, Geometry, build_geometry, partition_bit
from tierlab.engine.invariants import debug_from_env
from tierlab.engine.options import ReplayOptions
from tierlab.engine.policies import POLICY_NAMES
from tierlab.engine.state import Tensors, as_descriptors
from tierlab.engine.tally import CallCounters

if TYPE_CHECKING:
    from tierlab.engine.lines import LineStream

# Each kernel's driver (and the compiled functions it declares) is imported where that kernel is
# chosen: a replay loads only the kernel it runs (issue 42, start-up; 30-60 ms of imports each).

__all__ = ["kernel_for", "replay_arrays", "replay_blocks", "replay_twins"]

Batch = tuple  # (row, tid, offset, nbytes, count, stride, write, pim): integer arrays (any integer type,
               # e.g. a trace's uint32/uint64 columns as read) and a bool array
STREAM_KERNELS = ("cache_stream_chain", "cache_stream_passes")
STREAM_BUFFER_BLOCKS = 1 << 15     # tier-0 blocks expanded per kernel call (fits the host's L2 with the state)
CALL_OPS = 128                     # ops per call of a walk-type kernel: its counters, [op, kind, tier,
                                   # counter], a few hundred KiB, reused call after call


def describe(geo: Geometry, home: np.ndarray, kinds: np.ndarray, n_ops: int, options: ReplayOptions, *,
             source: str, writes: bool | None, pim: bool) -> Request:
    """The facts the dispatch table matches (:class:`tierlab.engine.dispatch.Request`)."""
    caching = geo.caching
    policies = tuple(POLICY_NAMES[int(p)] for p, c in zip(geo.policy, caching) if c)
    homes = np.unique(home)
    over_home = False
    if len(homes) == 1:
        h = int(homes[0])
        over_home = h >= 1 and bool(caching[:h].all()) and not caching[h:].any()
    return Request(source=source, policies=policies, caches_over_home=over_home,
                   lone_cache=len(caching) >= 2 and bool(caching[0]) and not caching[1:].any(),
                   writes=writes, flush=options.flush,
                   inclusive=options.inclusive and len(policies) >= 2, pim=pim,
                   ops=max(1, n_ops), kinds=max(1, len(np.unique(kinds))),
                   caching=tuple(int(i) for i in np.flatnonzero(caching)))


def pick(req: Request, options: ReplayOptions) -> Choice:
    """The kernel for ``req`` under ``options`` (``kernel``, and the ``fast_path`` / ``set_groups``
    aliases)."""
    exclude = frozenset() if options.set_groups else frozenset({"set_groups"})
    return choose(req, options.requested_kernel, exclude=exclude)


def kernel_for(geo: Geometry, home, kinds, n_ops: int, options: ReplayOptions, *, source: str = "descriptors",
               writes: bool | None = None, pim: bool = False) -> Choice:
    """The kernel the door would choose for a replay of this shape (the dispatch, asked directly)."""
    return pick(describe(geo, np.asarray(home, np.int64), np.asarray(kinds, np.int64), n_ops, options,
                         source=source, writes=writes, pim=pim), options)


def drive(r, batches: Iterable[Batch], options: ReplayOptions, totals: tuple[np.ndarray, np.ndarray] | None,
          progress) -> tuple[np.ndarray, int, int]:
    """Feed every batch to the walk-type driver ``r``, ``CALL_OPS`` ops a kernel call sharing one
    counter buffer (:meth:`tierlab.engine.tally.CallCounters.replay`), the counts folded into
    ``totals`` (``(per_op, by_kind)``; None: dropped, for an opt pre-pass); return (flush counters,
    blocks, descriptors)."""
    n_kinds, n_tiers = len(KINDS), len(r.geo.names)
    per_op, by_kind = (None, None) if totals is None else totals
    n_blocks = n_acc = 0
    calls = CallCounters(n_tiers)
    for b in batches:
        if len(b[0]) == 0:
            continue
        desc = as_descriptors(b)
        n_blocks += calls.replay(r, desc, per_op, by_kind, CALL_OPS)
        n_acc += len(desc.row)
        if progress is not None:
            progress(len(desc.row))
    fl = np.zeros((1, n_kinds, n_tiers, N_COUNTERS), np.int64)
    if options.flush:
        r.flush(fl)
    return fl[0], n_blocks, n_acc


def _stream_descriptors(geo: Geometry, tensors: Tensors, choice: Choice, batches, options, progress,
                        n_caches: int, writes: bool | None) -> tuple[np.ndarray, int, int, dict]:
    """A descriptor stream on the stream kernels: each batch expanded, in compiled code and from
    its columns as they come (any integer type), to its tier-0 blocks, fed buffer by buffer. The
    chain, asked to serve a stream whose writes are not known, hands over to the tier passes at the
    first buffer holding a write."""
    from tierlab.engine.blocks import expand_rows
    from tierlab.engine.stream_driver import StreamReplayer

    sh0 = int(geo.block_bytes[0]).bit_length() - 1
    chain = choice.kernel.name == "cache_stream_chain"
    r = StreamReplayer(geo, n_caches, options, chain=chain, hand_over=chain and writes is None)
    cap = STREAM_BUFFER_BLOCKS
    out_block, out_write = np.empty(cap, np.int64), np.empty(cap, np.bool_)
    state = np.zeros(3, np.int64)
    n_blocks = n_acc = 0
    for b in batches:
        n_rows = len(b[0])
        if n_rows == 0:
            continue
        state[:] = (0, 0, -1)
        cols = [np.ascontiguousarray(c) for c in b[1:6]] + [np.ascontiguousarray(b[6], np.bool_)]
        while state[0] < n_rows:
            n, wrote = expand_rows(tensors.address, *cols, sh0, state, out_block, out_write)
            if n:
                r.feed(out_block[:n], 0, out_write[:n] if wrote else None, wrote)
                n_blocks += n
        n_acc += n_rows
        if progress is not None:
            progress(n_rows)
    return r.counts(), n_blocks, n_acc, r.stats()


def run_replay(geo: Geometry, tensors: Tensors, batches: Callable[[], Iterable[Batch]], options: ReplayOptions,
               choice: Choice, totals: tuple[np.ndarray, np.ndarray], progress=None,
               writes: bool | None = None) -> dict:
    """Replay every batch from ``batches()`` (called again for each opt pre-pass) with the chosen
    kernel, a walk-type kernel's counts folded into ``totals`` (``(per_op, by_kind)``). Returns
    ``flush`` (counters ``[kind, tier, counter]``), ``blocks``, ``descriptors``, ``stats`` and, for
    the stream kernels, ``counts`` (``[tier, counter]``, one op of one kind)."""
    name = choice.kernel.name
    if name in STREAM_KERNELS:
        n_caches = int(np.count_nonzero(geo.caching))
        counts, n_blocks, n_acc, stats = _stream_descriptors(geo, tensors, choice, batches(), options,
                                                             progress, n_caches, writes)
        return {"counts": counts, "flush": None, "blocks": n_blocks, "descriptors": n_acc, "stats": stats}
    if options.inclusive:
        from tierlab.engine.walker import check_inclusive

        check_inclusive(geo, options)
    futures = None
    if name == "set_groups":            # LRU/FIFO only (dispatch): no opt pre-pass
        from tierlab.engine.groups_driver import SetGroupReplayer

        r = SetGroupReplayer(geo, tensors, options)
    else:
        from tierlab.engine.walker import WalkReplayer, opt_prepass

        fast = name != "walk"
        futures = opt_prepass(geo, tensors, options, fast, batches,
                              lambda r, bs: drive(r, bs, options, None, None))
        r = WalkReplayer(geo, tensors, options, fast_path=fast, opt_next=futures)
    fl, n_blocks, n_acc = drive(r, batches(), options, totals, progress)
    stats = r.stats()
    if futures:
        stats["opt_prepasses"] = len(futures)
    return {"counts": None, "flush": fl, "blocks": n_blocks, "descriptors": n_acc, "stats": stats}


def replay_arrays(tiers: Sequence[Tier], *, tensor_address, tensor_nbytes, tensor_home, tensor_kind,
                  batches: Callable[[], Iterable[Batch]], n_ops: int, lent_bytes=None,
                  options: ReplayOptions = ReplayOptions(), progress=None, pim: bool = True,
                  writes: bool | None = None, lines: LineStream | None = None) -> ReplayResult:
    """Replay descriptor batches on ``tiers`` given each tensor's address, size, home and kind index.

    ``batches()`` yields tuples ``(op_id, tensor_id, offset, nbytes, count, stride, is_write, pim)``
    of equal-length arrays, op ids non-decreasing across the whole stream; ``pim`` is nonzero for a
    descriptor the home tier's PIM unit reads in memory (the argument ``pim``: whether any may be).
    ``writes``: whether any descriptor writes (None: not known). ``progress(n)`` is called with the
    descriptors of each batch replayed.

    ``lines``: the same stream as an address trace's lines (:class:`tierlab.engine.lines.LineStream`;
    ``batches`` is then its descriptor view, one descriptor per line). A stream kernel takes the
    words as they are (:func:`tierlab.engine.lines.replay_lines`); any other kernel, the descriptors.
    """
    geo, tensors = prepare(tiers, tensor_address, tensor_nbytes, tensor_home, tensor_kind, lent_bytes, options)
    if lines is not None and writes is None:
        writes = lines.writes
    req = describe(geo, tensors.home, tensors.kind, n_ops, options, source="descriptors", writes=writes, pim=pim)
    choice = pick(req, options)
    if lines is not None:
        from tierlab.engine.lines import serves as serves_lines

        if choice.kernel.name in STREAM_KERNELS and serves_lines(geo, lines):
            return _replay_lines(geo, tensors, lines, options, choice, progress)
        if len(lines.once_rows):
            raise UsageError(f"a trace imported with --straddle once replays on the stream kernels "
                             f"({', '.join(STREAM_KERNELS)}) with tier-0 blocks of at least its "
                             f"{lines.line_bytes} B lines; {choice.kernel.name} was chosen ({choice.why})",
                             field="straddle")
    return _replay_prepared(geo, tensors, batches, n_ops, options, choice, progress, writes)


def _replay_lines(geo: Geometry, tensors: Tensors, lines: LineStream, options: ReplayOptions, choice: Choice,
                  progress) -> ReplayResult:
    """An address trace's words on the stream kernels: one op of one kind."""
    from tierlab.engine.lines import replay_lines

    n_tiers = len(geo.names)
    n_caches = int(np.count_nonzero(geo.caching))
    counts, stats = replay_lines(geo, n_caches, choice.kernel.name == "cache_stream_chain", lines, options, progress)
    per_op = counts[None].copy()
    by_kind = np.zeros((len(KINDS), n_tiers, N_COUNTERS), np.int64)
    by_kind[int(tensors.kind[0]) if len(tensors.kind) else KINDS.index("other")] = counts
    result = _result(geo, per_op, by_kind, np.zeros_like(counts), lines.n_lines, lines.n_lines, choice, stats,
                     options)
    if "straddle_once" in stats:            # shown in --json as provenance.kernel.straddle_once
        result.meta["kernel"]["straddle_once"] = stats["straddle_once"]
    return result


def replay_twins(tiers: Sequence[Tier], *, tensor_address, tensor_nbytes, tensor_home, tensor_kind,
                 base: Batch, twins: Sequence[Batch], n_ops: int, lent_bytes=None,
                 options: ReplayOptions = ReplayOptions(), progress=None, pim: bool = True,
                 writes: bool | None = None, max_diff_share: float | None = None
                 ) -> list[ReplayResult | None] | None:
    """Replay ``base`` and its ``twins`` (whole streams of the same ops on the same tensors, as one
    batch each of :func:`replay_arrays`) with the same results as one :func:`replay_arrays` each,
    replaying each twin only where it differs from the base (:mod:`tierlab.engine.twins`).

    Returns the base's result then each twin's (None for a twin that could not be followed, or that
    differs in more than ``max_diff_share`` of the ops: replay it on its own), or None when the kernel
    chosen is not ``set_groups`` (whose state forks). ``max_diff_share`` None:
    :data:`tierlab.engine.twins.MAX_DIFF_SHARE`."""
    from tierlab.engine.twins import MAX_DIFF_SHARE, TwinDriver

    if max_diff_share is None:
        max_diff_share = MAX_DIFF_SHARE
    geo, tensors = prepare(tiers, tensor_address, tensor_nbytes, tensor_home, tensor_kind, lent_bytes, options)
    req = describe(geo, tensors.home, tensors.kind, n_ops, options, source="descriptors", writes=writes, pim=pim)
    choice = pick(req, options)
    if choice.kernel.name != "set_groups" or options.inclusive:
        return None
    # the kernels' column types, once for each whole stream
    outs = TwinDriver(geo, tensors, options, as_descriptors(base), [as_descriptors(t) for t in twins], n_ops,
                      progress, max_diff_share, call_ops=CALL_OPS).run()
    return [None if o is None else
            _result(geo, o["per_op"], o["by_kind"], o["flush"].sum(axis=0), o["descriptors"], o["blocks"],
                    choice, o["stats"], options) for o in outs]


def prepare(tiers: Sequence[Tier], tensor_address, tensor_nbytes, tensor_home, tensor_kind, lent_bytes,
            options: ReplayOptions) -> tuple[Geometry, Tensors]:
    """Check the tensor table against the tiers and build the geometry."""
    n_tiers = len(tiers)
    addr = np.asarray(tensor_address, np.int64)
    nbytes = np.asarray(tensor_nbytes, np.int64)
    home = np.asarray(tensor_home, np.int64)
    kind = np.asarray(tensor_kind, np.int64)
    lent = np.zeros(n_tiers, np.int64) if lent_bytes is None else np.asarray(lent_bytes, np.int64)
    if len(home) and (home.min() < 0 or home.max() >= n_tiers):
        raise UsageError("a tensor's home tier is outside the hierarchy", field="home")
    for t in tiers:
        bad = np.nonzero(addr % t.block_bytes)[0]
        if len(bad):
            raise TraceError(f"tensor {int(bad[0])} at address {int(addr[bad[0]])} is not aligned to the "
                             f"{t.block_bytes} B block of tier {t.name!r}; regenerate the trace with "
                             f"--align {t.block_bytes} or more", field="address")
    below = np.array([int((-(-nbytes[home > i] // t.block_bytes)).sum()) for i, t in enumerate(tiers)],
                     np.int64)
    geo = build_geometry(tiers, lent, below, options)
    geo.space_bytes = int((addr + nbytes).max()) if len(addr) else 1
    return geo, Tensors(np.ascontiguousarray(addr), np.ascontiguousarray(home), np.ascontiguousarray(kind))


def _replay_prepared(geo: Geometry, tensors: Tensors, batches, n_ops: int, options: ReplayOptions,
                     choice: Choice, progress, writes: bool | None = None) -> ReplayResult:
    n_tiers = len(geo.names)
    per_op = np.zeros((max(n_ops, 1), n_tiers, N_COUNTERS), np.int64)
    by_kind = np.zeros((len(KINDS), n_tiers, N_COUNTERS), np.int64)
    out = run_replay(geo, tensors, batches, options, choice, (per_op, by_kind), progress, writes)
    flush = out["flush"]
    if out["counts"] is not None:           # one op of one kind: the stream kernels' totals
        k = int(tensors.kind[0]) if len(tensors.kind) else KINDS.index("other")
        per_op[0] += out["counts"]
        by_kind[k] += out["counts"]
        flush = np.zeros((len(KINDS), n_tiers, N_COUNTERS), np.int64)
    return _result(geo, per_op[:n_ops], by_kind, flush.sum(axis=0), out["descriptors"], out["blocks"],
                   choice, out["stats"], options)


def _result(geo: Geometry, per_op, by_kind, flush, n_acc, n_blocks, choice: Choice, stats: dict,
            options: ReplayOptions) -> ReplayResult:
    kernel = choice.to_dict()
    if "handed_over_at_block" in stats:     # the chain met the stream's first write there
        kernel.update(then=choice.kernel.hands_over, at_block=stats["handed_over_at_block"])
    result = ReplayResult(tier_names=geo.names, block_bytes=geo.block_bytes.copy(), kinds=KINDS,
                          tiers=by_kind.sum(axis=0), by_kind=by_kind,
                          per_op=per_op, flush=flush, n_accesses=n_acc, n_blocks=n_blocks,
                          meta={"geometry": {"n_sets": geo.n_sets.tolist(), "n_ways": geo.n_ways.tolist(),
                                             "caching": geo.caching.tolist()},
                                "kernel": kernel, **stats})
    if options.debug or debug_from_env():
        from tierlab.engine.invariants import check_result

        check_result(result)
    return result


def _merge(results: list[ReplayResult]) -> ReplayResult:
    r0 = results[0]
    fast = np.sum([r.meta["fast_requests"] for r in results], axis=0).tolist()
    return ReplayResult(tier_names=r0.tier_names, block_bytes=r0.block_bytes, kinds=r0.kinds,
                        tiers=sum(r.tiers for r in results), by_kind=sum(r.by_kind for r in results),
                        per_op=sum(r.per_op for r in results), flush=sum(r.flush for r in results),
                        n_accesses=sum(r.n_accesses for r in results),
                        n_blocks=sum(r.n_blocks for r in results),
                        meta={**r0.meta, "fast_requests": fast, "partitions": len(results)})


def replay_blocks(addresses, is_write=None, *, tiers: Sequence[Tier],
                  options: ReplayOptions = ReplayOptions(), memory_name: str = "memory") -> ReplayResult:
    """Replay a raw stream of byte addresses (+ write flags) on cache ``tiers`` without a trace.

    Each address is one request for the tier-0 block containing it. Below the last tier an
    unbounded memory tier (named ``memory_name``) homes everything; it is the last tier of the
    result. For throughput comparisons (``benchmarks/bench_replay.py``) and the pycachesim tests.
    With ``options.threads`` > 1 and a :func:`tierlab.engine.geometry.partition_bit`, the stream is
    split in two by that bit and the halves replay on two threads (the engine releases the GIL);
    counts are identical.
    """
    a = np.ascontiguousarray(addresses, np.int64)
    n = len(a)
    w = np.zeros(n, np.bool_) if is_write is None else np.ascontiguousarray(is_write, np.bool_)
    if w.shape != a.shape:
        raise UsageError("is_write must have one flag per address", field="is_write")
    last = tiers[-1]
    mem = Tier(memory_name, capacity_bytes=1 << 62, block_bytes=last.block_bytes, ways=None,
               policy="lru", managed="memory", bandwidth_bytes_per_s=1.0,
               read_energy_j_per_byte=0.0, write_energy_j_per_byte=0.0)
    all_tiers = tuple(tiers) + (mem,)
    writes = is_write is not None and bool(w.any())
    if n == 0:
        # nothing to replay: the walk names the (empty) result
        return _replay_blocks_walk(a, w, all_tiers, len(tiers), options, 1, Choice(BY_NAME["walk"], "empty stream"))
    # the stream kernels' geometry (nothing clamped: the walk's own is built from the tensor table);
    # no pass over the stream before a kernel is chosen (the chain reports negative addresses itself)
    probe = build_geometry(all_tiers, [0] * len(all_tiers), [1 << 62] * len(all_tiers), options)
    req = describe(probe, np.array([len(tiers)]), np.array([0]), 1, options, source="blocks", writes=writes,
                   pim=False)
    choice = pick(req, options)
    if choice.kernel.name in STREAM_KERNELS:
        return _replay_blocks_stream(a, w if writes else None, probe, len(tiers), options, choice)
    if a.min() < 0:
        raise UsageError("addresses must be non-negative", field="addresses")
    top = int(a.max()) + 1
    bit = partition_bit(probe, len(tiers)) if options.threads > 1 and n > 1 else None
    if bit is not None:
        one = dataclasses.replace(options, threads=1, kernel=choice.kernel.name, fast_path=True)
        sel = ((a // tiers[0].block_bytes) >> bit) & 1 == 1
        halves = [(a[~sel], None if is_write is None else w[~sel]), (a[sel], None if is_write is None else w[sel])]
        halves = [h for h in halves if len(h[0])]
        with ThreadPoolExecutor(len(halves)) as pool:
            results = list(pool.map(lambda h: replay_blocks(h[0], h[1], tiers=tiers, options=one,
                                                            memory_name=memory_name), halves))
        merged = results[0] if len(results) == 1 else _merge(results)
        merged.meta["kernel"] = choice.to_dict()
        return merged
    return _replay_blocks_walk(a, w, all_tiers, len(tiers), options, top, choice)


def _replay_blocks_stream(a, w, geo: Geometry, n_caches: int, options: ReplayOptions, choice: Choice) -> ReplayResult:
    chain = choice.kernel.name == "cache_stream_chain"
    bit = partition_bit(geo, n_caches) if options.threads > 1 and len(a) > 1 else None
    if chain and n_caches == 1:
        bit = None      # one tier is less work per block than splitting the stream (measured)
    sh0 = int(geo.block_bytes[0]).bit_length() - 1
    if len(a) and a.min() < 0:
        raise UsageError("addresses must be non-negative", field="addresses")
    from tierlab.engine.stream_driver import StreamReplayer

    # the chain's tag words are sized for the largest block
    r = StreamReplayer(geo, n_caches, options, chain=chain, bit=bit,
                       top_block=(int(a.max()) >> sh0) + 1 if len(a) else 1)
    r.feed(a, sh0, w)
    cnt = r.counts()
    by_kind = np.zeros((len(KINDS), len(geo.names), N_COUNTERS), np.int64)
    by_kind[KINDS.index("other")] = cnt
    return _result(geo, cnt[None].copy(), by_kind, np.zeros_like(cnt), len(a), len(a), choice, r.stats(), options)


def _replay_blocks_walk(a, w, all_tiers, n_caches, options, top, choice: Choice) -> ReplayResult:
    n = len(a)
    b0 = all_tiers[0].block_bytes
    if choice.kernel.name != "walk" and n:
        # coalesce consecutive blocks (same write flag) into one chunk each: a chunk requests each
        # of its blocks once, in order, exactly as the separate addresses did
        blk = a // b0
        brk = np.ones(n, bool)
        brk[1:] = (blk[1:] != blk[:-1] + 1) | (w[1:] != w[:-1])
        starts = np.flatnonzero(brk)
        lens = np.diff(np.append(starts, n))
        offs = blk[starts] * b0
        nbs = lens * b0
        ws = w[starts]
    else:
        offs, nbs, ws = a, np.ones(n, np.int64), w
    m = len(offs)
    zeros = np.zeros(m, np.int64)
    ones = np.ones(m, np.int64)
    top = max(top, int((offs + nbs).max()) if m else 1)

    def batches():
        step = options.batch_rows * 16
        for lo in range(0, m, step):
            hi = min(m, lo + step)
            yield (zeros[lo:hi], zeros[lo:hi], offs[lo:hi], nbs[lo:hi], ones[lo:hi], zeros[lo:hi],
                   ws[lo:hi], zeros[lo:hi])

    geo, tensors = prepare(all_tiers, [0], [top], [n_caches], [KINDS.index("other")], None, options)
    return _replay_prepared(geo, tensors, batches, 1, options, choice, None)
