"""Test-suite settings shared by every test module, in every area's folder.

``TIERLAB_DEBUG=1``: every replay in the tests runs in debug mode, so the conservation and count
invariants of :mod:`tierlab.engine.invariants` are checked after each one and a violation fails the test.
The ``transformers`` fixture: the capture extra, for the tests that build Transformers models.
"""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TIERLAB_DEBUG", "1")

# Tests live in one folder per area (engine/, traces/, serving/, ...); a test module may reuse another
# area's scenarios and helpers by name (``from test_engine_reference import scenarios``), and the
# shared references (reference.py, kvstream_reference.py) sit here: every area is on the path.
HERE = Path(__file__).resolve().parent
for _area in sorted(p for p in HERE.iterdir() if p.is_dir() and any(p.glob("test_*.py"))):
    if str(_area) not in sys.path:
        sys.path.append(str(_area))

HAVE_CAPTURE_EXTRA = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


@pytest.fixture(scope="module")
def transformers():
    """The capture extra's Transformers: skipped where it is not installed, a failure under CI=true
    (``.ci/run`` installs it)."""
    if not HAVE_CAPTURE_EXTRA:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true: the capture extra (torch, transformers) must be installed; .ci/run installs it")
        pytest.skip("the capture extra (torch, transformers) is not installed")
    import transformers

    return transformers
