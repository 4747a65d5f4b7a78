"""The read-only chain's two forms (emulator/engine/stream.py): the block followed down the tiers
(``_build_chain``) and the tier runs over chunks (``_build_runs``), against each other and against a
plain-Python LRU/FIFO hierarchy, on 1-3 tiers with power-of-two and other set counts, vector and
other way counts, and tag words of 16, 32 and 64 bits."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from emulator.engine import stream
from emulator.engine.stream import RUN_BLOCKS


def _reference(blocks, geo, fifo):
    """Misses per tier: each tier a list of sets, each set an OrderedDict (most recent last)."""
    sets = [[OrderedDict() for _ in range(s)] for s, _, _ in geo]
    misses = [0] * len(geo)
    for b in blocks:
        b = int(b)
        for i, (n_sets, ways, shift) in enumerate(geo):
            st = sets[i][b % n_sets]
            if b in st:
                if not fifo:
                    st.move_to_end(b)
                break
            misses[i] += 1
            if len(st) == ways:
                st.popitem(last=False)
            st[b] = True
            b >>= shift
    return misses


ONE = [(16, 4, 0)]
TWO = [(8, 8, 1), (32, 16, 0)]
THREE = [(16, 4, 0), (24, 12, 0), (64, 16, 0)]      # 24 sets, 12 ways: the run-time forms
THREE_POW2 = [(4, 2, 0), (16, 8, 1), (64, 16, 0)]
# two ways a tier (log2 1) under a word shifted by 2: the set index is not the word shifted left
NARROW = [(4, 2, 1), (8, 2, 0)]
# (geometry, policy, largest block + 1): every tier count and policy, tags of 16, 32 and 64 bits
CASES = [(ONE, False, 1 << 12), (ONE, True, 1 << 40), (TWO, False, 1 << 22), (TWO, True, 1 << 12),
         (THREE, False, 1 << 12), (THREE, True, 1 << 22), (THREE_POW2, False, 1 << 40), (THREE_POW2, True, 1 << 12),
         (NARROW, False, 1 << 12), (NARROW, True, 1 << 20)]


@pytest.mark.parametrize("geo,fifo,top", CASES,
                         ids=[f"{len(g)}tier-{'fifo' if f else 'lru'}-2^{t.bit_length() - 1}" for g, f, t in CASES])
def test_chain_and_runs_equal_a_plain_hierarchy(geo, fifo, top):
    rng = np.random.default_rng(len(geo) * 31 + top % 97 + fifo)
    n = 3 * RUN_BLOCKS + 123                  # several chunks of runs and a partial one
    hot = rng.integers(0, 4 * sum(s * w for s, w, _ in geo), n)
    sweep = np.arange(n) % (top // 2) + top // 2
    blocks = np.where(rng.random(n) < 0.7, hot, sweep).astype(np.int64) % top
    want = _reference(blocks, geo, fifo)
    par = np.array([(s, s - 1 if s & (s - 1) == 0 else -1, max(s - 1, 0).bit_length() if s & (s - 1) == 0 else 0,
                     w, h) for s, w, h in geo], np.int64)
    widths, t = [], top
    for s, w, h in geo:
        widths.append(stream.tag_width(t, s))
        t = ((t - 1) >> h) + 1
    spec = tuple((w if w in stream.VECTOR_WAYS else 0, s & (s - 1) == 0, fifo, wd) for (s, w, _), wd in zip(geo, widths))
    words = (blocks.astype(np.uint64) << np.uint64(1))        # an address trace's words: shift 1
    if top <= 1 << 22:
        words = words.astype(np.uint32)                         # as version 5 stores them
    for form in ("chain", "runs"):
        for feed in (n, 1000):                                  # one call, or many (the state carries over)
            tags = stream.chain_state(par, widths)
            cnt = np.zeros((3, 2), np.int64)
            for lo in range(0, n, feed):
                part = words[lo:lo + feed]
                stream.chain_pass(part, len(part), 1, par, tags, cnt, spec, form=form)
            assert cnt[:len(geo), 1].tolist() == want, (form, feed, widths)
            assert cnt[0, 0] == n and all(cnt[i + 1, 0] == want[i] for i in range(len(geo) - 1))
