"""The counting engine: one door (:mod:`tierlab.engine.door`) that validates a request and picks a
kernel from the dispatch table (:mod:`tierlab.engine.dispatch`), the kernels themselves (one module
each), replacement policies, vector set operations, counters and their conservation laws, and the
project's Numba options. It counts; it never costs.
"""
