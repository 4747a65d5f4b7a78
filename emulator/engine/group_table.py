"""The set-group table of :mod:`tierlab.engine.setgroups`: its state arrays and the operations on them.

Groups are runs of sets ``[grp_lo[k], grp_lo[k + 1])`` that hold alike; each group's entries are one
row of ``ent`` (``grp_row[k]``), rows come from a free stack, and ``st`` keeps the counts below.
Finding the group of a set, cutting a group, merging neighbours left alike and growing the row pool
are the four operations the replay needs.
"""

from __future__ import annotations

import numpy as np

from tierlab.engine.jit import helper, njit

EMPTY = -1
# ``st`` (int64): groups, rows on the free stack, requests served, growths of the row pool, the
# most groups held at once, chunks served as sweeps (a chunk that resets every set, tierlab.engine.setgroups)
ST_K, ST_FREE, ST_REQUESTS, ST_GROWN, ST_K_MAX, ST_SWEEPS = range(6)
N_ST = 6


def new_state(n_sets: int, n_ways: int, rows: int = 64):
    """Group state of an empty tier: one group of every set, its ``n_ways`` entries empty."""
    rows = max(rows, 8)
    grp_lo = np.zeros(n_sets + 2, np.int64)
    grp_row = np.zeros(n_sets + 1, np.int64)
    grp_lo[1] = n_sets
    ent = np.full((3, rows * n_ways), EMPTY, np.int64)
    ent[1:] = 0
    free = np.zeros(rows, np.int64)
    free[:rows - 1] = np.arange(rows - 1, 0, -1)          # a stack of rows; row 0 is group 0's
    st = np.zeros(N_ST, np.int64)
    st[ST_K] = 1
    st[ST_K_MAX] = 1
    st[ST_FREE] = rows - 1
    return grp_lo, grp_row, ent, free, st


@helper
def find_group(grp_lo, K, s):
    """The group holding set ``s`` (the last ``k`` with ``grp_lo[k] <= s``)."""
    lo = 0
    hi = K - 1
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if grp_lo[mid] <= s:
            lo = mid
        else:
            hi = mid - 1
    return lo


@helper
def split_group(k, s, grp_lo, grp_row, ent, free, st, W):
    """Cut group ``k`` at set ``s`` (inside it): the sets from ``s`` on become group ``k + 1``."""
    K = st[ST_K]
    st[ST_FREE] -= 1
    r = free[st[ST_FREE]]
    src = grp_row[k] * W
    dst = r * W
    for f in range(3):
        for e in range(W):
            ent[f, dst + e] = ent[f, src + e]
    for x in range(K, k, -1):           # one array a loop: each a plain move LLVM can vectorise
        grp_lo[x + 1] = grp_lo[x]
    for x in range(K, k, -1):
        grp_row[x] = grp_row[x - 1]
    grp_lo[k + 1] = s
    grp_row[k + 1] = r
    st[ST_K] = K + 1
    if K + 1 > st[ST_K_MAX]:
        st[ST_K_MAX] = K + 1


@helper
def same_rows(ent, ra, rb, W):
    for f in range(3):
        for e in range(W):
            if ent[f, ra + e] != ent[f, rb + e]:
                return False
    return True


@njit(nogil=True)
def merge_groups(k_lo, k_hi, grp_lo, grp_row, ent, free, st, W):
    """Merge each group in ``k_lo..k_hi`` (clipped) with the next one when they hold alike.

    One pass: the groups kept are compacted in place and the groups after ``k_hi`` moved down once,
    O(K) for any number of merges (one move of every later group per merge was O(merges x K): a
    chunk over many groups leaves them alike, and a cache of 125,000 sets holds thousands)."""
    K = st[ST_K]
    k = max(k_lo, 0)
    last = min(k_hi, K - 1)         # the last group that may join the one before it
    if k >= last:
        return
    w = k                           # the group the next ones are compared with (kept)
    for j in range(k + 1, last + 1):
        if same_rows(ent, grp_row[w] * W, grp_row[j] * W, W):
            free[st[ST_FREE]] = grp_row[j]
            st[ST_FREE] += 1
        else:
            w += 1
            grp_lo[w] = grp_lo[j]
            grp_row[w] = grp_row[j]
    gone = last - w
    if gone == 0:
        return
    for j in range(last + 1, K):
        grp_lo[j - gone] = grp_lo[j]
    for j in range(last + 1, K):
        grp_row[j - gone] = grp_row[j]
    for j in range(K - gone, K + 1):    # the end mark (S) and what lies past it, as before
        grp_lo[j] = grp_lo[K]
    for j in range(K - gone, K):
        grp_row[j] = 0
    st[ST_K] = K - gone


@helper
def grow_rows(ent, free, st, W):
    """Twice the entry rows (the new ones on the free stack); returns the new arrays."""
    rows = ent.shape[1] // W
    ent2 = np.empty((3, 2 * rows * W), np.int64)
    for j in range(rows * W):       # element by element: a slice copy compiles Numba's shape-error text
        ent2[0, j], ent2[1, j], ent2[2, j] = ent[0, j], ent[1, j], ent[2, j]
    ent2[0, rows * W:] = EMPTY
    ent2[1:, rows * W:] = 0
    free2 = np.empty(2 * rows, np.int64)
    n = st[ST_FREE]
    for x in range(n):
        free2[x] = free[x]
    for x in range(rows):
        free2[n + x] = 2 * rows - 1 - x
    st[ST_FREE] = n + rows
    st[ST_GROWN] += 1
    return ent2, free2
