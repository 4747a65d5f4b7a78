"""Serving: the throughput of continuous batching against the speed each user sees (``tierlab throughput``).

:mod:`~emulator.serving.schedule` steps a vLLM-style scheduler; :mod:`~emulator.serving.steps`
picks the representative steps; :mod:`~emulator.serving.replay` replays them exactly through the
engine (one chip or a system) with the calibrated latency; :mod:`~emulator.serving.capacity` bounds
concurrency by the paged KV cache; :mod:`~emulator.serving.curve` makes the curve. See
``docs/serving.md``.
"""
