"""Test-suite settings shared by every test module.

``TIERLAB_DEBUG=1``: every replay in the tests runs in debug mode, so the conservation and count
invariants of :mod:`emulator.engine.invariants` are checked after each one and a violation fails the test.
"""

import os

os.environ.setdefault("TIERLAB_DEBUG", "1")
