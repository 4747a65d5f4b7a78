"""Representative steps: the window's steps in classes of alike shape, one step of each replayed.

A step's time is what its ops take, and every op's time grows with a few numbers of the step: the
tokens through the linear layers (``D + P``: decodes plus prefill tokens), the keys the decodes
read (``S``: the sum of their positions) and the query-key pairs of the chunks (``Q``). So steps
are put in classes by

- the number of prefill chunks, exactly (0: a step of decodes alone, whose GEMMs stream weights as
  decode does; with a chunk they are tiled as in prefill), and
- ``D``, ``P`` and ``Q`` each in geometric bins of ratio ``1 + tokens_rel`` (every distinct count
  below ``1 / tokens_rel`` its own bin), ``S`` in bins of ratio ``1 + context_rel``.

The **representative** of a class is its step nearest the class's mean in those logs (a real step:
its decodes at their own positions); it is replayed exactly and its time stands for every step of
the class. Steps with the same shape are one replay (:mod:`tierlab.serving.replay` caches by shape).

**The error they introduce.** Within a class, ``D``, ``P`` and ``Q`` differ from the
representative's by less than a factor ``1 + tokens_rel`` and ``S`` by less than ``1 +
context_rel``. Each op's time is a sum of per-resource terms that do not decrease, and grow at
most in proportion, with these counts (weights are read once whatever the tokens), so a step's time
differs from its representative's by less than the largest of those factors — a loose bound (25%
at the default ``context_rel``), since the keys are the attention's share of a step only. What it
comes to is measured: ``tests/serving/test_throughput_steps.py`` replays every step of short runs and
compares each point's figures with the representative steps' (within 2% there, at every
concurrency). The sum of positions moves the time of the attention alone, which is why its bins
are wider.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tierlab.serving.schedule import Schedule

TOKENS_REL = 0.05
CONTEXT_REL = 0.25


@dataclass
class Classes:
    """``of_step[k]``: the class of window step ``k``; ``rep[c]``: the window step standing for class ``c``."""

    of_step: np.ndarray
    rep: np.ndarray
    tokens_rel: float
    context_rel: float

    @property
    def n(self) -> int:
        return len(self.rep)


def log_bin(x: np.ndarray, rel: float) -> np.ndarray:
    """Geometric bin of each count: -1 for 0, else ``floor(log(x) / log(1 + rel))``; counts below
    ``1 / rel`` keep their own bin (a bin narrower than one is no coarser than the count)."""
    x = np.asarray(x, np.float64)
    out = np.full(len(x), -1, np.int64)
    pos = x > 0
    small = pos & (x < 1.0 / rel)
    out[small] = x[small].astype(np.int64) - (1 << 40)          # disjoint from the log bins
    big = pos & ~small
    out[big] = np.floor(np.log(x[big]) / np.log1p(rel)).astype(np.int64)
    return out


def classify(s: Schedule, tokens_rel: float = TOKENS_REL, context_rel: float = CONTEXT_REL) -> Classes:
    """Classes of the window's steps and their representatives (module docstring)."""
    keys = np.stack([s.chunks, log_bin(s.decodes, tokens_rel), log_bin(s.prefill_tokens, tokens_rel),
                     log_bin(s.prefill_pairs, tokens_rel), log_bin(s.context_sum, context_rel)], axis=1)
    _, of_step = np.unique(keys, axis=0, return_inverse=True)
    of_step = of_step.ravel()
    feats = np.log1p(np.stack([s.decodes, s.prefill_tokens, s.prefill_pairs, s.context_sum], axis=1).astype(float))
    n = int(of_step.max()) + 1 if len(of_step) else 0
    rep = np.zeros(n, np.int64)
    for c in range(n):
        members = np.flatnonzero(of_step == c)
        f = feats[members]
        d = ((f - f.mean(axis=0)) ** 2).sum(axis=1)
        rep[c] = members[int(np.argmin(d))]
    return Classes(of_step=of_step, rep=rep, tokens_rel=tokens_rel, context_rel=context_rel)
