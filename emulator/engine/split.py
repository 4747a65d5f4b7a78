"""The two halves of a block stream for two threads (``tierlab replay --threads 2``): when a bit
is a set-index bit at every tier, the requests with it 0 and those with it 1 share no set anywhere
and replay independently, one thread each (:class:`tierlab.engine.stream_driver.StreamReplayer`).
"""

from __future__ import annotations

from tierlab.engine.jit import njit


@njit(nogil=True)
def select_half(blk, n, in_shift, wr, bit, val, out_blk, out_wr):
    """Copy the requests ``blk[:n] >> in_shift`` whose bit ``bit`` is ``val`` (and their write
    flags) to ``out_blk``/``out_wr``, in order; return how many. Without a branch per request.

    When ``bit`` is a set-index bit at every tier, the two halves of a stream share no set anywhere
    and replay independently (one thread each)."""
    k = 0
    for j in range(n):
        b = blk[j] >> in_shift
        out_blk[k] = b
        out_wr[k] = wr[j]
        k += ((b >> bit) & 1) == val
    return k


@njit(nogil=True)
def split_blocks(blk, lo, hi, in_shift, bit, out0, out1):
    """Block numbers ``blk[lo:hi] >> in_shift`` whose bit ``bit`` is 0 to ``out0``, the others to
    ``out1``, each in order; return both counts and the OR of all blocks (negative if any was).
    Without a branch per block."""
    k0 = k1 = seen = 0
    for j in range(lo, hi):
        b = blk[j] >> in_shift
        one = (b >> bit) & 1
        out0[k0] = b
        out1[k1] = b
        k0 += 1 - one
        k1 += one
        seen |= b
    return k0, k1, seen
