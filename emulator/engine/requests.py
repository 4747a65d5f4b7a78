"""The requests reaching one tier during a replay, in order (``tierlab export --format ramulator|dramsim3``).

What a tier sees depends only on the tiers above it (non-inclusive: no tier ever sends a request
up), so :class:`RequestRecorder` replays the tiers above the target ``T`` block by block, as the
walk does (``docs/design.md``, accounting rules): a tensor's home counts a hit and stops, a
pass-through tier forwards, a caching tier looks the block up and on a miss forwards the fetch
first, then writes a dirty victim back. Every request arriving at ``T`` — a fetch or a bypassed
read (``LD``), a writeback or a written-through store (``ST``), a home hit at ``T`` — is recorded
as (byte address, write flag), aligned to the requesting tier's block; nothing at or below ``T`` is
modelled. The count is therefore ``hits + misses + bypasses + writethroughs`` of ``T`` in the
normal replay (its arrivals, :mod:`tierlab.engine.invariants`).

Not served (refused by :func:`check_recordable`): ``opt`` or inclusive caching above ``T`` and the
end-of-run flush. Geometry, state and policies are the engine's own
(:func:`tierlab.engine.walker.new_tier_state`, :mod:`tierlab.engine.policies`).
"""

from __future__ import annotations

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.engine.geometry import Geometry
from tierlab.engine.jit import njit
from tierlab.engine.options import ReplayOptions
from tierlab.engine.policies import OPT, OPT_NEVER, policy_fill, policy_hit, policy_victim
from tierlab.engine.state import MODE_CACHE, MODE_PASS, Tensors
from tierlab.engine.walker import new_tier_state

# resume point of a batch: descriptor, chunk, tier-0 unit; and records written
CUR_A, CUR_J, CUR_UNIT, CUR_OUT = range(4)


@njit(nogil=True)
def record_batch(tid_a, off_a, nb_a, cnt_a, str_a, wr_a, pim_a, t_addr, t_home, blk, n_sets, n_ways, mode,
                 policy, slot_off, tag, dirty, meta, owner, clock, rng, target, rules, cur, out_addr, out_write):
    """Replay descriptors from ``cur`` on, recording each request arriving at tier ``target`` into
    ``out_addr``/``out_write`` from ``cur[CUR_OUT]``. Stops before a tier-0 block whose requests
    might not fit (one block reaches ``target`` at most ``2**target`` times: each tier above
    sends at most a fetch and a writeback per request); returns True when the batch is done
    (``cur`` holds the resume point if not)."""
    store_hit_recency, fetch_on_write_miss, fetch_on_writeback_miss = rules
    depth = 2 * target + 4                       # the request stack, as the walk's
    reserve = np.int64(1) << target
    st_tier = np.empty(depth, np.int64)
    st_addr = np.empty(depth, np.int64)
    st_write = np.empty(depth, np.int64)
    st_tid = np.empty(depth, np.int64)
    shift = np.zeros(blk.shape[0], np.int64)     # log2 of each tier's block
    for i in range(blk.shape[0]):
        while (np.int64(1) << shift[i]) < blk[i]:
            shift[i] += 1
    sh0 = shift[0]
    b0 = blk[0]
    n_out = cur[CUR_OUT]
    cap = out_addr.shape[0]
    for a in range(cur[CUR_A], tid_a.shape[0]):
        if pim_a[a] > 0:            # read in memory by its home's PIM unit: reaches no tier
            continue
        tid = tid_a[a]
        w = 1 if wr_a[a] else 0
        j0 = cur[CUR_J] if a == cur[CUR_A] else 0
        for j in range(j0, cnt_a[a]):
            start = t_addr[tid] + off_a[a] + j * str_a[a]
            first = start >> sh0
            last = (start + nb_a[a] - 1) >> sh0
            u0 = cur[CUR_UNIT] if (a == cur[CUR_A] and j == j0 and cur[CUR_UNIT] > first) else first
            for unit in range(u0, last + 1):
                if n_out + reserve > cap:
                    cur[CUR_A] = a
                    cur[CUR_J] = j
                    cur[CUR_UNIT] = unit
                    cur[CUR_OUT] = n_out
                    return False
                st_tier[0] = 0
                st_addr[0] = unit << sh0
                st_write[0] = w
                st_tid[0] = tid
                sp = 1
                while sp > 0:
                    sp -= 1
                    i = st_tier[sp]
                    addr = st_addr[sp]
                    rw = st_write[sp]
                    rt = st_tid[sp]
                    if i == target:
                        out_addr[n_out] = addr
                        out_write[n_out] = rw != 0
                        n_out += 1
                        continue
                    if i == t_home[rt]:
                        continue
                    b_i = blk[i]
                    sh_i = shift[i]
                    b = addr >> sh_i
                    if mode[i] == MODE_PASS:
                        st_tier[sp] = i + 1
                        st_addr[sp] = b << sh_i
                        st_write[sp] = rw
                        st_tid[sp] = rt
                        sp += 1
                        continue
                    ways = n_ways[i]
                    base = slot_off[i] + (b % n_sets[i]) * ways
                    stamp = clock[i]
                    clock[i] = stamp + 1
                    pid = policy[i]
                    way = -1
                    empty = -1
                    for k in range(ways):             # no match: ``empty`` is the first empty way
                        if tag[base + k] == b:
                            way = k
                            break
                        if empty < 0 and tag[base + k] == -1:
                            empty = k
                    if way >= 0:
                        slot = base + way
                        if rw:
                            dirty[slot] = 1
                            if store_hit_recency:
                                policy_hit(pid, meta, slot, stamp, OPT_NEVER)
                        else:
                            policy_hit(pid, meta, slot, stamp, OPT_NEVER)
                        continue
                    req = b0 if i == 0 else blk[i - 1]
                    fetch = True
                    if rw and req == b_i:
                        fetch = fetch_on_write_miss if i == 0 else fetch_on_writeback_miss
                    if empty >= 0:
                        way = empty
                    else:
                        way = policy_victim(pid, meta, base, ways, rng, i)
                        slot = base + way
                        if dirty[slot]:    # pushed first, so the fetch below is served first
                            st_tier[sp] = i + 1
                            st_addr[sp] = tag[slot] << sh_i
                            st_write[sp] = 1
                            st_tid[sp] = owner[slot]
                            sp += 1
                    slot = base + way
                    tag[slot] = b
                    owner[slot] = rt
                    dirty[slot] = 1 if rw else 0
                    policy_fill(pid, meta, slot, stamp, OPT_NEVER)
                    if fetch:
                        st_tier[sp] = i + 1
                        st_addr[sp] = b << sh_i
                        st_write[sp] = 0
                        st_tid[sp] = rt
                        sp += 1
    cur[CUR_A] = tid_a.shape[0]
    cur[CUR_OUT] = n_out
    return True


def check_recordable(geo: Geometry, target: int, options: ReplayOptions) -> None:
    """Refuse what the recorder does not model exactly."""
    for i in range(target):
        if geo.mode[i] == MODE_CACHE and geo.policy[i] == OPT:
            raise UsageError(f"tier {geo.names[i]!r} above {geo.names[target]!r} uses policy 'opt'; "
                             "exporting requests needs lru, fifo or random above the tier", field="tier")
    if options.inclusive and int(np.count_nonzero(geo.mode[:target] == MODE_CACHE)) >= 1:
        raise UsageError("inclusive replay is not exported (back-invalidation is not modelled)", field="inclusive")
    if options.flush:
        raise UsageError("the end-of-run flush is not exported", field="flush")


class RequestRecorder:
    """The tiers above ``target`` of a prepared hierarchy (:func:`tierlab.engine.door.prepare`);
    :meth:`feed` a descriptor batch and get its requests at ``target`` as chunks of at most
    ``chunk`` records ``(addresses int64, writes bool)``, in order."""

    def __init__(self, geo: Geometry, tensors: Tensors, target: int, options: ReplayOptions = ReplayOptions(),
                 chunk: int = 1 << 20):
        check_recordable(geo, target, options)
        self.geo, self.tensors, self.target = geo, tensors, target
        self.hier = geo.hierarchy()
        self.state = new_tier_state(geo, options.seed)
        self.rules = (options.store_hit_recency, options.fetch_on_write_miss, options.fetch_on_writeback_miss)
        self.out_addr = np.empty(max(chunk, 1 << target), np.int64)
        self.out_write = np.empty(len(self.out_addr), np.bool_)

    def feed(self, tid, offset, nbytes, count, stride, write, pim):
        """Yield the batch's requests at the target tier (views of reused buffers: copy to keep)."""
        arrays = [np.ascontiguousarray(x, np.int64) for x in (tid, offset, nbytes, count, stride)]
        write = np.ascontiguousarray(write, np.bool_)
        pim = np.ascontiguousarray(pim, np.int64)
        h, s, t = self.hier, self.state, self.tensors
        cur = np.zeros(4, np.int64)
        while True:
            cur[CUR_OUT] = 0
            done = record_batch(*arrays, write, pim, t.address, t.home, h.block_bytes, h.n_sets, h.n_ways, h.mode,
                                h.policy, h.slot_off, s.tag, s.dirty, s.meta, s.owner, s.clock, s.rng, self.target,
                                self.rules, cur, self.out_addr, self.out_write)
            n = int(cur[CUR_OUT])
            if n:
                yield self.out_addr[:n], self.out_write[:n]
            if done:
                return
