"""tierlab: the chip, the counting engine, costing, analyses, presentation and the CLI.

Data walks one way: ``chip`` (hierarchy, placement) -> ``engine`` (door -> kernel -> counters) ->
``cost`` (energy, latency) -> ``analysis`` / ``present`` -> ``cli``. See ``docs/design.md``.

The Python API (``docs/api.md``; :mod:`tierlab.api`)::

    import tierlab
    r = tierlab.run("llama-3.1-8b", chip="h100", context=1024, generate=4)
    r.to_dict()["per_token"]["tokens_per_s"]; r.to_arrow()    # the --json dict; one row per op

``trace``, ``replay``, ``run``, ``compare``, ``sweep``, ``throughput``, ``mrc``, ``load_chip`` and ``load_system`` are
imported on first use, so ``import tierlab`` (and every ``tierlab`` command) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["trace", "replay", "run", "compare", "sweep", "throughput", "mrc", "load_chip", "load_system",
           "read_requests", "synthetic_requests", "hit_curve", "serve_requests"]
# the request-stream functions (issue 41): typed library functions of tierlab.kvstream, as they are
_KVSTREAM = {"read_requests": "tierlab.kvstream.reader", "synthetic_requests": "tierlab.kvstream.synthetic",
             "hit_curve": "tierlab.kvstream.hitcurve", "serve_requests": "tierlab.kvstream.server"}

if TYPE_CHECKING:
    from tierlab.api import compare, load_chip, load_system, mrc, replay, run, sweep, throughput, trace
    from tierlab.kvstream.hitcurve import hit_curve
    from tierlab.kvstream.reader import read_requests
    from tierlab.kvstream.server import serve_requests
    from tierlab.kvstream.synthetic import synthetic_requests


def __getattr__(name: str):
    if name in _KVSTREAM:
        import importlib

        return getattr(importlib.import_module(_KVSTREAM[name]), name)
    if name in __all__:
        import tierlab.api

        return getattr(tierlab.api, name)
    raise AttributeError(f"module 'tierlab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
