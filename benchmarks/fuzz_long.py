"""Long fuzz run of the loaders (chip files, model configs, trace bytes); prints JSON.

The cases are those of ``tests/traces/test_fuzz.py`` (same mutations, same allowed outcomes: a valid object
or a one-line TierlabError), run many more times. Anything else is a *failure*: it is counted, the
first few are described (exception, message, innermost tierlab frame), and the exit status is 1.

    python benchmarks/fuzz_long.py [--cases N] [--only chip|config|trace|trace-values] [--seed S]

Output: ``{"cases": total, "seconds": ..., "targets": {name: {"cases", "ok", "errors": {type: n},
"failures", "examples"}}}``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("TIERLAB_DEBUG", "1")   # replays of fuzzed chips check their invariants

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import test_fuzz  # noqa: E402

TARGETS = {"chip": test_fuzz.fuzz_chip, "config": test_fuzz.fuzz_config, "trace": test_fuzz.fuzz_trace,
           "trace-values": test_fuzz.fuzz_trace_values}


def _where(err: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "/tests/" not in f.filename
              and "/benchmarks/" not in f.filename and "site-packages" not in f.filename]
    f = frames[-1] if frames else traceback.extract_tb(err.__traceback__)[-1]
    return f"{Path(f.filename).name}:{f.lineno} ({f.name})"


class CaseTimeout(Exception):
    """A case ran longer than --timeout seconds: a hang is a failure too."""


def _alarm(signum, frame):
    raise CaseTimeout("case exceeded the time limit")


def run_target(name: str, cases: int, seed: int, scratch: Path, timeout_s: int = 20) -> dict:
    fn = TARGETS[name]
    tally: Counter = Counter()
    examples: dict[str, str] = {}
    messages: dict[str, str] = {}

    @hypothesis_seed(seed)
    @settings(max_examples=cases, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def one(data):
        signal.alarm(timeout_s)
        try:
            result = fn(data, scratch)
            tally[result] += 1
            kind = result.partition(":")[2]
            if kind and sum(k.startswith(kind) for k in messages) < 3:   # a few samples of each type
                messages[f"{kind} #{tally[result]}"] = test_fuzz.LAST_ERROR[:200]
        except Exception as err:   # a failure: record it, keep going (no shrinking)
            key = f"{type(err).__name__} at {_where(err)}"
            tally["failure"] += 1
            if key not in examples and len(examples) < 10:
                examples[key] = str(err)[:300]
        finally:
            signal.alarm(0)

    one()
    ok = tally.pop("ok", 0)
    failures = tally.pop("failure", 0)
    return {"cases": ok + failures + sum(tally.values()), "ok": ok,
            "errors": {k.split(":", 1)[1]: v for k, v in sorted(tally.items())},
            "failures": failures, "examples": examples, "sample_errors": messages}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=2000, help="cases per target (default 2000)")
    ap.add_argument("--only", choices=sorted(TARGETS), action="append", help="fuzz only these targets")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=20, help="seconds one case may take (default 20)")
    args = ap.parse_args()
    signal.signal(signal.SIGALRM, _alarm)
    t0 = time.perf_counter()
    out = {"targets": {}}
    with tempfile.TemporaryDirectory(prefix="tierlab-fuzz-long-") as d:
        for name in args.only or sorted(TARGETS):
            t = time.perf_counter()
            res = run_target(name, args.cases, args.seed, Path(d), args.timeout)
            res["seconds"] = round(time.perf_counter() - t, 2)
            out["targets"][name] = res
    out["cases"] = sum(r["cases"] for r in out["targets"].values())
    out["failures"] = sum(r["failures"] for r in out["targets"].values())
    out["seconds"] = round(time.perf_counter() - t0, 2)
    print(json.dumps(out, indent=1))
    return 1 if out["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
