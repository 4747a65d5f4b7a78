"""Inclusive caching: a caching tier's eviction back-invalidates the nearer caching tiers' copies.

Called from the walk (:mod:`tierlab.engine.walk`) when ``Rules.inclusive`` holds with two or more
caching tiers; the rules are in ``docs/design.md`` (accounting: inclusive).
"""

from __future__ import annotations

import numpy as np

from tierlab.engine.counters import (
    BACK_INVALIDATIONS,
    BYTES_READ,
    BYTES_WRITTEN,
    HITS,
    WRITEBACKS,
    WRITETHROUGHS,
)
from tierlab.engine.jit import helper, njit
from tierlab.engine.state import MODE_CACHE, TI_DIRTY_FAR, TI_SET_MASK, TI_SHIFT


@njit(nogil=True)
def back_invalidate(k, v, row, cnt, t_home, t_kind, blk, n_sets, n_ways, mode, slot_off,
                    tag, dirty, owner, tinfo):
    """Inclusive mode: caching tier ``k`` evicts its block ``v``; nearer caching tiers drop theirs inside it.

    Tiers are visited nearest first. Each valid tier-j block inside ``v`` is invalidated (a
    ``back_invalidations`` at tier j, attributed to row ``row`` and the block's tensor kind); a dirty
    one is written back first (a writeback at tier j, ``block_j`` bytes read there): the write crosses
    any pass-through tiers as writethroughs and arrives at the next caching tier as a write hit
    (request size counted as bytes written, the block marked dirty, no replacement update; that block
    is itself about to be dropped, or is ``v``, which then writes back as dirty).
    """
    sh_k = tinfo[k, TI_SHIFT]
    for j in range(k):
        if mode[j] != MODE_CACHE:
            continue
        sh_j = tinfo[j, TI_SHIFT]
        d = sh_k - sh_j
        W = n_ways[j]
        S = n_sets[j]
        smask = tinfo[j, TI_SET_MASK]
        n_sub = np.int64(1) << d
        if n_sub <= S:
            # look each sub-block up in its set
            for u in range(v << d, (v << d) + n_sub):
                s = (u & smask) if smask >= 0 else (u % S)
                base = slot_off[j] + s * W
                for x in range(W):
                    if tag[base + x] == u:
                        _drop_block(j, base + x, row, cnt, t_home, t_kind, blk, n_sets, n_ways, mode,
                                    slot_off, tag, dirty, owner, tinfo)
                        break
        else:
            # fewer slots than sub-blocks: scan the tier
            for slot in range(slot_off[j], slot_off[j] + S * W):
                if tag[slot] >= 0 and (tag[slot] >> d) == v:
                    _drop_block(j, slot, row, cnt, t_home, t_kind, blk, n_sets, n_ways, mode,
                                slot_off, tag, dirty, owner, tinfo)


@helper
def _drop_block(j, slot, row, cnt, t_home, t_kind, blk, n_sets, n_ways, mode, slot_off,
                tag, dirty, owner, tinfo):
    """Back-invalidate the block in ``slot`` of tier ``j`` (see :func:`back_invalidate`)."""
    t = owner[slot]
    kd = t_kind[t]
    cnt[row, kd, j, BACK_INVALIDATIONS] += 1
    if dirty[slot]:
        if t_home[t] != j + 1:
            tinfo[j, TI_DIRTY_FAR] -= 1
        cnt[row, kd, j, WRITEBACKS] += 1
        cnt[row, kd, j, BYTES_READ] += blk[j]
        addr = tag[slot] << tinfo[j, TI_SHIFT]
        p = j + 1
        while mode[p] != MODE_CACHE:
            cnt[row, kd, p, WRITETHROUGHS] += 1
            p += 1
        cnt[row, kd, p, HITS] += 1
        cnt[row, kd, p, BYTES_WRITTEN] += blk[p - 1]
        b = addr >> tinfo[p, TI_SHIFT]
        smask = tinfo[p, TI_SET_MASK]
        W = n_ways[p]
        s = (b & smask) if smask >= 0 else (b % n_sets[p])
        base = slot_off[p] + s * W
        found = False
        for x in range(W):
            if tag[base + x] == b:
                if dirty[base + x] == 0 and t_home[t] != p + 1:
                    tinfo[p, TI_DIRTY_FAR] += 1
                dirty[base + x] = 1
                found = True
                break
        if not found:
            raise RuntimeError("inclusion broken: a back-invalidated block is missing from the next caching tier")
    tag[slot] = -1
    dirty[slot] = 0
