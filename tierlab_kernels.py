"""tierlab's operator kernels (the modules of ``kernels/``) under their import name, ``tierlab_kernels``.

The folder is never imported as ``kernels``: that is the import name of Hugging Face's package, which
Transformers requires and imports. Installed (a wheel or ``pip install -e``), ``pyproject.toml`` maps
``tierlab_kernels`` to the folder (``package-dir``). This module does the same for a checkout run without
an install, the repository's root on ``sys.path``: a module with a ``__path__`` is a package, and its
submodules (``tierlab_kernels.attention``, ...) are found in the folder. It is not shipped in the wheel.
"""

from pathlib import Path

__path__ = [str(Path(__file__).resolve().parent / "kernels")]
