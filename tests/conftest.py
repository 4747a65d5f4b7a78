"""Test-suite settings shared by every test module.

``TIERLAB_DEBUG=1``: every replay in the tests runs in debug mode, so the conservation and count
invariants of :mod:`tierlab.engine.invariants` are checked after each one and a violation fails the test.
The ``transformers`` fixture: the capture extra, for the tests that build Transformers models.
"""

import importlib.util
import os

import pytest

os.environ.setdefault("TIERLAB_DEBUG", "1")

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
