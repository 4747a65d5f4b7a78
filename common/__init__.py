"""The shared base of tierlab's packages: errors, atomic writes, the paths of shipped data.

``traces/``, ``kernels/`` and ``emulator/`` import from here; this package imports none of them.
"""
