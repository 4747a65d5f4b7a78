"""Each compiled function compiles once per request, not once more for a literal argument.

Numba types a variable first set to a constant (``i = 0``, then ``i += 1`` in a loop) as that
literal during type inference, and a call made with it compiles the callee for ``Literal[int](0)``
as well as for ``int64``; a callee given ``True`` here and ``False`` there compiles twice. Either
doubles a kernel's compile time (the walk's range fast path alone took 12 s of a 20 s first run).
In a fresh process with an empty cache (a warm cache loads a kernel with its callees inside, so it
would show nothing), a replay on a chip served by the walk, its fast path and lazy stacks
(``sn40l``), one served by set groups (``h100``) and block streams through the stream kernels
compile what they need; no compiled function of ``emulator/`` may then hold two signatures that
are the same once literals are widened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


SCRIPT = r"""
import importlib, json, pkgutil, sys
import numpy as np
from numba.core import types
from numba.core.registry import CPUDispatcher
import tierlab
from tierlab.chip.hierarchy import Tier
from tierlab.engine.door import replay_blocks
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model

trace = generate_trace(load_model("qwen2-0.5b"), RunConfig(context=16, generate=1), sys.argv[1])
for chip in ("sn40l", "h100"):
    replay_trace(trace, chip)
a = np.random.default_rng(0).integers(0, 1 << 20, 5000) * 64
tiers = [Tier("l1", 32 << 10, 64, 8, "lru", "cache", 1.0, 0.0, 0.0),
         Tier("l2", 1 << 20, 64, 16, "fifo", "cache", 1.0, 0.0, 0.0)]
replay_blocks(a, tiers=tiers)
replay_blocks(a, a % 3 == 0, tiers=tiers)
out = {}
for m in pkgutil.walk_packages(tierlab.__path__, "tierlab."):
    try:
        mod = importlib.import_module(m.name)
    except Exception:
        continue
    for name, f in vars(mod).items():
        if isinstance(f, CPUDispatcher) and f.py_func.__module__ == mod.__name__:
            seen = {}
            for sig in f.signatures:
                key = tuple(types.unliteral(t) for t in sig)
                if key in seen:
                    out[f"{mod.__name__}.{name}"] = [str(seen[key]), str(sig)]
                seen[key] = sig
json.dump(out, sys.stdout)
"""


def test_no_kernel_compiles_twice_for_a_literal(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "tiny.trace")], env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    twice = json.loads(p.stdout)
    assert twice == {}, "compiled once more for a literal argument: " + json.dumps(twice, indent=1)
