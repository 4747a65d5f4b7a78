"""Block expansion against a plain-Python expansion of the same descriptors."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tierlab.engine.blocks import BlockExpander, block_stream
from tierlab.common.errors import UsageError


def reference_blocks(tensor_addr, rows, block_bytes, include=None):
    """Every chunk, then every block the chunk's bytes touch, in order (byte by byte, no division tricks)."""
    out = []
    for tid, off, nb, cnt, stride, w in rows:
        if include is not None and not include[tid]:
            continue
        for k in range(cnt):
            start = tensor_addr[tid] + off + k * stride
            seen = []
            for byte in range(start, start + nb):
                b = byte // block_bytes
                if not seen or seen[-1] != b:
                    seen.append(b)
            out.extend((b, w) for b in seen)
    return out


row = st.tuples(st.integers(0, 2), st.integers(0, 300), st.integers(1, 200), st.integers(1, 5),
                st.integers(0, 150), st.booleans())


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(row, max_size=12), block=st.sampled_from([1, 8, 16, 64, 100]),
       buffer=st.integers(1, 40), mask=st.lists(st.booleans(), min_size=3, max_size=3))
def test_expansion_matches_reference(rows, block, buffer, mask):
    tensor_addr = np.array([0, 4096, 10_000], dtype=np.int64)
    include = np.array(mask)
    expected = reference_blocks(tensor_addr, rows, block, include)
    cols = [np.array([r[i] for r in rows], dtype=dt)
            for i, dt in enumerate((np.int64, np.int64, np.int64, np.int64, np.int64, np.bool_))]
    ex = BlockExpander(tensor_addr, block, include=include, buffer_blocks=buffer)
    blocks, writes = block_stream(ex.expand(*cols))
    assert list(zip(blocks.tolist(), writes.tolist())) == expected
    assert ex.count(*cols[:5]) == len(expected)
    # every yielded chunk but the last fills the buffer: the resume state loses nothing
    sizes = [len(b) for b, _ in ex.expand(*cols)]
    assert all(s == buffer for s in sizes[:-1])


def test_repeated_chunk_is_emitted_per_repetition():
    ex = BlockExpander(np.array([0]), 64)
    blocks, _ = block_stream(ex.expand([0], [64], [128], [3], [0], [False]))
    assert blocks.tolist() == [1, 2, 1, 2, 1, 2]


def test_bad_block_size_is_a_usage_error():
    with pytest.raises(UsageError):
        BlockExpander(np.array([0]), 0)
    with pytest.raises(UsageError):
        BlockExpander(np.array([0]), 64, buffer_blocks=0)
