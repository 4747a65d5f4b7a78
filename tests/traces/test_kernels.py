"""Operator kernels, one at a time: bytes each touches and FLOPs, against closed forms and brute force."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlab.kernels import attention as attn
from tierlab.kernels.base import Ten
from tierlab.kernels.embedding import embedding
from tierlab.kernels.linear import linear
from tierlab.kernels.moe import expert_mlp
from tierlab.kernels.norm import rmsnorm

W, X, Y, S, B = Ten(0, 10**9), Ten(1, 10**9), Ten(2, 10**9), Ten(3, 10**6), Ten(4, 10**6)


def totals(ops) -> Counter:
    """(tensor id, is_write) -> bytes issued."""
    c = Counter()
    for op in ops if isinstance(ops, list) else [ops]:
        for a in op.accesses:
            c[(a.tensor, a.is_write)] += a.nbytes * a.count
    return c


def chunks(op, tensor, write=False) -> list[tuple[int, int]]:
    """Every (offset, nbytes) chunk of a tensor an op touches, expanded."""
    out = []
    for a in op.accesses:
        if a.tensor == tensor and a.is_write == write:
            out += [(a.offset + k * a.stride, a.nbytes) for k in range(a.count)]
    return out


@pytest.mark.parametrize("m", [1, 8, 300])
def test_decode_linear_reads_weight_once(m):
    op = linear("l", Ten(0, 4096 * 1024 * 2), X, Y, m=m, in_features=4096, out_features=1024, act_bytes=2,
                phase="decode", tile_m=64, tile_n=64, scales=S, bias=B)
    t = totals(op)
    assert t[(0, False)] == 4096 * 1024 * 2
    assert t[(S.id, False)] == S.nbytes and t[(B.id, False)] == B.nbytes
    assert t[(X.id, False)] == m * 4096 * 2
    assert t[(Y.id, True)] == m * 1024 * 2
    assert op.flops == 2 * m * 4096 * 1024 + m * 1024
    assert op.pim_eligible


@pytest.mark.parametrize("m,tile_m,tile_n", [(1000, 256, 256), (1000, 1000, 64), (257, 256, 1024), (64, 128, 7)])
def test_prefill_linear_rereads_follow_tiles(m, tile_m, tile_n):
    k, n = 96, 200
    w = Ten(0, k * n * 2)
    op = linear("l", w, X, Y, m=m, in_features=k, out_features=n, act_bytes=2, phase="prefill", tile_m=tile_m,
                tile_n=tile_n)
    t = totals(op)
    m_tiles = -(-m // tile_m)
    n_tiles = -(-n // tile_n)
    assert t[(0, False)] == m_tiles * k * n * 2
    assert t[(X.id, False)] == m * k * 2 * n_tiles
    assert t[(Y.id, True)] == m * n * 2
    assert not op.pim_eligible
    # every output row written exactly once
    rows = sorted(chunks(op, Y.id, True))
    assert sum(nb for _, nb in rows) == m * n * 2 and rows[0][0] == 0


def test_linear_strided_rows_last_token():
    # LM head over the last of t=5 tokens of 3 sequences: rows at (4, 9, 14).
    h = 8
    op = linear("lm", Ten(0, 16 * h * 2), X, Y, m=3, in_features=h, out_features=16, act_bytes=2, phase="prefill",
                tile_m=256, tile_n=256, x_offset=4 * h * 2, x_stride=5 * h * 2)
    assert chunks(op, X.id) == [(4 * 16, 16), (9 * 16, 16), (14 * 16, 16)]


def brute_pairs(start, t, window):
    return sum(1 for p in range(start, start + t) for key in range(p + 1) if window is None or p - key < window)


@given(st.integers(0, 50), st.integers(1, 40), st.one_of(st.none(), st.integers(1, 30)))
@settings(max_examples=100, deadline=None)
def test_causal_pairs_brute_force(start, t, window):
    assert attn.causal_pairs(start, t, window) == brute_pairs(start, t, window)


def _cache(tid, row, positions, batch):
    return attn.Cache(Ten(tid, batch * positions * row), row, positions * row)


@given(st.integers(0, 40), st.integers(1, 40), st.one_of(st.none(), st.integers(1, 30)), st.integers(1, 3),
       st.integers(1, 16))
@settings(max_examples=60, deadline=None)
def test_flash_attention_reads_the_keys_each_query_needs(start, t, window, batch, tile):
    row, positions = 32, start + t
    k, v = _cache(10, row, positions, batch), _cache(11, row, positions, batch)
    (op,) = attn.flash_attention("a", X, Y, [k], [v], batch=batch, start=start, t=t, window=window, heads=2,
                                 score_dim=8, value_dim=8, q_row_bytes=16, o_row_bytes=16, act_bytes=2,
                                 attn_tile=tile, phase="prefill" if t > 1 else "decode")
    # Every key a query needs is read, within its own sequence, and nothing outside the causal window
    # of the tile's queries.
    for cache in (k, v):
        got = set()
        for off, nb in chunks(op, cache.ten.id):
            b, r0 = divmod(off, cache.seq_stride)
            assert r0 % row == 0 and nb % row == 0 and r0 + nb <= cache.seq_stride
            got |= {(b, p) for p in range(r0 // row, (r0 + nb) // row)}
        need = {(b, key) for b in range(batch) for p in range(start, start + t)
                for key in range(*attn.key_range(p, window))}
        assert need <= got
        assert max(p for _, p in got) == start + t - 1
    assert op.flops == 2 * 2 * batch * brute_pairs(start, t, window) * 16
    assert op.pim_eligible == (t == 1)


def test_decode_attention_one_descriptor_per_cache():
    batch, ctx, row = 4, 100, 64
    k, v = _cache(10, row, 128, batch), _cache(11, row, 128, batch)
    (op,) = attn.flash_attention("a", X, Y, [k], [v], batch=batch, start=ctx - 1, t=1, window=None, heads=8,
                                 score_dim=16, value_dim=16, q_row_bytes=256, o_row_bytes=256, act_bytes=2,
                                 attn_tile=64, phase="decode")
    t = totals(op)
    assert t[(10, False)] == t[(11, False)] == batch * ctx * row
    assert len(op.accesses) == 4


def test_mla_latent_read_once_per_tile():
    lat = _cache(10, 80, 16, 1)
    (op,) = attn.flash_attention("a", X, Y, [lat], [lat], batch=1, start=15, t=1, window=None, heads=4,
                                 score_dim=40, value_dim=32, q_row_bytes=64, o_row_bytes=64, act_bytes=2,
                                 attn_tile=64, phase="decode")
    assert totals(op)[(10, False)] == 16 * 80


def test_naive_attention_materialises_scores():
    batch, t, row, heads = 2, 6, 32, 4
    k, v = _cache(10, row, t, batch), _cache(11, row, t, batch)
    ops = attn.naive_attention("a", X, Y, [k], [v], scores=S, batch=batch, start=0, t=t, window=None, heads=heads,
                               score_dim=8, value_dim=8, q_row_bytes=64, o_row_bytes=64, act_bytes=2,
                               phase="prefill")
    assert [o.name for o in ops] == ["a.scores", "a.softmax", "a.pv"] * batch
    tot = totals(ops)
    score = heads * t * t * 2
    assert tot[(S.id, True)] == 2 * batch * score and tot[(S.id, False)] == 2 * batch * score
    assert tot[(10, False)] == tot[(11, False)] == batch * t * row


def test_kv_append_writes_new_rows_of_each_sequence():
    batch, row, positions = 3, 40, 50
    c = _cache(10, row, positions, batch)
    op = attn.kv_append("kv", [(X, row)], [c], batch=batch, start=20, t=4)
    assert chunks(op, 10, True) == [(b * positions * row + 20 * row, 4 * row) for b in range(batch)]


def test_embedding_reads_only_token_rows():
    ids = np.array([5, 0, 5, 99])
    op = embedding("e", Ten(0, 100 * 32), Y, ids, row_bytes=32, act_row_bytes=64)
    assert chunks(op, 0) == [(160, 32), (0, 32), (160, 32), (99 * 32, 32)]
    assert totals(op)[(Y.id, True)] == 4 * 64


def test_rmsnorm_strided_rows():
    op = rmsnorm("n", X, X, B, m=3, width=4, act_bytes=2, row_stride=20)
    assert chunks(op, X.id) == [(0, 8), (20, 8), (40, 8)] and chunks(op, X.id, True) == [(0, 8), (20, 8), (40, 8)]


@pytest.mark.parametrize("phase,rows,tile_m,reads", [("decode", 7, 2, 1), ("prefill", 7, 2, 4), ("prefill", 7, 8, 1)])
def test_expert_weights_read_once_per_tile(phase, rows, tile_m, reads):
    ws = [Ten(20, 1000), Ten(21, 1000), Ten(22, 1000)]
    op = expert_mlp("e", 3, ws, [None, None, None], X, Y, S, first_row=5, rows=rows, hidden=16, ffn=8, act_bytes=2,
                    phase=phase, tile_m=tile_m)
    t = totals(op)
    assert all(t[(w.id, False)] == reads * 1000 for w in ws)
    assert t[(X.id, False)] == rows * 16 * 2 and min(o for o, _ in chunks(op, X.id)) == 5 * 32
    assert op.expert == 3 and op.kind == "linear"
