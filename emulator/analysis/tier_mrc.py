"""Exact miss-ratio curves of one tier of a chip, from a trace, in one pass (``tierlab mrc``).

The tier sees the trace's accesses at its own block size, in issue order (loads and stores alike:
with write-allocate and store-hit recency update, the replay's defaults, both are references to the
LRU stack). Accesses to tensors homed in a nearer tier never reach it and are left out (placement
as the replay computes it); tensors homed in the tier itself are kept, so for a scratchpad or
memory tier the curve answers "what if this capacity were a cache of everything reaching it".
Nearer *cache* tiers are not simulated: the curve is that of the tier as the first cache of the
traffic that reaches its level. Every row is exact; OPT is fully associative Belady MIN.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from tierlab.analysis.mrc import LruDistances, SetLruDistances
from tierlab.analysis.mrc_opt import opt_misses
from tierlab.chip.placement import place
from tierlab.engine.blocks import BlockExpander, tensor_addresses
from tierlab.common.errors import UsageError

DEFAULT_OPT_LIMIT_BLOCKS = 1 << 24   # OPT holds the stream in memory: ~24 bytes per block access


def _default_rows(tier, max_ways: int | None) -> list[int]:
    if tier.ways is None:                           # powers of two around the tier's capacity
        cap = tier.capacity_bytes
        top = 1 << (4 * cap - 1).bit_length()
        caps = {1 << k for k in range(top.bit_length()) if cap // 1024 <= 1 << k <= 4 * cap} | {cap}
        return sorted(c for c in caps if c >= tier.block_bytes and c % tier.block_bytes == 0)
    unit = tier.n_sets * tier.block_bytes
    ways = {1 << k for k in range(max_ways.bit_length()) if 1 << k <= max_ways} | {tier.ways}
    return sorted(w * unit for w in ways)


def tier_mrc(trace, chip, tier_name: str, *, sizes=(), max_ways: int | None = None, opt: bool | None = None,
             opt_limit_blocks: int = DEFAULT_OPT_LIMIT_BLOCKS, progress: Callable[[int], None] | None = None):
    """Miss ratios of tier ``tier_name`` of ``chip`` at every row capacity.

    Returns ``(result, curves)``: a JSON-able dict (the ``--json`` output) and the curve objects
    ``(fully-associative MissRatioCurve, per-set MissRatioCurve or None, {capacity: OPT misses})``.

    ``opt``: True computes the fully-associative OPT misses of every row (an error if the stream
    is longer than ``opt_limit_blocks``), False skips it, None computes it when the stream fits.
    ``max_ways`` (set-associative tiers) bounds the per-set curve; default twice the tier's ways.
    ``progress(n)`` is called after each batch of ``n`` access rows (of ``trace.n_accesses``).
    """
    names = [t.name for t in chip.tiers]
    if tier_name not in names:
        raise UsageError(f"unknown tier {tier_name!r}; chip {chip.name} has {', '.join(names)}", field="tier")
    idx = names.index(tier_name)
    tier = chip.tiers[idx]
    include = None
    if idx > 0:
        include = place(chip, trace.tensors, align_bytes=trace.alignment or 1).home >= idx
    n_sets = None if tier.ways is None else tier.n_sets
    if n_sets is not None:
        max_ways = max_ways or 2 * tier.ways
    rows = sorted(set(sizes) or set(_default_rows(tier, max_ways)))
    for c in rows:
        if c <= 0 or c % tier.block_bytes:
            raise UsageError(f"size {c} B is not a positive multiple of the {tier.block_bytes} B block",
                             field="sizes")

    # the fully-associative curve tracks only as deep as the largest row: memory stays bounded by
    # that capacity, not by the trace's footprint (a model's weights are ~10^8 distinct blocks)
    limit_blocks = max(max(rows), tier.capacity_bytes) // tier.block_bytes
    full = LruDistances(limit=limit_blocks)
    per_set = SetLruDistances(n_sets, max_ways) if n_sets is not None else None
    kept, opt_note = [], None
    expander = BlockExpander(tensor_addresses(trace.tensors), tier.block_bytes, include=include)
    if opt is not False:                            # descriptors are coarse: counting blocks is cheap
        total = sum(expander.count(*(batch.column(c).to_numpy(zero_copy_only=False) for c in
                                     ("tensor_id", "offset", "nbytes", "count", "stride")))
                    for batch in trace.iter_accesses(1 << 18))
        if total > opt_limit_blocks:
            if opt:
                raise UsageError(f"OPT needs the whole stream in memory: {total} blocks exceed --opt-limit "
                                 f"{opt_limit_blocks} (raise it or pass --no-opt)", field="opt")
            kept, opt_note = None, f"OPT skipped: {total} blocks exceed --opt-limit {opt_limit_blocks}"

    # the two curves are independent and their kernels release the GIL: the per-set one runs on
    # a second core while this thread computes the fully-associative one
    with ThreadPoolExecutor(1) as pool:
        for batch in trace.iter_accesses(1 << 18):
            # a trace's batch can be tens of seconds of curve (a model's weights, ~10^8 blocks):
            # the bar moves with each expanded chunk, by the batch's rows in proportion to its blocks
            in_batch = expander.count(*(batch.column(c).to_numpy(zero_copy_only=False) for c in
                                        ("tensor_id", "offset", "nbytes", "count", "stride"))) \
                if progress is not None else 0
            done_blocks = done_rows = 0
            for blocks, _ in expander.expand_batch(batch):
                other = pool.submit(per_set.update, blocks) if per_set is not None else None
                full.update(blocks)
                if other is not None:
                    other.result()
                if opt is not False and kept is not None:
                    kept.append(blocks.copy())
                if progress is not None and in_batch:
                    done_blocks += len(blocks)
                    upto = batch.num_rows * min(done_blocks, in_batch) // in_batch
                    if upto > done_rows:
                        progress(upto - done_rows)
                        done_rows = upto
            if progress is not None and batch.num_rows > done_rows:
                progress(batch.num_rows - done_rows)

    curve = full.curve(tier.block_bytes)
    set_curve = per_set.curve(tier.block_bytes) if per_set is not None else None
    opt_by_row: dict[int, int] = {}
    if opt is False:
        opt_note = "not computed (--no-opt)"
    elif kept is not None:
        stream = np.concatenate(kept) if kept else np.empty(0, np.int64)
        got = opt_misses(stream, [c // tier.block_bytes for c in rows])
        opt_by_row = {c: got[c // tier.block_bytes] for c in rows}
        opt_note = "OPT = Belady MIN, fully associative, no bypass"

    n = curve.accesses

    def ratio(m):
        return None if m is None else (m / n if n else 0.0)

    out_rows = []
    for c in rows:
        set_m = None
        if set_curve is not None:
            unit = n_sets * tier.block_bytes
            if c % unit == 0 and c // unit <= max_ways:
                set_m = set_curve.misses(c)
        lru_m = curve.misses(c)
        out_rows.append({
            "capacity_bytes": c,
            "lru_misses": lru_m, "lru_miss_ratio": ratio(lru_m),
            "set_lru_misses": set_m, "set_lru_miss_ratio": ratio(set_m),
            "opt_misses": opt_by_row.get(c), "opt_miss_ratio": ratio(opt_by_row.get(c)),
        })
    return {
        "trace": str(trace.path), "chip": chip.name, "tier": tier.name, "tier_index": idx,
        "tier_capacity_bytes": tier.capacity_bytes, "block_bytes": tier.block_bytes,
        "ways": tier.ways, "n_sets": n_sets, "max_ways": max_ways,
        "accesses": n, "tracked_blocks": limit_blocks,
        "distinct_blocks": curve.cold_misses,       # None when more than tracked_blocks
        "footprint_bytes": None if curve.cold_misses is None else curve.cold_misses * tier.block_bytes,
        "rows": out_rows, "opt": opt_note,
        "stream": ("every access" if idx == 0 else
                   f"accesses to tensors homed at or beyond {tier.name}; nearer tiers not simulated"),
    }, (curve, set_curve, opt_by_row)
