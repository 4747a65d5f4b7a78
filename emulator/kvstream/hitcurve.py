"""The prefix cache's hit curve of a request stream (Mooncake FAST'25 Figure 9, for any trace).

Semantics (what every policy and the tests' plain replays implement)
--------------------------------------------------------------------
Requests are taken in arrival order through one cache of ``C`` blocks (``capacity_tokens //
block_tokens``), empty at the start. For each request with blocks ``b_0 .. b_{n-1}``:

1. it hits the longest run ``b_0 .. b_{k-1}`` of its leading blocks present in the cache;
2. then all its blocks are touched or inserted in order (a miss always fills; a full cache first
   evicts per the policy: LRU the least recently touched, FIFO the first inserted, OPT the block
   whose next access in the block stream is farthest, Belady's MIN without bypass);
3. its hit tokens are ``min(k x block_tokens, input_tokens)`` (the trailing partial block counts
   its own tokens); its hit blocks are ``k``.

``hit_ratio_tokens`` = hit tokens / input tokens, ``hit_ratio_blocks`` = hit blocks / blocks, summed
over all requests. ``max_hit_ratio_tokens`` is the infinite cache: a block hits iff it was seen in
an earlier request (or earlier in the same one) and every block before it in the request did too.

LRU at every capacity in one pass
---------------------------------
The block stream (all requests' blocks in order) goes once through the analysis room's
fully-associative stack-distance machine (:class:`tierlab.analysis.mrc.LruDistances`), which
gives each access ``j`` its LRU stack distance ``D_j`` measured *when it is accessed*, i.e. after
the request's earlier blocks were touched (``COLD_DISTANCE`` for a first access: infinite).
Per request, ``R_j = max(D_0 .. D_j)``; then at capacity ``C`` the request hits ``k(C) = #{j :
R_j < C}`` blocks, so one weighted histogram of all ``R`` gives every capacity at once.

Why the running maximum of the sequential distances ``D`` equals the maximum of the distances
``S`` measured at the request's start (so this is rule 1 and not "hit per access"): fix any
``C``. LRU is a stack algorithm, so a block is held by the cache of ``C`` blocks iff its distance
is ``< C``. Suppose ``b_0 .. b_{j-1}`` all hit as they are accessed. A hit evicts nothing and
inserts nothing, so the *set* of held blocks when ``b_j`` is accessed is the set at the request's
start; hence ``D_j < C`` iff ``S_j < C``. By induction on ``j``: ``max(D_0..D_j) < C`` iff
``max(S_0..S_j) < C``. Both maxima are below the same capacities ``C``, for every ``C``, so they
are equal. (The same argument holds for any policy that only evicts on a miss, which is why
FIFO and OPT below just count each request's leading run of hits.)

FIFO and OPT are not stack algorithms: one exact replay per capacity through
:mod:`tierlab.kvstream.blockstore` (O(1) per block for FIFO, a heap for OPT), capacities spread over the
cores (the kernels release the GIL).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.analysis.mrc import COLD_DISTANCE, LruDistances
from tierlab.analysis.mrc_opt import next_use_positions
from tierlab.engine.jit import njit
from tierlab.kvstream.blockstore import lru_prefix_replay, opt_prefix_replay, POLICIES
from tierlab.kvstream.trace import RequestTrace

__all__ = ["hit_curve", "HitCurve", "default_capacities_blocks"]


@njit(nogil=True)
def _running_max(offsets, dist):
    """Per request (CSR ``offsets``), the running maximum of ``dist`` along its blocks."""
    out = np.empty(dist.shape[0], np.int64)
    for r in range(offsets.shape[0] - 1):
        m = -1
        for j in range(offsets[r], offsets[r + 1]):
            if dist[j] > m:
                m = dist[j]
            out[j] = m
    return out


def default_capacities_blocks(unique_blocks: int, points: int = 24) -> np.ndarray:
    """About ``points`` log-spaced capacities from 1 block to every distinct block."""
    if unique_blocks < 1:
        return np.array([1], np.int64)
    return np.unique(np.round(np.geomspace(1, unique_blocks, points)).astype(np.int64))


@dataclass(frozen=True)
class HitCurve:
    """Prefix hits of a request stream at several capacities (see the module docstring).

    ``capacities_tokens[i]`` holds ``capacities_blocks[i] = capacities_tokens[i] // block_tokens``
    blocks and hits ``hit_tokens[i]`` tokens in ``hit_blocks[i]`` blocks; ``max_hit_tokens`` and
    ``max_hit_blocks`` are the infinite cache's.
    """

    policy: str
    block_tokens: int
    capacities_tokens: np.ndarray
    capacities_blocks: np.ndarray
    hit_tokens: np.ndarray
    hit_blocks: np.ndarray
    max_hit_tokens: int
    max_hit_blocks: int
    requests: int
    input_tokens: int
    total_blocks: int
    unique_blocks: int

    def to_dict(self) -> dict:
        """The ``tierlab mrc REQUESTS --json`` document (keys stable)."""
        tok = max(self.input_tokens, 1)
        blk = max(self.total_blocks, 1)
        return {
            "curve": [{"capacity_tokens": int(c), "hit_ratio_tokens": float(t) / tok,
                       "hit_ratio_blocks": float(b) / blk}
                      for c, t, b in zip(self.capacities_tokens, self.hit_tokens, self.hit_blocks)],
            "max_hit_ratio_tokens": self.max_hit_tokens / tok,
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "unique_blocks": self.unique_blocks,
            "block_tokens": self.block_tokens,
            "policy": self.policy,
        }


def _capacities(capacities_tokens, block_tokens: int, unique_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    if capacities_tokens is None:
        blocks = default_capacities_blocks(unique_blocks)
        return blocks * block_tokens, blocks
    caps = np.atleast_1d(np.asarray(capacities_tokens, dtype=np.float64))
    if caps.ndim != 1 or caps.size == 0 or not np.all(np.isfinite(caps)) or np.any(caps <= 0) \
            or np.any(caps != np.floor(caps)):
        raise UsageError(f"capacities must be whole numbers of tokens > 0, got {list(np.atleast_1d(capacities_tokens))}",
                         field="capacity")
    caps = caps.astype(np.int64)
    return caps, caps // block_tokens


def hit_curve(trace: RequestTrace, *, capacities_tokens=None, policy: str = "lru",
              workers: int | None = None) -> HitCurve:
    """The prefix cache's hit curve of ``trace``.

    Parameters
    ----------
    trace : RequestTrace
        The requests (a trace without hash ids gets a fresh block per block of prompt: no reuse).
    capacities_tokens : sequence of int, optional
        Cache capacities in tokens (each holds ``capacity // block_tokens`` blocks). Default: about
        24 log-spaced points from one block to every distinct block.
    policy : {"lru", "fifo", "opt"}
        LRU in one pass at every capacity; FIFO and OPT one exact replay per capacity.
    workers : int, optional
        Threads for FIFO/OPT replays (default: every core).

    Returns
    -------
    HitCurve
    """
    if policy not in POLICIES:
        raise UsageError(f"unknown policy {policy!r}; expected lru, fifo or opt", field="policy")
    trace = trace.with_unique_blocks()
    bt = trace.block_tokens
    U = trace.n_unique_blocks
    offsets, blocks = trace.block_offsets, trace.blocks
    weights = trace.block_token_counts()
    caps_tok, caps_blk = _capacities(capacities_tokens, bt, U)

    if policy == "lru":
        dist = np.empty(blocks.shape[0], np.int64)
        acc = LruDistances()
        acc.update(blocks, distances=dist)
        run = _running_max(offsets, dist)
        warm = run != COLD_DISTANCE
        counts = np.bincount(run[warm], minlength=U + 1)
        tokens = np.bincount(run[warm], weights=weights[warm], minlength=U + 1)
        cum_b = np.concatenate([[0], np.cumsum(counts)])            # cum[c] = hits with R < c
        cum_t = np.concatenate([[0], np.cumsum(tokens)])
        at = np.minimum(caps_blk, U + 1)
        hit_b, hit_t = cum_b[at].astype(np.int64), np.rint(cum_t[at]).astype(np.int64)
        max_b, max_t = int(cum_b[-1]), int(round(cum_t[-1]))
    else:
        nxt = next_use_positions(blocks, U) if policy == "opt" else None

        def one(c: int) -> tuple[int, int]:
            c = min(int(c), max(U, 1))                                # >= every distinct block: never evicts
            if c < 1:
                return 0, 0
            if policy == "opt":
                return opt_prefix_replay(offsets, blocks, nxt, weights, U, c)
            return lru_prefix_replay(offsets, blocks, weights, U, c, POLICIES[policy])

        todo = [int(c) for c in caps_blk] + [max(U, 1)]
        n_workers = max(1, min(len(todo), workers or os.cpu_count() or 1))
        with ThreadPoolExecutor(n_workers) as pool:
            res = list(pool.map(one, todo))
        hit_b = np.array([r[0] for r in res[:-1]], np.int64)
        hit_t = np.array([r[1] for r in res[:-1]], np.int64)
        max_b, max_t = int(res[-1][0]), int(res[-1][1])
    return HitCurve(policy, bt, caps_tok, caps_blk, hit_t, hit_b, max_t, max_b, len(trace),
                    int(trace.input_tokens.sum()), int(blocks.shape[0]), U)
