"""Design-space sweeps on Dask: a grid of points (``grid.py``), one trace group into rows
(``point.py``), the Parquet store (``store.py``) and the Dask runner (``runner.py``).

``tierlab.sweep`` is also the Python API's function (:func:`tierlab.api.sweep`): this package is
callable, ``tierlab.sweep(grid, scheduler=None, workers=None, **options)``, because Python binds the
package to the name ``tierlab.sweep`` whenever it is imported.
"""

import sys
import types


class _CallableModule(types.ModuleType):
    def __call__(self, grid, scheduler=None, workers=None, **options):
        from tierlab.api import sweep

        return sweep(grid, scheduler, workers, **options)


sys.modules[__name__].__class__ = _CallableModule
