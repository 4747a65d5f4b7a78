"""Count masked vector stores in the compiled stream kernels, for the target Numba compiles for.

A blend of a set's words stored back where they were loaded can be turned by LLVM into a masked
store when the set spans several host vectors (AVX2: a 16-way set of int32 words, an 8-way set of
int64 words). Masked stores (``vpmaskmovd``/``vpmaskmovq``) are cheap on Intel but microcoded on
AMD before Zen 4 (uops.info: 42 uops, one per 12 cycles on Zen 2/3), so the kernels must have none.
Prints JSON: the count per kernel (each compiled fresh into a scratch cache directory, so that its
code can be read). To check an AVX2 target on any x86 host, set ``NUMBA_CPU_NAME`` and
``NUMBA_CPU_FEATURES`` (e.g. ``znver2`` and the AVX2 features, ``-avx512f`` and the other
``avx512*`` turned off).

    python benchmarks/check_vector_code.py
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile

SCRATCH = tempfile.mkdtemp(prefix="tierlab-vector-code-")
os.environ["NUMBA_CACHE_DIR"] = SCRATCH          # before Numba is imported
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)

import numpy as np  # noqa: E402

import _common  # noqa: E402,F401  (puts the repository on sys.path)
from tierlab.engine import stream  # noqa: E402


def _asm(fn) -> str:
    text = "\n".join(fn.inspect_asm().values())
    if "ret" not in text:       # code loaded from a cache cannot be read
        raise SystemExit("no machine code to read (loaded from a cache?)")
    return text


def main() -> None:
    out = {}
    for ways in (8, 16):
        for clean in (True, False):
            fn = stream._build(ways, True, clean, False, False)
            n = 64
            tag = stream.new_state(64 * ways, np.int64)
            fn(np.arange(n, dtype=np.int64), n, 0, np.zeros(n, bool), 0, 64, 63, ways, False, True, True, 64, 64, 0,
               tag, np.empty(2 * n, np.int64), np.empty(2 * n, bool), np.zeros(16, np.int64), np.zeros(1, np.uint64))
            out[f"tier_pass_{ways}way{'_clean' if clean else ''}"] = _asm(fn).count("maskmov")
    par = np.array([[64, 63, 6, 8, 0], [1024, 1023, 10, 16, 0], [8192, 8191, 13, 16, 0]], np.int64)
    for levels, fifo in ((2, False), (3, False), (2, True), (3, True)):
        for width in (16, 32, 64):
            spec = ((8, True, fifo, width),) + ((16, True, fifo, width),) * (levels - 1)
            fn = stream._build_chain(spec)
            tags = stream.chain_state(par[:levels], [width] * levels)
            tags += [tags[0]] * (3 - levels)
            fn(np.arange(100, dtype=np.int64), 100, par[:levels], *tags, np.zeros((3, 2), np.int64))
            out[f"chain_{levels}_levels_{'fifo' if fifo else 'lru'}_int{width}"] = _asm(fn).count("maskmov")
    import numba
    print(json.dumps({"check": "masked_stores", "cpu_name": numba.config.CPU_NAME or "host",
                      "counts": out, "total": sum(out.values())}, indent=1))


if __name__ == "__main__":
    main()
