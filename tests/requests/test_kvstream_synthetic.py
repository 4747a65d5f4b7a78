"""Synthetic streams: seeded, consistent hash ids, and shared prefixes that hit."""

from __future__ import annotations

import numpy as np
import pytest

from tierlab.common.errors import UsageError
from tierlab.kvstream.hitcurve import hit_curve
from tierlab.kvstream.synthetic import synthetic_requests
from kvstream_reference import seen_before


def _reqs(t):
    return [t.request_blocks(i).tolist() for i in range(len(t))], t.input_tokens.tolist()


def test_seeded_and_reproducible():
    kw = dict(rate=4.0, arrival="gamma", cv=2.0, input_tokens=700, system_prompt_tokens=1500,
              n_system_prompts=3, sessions=5)
    a, b, c = synthetic_requests(300, seed=1, **kw), synthetic_requests(300, seed=1, **kw), synthetic_requests(300, seed=2, **kw)
    for f in ("arrival_s", "input_tokens", "output_tokens", "session", "block_offsets", "blocks"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    assert not np.array_equal(a.arrival_s, c.arrival_s)
    assert np.array_equal(np.diff(a.block_offsets), -(-a.input_tokens // 512))    # ids match lengths
    assert np.all(np.diff(a.arrival_s) >= 0)


def test_shared_system_prompt_hits_exactly():
    n = 50
    t = synthetic_requests(n, rate=1.0, input_tokens=100, output_tokens=5, system_prompt_tokens=1100,
                           block_tokens=512)
    assert t.input_tokens.tolist() == [1200] * n
    d = hit_curve(t).to_dict()                  # two full system blocks shared; the third mixes in the user's text
    assert d["max_hit_ratio_tokens"] == (n - 1) * 1024 / (n * 1200)
    assert d["unique_blocks"] == 2 + n


def test_sessions_share_the_previous_prompt():
    t = synthetic_requests(200, rate=2.0, input_tokens=300, output_tokens=90, system_prompt_tokens=600,
                           n_system_prompts=2, sessions=4, block_tokens=128, seed=5)
    last = {}
    for i in range(len(t)):
        s = int(t.session[i])
        ids = t.request_blocks(i).tolist()
        if s in last:
            prev_ids, prev_in, prev_out = last[s]
            assert t.input_tokens[i] == prev_in + prev_out + 300
            full = prev_in // 128
            assert ids[:full] == prev_ids[:full]
            assert not set(ids[full:]) & set(prev_ids)
        last[s] = (ids, int(t.input_tokens[i]), int(t.output_tokens[i]))
    reqs, inps = _reqs(t)
    hb, ht = seen_before(reqs, inps, 128)
    d = hit_curve(t).to_dict()
    assert d["max_hit_ratio_tokens"] == ht / sum(inps) > 0.5


def test_lengths_drawn_from_a_trace_and_rates():
    base = synthetic_requests(50, rate=1.0, input_tokens=333, output_tokens=7)
    t = synthetic_requests(4000, rate=10.0, input_tokens=base, seed=3)
    assert set(t.input_tokens.tolist()) == {333} and set(t.output_tokens.tolist()) == {7}
    assert abs(len(t) / t.arrival_s[-1] - 10.0) < 0.6
    g = synthetic_requests(4000, rate=10.0, arrival="gamma", cv=3.0, seed=3)
    gaps = np.diff(g.arrival_s)
    assert abs(gaps.std() / gaps.mean() - 3.0) < 0.5


def test_bad_arguments():
    for kw, field in ((dict(rate=0), "rate"), (dict(rate=1, arrival="uniform"), "arrival"),
                      (dict(rate=1, input_tokens=0), "input_tokens"), (dict(rate=1, sessions=-1), "sessions")):
        with pytest.raises(UsageError, match=field):
            synthetic_requests(10, **kw)
