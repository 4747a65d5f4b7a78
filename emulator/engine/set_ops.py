"""The set operations of :mod:`tierlab.engine.simd` by the width of a tier's words (16, 32 or 64
bits, a build constant of the kernel that inlines them): what :mod:`tierlab.engine.stream`'s chain
and tier runs call for one lookup and update of a clean LRU/FIFO set."""

from __future__ import annotations

from tierlab.engine.jit import njit
from tierlab.engine.simd import (
    set_touch,
    set_touch16,
    set_touch32,
    set_touch_at,
    set_touch_at16,
    set_touch_at32,
    set_touch_key,
    set_touch_key32,
)


@njit(nogil=True, inline="always")
def touch(words, base, ways, key, act, fifo, width):
    """:func:`tierlab.engine.simd.set_touch` on words of ``width`` bits (a build constant); 1 on
    a miss where ``act`` is 1, else 0."""
    if width == 16:
        miss = set_touch16(words, base, ways, key, act, fifo)
    elif width == 32:
        miss = set_touch32(words, base, ways, key, act, fifo)
    else:
        miss = set_touch(words, base, ways, key, act, fifo)
    return miss & act


@njit(nogil=True, inline="always")
def touch_at(words, base, ways, blk, j, key_sh, act, fifo, width):
    """:func:`tierlab.engine.simd.set_touch_at` (the key ``blk[j] >> key_sh`` made in the vector
    registers) on words of ``width`` bits; 1 on a miss where ``act`` is 1, else 0."""
    if width == 16:
        miss = set_touch_at16(words, base, ways, blk, j, key_sh, act, fifo)
    elif width == 32:
        miss = set_touch_at32(words, base, ways, blk, j, key_sh, act, fifo)
    else:
        miss = set_touch_at(words, base, ways, blk, j, key_sh, act, fifo)
    return miss & act


@njit(nogil=True, inline="always")
def touch_key(words, base, ways, blk, j, mask, act, fifo, width):
    """:func:`tierlab.engine.simd.set_touch_key` (the key ``blk[j] & mask``, its lanes broadcast
    from memory) on a keyed tier's words, of the input's own width (32 or 64 bits); 1 on a miss
    where ``act`` is 1, else 0."""
    if width == 32:
        miss = set_touch_key32(words, base, ways, blk, j, mask, act, fifo)
    else:
        miss = set_touch_key(words, base, ways, blk, j, mask, act, fifo)
    return miss & act
