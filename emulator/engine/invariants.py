"""Debug-mode checks of a replay's counts: conservation and count invariants, a violation is an error.

The engine counts every quantity separately (hits, misses, fills, bytes read and written, ...); the
accounting rules of :mod:`tierlab.engine.door` tie them together. :func:`check_result` verifies those
ties after a replay, on the whole-run counters, per op and per tensor kind, and on the end-of-run
flush, and raises :class:`InvariantError` (a :class:`~tierlab.common.errors.TierlabError`) naming the first
broken law. Nothing here runs inside compiled code; it costs a few numpy passes over the counter
arrays, so it is off by default and on under ``ReplayOptions(debug=True)`` or the environment
variable ``TIERLAB_DEBUG=1`` (always set in the test suite, see ``tests/conftest.py``).

Notation for tier ``i`` with block ``b_i`` (the request size arriving at tier ``i > 0`` is
``b_{i-1}``; at tier 0 it is ``b_0``). *Arrivals* at a tier are requests that reach it:

* arrivals_i = hits_i + misses_i + bypasses_i + writethroughs_i  (every request is exactly one of these)
* arrivals_0 = tier-0 blocks requested - blocks read in memory by a PIM unit (pim_bytes / b_0)
* arrivals_{i+1} = (misses_i - unfetched_i + bypasses_i)  [reads forwarded]
                   + (writebacks_i + writethroughs_i)     [writes forwarded]
* link(i, i+1): bytes_down = (misses_i - unfetched_i + bypasses_i) x b_i,
  bytes_up = (writebacks_i + writethroughs_i) x b_i  (so ``ReplayResult.links`` is conserved)
* bytes_read_{i+1} = (reads forwarded from i - bypasses_{i+1}) x b_i + writebacks_{i+1} x b_{i+1}
* bytes_written_{i+1} = (writes forwarded from i - writethroughs_{i+1}) x b_i
                        + (fills_{i+1} - unfetched_{i+1}) x b_{i+1}
* fills = misses, unfetched <= misses, writebacks <= evictions + back_invalidations,
  evictions + back_invalidations <= fills (whole run), resident blocks (fills - evictions -
  back_invalidations) fit the tier's emulated slots, and a tier that does not cache has no
  misses, fills, evictions or back-invalidations; the farthest tier only ever hits (every tensor
  has a home)
* back_invalidations_j <= sum over k > j of evictions_k x block_k / block_j (inclusive mode: each
  eviction at k drops at most its block's worth of tier-j blocks; zero otherwise)
* per-op rows and per-kind rows each sum to the whole-run counters; nothing is negative

Attribution keeps a request's consequences in the row of the op that issued it and the kind of
the block it concerns, so the arrival laws also hold row by row and kind by kind.
"""

from __future__ import annotations

import os

import numpy as np

from tierlab.engine.counters import (
    BACK_INVALIDATIONS,
    BYPASSES,
    BYTES_READ,
    BYTES_WRITTEN,
    EVICTIONS,
    FILLS,
    HITS,
    MISSES,
    PIM_BYTES,
    TIER_COUNTERS,
    UNFETCHED,
    WRITEBACKS,
    WRITETHROUGHS,
    ReplayResult,
)
from tierlab.common.errors import TierlabError

DEBUG_ENV = "TIERLAB_DEBUG"


class InvariantError(TierlabError):
    """A replay's counts break a conservation or count law: a bug in tierlab, never bad input."""


def debug_from_env() -> bool:
    """True when ``TIERLAB_DEBUG`` is set to something other than ``""``, ``0``, ``false`` or ``no``."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def _fail(where: str, law: str, idx=None) -> InvariantError:
    at = "" if idx is None else f" (first at index {tuple(int(x) for x in idx)})"
    return InvariantError(f"{law} is violated{at}; this is a tierlab bug, please report it",
                          field=f"invariant {where}")


def _require(ok: np.ndarray | bool, where: str, law: str) -> None:
    ok = np.asarray(ok)
    if not ok.all():
        raise _fail(where, law, np.argwhere(~ok)[0] if ok.ndim else None)


def _tier_laws(c: np.ndarray, blk: np.ndarray, where: str) -> None:
    """Laws that hold for any stack of per-tier counter rows ``c[..., tier, counter]``."""
    _require(c >= 0, where, "every counter >= 0")
    hits, misses, byp, wt = c[..., HITS], c[..., MISSES], c[..., BYPASSES], c[..., WRITETHROUGHS]
    fills, unf, ev, wb = c[..., FILLS], c[..., UNFETCHED], c[..., EVICTIONS], c[..., WRITEBACKS]
    _require(fills == misses, where, "fills = misses")
    _require(unf <= misses, where, "unfetched <= misses")
    n = c.shape[-2]
    if n < 2:
        return
    # each eviction at k drops at most block_k / block_j blocks of every nearer tier j
    binv = c[..., BACK_INVALIDATIONS]
    for j in range(n - 1):
        bound = sum(ev[..., k] * (int(blk[k]) // int(blk[j])) for k in range(j + 1, n))
        _require(binv[..., j] <= bound, where,
                 "back_invalidations(j) <= sum over farther tiers k of evictions(k) x block(k) / block(j)")
    _require(binv[..., n - 1] == 0, where, "the farthest tier back-invalidates nothing")
    reads_fwd = misses[..., :-1] - unf[..., :-1] + byp[..., :-1]
    writes_fwd = wb[..., :-1] + wt[..., :-1]
    arrivals = hits + misses + byp + wt
    _require(arrivals[..., 1:] == reads_fwd + writes_fwd, where,
             "requests arriving at tier i+1 = reads and writes forwarded by tier i")
    b_up, b_here = blk[:-1], blk[1:]
    _require(c[..., 1:, BYTES_READ] == (reads_fwd - byp[..., 1:]) * b_up + wb[..., 1:] * b_here, where,
             "bytes_read(i+1) = (reads from i - bypasses) x block(i) + writebacks x block(i+1)")
    _require(c[..., 1:, BYTES_WRITTEN] == (writes_fwd - wt[..., 1:]) * b_up + (fills[..., 1:] - unf[..., 1:]) * b_here,
             where, "bytes_written(i+1) = (writes from i - writethroughs) x block(i) + fetched fills x block(i+1)")
    last = c[..., -1, :]
    _require((last[..., MISSES] == 0) & (last[..., BYPASSES] == 0) & (last[..., WRITETHROUGHS] == 0), where,
             "the farthest tier only hits (every tensor has a home)")


def check_result(result: ReplayResult, *, expected_accesses: int | None = None) -> None:
    """Raise :class:`InvariantError` if ``result`` breaks any law listed in the module docstring.

    ``expected_accesses``: the trace's access row count, when known (all must have been replayed).
    """
    blk = np.asarray(result.block_bytes, np.int64)
    tiers, per_op, by_kind, fl = (np.asarray(a, np.int64) for a in
                                  (result.tiers, result.per_op, result.by_kind, result.flush))
    n_tiers = len(result.tier_names)
    if tiers.shape != (n_tiers, len(TIER_COUNTERS)) or blk.shape != (n_tiers,):
        raise _fail("shape", f"counters shaped {tiers.shape} for {n_tiers} tiers")
    _require(per_op.sum(axis=0) == tiers, "per_op", "per-op counters sum to the whole-run counters")
    _require(by_kind.sum(axis=0) == tiers, "by_kind", "per-kind counters sum to the whole-run counters")
    _tier_laws(tiers, blk, "tiers")
    _tier_laws(per_op, blk, "per_op")
    _tier_laws(by_kind, blk, "by_kind")
    _tier_laws(fl, blk, "flush")

    # whole run: what compute asked for arrived at tier 0 or was read in memory by a PIM unit
    b0 = int(blk[0])
    pim_bytes = int(tiers[:, PIM_BYTES].sum())
    _require(pim_bytes % b0 == 0, "tiers", "pim_bytes is a whole number of tier-0 blocks")
    arrivals0 = int(tiers[0, HITS] + tiers[0, MISSES] + tiers[0, BYPASSES] + tiers[0, WRITETHROUGHS])
    _require(arrivals0 + pim_bytes // b0 == int(result.n_blocks), "tiers",
             "tier-0 requests + PIM-read blocks = tier-0 blocks the accesses touch")
    _require(fl[0, HITS] + fl[0, MISSES] + fl[0, BYPASSES] + fl[0, WRITETHROUGHS] == 0, "flush",
             "the flush issues no request at tier 0")
    binv = tiers[:, BACK_INVALIDATIONS]
    _require(tiers[:, WRITEBACKS] <= tiers[:, EVICTIONS] + binv, "tiers",
             "writebacks <= evictions + back_invalidations")
    _require(tiers[:, EVICTIONS] + binv <= tiers[:, FILLS], "tiers", "evictions <= fills - back_invalidations")
    _require(per_op[:, :, EVICTIONS] <= per_op[:, :, FILLS], "per_op", "evictions <= fills (per op)")
    _require(by_kind[:, :, WRITEBACKS] <= by_kind[:, :, EVICTIONS] + by_kind[:, :, BACK_INVALIDATIONS], "by_kind",
             "writebacks <= evictions + back_invalidations (per kind)")
    geo = result.meta.get("geometry") if isinstance(result.meta, dict) else None
    if geo:
        caching = np.asarray(geo["caching"], bool)
        slots = np.asarray(geo["n_sets"], np.int64) * np.asarray(geo["n_ways"], np.int64)
        resident = tiers[:, FILLS] - tiers[:, EVICTIONS] - binv
        _require(resident <= np.where(caching, slots, 0), "tiers",
                 "resident blocks (fills - evictions - back_invalidations) fit the tier's slots; "
                 "a non-caching tier fills nothing")
        _require(caching | ((tiers[:, MISSES] == 0) & (tiers[:, EVICTIONS] == 0) & (binv == 0)), "tiers",
                 "a tier that does not cache has no misses, evictions or back-invalidations")
    if expected_accesses is not None:
        _require(int(result.n_accesses) == int(expected_accesses), "n_accesses",
                 f"every access replayed ({result.n_accesses} of {expected_accesses})")
