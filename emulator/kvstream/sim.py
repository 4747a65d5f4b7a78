"""The simulation loop of :func:`tierlab.kvstream.server.serve_requests` (its docstring has the rules):
arrivals, routing, admission, prefix lookup, load or recompute, steps, and the tiers' write-down."""

from __future__ import annotations

import heapq

import numpy as np

from .replica import LruTier, Replica


class Sim:
    """The simulation's state and loop (module docstring); per-request results in numpy arrays."""

    def __init__(self, trace, tiers, surf, bt, kv_tok, kv_tok_dev, hbm_blocks, dp, router, policy, overlap,
                 shared_remote, budget, layers, inp, out, roles=None, handover=None):
        self.trace, self.tiers, self.surf, self.bt = trace, tiers, surf, bt
        self.kv_tok, self.kv_tok_dev, self.router, self.policy = kv_tok, kv_tok_dev, router, policy
        self.overlap, self.budget, self.layers = overlap, budget, max(1, layers)
        self.inp, self.out = inp, out
        self.off, self.blocks = np.asarray(trace.block_offsets), np.asarray(trace.blocks)
        n, nt = len(inp), len(tiers)
        shared = None
        self.replicas = []
        roles = roles or ["both"] * dp
        self.handover = handover                      # a .transfer.KvHandover when prefill and decode are apart
        for r, role in enumerate(roles):
            lower = []
            for t in (tiers[1:] if role != "decode" else ()):
                blocks = int(t.capacity_bytes // (kv_tok * bt))
                if t.name == "remote" and shared_remote:
                    shared = shared or LruTier(t.name, blocks * (1 if t.shared else dp))
                    lower.append((t, shared))
                else:
                    lower.append((t, LruTier(t.name, blocks)))
            self.replicas.append(Replica(r, hbm_blocks, lower, role))
        self.front = [x for x in self.replicas if x.role != "decode"]      # where requests arrive
        self.back = [x for x in self.replicas if x.role == "decode"]
        self.decode_replica_of = np.full(n, -1, np.int64)
        self.transfer_s = np.zeros(n)                  # the KV handover's own time (from its start)
        self.transfer_wait_s = np.zeros(n)             # prefill end to the handover's start (links busy)
        self.transfer_bytes = np.zeros(n)
        self.handoffs: list = []                       # (time the KV lands, request, decode replica)
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.admitted = np.full(n, np.nan)
        self.replica_of = np.full(n, -1, np.int64)
        self.tok_from = np.zeros((n, nt), np.int64)       # hit tokens served (loaded, or in HBM)
        self.tok_recomputed = np.zeros((n, nt), np.int64)  # hit tokens recomputed instead of loaded
        self.computed = np.zeros(n, np.int64)
        self.written_blocks = np.zeros(nt, np.int64)       # blocks written into each tier
        self.evicted_blocks = np.zeros(nt, np.int64)       # blocks evicted from each tier
        self.est_prefill_s = np.zeros(n)                   # the ttft router's estimate of each prefill
        self.step_energy_j = 0.0
        self.steps = 0
        self.rr = 0

    # ---- the loop -------------------------------------------------------------------------------
    def run(self, arrival: np.ndarray, closed_loop: int | None) -> None:
        n = len(arrival)
        # when each request was sent: its arrival, or in a closed loop when a client's last request finished
        self.issued = np.array(arrival, np.float64, copy=True)
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
            t_kv = self.handoffs[0][0] if self.handoffs else np.inf
            busy = [r for r in reps if r.outstanding > 0]
            r = min(busy, key=lambda x: x.now) if busy else None
            if r is not None and r.now < min(t_arr, t_kv):
                self._step(r, min(t_arr, t_kv))
                continue
            if t_kv <= t_arr and t_kv < np.inf:        # a request's KV lands on its decode replica
                t, i, d = heapq.heappop(self.handoffs)
                dst = reps[d]
                dst.now = max(dst.now, t)
                dst.waiting.append(i)
                dst.outstanding += 1
                continue
            if t_arr == np.inf:
                break
            if heap:
                t, i = heapq.heappop(heap)
                self.issued[i] = t
            else:
                t, i = arrival[nxt], nxt
                nxt += 1
            dst = self._route(i)
            dst.load_tokens += int(self.inp[i] + self.out[i])
            dst.now = max(dst.now, t)
            dst.waiting.append(i)
            dst.outstanding += 1
            self.replica_of[i] = dst.idx

    def _route(self, i: int) -> Replica:
        reps = self.front
        if len(reps) == 1:
            return reps[0]
        n = len(reps)
        self.rr += 1
        if self.router == "round-robin":
            return reps[(self.rr - 1) % n]
        turn = lambda r: (r.idx - self.rr) % n            # ties go round, not always to the first replica
        if self.router == "least-loaded":
            return min(reps, key=lambda r: (r.load_tokens, turn(r)))
        ids = self.blocks[self.off[i]:self.off[i + 1]].tolist()
        if self.router == "ttft":
            return self._route_ttft(i, ids, reps, turn)
        return max(reps, key=lambda r: (r.prefix_len(ids), -r.load_tokens, -turn(r)))

    def _route_ttft(self, i: int, ids: list, reps: list, turn) -> Replica:
        """Mooncake's cache-aware prefill scheduling (FAST'25 Algorithm 1, an instance's own prefix): the
        replica with the shortest estimated TTFT, its queue (the estimated prefills of the requests
        routed there and not yet prefilled) plus this prompt's prefill after the prefix it holds."""
        inp = int(self.inp[i])
        best, best_key, best_pf = None, None, 0.0
        for r in reps:
            hit = min(r.prefix_len(ids) * self.bt, inp - 1)
            pf = self.surf.prefill_time(inp - hit, hit)
            key = (r.queued_prefill_s + pf, turn(r))
            if best_key is None or key < best_key:
                best, best_key, best_pf = r, key, pf
        self.est_prefill_s[i] = best_pf
        best.queued_prefill_s += best_pf
        return best

    def _step(self, r: Replica, horizon: float) -> None:
        admit = self._admit_decode if r.role == "decode" else self._admit
        while r.waiting and admit(r, r.waiting[0]):
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
                i = r.waiting[0]
                raise self.trace.request_error(i, f"does not fit in HBM even alone "
                                               f"({int(self.inp[i] + self.out[i])} positions)")
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
            r.queued_prefill_s -= self.est_prefill_s[i]      # the ttft router's queue estimate
            if r.role == "prefill":                       # its KV moves to a decode replica
                r.load_tokens -= int(self.inp[i] + self.out[i])
                self._release(r, i)
                self._hand_over(r, i, r.now)
                continue
            self._start_decode(r, i)

    def _start_decode(self, r: Replica, i: int) -> None:
        """Request ``i``'s first token is out (now): it finishes, or decodes ``out - 1`` more tokens."""
        self.first[i] = r.now
        if self.out[i] <= 1:
            self._finish(r, i, r.now)
        else:
            r.D += 1
            r.sumA += int(self.inp[i]) - r.step
            heapq.heappush(r.decoding_heap, (r.step + int(self.out[i]) - 1, i))

    def _hand_over(self, r: Replica, i: int, t: float) -> None:
        """Send request ``i``'s prompt KV from prefill replica ``r`` to the decode replica with the
        fewest blocks held and awaited, over the system's links (:mod:`.transfer`)."""
        d = min(self.back, key=lambda x: (x.used() + x.incoming, x.idx))
        d.incoming += self._total_blocks(i)
        start, land, nbytes = self.handover.send(r.idx, d.idx - len(self.front), int(self.inp[i]), t)
        self.transfer_wait_s[i] = start - t
        self.transfer_s[i] = land - start
        self.transfer_bytes[i] = nbytes
        self.decode_replica_of[i] = d.idx
        heapq.heappush(self.handoffs, (land, i, d.idx))

    def _admit_decode(self, r: Replica, i: int) -> bool:
        """A decode replica takes request ``i`` when its ``input + output`` positions fit (private
        blocks: a decode replica keeps no prefix cache); its first token goes out then."""
        need = self._total_blocks(i)
        if need > r.cap:
            raise self.trace.request_error(i, f"{int(self.inp[i] + self.out[i])} positions need {need} blocks; "
                                              f"HBM holds {r.cap}")
        if r.cap - r.used() < need:
            return False
        r.private += need
        r.incoming -= need
        self._start_decode(r, i)
        return True

    def _finish(self, r: Replica, i: int, t: float) -> None:
        self.finish[i] = t
        if self.out[i] > 1:                                # it was decoding
            r.D -= 1
            r.sumA -= int(self.inp[i]) - (r.step - (int(self.out[i]) - 1))
        if r.role == "decode":
            r.private -= self._total_blocks(i)
            r.outstanding -= 1
        else:
            r.load_tokens -= int(self.inp[i] + self.out[i])
            self._release(r, i)
        if self.closed and self.next_closed < len(self.inp):
            heapq.heappush(self.arrivals, (t, self.next_closed))
            self.next_closed += 1

    def _release(self, r: Replica, i: int) -> None:
        """Request ``i`` leaves replica ``r``: its prompt blocks unpinned (they stay cached), its
        private blocks freed."""
        ids = self.blocks[self.off[i]:self.off[i + 1]].tolist()
        for b in reversed(ids):                            # tail first: LRU loses a prefix's tail first
            c = r.pinned[b] - 1
            if c:
                r.pinned[b] = c
            else:
                del r.pinned[b]
                r.cached[b] = None
        r.private -= self._blocks_on(r, i) - len(ids)
        r.outstanding -= 1

    def _total_blocks(self, i: int) -> int:
        return -(-int(self.inp[i] + self.out[i]) // self.bt)

    def _blocks_on(self, r: Replica, i: int) -> int:
        """Blocks request ``i`` holds on ``r``: a prefill replica holds its prompt only."""
        if r.role == "prefill":
            return -(-int(self.inp[i]) // self.bt)
        return self._total_blocks(i)

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
        need = self._blocks_on(r, i) - kh
        evictable = len(r.cached) - sum(1 for b in ids[:kh] if b in r.cached)
        if r.cap - r.used() + evictable < need:
            return False
        if need > r.cap:
            raise self.trace.request_error(i, f"{inp + int(self.out[i])} positions need {need} blocks; HBM holds "
                                              f"{r.cap}")
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
        r.private += self._blocks_on(r, i) - len(ids)
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
