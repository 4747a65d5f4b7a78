"""Serving: the throughput of continuous batching against the speed each user sees (``tierlab throughput``).

:mod:`~tierlab.serving.schedule` steps a vLLM-style scheduler; :mod:`~tierlab.serving.steps`
picks the representative steps; :mod:`~tierlab.serving.replay` replays them exactly through the
engine (one chip or a system) with the calibrated latency; :mod:`~tierlab.serving.capacity` bounds
concurrency by the paged KV cache; :mod:`~tierlab.serving.curve` makes the curve. See
``docs/serving.md``.
"""
