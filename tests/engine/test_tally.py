"""Folding a batch's counters into the replay's totals (emulator/engine/tally.py) equals numpy's sums."""

from __future__ import annotations

import numpy as np
import pytest

from tierlab.engine.tally import fold_batch


def test_fold_equals_the_numpy_sums():
    rng = np.random.default_rng(1)
    for n_ops, lo, n in ((5, 0, 5), (9, 3, 4), (1, 0, 1)):
        cnt = rng.integers(0, 3, (n, 5, 3, 12)) * (rng.random((n, 5, 3, 12)) < 0.3)
        per_op = rng.integers(0, 9, (n_ops, 3, 12))
        by_kind = rng.integers(0, 9, (5, 3, 12))
        want_op, want_kind = per_op.copy(), by_kind.copy()
        want_op[lo:lo + n] += cnt.sum(axis=1)
        want_kind += cnt.sum(axis=0)
        fold_batch(cnt, lo, per_op, by_kind)
        assert not cnt.any()                    # cleared for the next batch
        np.testing.assert_array_equal(per_op, want_op)
        np.testing.assert_array_equal(by_kind, want_kind)


def test_a_batch_past_the_totals_is_refused():
    with pytest.raises(ValueError, match="does not fit"):
        fold_batch(np.zeros((3, 5, 3, 12), np.int64), 2, np.zeros((4, 3, 12), np.int64), np.zeros((5, 3, 12), np.int64))
