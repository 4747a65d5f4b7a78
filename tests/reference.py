"""A slow, obviously-correct Python twin of the replay engine, sharing no code with it.

Structure differs from the engine on purpose: the engine walks each request depth-first through the
hierarchy; this model replays **level by level** — tier 0 consumes the whole request list and
produces the list of requests it sends to tier 1 (in issue order, a miss's fetch before its victim's
writeback), tier 1 consumes that, and so on. In a non-inclusive hierarchy a tier's state depends
only on the requests it sees, so both orders give identical counts. Level by level also makes
Belady's OPT trivial here: a tier's whole future is the list in hand.

Sets are Python lists of ways (``None`` or a dict); recency/fifo order is an ``OrderedDict``.
The semantics are the ones documented in :mod:`tierlab.engine.door`.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict

M64 = (1 << 64) - 1

NAMES = ("hits", "misses", "bypasses", "fills", "evictions", "writebacks", "writethroughs",
         "unfetched", "bytes_read", "bytes_written", "pim_bytes", "back_invalidations")


def seed_state(seed, tier):
    x = (seed * 0x9E3779B97F4A7C15 + (tier + 1) * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 31
    return x or 1


def xorshift(x):
    x ^= (x << 13) & M64
    x ^= x >> 7
    x ^= (x << 17) & M64
    return x


class RefTier:
    def __init__(self, index, tier, lent):
        self.index = index
        self.name = tier.name
        self.block = tier.block_bytes
        self.policy = tier.policy
        cap = None
        if tier.managed == "cache":
            cap = tier.capacity_bytes
        elif tier.managed == "memory" and tier.lend and lent > 0:
            cap = lent
        self.caching = False
        if cap is not None:
            n_blocks = cap // tier.block_bytes
            ways = n_blocks if tier.ways is None else min(tier.ways, n_blocks)
            if ways > 0:
                self.caching = True
                self.ways = ways
                self.n_sets = n_blocks // ways
                self.sets = [[None] * ways for _ in range(self.n_sets)]
                self.order = [OrderedDict() for _ in range(self.n_sets)]  # block -> way


def reference_replay(tiers, lent_bytes, tensors, accesses, *, store_hit_recency=True,
                     fetch_on_write_miss=True, fetch_on_writeback_miss=True, flush=False, seed=0):
    """Replay and return ``(counts, flush_counts)``.

    ``tensors``: list of (address, home tier, kind). ``accesses``: list of (op, tensor id, offset,
    nbytes, count, stride, is_write, pim). ``counts[(op, kind, tier)][name]`` (a defaultdict of
    dicts); ``flush_counts[(kind, tier)][name]``.
    """
    counts = defaultdict(lambda: dict.fromkeys(NAMES, 0))
    fcounts = defaultdict(lambda: dict.fromkeys(NAMES, 0))
    rts = [RefTier(i, t, lent_bytes[i] if lent_bytes is not None else 0) for i, t in enumerate(tiers)]
    b0 = tiers[0].block_bytes
    # the request list at tier 0: (op, tensor, address, write, is_flush)
    reqs = []
    for op, tid, off, nb, cnt, stride, w, pim in accesses:
        addr, home, kind = tensors[tid]
        for j in range(cnt):
            start = addr + off + j * stride
            end = start + nb
            blocks = range(start // b0, (end - 1) // b0 + 1)
            if pim:
                counts[(op, kind, home)]["pim_bytes"] += len(blocks) * b0
                continue
            for bn in blocks:
                reqs.append((op, tid, bn * b0, bool(w), False))
    for rt in rts:
        reqs = _tier(rt, reqs, tiers, tensors, counts, fcounts, b0, store_hit_recency,
                     fetch_on_write_miss, fetch_on_writeback_miss, flush, seed)
    assert not reqs, "requests left below the last tier"
    return counts, fcounts


def _tier(rt, reqs, tiers, tensors, counts, fcounts, b0, store_hit_recency, fow, fowb, flush, seed):
    i = rt.index
    out = []
    size = b0 if i == 0 else tiers[i - 1].block_bytes
    blk = rt.block
    rng = seed_state(seed, i)
    # the lookups this tier will do, for opt: positions of each block
    lookups = [r for r in reqs if tensors[r[1]][1] != i] if rt.caching else []
    lookup_blocks = [r[2] // blk for r in lookups]
    pos = 0

    def c(r, kind):
        return fcounts[(kind, i)] if r[4] else counts[(r[0], kind, i)]

    for r in reqs:
        op, tid, addr, w, is_flush = r
        _, home, kind = tensors[tid]
        cc = c(r, kind)
        if home == i:
            cc["hits"] += 1
            cc["bytes_written" if w else "bytes_read"] += size
            continue
        bn = addr // blk
        if not rt.caching:
            cc["writethroughs" if w else "bypasses"] += 1
            out.append((op, tid, bn * blk, w, is_flush))
            continue
        here = pos
        pos += 1
        s = bn % rt.n_sets
        ways, order = rt.sets[s], rt.order[s]
        if bn in order:
            way = order[bn]
            cc["hits"] += 1
            if w:
                ways[way]["dirty"] = True
                cc["bytes_written"] += size
                if store_hit_recency and rt.policy == "lru":
                    order.move_to_end(bn)
            else:
                cc["bytes_read"] += size
                if rt.policy == "lru":
                    order.move_to_end(bn)
            continue
        cc["misses"] += 1
        fetch = True
        if w and size == blk:
            fetch = fow if i == 0 else fowb
        wb = None
        if None in ways:
            way = ways.index(None)
        else:
            if rt.policy in ("lru", "fifo"):
                victim_block = next(iter(order))
                way = order[victim_block]
            elif rt.policy == "random":
                rng = xorshift(rng)
                way = rng % rt.ways
            elif rt.policy == "opt":
                def nxt(b):
                    for q in range(here + 1, len(lookup_blocks)):
                        if lookup_blocks[q] == b:
                            return q
                    return float("inf")
                far = [nxt(e["block"]) for e in ways]
                way = far.index(max(far))
            else:
                raise ValueError(rt.policy)
            v = ways[way]
            vkind = tensors[v["owner"]][2]
            vc = c(r, vkind)
            vc["evictions"] += 1
            if v["dirty"]:
                vc["writebacks"] += 1
                vc["bytes_read"] += blk
                wb = (op, v["owner"], v["block"] * blk, True, is_flush)
            del order[v["block"]]
        ways[way] = {"block": bn, "dirty": w, "owner": tid}
        order[bn] = way
        cc["fills"] += 1
        if fetch:
            cc["bytes_written"] += blk
            out.append((op, tid, bn * blk, False, is_flush))
        else:
            cc["unfetched"] += 1
        cc["bytes_written" if w else "bytes_read"] += size
        if wb is not None:
            out.append(wb)
    if flush and rt.caching:
        for s in range(rt.n_sets):
            for e in rt.sets[s]:
                if e is not None and e["dirty"]:
                    e["dirty"] = False
                    kind = tensors[e["owner"]][2]
                    fcounts[(kind, i)]["writebacks"] += 1
                    fcounts[(kind, i)]["bytes_read"] += blk
                    out.append((-1, e["owner"], e["block"] * blk, True, True))
    return out


def reference_replay_inclusive(tiers, lent_bytes, tensors, accesses, *, store_hit_recency=True,
                               flush=False, seed=0):
    """The inclusive rule of :mod:`tierlab.engine.door`, request by request (depth first, by recursion).

    Same arguments and result as :func:`reference_replay` (lru, fifo and random only; fetches never
    skipped, as the engine requires). Level by level no longer works here: a farther tier's eviction
    changes what the nearer tiers hold. Each request is handled completely at its tier, then the
    requests it sends down are handled in issue order (the fetch, then the victim's writeback).
    Also returns the final tier states: ``states[i]`` = set of (block, dirty, tensor id) for a
    caching tier, None for the others.
    """
    counts = defaultdict(lambda: dict.fromkeys(NAMES, 0))
    fcounts = defaultdict(lambda: dict.fromkeys(NAMES, 0))
    rts = [RefTier(i, t, lent_bytes[i] if lent_bytes is not None else 0) for i, t in enumerate(tiers)]
    rng = [seed_state(seed, i) for i in range(len(tiers))]
    b0 = tiers[0].block_bytes

    def box(op, kind, i, is_flush):
        return fcounts[(kind, i)] if is_flush else counts[(op, kind, i)]

    def arriving_size(i):
        return b0 if i == 0 else tiers[i - 1].block_bytes

    def request(i, op, tid, addr, w, is_flush):
        _, home, kind = tensors[tid]
        cc = box(op, kind, i, is_flush)
        size = arriving_size(i)
        if home == i:
            cc["hits"] += 1
            cc["bytes_written" if w else "bytes_read"] += size
            return
        rt = rts[i]
        bn = addr // rt.block
        if not rt.caching:
            cc["writethroughs" if w else "bypasses"] += 1
            request(i + 1, op, tid, bn * rt.block, w, is_flush)
            return
        ways, order = rt.sets[bn % rt.n_sets], rt.order[bn % rt.n_sets]
        if bn in order:
            cc["hits"] += 1
            if w:
                ways[order[bn]]["dirty"] = True
            cc["bytes_written" if w else "bytes_read"] += size
            if rt.policy == "lru" and (store_hit_recency or not w):
                order.move_to_end(bn)
            return
        cc["misses"] += 1
        writeback = None
        if None in ways:
            way = ways.index(None)
        else:
            if rt.policy in ("lru", "fifo"):
                way = order[next(iter(order))]
            elif rt.policy == "random":
                rng[i] = xorshift(rng[i])
                way = rng[i] % rt.ways
            else:
                raise ValueError(rt.policy)
            v = ways[way]
            vc = box(op, tensors[v["owner"]][2], i, is_flush)
            vc["evictions"] += 1
            back_invalidate(i, v["block"], op, is_flush)  # may dirty v
            if v["dirty"]:
                vc["writebacks"] += 1
                vc["bytes_read"] += rt.block
                writeback = (v["owner"], v["block"] * rt.block)
            del order[v["block"]]
        ways[way] = {"block": bn, "dirty": w, "owner": tid}
        order[bn] = way
        cc["fills"] += 1
        cc["bytes_written"] += rt.block  # the fetch
        cc["bytes_written" if w else "bytes_read"] += size
        request(i + 1, op, tid, bn * rt.block, False, is_flush)
        if writeback is not None:
            request(i + 1, op, writeback[0], writeback[1], True, is_flush)

    def back_invalidate(k, victim, op, is_flush):
        for j in range(k):  # nearest first: dirty data moves down into the next caching tier
            rt = rts[j]
            if not rt.caching:
                continue
            per = rts[k].block // rt.block
            for u in range(victim * per, (victim + 1) * per):
                order = rt.order[u % rt.n_sets]
                if u not in order:
                    continue
                way = order.pop(u)
                e = rt.sets[u % rt.n_sets][way]
                rt.sets[u % rt.n_sets][way] = None
                c = box(op, tensors[e["owner"]][2], j, is_flush)
                c["back_invalidations"] += 1
                if e["dirty"]:
                    c["writebacks"] += 1
                    c["bytes_read"] += rt.block
                    deliver(j + 1, op, e["owner"], u * rt.block, is_flush)

    def deliver(p, op, tid, addr, is_flush):
        kind = tensors[tid][2]
        while not rts[p].caching:
            box(op, kind, p, is_flush)["writethroughs"] += 1
            p += 1
        rt = rts[p]
        bn = addr // rt.block
        order = rt.order[bn % rt.n_sets]
        assert bn in order, "inclusion broken"
        rt.sets[bn % rt.n_sets][order[bn]]["dirty"] = True
        c = box(op, kind, p, is_flush)
        c["hits"] += 1
        c["bytes_written"] += arriving_size(p)

    for op, tid, off, nb, cnt, stride, w, pim in accesses:
        addr, home, kind = tensors[tid]
        for j in range(cnt):
            start = addr + off + j * stride
            blocks = range(start // b0, (start + nb - 1) // b0 + 1)
            if pim:
                counts[(op, kind, home)]["pim_bytes"] += len(blocks) * b0
                continue
            for bn in blocks:
                request(0, op, tid, bn * b0, bool(w), False)
    if flush:
        for i, rt in enumerate(rts[:-1]):
            if not rt.caching:
                continue
            for s in range(rt.n_sets):
                for way in range(rt.ways):
                    e = rt.sets[s][way]
                    if e is not None and e["dirty"]:
                        e["dirty"] = False
                        c = fcounts[(tensors[e["owner"]][2], i)]
                        c["writebacks"] += 1
                        c["bytes_read"] += rt.block
                        request(i + 1, -1, e["owner"], e["block"] * rt.block, True, True)
    states = [None if not rt.caching else {(e["block"], e["dirty"], e["owner"]) for ways in rt.sets for e in ways if e}
              for rt in rts]
    return counts, fcounts, states


def naive_lru_misses(blocks, n_sets, ways):
    """Per-size LRU replay: one OrderedDict per set (set = block mod n_sets)."""
    sets = [OrderedDict() for _ in range(n_sets)]
    misses = 0
    for b in blocks:
        s = sets[b % n_sets]
        if b in s:
            s.move_to_end(b)
        else:
            misses += 1
            s[b] = True
            if len(s) > ways:
                s.popitem(last=False)
    return misses
