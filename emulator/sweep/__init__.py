"""Design-space sweeps on Dask: a grid of points (``grid.py``), one trace group into rows
(``point.py``), the Parquet store (``store.py``) and the Dask runner (``runner.py``)."""
