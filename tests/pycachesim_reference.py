"""pycachesim as the reference of the address-trace tests, replayed in a process of its own.

In one pytest process after hundreds of other tests, pycachesim 0.3.1 once gave another L2 count for
the same loads than the same call a moment later (71 against 83 hits: a fresh venv's full run of
the README's test command, 7 of the 8 cases of test_imported_trace_replays_as_pycachesim), and
never in a process of its own: its answer depends on the process's earlier state. So the reference
runs in a new interpreter (:func:`replay_isolated`), as it does when its test runs alone.

Each record ``(address, size, is_write)`` is one request per 64-byte line it touches, as tierlab's
import makes them. pycachesim counts hits of loads only, and a store miss allocates by a load;
tierlab counts every request. Per level, the loads arriving from above are known (the records' load
lines at the first level, the misses of the level above below it), so the store misses are its other
loads, and its hits over all requests are load hits + stores - store misses.
"""

from __future__ import annotations

import json
import subprocess
import sys

LINE = 64


def replay(policy: str, levels, records) -> dict:
    """``{level: (hits, misses)}`` of ``records`` on pycachesim's hierarchy ``levels`` ((name, sets,
    ways), nearest first) with ``policy`` (lru or fifo), in this process."""
    from cachesim import Cache, CacheSimulator, MainMemory

    mem = MainMemory()
    below, caches = None, []
    for name, sets, ways in reversed(levels):
        c = Cache(name, sets, ways, LINE, policy.upper(), load_from=below, store_to=below)
        caches.append(c)
        below = c
    mem.load_to(caches[0])
    mem.store_from(caches[0])
    sim = CacheSimulator(caches[-1], mem)
    for a, size, w in records:
        for line in range(a // LINE, (a + size - 1) // LINE + 1):
            lo, hi = max(a, line * LINE), min(a + size, (line + 1) * LINE)
            (sim.store if w else sim.load)(int(lo), length=int(hi - lo))
    st = {x["name"]: x for x in sim.stats()}
    loads = sum((a + s - 1) // LINE - a // LINE + 1 for a, s, w in records if not w)
    out = {}
    for name, _, _ in levels:
        x = st[name]
        store_misses = x["LOAD_count"] - loads
        out[name] = (x["HIT_count"] + x["STORE_count"] - store_misses, x["MISS_count"])
        loads = x["MISS_count"]
    return out


def replay_isolated(policy: str, levels, records) -> dict:
    """:func:`replay` in a new interpreter (module docstring)."""
    data = json.dumps({"policy": policy, "levels": [list(x) for x in levels],
                       "records": [[int(a), int(s), bool(w)] for a, s, w in records]})
    out = subprocess.run([sys.executable, __file__], input=data, capture_output=True, text=True, check=True)
    return {k: tuple(v) for k, v in json.loads(out.stdout).items()}


if __name__ == "__main__":
    d = json.load(sys.stdin)
    print(json.dumps(replay(d["policy"], [tuple(x) for x in d["levels"]], [tuple(r) for r in d["records"]])))
