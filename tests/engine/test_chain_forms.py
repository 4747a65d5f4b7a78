"""The read-only chain's two forms (emulator/engine/stream.py): the block followed down the tiers
(``_build_chain``) and the tier runs over chunks (``_build_runs``), against each other and against a
plain-Python LRU/FIFO hierarchy, on 1-3 tiers with power-of-two and other set counts, vector and
other way counts, and tag words of 16, 32 and 64 bits."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from tierlab.engine import stream
from tierlab.engine.stream import RUN_BLOCKS


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
    bits = words.dtype.itemsize * 8
    assert stream.can_key(*spec[0][:2], 1)
    # the first tier keyed (it keeps the words themselves), as an address trace's replay builds it
    keyed = ((spec[0][:3] + (bits, True),) + spec[1:], [bits] + widths[1:])
    for (sp, wd) in ((spec, widths), keyed):
        for form in ("chain", "runs"):
            for feed in (n, 1000):                                  # one call, or many (the state carries over)
                tags = stream.chain_state(par, wd)
                cnt = np.zeros((3, 2), np.int64)
                for lo in range(0, n, feed):
                    part = words[lo:lo + feed]
                    stream.chain_pass(part, len(part), 1, par, tags, cnt, sp, form=form)
                assert cnt[:len(geo), 1].tolist() == want, (form, feed, sp)
                assert cnt[0, 0] == n and all(cnt[i + 1, 0] == want[i] for i in range(len(geo) - 1))


def _par_spec(geo, fifo, widths):
    par = np.array([(s, s - 1, (s - 1).bit_length(), w, h) for s, w, h in geo], np.int64)
    return par, tuple((w, True, fifo, wd) for (s, w, _), wd in zip(geo, widths))


@pytest.mark.parametrize("fifo", [False, True])
@pytest.mark.parametrize("dtype,shift", [(np.uint32, 1), (np.uint64, 1), (np.uint32, 2), (np.uint64, 3)])
def test_keyed_tiers_count_as_tags_do_and_keep_the_words(fifo, dtype, shift):
    """Every tier keyed in the chain form (words with their low bits set, a third with a high bit:
    a 32-bit word's top bit, negative as a signed key; 64-bit: an address's bit 63 in the words of
    64-byte lines), against a plain hierarchy; the words kept read back as the blocks."""
    geo = [(8, 8, 1), (16, 8, 0)]
    rng = np.random.default_rng(shift * 7 + fifo)
    far = dtype(1) << dtype(31 if dtype == np.uint32 else 63 - 6 + shift)
    blocks = rng.integers(0, 600, 20_000).astype(np.uint64)
    words = ((blocks << np.uint64(shift)) | rng.integers(0, 1 << shift, len(blocks)).astype(np.uint64)).astype(dtype)
    words[::3] |= far
    tier0 = (words >> dtype(shift)).astype(np.uint64)
    want = _reference(tier0.astype(object), geo, fifo)
    bits = np.dtype(dtype).itemsize * 8
    par, spec = _par_spec(geo, fifo, [bits, bits])
    # each tier keyed where it can be (all but tier 1 under words >> 3: 4 > log2 of its 8 ways)
    keyed = tuple(t + (stream.can_key(t[0], True, h),) for t, h in zip(spec, (shift, shift + 1)))
    assert [t[4] for t in keyed] == [True, shift < 3]
    w1 = bits if shift < 3 else stream.tag_width(int(tier0.max() >> np.uint64(1)) + 1, 16)     # tags there
    tags = stream.chain_state(par, [bits, w1])
    keyed = keyed[:1] + (keyed[1][:3] + (w1, keyed[1][4]),)
    cnt = np.zeros((3, 2), np.int64)
    stream.chain_pass(words, len(words), shift, par, tags, cnt, keyed, form="chain")
    assert cnt[:2, 1].tolist() == want
    # the words a keyed tier keeps are its blocks (<< 1, as the tier passes take them over), in a set
    # that holds no block twice, each in its own set
    got = stream.chain_blocks(tags[0], 8, 8, keyed_shift=shift)
    held = got[got != -1] >> 1
    assert len(held) == len(set(held.tolist())) > 0
    assert set(held.tolist()) <= set(tier0.tolist())
    assert all(int(b) % 8 == k for k, b in zip(np.repeat(np.arange(8), 8)[got != -1], held))


def test_a_tier_the_words_cannot_key_is_refused():
    geo = [(8, 4, 1), (16, 8, 0)]
    par, spec = _par_spec(geo, False, [32, 32])
    keyed = tuple(t + (True,) for t in spec)
    words = np.arange(100, dtype=np.uint32) << np.uint32(1)
    cnt = np.zeros((3, 2), np.int64)
    with pytest.raises(ValueError, match="tier 1 .* cannot be keyed"):      # the runs feed tier 1 blocks
        stream.chain_pass(words, 100, 1, par, stream.chain_state(par, [32, 32]), cnt, keyed, form="runs")
    with pytest.raises(ValueError, match="tier 0 .* cannot be keyed"):      # blocks, not words: -1 is a block
        stream.chain_pass(words, 100, 0, par, stream.chain_state(par, [32, 32]), cnt, keyed[:1], form="chain")
    assert not stream.can_key(0, True, 1) and not stream.can_key(4, False, 1) and not stream.can_key(4, True, 3)
