"""The kvstream tests' helpers: plain pure-Python replays of the prefix cache (the oracle; no numpy, no
Numba), random requests with shared prefixes, and a plain-CSV writer."""

from __future__ import annotations

import random
from collections import OrderedDict


def replay(requests: list[list[int]], input_tokens: list[int], block_tokens: int, capacity: int | None,
           policy: str) -> tuple[int, int]:
    """(hit blocks, hit tokens) of the requests through one cache of ``capacity`` blocks (None:
    infinite): a request hits its longest leading run held, then touches/inserts all its blocks."""
    flat = [b for r in requests for b in r]
    n = len(flat)
    cache: OrderedDict[int, None] = OrderedDict()
    hit_b = hit_t = 0
    t = 0
    for ids, inp in zip(requests, input_tokens):
        k = 0
        while k < len(ids) and ids[k] in cache:
            k += 1
        hit_b += k
        hit_t += min(k * block_tokens, inp)
        for b in ids:
            if b in cache:
                if policy == "lru":
                    cache.move_to_end(b)
            else:
                if capacity is not None and len(cache) == capacity:
                    if policy == "opt":              # brute force: the held block used farthest ahead
                        def next_use(x: int) -> int:
                            for u in range(t + 1, n):
                                if flat[u] == x:
                                    return u
                            return n + x
                        victim = max(cache, key=next_use)
                        del cache[victim]
                    else:
                        cache.popitem(last=False)
                cache[b] = None
            t += 1
    return hit_b, hit_t


def seen_before(requests: list[list[int]], input_tokens: list[int], block_tokens: int) -> tuple[int, int]:
    """The infinite cache as the simple count: leading ids seen in an earlier request."""
    seen: set[int] = set()
    hit_b = hit_t = 0
    for ids, inp in zip(requests, input_tokens):
        k = 0
        while k < len(ids) and ids[k] in seen:
            k += 1
        hit_b += k
        hit_t += min(k * block_tokens, inp)
        seen.update(ids)
    return hit_b, hit_t

def random_requests(seed: int, n: int = 60, block_tokens: int = 16, max_blocks: int = 12):
    """Requests sharing prefixes: each reuses a random leading part of an earlier one, then new ids.
    Returns (list of id lists, input tokens, block_tokens)."""
    rng = random.Random(seed)
    reqs, inps = [], []
    fresh = 1000
    for _ in range(n):
        nb = rng.randint(1, max_blocks)
        ids = []
        if reqs and rng.random() < 0.7:
            parent = rng.choice(reqs)
            ids = parent[:rng.randint(0, min(nb, len(parent)))]
        ids = list(ids)
        while len(ids) < nb:
            ids.append(fresh * 7 + 3)              # sparse raw ids: the reader renumbers them
            fresh += 1
        reqs.append(ids)
        inps.append(rng.randint((nb - 1) * block_tokens + 1, nb * block_tokens))
    return reqs, inps, block_tokens


def write_csv(path, reqs, inps, arrivals=None, sessions=None):
    lines = ["arrival_s,input_tokens,output_tokens,session,hash_ids"]
    for i, (ids, inp) in enumerate(zip(reqs, inps)):
        a = i * 0.5 if arrivals is None else arrivals[i]
        s = "" if sessions is None else sessions[i]
        lines.append(f"{a},{inp},{i % 7},{s},{' '.join(map(str, ids))}")
    path.write_text("\n".join(lines) + "\n")
    return path
