"""Serving a request stream through a tiered KV cache: an open-loop continuous-batching simulator.

Each request arrives at its own time (or, with ``closed_loop=C``, when one of ``C`` clients' last
request is done). Per replica, each step (the scheduler of :mod:`tierlab.serving.schedule`):

1. **Admission**, first come first served: a waiting request is admitted when its KV, ``input +
   output`` positions in whole blocks, fits in the HBM left by weights and workspace (the terms of
   :func:`tierlab.serving.capacity.device_terms`), evicting unpinned cached blocks (LRU) as
   needed; blocks of running requests are pinned. A request that does not fit blocks those behind it.
2. **Prefix lookup**: its leading blocks are looked up block by block in HBM, then ``dram``, ``ssd``,
   ``remote`` (the highest tier holding each); the run stops at the first block no tier holds. Hit
   tokens are ``min(k x block_tokens, input - 1)`` (the last prompt token is always computed, for
   its logits, as vLLM does).
3. **Load or recompute**: the hit blocks of the lower tiers are loaded over each tier's link
   (``bytes per device / bandwidth + latency`` per tier, one transfer each) up to the cut that
   minimises the estimated time to the end of the prefill (load, optionally overlapped layer by
   layer with the prefill of the rest: ``max(0, load - prefill) + load / layers``; prefill times from
   the step-time surface); blocks past the cut are recomputed. Tokens of each choice are counted.
   The request waits for its load, then its remaining prompt is prefilled in chunks.
4. **Steps**: every running decode takes a token of ``max_batch_tokens``, the rest goes to prompts
   being prefilled (oldest first, chunked). A step's time and energy come from the surface of
   :mod:`.steptime` (exact replays of a grid of steps, interpolated).
5. **Tiers**: new blocks land in HBM. An HBM block evicted moves to the next tier (``write-back``), or
   was written there when it was made (``write-through``); each lower tier is LRU and passes its own
   evictions down (write-back). A request done unpins its prompt blocks last block first, so LRU
   evicts a prefix's tail before its head (vLLM's free-block order).

With ``dp > 1``: replicas with their own HBM, ``dram`` and ``ssd``; ``remote`` is one pool shared by
all (``shared_remote``, as Mooncake Store) or one per replica. A router places each request on
arrival: ``round-robin``, ``least-loaded`` (fewest tokens outstanding) or ``prefix`` (the replica
holding its longest prefix, then the least loaded).
"""

from __future__ import annotations

import heapq
import os
from collections import OrderedDict, deque

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.serving.capacity import UTILISATION, device_terms, memory_tier
from tierlab.traces.run import RunConfig

from .steptime import surface_for
from .summary import RequestsResult, build_result
from .tiers import build_tiers

POLICIES = ("write-back", "write-through")
ROUTERS = ("round-robin", "least-loaded", "prefix")
MOONCAKE_BLOCK = 512


class LruTier:
    """A lower tier's blocks, LRU (an ordered dict: least recent first). Same semantics as the Numba
    block store of ``tierlab.kvstream.blockstore`` (touch returns the evicted ids)."""

    def __init__(self, name: str, capacity_blocks: int):
        self.name, self.cap, self.d = name, int(capacity_blocks), OrderedDict()

    def __contains__(self, b) -> bool:
        return b in self.d

    def touch(self, b) -> list:
        """Insert or refresh ``b``; the blocks evicted to make room."""
        d = self.d
        if b in d:
            d.move_to_end(b)
            return []
        if self.cap <= 0:
            return [b]
        d[b] = None
        out = []
        while len(d) > self.cap:
            out.append(d.popitem(last=False)[0])
        return out


class Replica:
    """One instance: its HBM (pinned and cached blocks), its lower tiers and its scheduler state."""

    def __init__(self, idx: int, hbm_blocks: int, lower: list):
        self.idx, self.cap = idx, hbm_blocks
        self.cached: OrderedDict = OrderedDict()    # unpinned prompt blocks, least recent first
        self.pinned: dict = {}                      # block -> running requests holding it
        self.private = 0                            # blocks of output positions and partial tails
        self.lower = lower                          # [(KvTier, LruTier)], nearest first
        self.waiting: deque = deque()
        self.prefilling: list = []                  # [req, pos, left, ready_s]
        self.decoding_heap: list = []               # (finish step, req)
        self.D, self.sumA, self.step = 0, 0, 0
        self.now, self.outstanding = 0.0, 0
        self.busy_s = 0.0

    def used(self) -> int:
        return len(self.cached) + len(self.pinned) + self.private

    def in_hbm(self, b) -> bool:
        return b in self.pinned or b in self.cached

    def prefix_len(self, ids) -> int:
        """Leading blocks held in any tier (HBM or lower)."""
        k = 0
        for b in ids:
            if self.in_hbm(b) or any(b in store for _, store in self.lower):
                k += 1
            else:
                break
        return k


def serve_requests(trace, spec, *, chip=None, system=None, tp: int = 1, pp: int = 1, ep: int = 1, dp: int = 1,
                   kv_tiers: dict | None = None, block_tokens: int | None = None, rate_scale: float = 1.0,
                   write_policy: str = "write-back", overlap_load: bool = True, router: str = "round-robin",
                   shared_remote: bool = True, max_batch_tokens: int = 8192, slo_ttft_s: float | None = None,
                   slo_tpot_s: float | None = None, weights: str = "bf16", kv: str = "bf16",
                   activations: str = "bf16", utilisation: float = UTILISATION, closed_loop: int | None = None, hbm_tokens: int | None = None,
                   workers: int | None = None, surface=None) -> RequestsResult:
    """Serve ``trace`` (a ``tierlab.kvstream.trace.RequestTrace``) with ``spec`` on ``chip`` or ``system`` (module
    docstring). ``kv_tiers``: tier name -> capacity (bytes, a size string, or None for the file's
    default). ``hbm_tokens``: KV tokens a replica's HBM holds, to override the KV limit (what-ifs,
    tests). ``surface``: a fitted :class:`.steptime.StepSurface` to reuse."""
    _check(trace, spec, chip, system, dp, router, write_policy, rate_scale, max_batch_tokens, closed_loop)
    spec, chip, system = _loaded(spec, chip, system)
    for name, v in (("slo_ttft_s", slo_ttft_s), ("slo_tpot_s", slo_tpot_s)):
        if v is not None and not v > 0:
            raise UsageError(f"expected a positive time in seconds, got {v!r}", field=name)
    if block_tokens is not None and block_tokens != trace.block_tokens:
        raise UsageError(f"the trace's ids are of {trace.block_tokens}-token blocks; re-read it with "
                         f"block_tokens={block_tokens}", field="block_tokens")
    bt = int(trace.block_tokens)
    inp = np.asarray(trace.input_tokens, np.int64)
    out = np.maximum(np.asarray(trace.output_tokens, np.int64), 1)
    too_long = np.flatnonzero(inp + out > spec.max_position_embeddings)
    if too_long.size:
        i = int(too_long[0])
        raise UsageError(f"request {i}: {inp[i]} + {out[i]} positions exceed {spec.name}'s "
                         f"max_position_embeddings {spec.max_position_embeddings}", field="trace")
    run = RunConfig(generate=1, weights=weights, kv=kv, activations=activations, tp=tp, pp=pp, ep=ep)
    target = chip if system is None else system.chip
    devices = run.devices
    if system is not None and devices * dp > system.n_chips:
        raise UsageError(f"dp x pp x tp = {devices * dp} devices; {system.name} has {system.n_chips} chips", field="tp")
    if system is None and (devices > 1 or dp > 1):
        raise UsageError("tp/pp/ep/dp above 1 need a system, not one chip", field="chip")
    positions = bt * 256
    terms = device_terms(spec, run, positions, max_batch_tokens)
    cap = int(utilisation * memory_tier(target).capacity_bytes)
    kv_tok_dev = max(t[2] for t in terms) / positions                  # the busiest device's KV per token
    hbm_dev = min(cap - w - a for w, a, _ in terms)
    if hbm_dev <= 0:
        raise UsageError(f"{spec.name}'s weights and workspace leave no HBM for KV on {target.name}", field="spec")
    if hbm_tokens is None:
        hbm_tokens = int(hbm_dev // kv_tok_dev)
    elif isinstance(hbm_tokens, bool) or not isinstance(hbm_tokens, int) or hbm_tokens < bt:
        raise UsageError(f"expected at least one block of tokens, got {hbm_tokens!r}", field="hbm_tokens")
    kv_tok = kv_tok_dev * devices                                       # the replica's KV per token
    tiers = build_tiers(kv_tiers, target, system, devices, hbm_tokens * kv_tok)
    max_ctx = int(min(spec.max_position_embeddings, hbm_tokens))
    surf = surface or surface_for(spec, run, chip=chip, system=system, max_batch_tokens=max_batch_tokens,
                                  max_context=max_ctx, workers=workers)
    arrival = np.asarray(trace.arrival_s, np.float64) / float(rate_scale)
    sim = _Sim(trace, tiers, surf, bt, kv_tok, kv_tok_dev, hbm_tokens // bt, dp, router, write_policy,
               overlap_load, shared_remote, max_batch_tokens, spec.num_layers, inp, out)
    sim.run(arrival, closed_loop)
    return build_result(sim, spec=spec, chip=chip, system=system, tiers=tiers, devices=devices, dp=dp,
                        arrival=arrival, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s, surface=surf,
                        settings=dict(block_tokens=bt, rate_scale=rate_scale, write_policy=write_policy,
                                      overlap_load=overlap_load, router=router, shared_remote=shared_remote,
                                      max_batch_tokens=max_batch_tokens, utilisation=utilisation,
                                      closed_loop=closed_loop, weights=weights, kv=kv, activations=activations,
                                      tp=tp, pp=pp, ep=ep, dp=dp))


def _loaded(spec, chip, system):
    """A model, chip or system given by name or path, loaded (objects pass through)."""
    if isinstance(spec, (str, os.PathLike)):
        from tierlab.traces.spec import load_model

        spec = load_model(spec)
    if isinstance(chip, (str, os.PathLike)):
        from tierlab.chip.chipfile import load_chip

        chip = load_chip(chip)
    if isinstance(system, (str, os.PathLike)):
        from tierlab.system.systemfile import load_system

        system = load_system(system)
    return spec, chip, system


def _check(trace, spec, chip, system, dp, router, write_policy, rate_scale, max_batch_tokens, closed_loop) -> None:
    from tierlab.common.suggest import did_you_mean

    if (chip is None) == (system is None):
        raise UsageError("give a chip or a system", field="chip")
    if router not in ROUTERS:
        raise UsageError(f"unknown router {router!r}; {did_you_mean(router, ROUTERS)}", field="router")
    if router == "prefix" and dp < 2:
        raise UsageError("router 'prefix' chooses among replicas; it needs dp > 1", field="router")
    if write_policy not in POLICIES:
        raise UsageError(f"unknown write policy {write_policy!r}; {did_you_mean(write_policy, POLICIES)}",
                         field="write_policy")
    if not (rate_scale > 0 and np.isfinite(rate_scale)):
        raise UsageError(f"expected a positive rate scale, got {rate_scale!r}", field="rate_scale")
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise UsageError(f"expected a positive integer, got {dp!r}", field="dp")
    if not isinstance(max_batch_tokens, int) or max_batch_tokens < 1:
        raise UsageError(f"expected a positive integer, got {max_batch_tokens!r}", field="max_batch_tokens")
    if closed_loop is not None and (not isinstance(closed_loop, int) or closed_loop < 1):
        raise UsageError(f"expected a positive number of clients, got {closed_loop!r}", field="closed_loop")
    if len(trace) == 0:
        raise UsageError("the trace has no requests", field="trace")


class _Sim:
    """The simulation's state and loop (module docstring); per-request results in numpy arrays."""

    def __init__(self, trace, tiers, surf, bt, kv_tok, kv_tok_dev, hbm_blocks, dp, router, policy, overlap,
                 shared_remote, budget, layers, inp, out):
        self.trace, self.tiers, self.surf, self.bt = trace, tiers, surf, bt
        self.kv_tok, self.kv_tok_dev, self.router, self.policy = kv_tok, kv_tok_dev, router, policy
        self.overlap, self.budget, self.layers = overlap, budget, max(1, layers)
        self.inp, self.out = inp, out
        self.off, self.blocks = np.asarray(trace.block_offsets), np.asarray(trace.blocks)
        n, nt = len(inp), len(tiers)
        shared = None
        self.replicas = []
        for r in range(dp):
            lower = []
            for t in tiers[1:]:
                blocks = int(t.capacity_bytes // (kv_tok * bt))
                if t.name == "remote" and shared_remote:
                    shared = shared or LruTier(t.name, blocks * (1 if t.shared else dp))
                    lower.append((t, shared))
                else:
                    lower.append((t, LruTier(t.name, blocks)))
            self.replicas.append(Replica(r, hbm_blocks, lower))
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.admitted = np.full(n, np.nan)
        self.replica_of = np.full(n, -1, np.int64)
        self.tok_from = np.zeros((n, nt), np.int64)       # hit tokens served (loaded, or in HBM)
        self.tok_recomputed = np.zeros((n, nt), np.int64)  # hit tokens recomputed instead of loaded
        self.computed = np.zeros(n, np.int64)
        self.written_blocks = np.zeros(nt, np.int64)       # blocks written into each tier
        self.evicted_blocks = np.zeros(nt, np.int64)       # blocks evicted from each tier
        self.step_energy_j = 0.0
        self.steps = 0
        self.rr = 0

    # ---- the loop -------------------------------------------------------------------------------
    def run(self, arrival: np.ndarray, closed_loop: int | None) -> None:
        n = len(arrival)
        heap = []
        if closed_loop:
            for i in range(min(closed_loop, n)):
                heapq.heappush(heap, (0.0, i))
            self.next_closed = min(closed_loop, n)
        else:
            self.next_closed = None
        self.arrivals, self.closed = heap, closed_loop
        nxt = 0
        reps = self.replicas
        while True:
            t_arr = heap[0][0] if heap else (arrival[nxt] if (not closed_loop and nxt < n) else np.inf)
            busy = [r for r in reps if r.outstanding > 0]
            r = min(busy, key=lambda x: x.now) if busy else None
            if r is not None and r.now < t_arr:
                self._step(r, t_arr)
                continue
            if t_arr == np.inf:
                break
            if heap:
                t, i = heapq.heappop(heap)
            else:
                t, i = arrival[nxt], nxt
                nxt += 1
            dst = self._route(i)
            dst.now = max(dst.now, t)
            dst.waiting.append(i)
            dst.outstanding += 1
            self.replica_of[i] = dst.idx

    def _route(self, i: int) -> Replica:
        reps = self.replicas
        if len(reps) == 1:
            return reps[0]
        if self.router == "round-robin":
            self.rr += 1
            return reps[(self.rr - 1) % len(reps)]
        load = lambda r: (sum(int(self.inp[j] + self.out[j]) for j in r.waiting) + r.outstanding)
        if self.router == "least-loaded":
            return min(reps, key=load)
        ids = self.blocks[self.off[i]:self.off[i + 1]].tolist()
        return max(reps, key=lambda r: (r.prefix_len(ids), -load(r)))

    def _step(self, r: Replica, horizon: float) -> None:
        while r.waiting and self._admit(r, r.waiting[0]):
            r.waiting.popleft()
        left = self.budget - r.D
        P = Q = chunks = 0
        done_pf = []
        for e in r.prefilling:
            if left <= 0:
                break
            if e[3] > r.now:
                continue
            t = min(left, e[2])
            P += t
            Q += t * e[1] + t * (t + 1) // 2
            chunks += 1
            left -= t
            e[1] += t
            e[2] -= t
            if e[2] == 0:
                done_pf.append(e)
        if r.D == 0 and chunks == 0:                      # idle: wait for a load or an arrival
            ready = [e[3] for e in r.prefilling if e[3] > r.now]
            nxt = min(ready) if ready else np.inf
            if nxt == np.inf and horizon == np.inf:
                raise UsageError(f"request {r.waiting[0]} does not fit in HBM even alone "
                                 f"({self.inp[r.waiting[0]] + self.out[r.waiting[0]]} positions)", field="trace")
            r.now = min(nxt, horizon) if nxt < np.inf else horizon
            return
        S = r.sumA + r.D * r.step
        dt = self.surf.time(r.D, S, P, Q, chunks)
        self.step_energy_j += self.surf.energy(r.D, S, P, Q, chunks)
        r.now += dt
        r.busy_s += dt
        self.steps += 1
        r.step += 1                                       # every decode moved one position on
        while r.decoding_heap and r.decoding_heap[0][0] <= r.step:
            _, i = heapq.heappop(r.decoding_heap)
            self._finish(r, i, r.now)
        for e in done_pf:
            r.prefilling.remove(e)
            i = e[0]
            self.first[i] = r.now
            if self.out[i] <= 1:
                self._finish(r, i, r.now)
            else:                                          # decodes out - 1 more tokens
                r.D += 1
                r.sumA += int(self.inp[i]) - r.step
                heapq.heappush(r.decoding_heap, (r.step + int(self.out[i]) - 1, i))

    def _finish(self, r: Replica, i: int, t: float) -> None:
        self.finish[i] = t
        if self.out[i] > 1:                                # it was decoding
            r.D -= 1
            r.sumA -= int(self.inp[i]) - (r.step - (int(self.out[i]) - 1))
        ids = self.blocks[self.off[i]:self.off[i + 1]].tolist()
        for b in reversed(ids):                            # tail first: LRU loses a prefix's tail first
            c = r.pinned[b] - 1
            if c:
                r.pinned[b] = c
            else:
                del r.pinned[b]
                r.cached[b] = None
        r.private -= self._total_blocks(i) - len(ids)
        r.outstanding -= 1
        if self.closed and self.next_closed < len(self.inp):
            heapq.heappush(self.arrivals, (t, self.next_closed))
            self.next_closed += 1

    def _total_blocks(self, i: int) -> int:
        return -(-int(self.inp[i] + self.out[i]) // self.bt)

    # ---- admission, lookup, load or recompute ------------------------------------------------------
    def _admit(self, r: Replica, i: int) -> bool:
        ids = self.blocks[self.off[i]:self.off[i + 1]].tolist()
        inp, bt = int(self.inp[i]), self.bt
        kh = 0
        for b in ids:
            if r.in_hbm(b):
                kh += 1
            else:
                break
        need = self._total_blocks(i) - kh
        evictable = len(r.cached) - sum(1 for b in ids[:kh] if b in r.cached)
        if r.cap - r.used() + evictable < need:
            return False
        if need > r.cap:
            raise UsageError(f"request {i}: {inp + int(self.out[i])} positions need {need} blocks; HBM holds "
                             f"{r.cap}", field="trace")
        src = []                                           # tier index (1..) of each block past the HBM hits
        for b in ids[kh:]:
            where = 0
            for j, (_, store) in enumerate(r.lower):
                if b in store:
                    where = j + 1
                    break
            if not where:
                break
            src.append(where)
        k = kh + len(src)
        hit_tok = min(k * bt, inp - 1)
        hbm_tok = min(kh * bt, hit_tok)
        seg = []                                           # (tier index, tokens) in order
        pos = hbm_tok
        for j, w in enumerate(src):
            t = min(bt, hit_tok - pos)
            if t <= 0:
                break
            if seg and seg[-1][0] == w:
                seg[-1][1] += t
            else:
                seg.append([w, t])
            pos += t
        use = self._choose(hbm_tok, seg, inp)
        loaded_tok, load_s = hbm_tok, 0.0
        self.tok_from[i, 0] = hbm_tok
        for n_seg, (w, t) in enumerate(seg):
            if n_seg < use:
                tier = self.tiers[w]
                load_s += tier.load_time(t * self.kv_tok_dev)
                self.tok_from[i, w] += t
                loaded_tok += t
            else:
                self.tok_recomputed[i, w] += t
        rest = inp - loaded_tok
        self.computed[i] = rest
        if self.overlap and load_s > 0:
            load_s = max(0.0, load_s - self.surf.prefill_time(rest, loaded_tok)) + load_s / self.layers
        # blocks: pin the HBM hits, make room, insert the rest (loaded or computed)
        for b in ids[:kh]:
            if b in r.cached:
                del r.cached[b]
                r.pinned[b] = 1
            else:
                r.pinned[b] += 1
        short = need - (r.cap - r.used())
        for _ in range(max(0, short)):
            b, _ = r.cached.popitem(last=False)
            self.evicted_blocks[0] += 1
            if self.policy == "write-back":
                self._write_down(r, 0, b)
        for b in ids[kh:]:
            if b in r.pinned:
                r.pinned[b] += 1
                continue
            r.cached.pop(b, None)
            r.pinned[b] = 1
            if self.policy == "write-through":
                self._write_down(r, 0, b)
        for j, b in enumerate(ids[kh:kh + len(src)]):
            r.lower[src[j] - 1][1].touch(b)
        r.private += self._total_blocks(i) - len(ids)
        self.admitted[i] = r.now
        r.prefilling.append([i, loaded_tok, rest, r.now + load_s])
        return True

    def _choose(self, hbm_tok: int, seg: list, inp: int) -> int:
        """How many lower-tier segments to load (the rest recomputed): the cut minimising the
        estimated load (overlapped or not) plus prefill of the rest."""
        best, best_n, load, done = None, 0, 0.0, hbm_tok
        for n in range(len(seg) + 1):
            if n:
                w, t = seg[n - 1]
                load += self.tiers[w].load_time(t * self.kv_tok_dev)
                done += t
            pf = self.surf.prefill_time(inp - done, done)
            eff = (max(0.0, load - pf) + load / self.layers) if self.overlap and load > 0 else load
            c = pf + eff
            if best is None or c < best - 1e-12:
                best, best_n = c, n
        return best_n

    def _write_down(self, r: Replica, level: int, b) -> None:
        """Block ``b`` leaves tier ``level`` for ``level + 1`` (written unless held there already);
        that tier's own evictions go further down, the last tier's are dropped."""
        while level < len(r.lower):
            _, store = r.lower[level]
            if b in store:
                store.touch(b)
                return
            self.written_blocks[level + 1] += 1
            ev = store.touch(b)
            if not ev:
                return
            self.evicted_blocks[level + 1] += len(ev)
            for e in ev[:-1]:
                self._write_down(r, level + 1, e)
            b, level = ev[-1], level + 1
