"""Request streams with prefix reuse: read them, make them, cache their blocks, and curve their hits.

* :func:`tierlab.kvstream.reader.read_requests` -- Mooncake JSONL, Azure CSV, a plain CSV or Parquet (gzip/xz too).
* :func:`tierlab.kvstream.synthetic.synthetic_requests` -- seeded Poisson/gamma streams with shared system
  prompts and multi-turn sessions.
* :mod:`tierlab.kvstream.blockstore` -- one tier of a prefix cache (LRU, FIFO; OPT for the hit curve), Numba.
* :func:`tierlab.kvstream.hitcurve.hit_curve` -- the prefix cache's hit ratio at every capacity, in one pass
  for LRU.
"""

from __future__ import annotations

from tierlab.kvstream.blockstore import BlockStore
from tierlab.kvstream.hitcurve import HitCurve, hit_curve
from tierlab.kvstream.reader import read_requests
from tierlab.kvstream.synthetic import synthetic_requests
from tierlab.kvstream.trace import RequestTrace

__all__ = ["RequestTrace", "read_requests", "synthetic_requests", "BlockStore", "HitCurve", "hit_curve"]
