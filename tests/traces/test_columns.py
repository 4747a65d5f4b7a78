"""tierlab.traces.format.columns.string_in against Python set membership on the same strings."""

import numpy as np
import pyarrow as pa
from hypothesis import given, settings, strategies as st

from tierlab.traces.format.columns import string_in

WORDS = st.sampled_from(["linear", "attention", "norm", "", "lin", "linearx", "é", "kv", "weight", "ß✓"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.one_of(WORDS, st.text(max_size=6)), max_size=12), min_size=0, max_size=4),
       st.lists(st.one_of(WORDS, st.text(max_size=4)), max_size=4), st.integers(0, 3), st.booleans())
def test_string_in_matches_set_membership(chunks, wanted, cut, large):
    typ = pa.large_string() if large else pa.string()
    col = pa.chunked_array([pa.array(c, typ) for c in chunks], typ)
    flat = [s for c in chunks for s in c]
    want = np.array([s in set(wanted) for s in flat], bool)
    assert np.array_equal(string_in(col, wanted), want)
    if len(flat) > cut:                      # a sliced array: its offsets start part-way
        arr = pa.array(flat, typ).slice(cut)
        assert np.array_equal(string_in(arr, wanted), want[cut:])
    assert np.array_equal(string_in(flat, wanted), want)   # a plain sequence


def test_string_in_nulls_never_match():
    col = pa.array(["kv", None, "weight", None])
    assert string_in(col, ["kv", "weight"]).tolist() == [True, False, True, False]
    assert string_in(pa.chunked_array([], pa.string()), ["kv"]).shape == (0,)
