"""The operator kernels, ``tierlab.kernels``: the modules of the repository's ``kernels/`` folder.

That folder has no ``__init__.py``: ``kernels`` is also the import name of Hugging Face's package,
which Transformers imports, and a regular package of that name on ``sys.path`` (a checkout's root,
as under ``python -m`` there) would shadow it. A folder without ``__init__.py`` is a namespace
package, which setuptools' editable installs resolve only at the top level, so this module names the
folder as its ``__path__``: in a wheel, ``tierlab/kernels/`` beside this file; in an editable install,
``kernels/`` at the repository's top. Its submodules are then found there as a package's are.
"""

from pathlib import Path

_HERE = Path(__file__).resolve()
__path__ = [str(p) for p in (_HERE.with_suffix(""), _HERE.parent.parent / "kernels") if p.is_dir()][:1]
