"""Counter names and indices, and the container that names a replay's results.

The engine fills plain ``int64`` arrays indexed ``[..., tier, counter]``; this module is the one place
that says what each index means. Link counters are not counted separately: they follow exactly from
the tier above (see :func:`link_bytes`), which is the conservation law the tests check.

Per tier (counts are in requests, bytes in bytes):

``hits``
    requests found at the tier: a lookup hit in a cache (or lent) tier, or any request reaching the
    tensor's home tier (the home always holds it).
``misses``
    cache/lent-tier lookups that did not find the block (each fills one block).
``bypasses``
    read requests that passed through a tier that is neither the tensor's home nor caching it
    (a scratchpad or non-lending memory tier): a miss that fills nothing; the link below carries the block.
``fills``
    blocks installed (one per miss).
``evictions``
    valid blocks displaced by a fill.
``writebacks``
    dirty evictions (and, inclusive, dirty back-invalidations): each writes the tier's block to the
    next tier.
``writethroughs``
    write requests that passed through a non-caching tier to the next one.
``unfetched``
    misses whose fetch was skipped (a write covering the whole block with
    ``fetch_on_write_miss``/``fetch_on_writeback_miss`` off); these move nothing down the link.
``bytes_read``
    bytes served upward (request size on read hits, home hits and misses) plus bytes read out
    for writebacks (the tier's block each).
``bytes_written``
    bytes filled from below (the tier's block per fetched fill) plus bytes written into it by
    write requests (the request size).
``pim_bytes``
    bytes read inside the tier by a processing-in-memory unit (issue 5); these cross no link.
``back_invalidations``
    inclusive mode only: valid blocks this tier dropped because a farther caching tier evicted the
    block containing them (a dirty one is also a writeback).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TIER_COUNTERS = (
    "hits",
    "misses",
    "bypasses",
    "fills",
    "evictions",
    "writebacks",
    "writethroughs",
    "unfetched",
    "bytes_read",
    "bytes_written",
    "pim_bytes",
    "back_invalidations",
)
C = {name: i for i, name in enumerate(TIER_COUNTERS)}
N_COUNTERS = len(TIER_COUNTERS)

HITS, MISSES, BYPASSES, FILLS, EVICTIONS, WRITEBACKS, WRITETHROUGHS, UNFETCHED = range(8)
BYTES_READ, BYTES_WRITTEN, PIM_BYTES, BACK_INVALIDATIONS = range(8, 12)

LINK_COUNTERS = ("bytes_down", "bytes_up")


def link_bytes(tier_counts: np.ndarray, block_bytes: np.ndarray) -> np.ndarray:
    """Bytes on each link from the counters of the tier above it (exact, by construction).

    ``tier_counts[..., tier, counter]`` -> ``[..., link, 2]`` with ``link = tier`` for the link
    between tier ``i`` and ``i + 1``: ``bytes_down = (misses - unfetched + bypasses) * block_i``,
    ``bytes_up = (writebacks + writethroughs) * block_i``.
    """
    t = np.asarray(tier_counts, dtype=np.int64)
    blk = np.asarray(block_bytes, dtype=np.int64)
    n_links = t.shape[-2] - 1
    out = np.zeros(t.shape[:-2] + (n_links, 2), dtype=np.int64)
    b = blk[:n_links]
    down = t[..., :n_links, MISSES] - t[..., :n_links, UNFETCHED] + t[..., :n_links, BYPASSES]
    up = t[..., :n_links, WRITEBACKS] + t[..., :n_links, WRITETHROUGHS]
    out[..., 0] = down * b
    out[..., 1] = up * b
    return out


def tier_dict(row: np.ndarray) -> dict[str, int]:
    """One tier's counter row as a name -> int dict."""
    return {name: int(row[i]) for i, name in enumerate(TIER_COUNTERS)}


@dataclass
class ReplayResult:
    """Counts of one replay, named.

    ``tiers[t, c]``: whole-run counters per tier (``c`` indexes :data:`TIER_COUNTERS`), excluding the
    end-of-run flush, which is ``flush[t, c]`` (zero unless the flush option was on).
    ``by_kind[k, t, c]``: the same split by tensor kind (``kinds[k]``; requests caused by a writeback
    are attributed to the kind of the evicted block's tensor).
    ``per_op[o, t, c]``: per op id (row ``o`` is op id ``o``); sums to ``tiers``.
    ``tier_names``, ``block_bytes``: the hierarchy replayed (tier order, transfer unit per tier).
    """

    tier_names: tuple[str, ...]
    block_bytes: np.ndarray
    kinds: tuple[str, ...]
    tiers: np.ndarray
    by_kind: np.ndarray
    per_op: np.ndarray
    flush: np.ndarray
    n_accesses: int = 0
    n_blocks: int = 0
    meta: dict = field(default_factory=dict)

    @property
    def links(self) -> np.ndarray:
        """``[link, (bytes_down, bytes_up)]`` for the whole run (flush excluded)."""
        return link_bytes(self.tiers, self.block_bytes)

    @property
    def flush_links(self) -> np.ndarray:
        return link_bytes(self.flush, self.block_bytes)

    def tier(self, name: str) -> dict[str, int]:
        return tier_dict(self.tiers[self.tier_names.index(name)])

    def counter(self, name: str) -> np.ndarray:
        """One counter for every tier, as an int64 array."""
        return self.tiers[:, C[name]].copy()
