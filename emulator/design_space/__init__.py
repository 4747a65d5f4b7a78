"""Design-space sweeps on Dask: a grid of points (``grid.py``) with chip-file what-ifs
(``overrides.py``), one trace group into rows (``point.py``), the Parquet store (``store.py``) and
the Dask runner (``runner.py``). The Python API's :func:`tierlab.sweep` runs them.
"""
