"""A replica of a served request stream: its HBM blocks (pinned and cached), its lower tiers and its
scheduler state (:mod:`tierlab.kvstream.sim` drives them; the semantics are in
:mod:`tierlab.kvstream.server`'s docstring)."""

from __future__ import annotations

from collections import OrderedDict, deque


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

    def __init__(self, idx: int, hbm_blocks: int, lower: list, role: str = "both"):
        self.idx, self.cap, self.role = idx, hbm_blocks, role   # role: both, prefill or decode
        self.load_tokens = 0                        # input + output tokens of the requests routed here, not done
        self.incoming = 0                           # blocks of requests whose KV is on its way here
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
        self.queued_prefill_s = 0.0                 # the ttft router's estimate of the prefills routed here

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
