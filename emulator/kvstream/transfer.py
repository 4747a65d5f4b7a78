"""Disaggregated prefill and decode: a request's prompt KV moving from its prefill replica to a decode
replica over the system's links, timed and counted by the network model.

Replica ``r`` of ``devices`` devices (``tp x pp``) holds the system's devices ``r x devices ..
(r + 1) x devices - 1``: prefill replicas first, then decode replicas. A request's KV is sharded as
the replicas are (both have the same parallelism), so device ``k`` of the prefill replica sends its
shard, ``tokens x KV bytes per token per device``, to device ``k`` of the decode replica, all shards
at once. That is one stage of point-to-point flows, costed by
:func:`tierlab.network.direct.matrix_cost` (:func:`tierlab.network.schedule.account`): a flow inside
a node crosses the scale-up fabric, between nodes the scale-out NICs; the time is the fabric's
latency plus the busiest link's bytes over its bandwidth; the energy is the link-bytes carried times
the fabric's energy per byte.

Transfers queue: a prefill replica sends one request's KV at a time (its links' egress), and a decode
replica receives one at a time (its ingress). A transfer starts when the prefill is done and both are
free. Not modelled: a layer-by-layer handover overlapping the prefill (the KV moves after the last
layer), contention with the replicas' own collectives, and the prefill replica keeping the blocks
pinned until they are sent (they are unpinned, still cached, when the prefill ends).
"""

from __future__ import annotations

from tierlab.common.errors import UsageError


class KvHandover:
    """The links between ``prefill`` prefill replicas and ``decode`` decode replicas of ``devices``
    devices each on ``system``; :meth:`send` times one request's KV and counts it."""

    def __init__(self, system, devices: int, prefill: int, decode: int, kv_bytes_per_token_per_device: float):
        if system is None:
            raise UsageError("disaggregated prefill and decode move KV over a system's links; give a system",
                             field="chip")
        need = devices * (prefill + decode)
        if need > system.n_chips:
            raise UsageError(f"(prefill + decode instances) x tp x pp = {need} devices; {system.name} has "
                             f"{system.n_chips} chips", field="prefill_instances")
        self.system, self.devices, self.P, self.D = system, devices, prefill, decode
        self.kv_dev = float(kv_bytes_per_token_per_device)
        self.egress = [0.0] * prefill
        self.ingress = [0.0] * decode
        self._cost: dict = {}
        self.bytes = 0.0                 # bytes sent (every shard once)
        self.bytes_by_fabric: dict = {}  # link-bytes carried per fabric (a switch hop counts twice)
        self.time_s = 0.0                # sum of the transfers' own times
        self.energy_j = 0.0
        self.transfers = 0

    def devices_of(self, replica: int) -> list[int]:
        """The system's devices of replica ``replica`` (prefill replicas first)."""
        return list(range(replica * self.devices, (replica + 1) * self.devices))

    def cost(self, p: int, d: int, tokens: int):
        """The network model's :class:`~tierlab.network.schedule.CollectiveCost` of moving ``tokens``
        tokens of KV from prefill replica ``p`` to decode replica ``d`` (``0 <= d < decode``)."""
        key = (p, d, tokens)
        c = self._cost.get(key)
        if c is None:
            from tierlab.network.direct import matrix_cost
            from tierlab.network.schedule import Group

            src, dst = self.devices_of(p), self.devices_of(self.P + d)
            n, k = 2 * self.devices, self.devices
            shard = tokens * self.kv_dev
            m = [0.0] * (n * n)
            for j in range(k):
                m[j * n + k + j] = shard
            c = matrix_cost(Group(tuple(src + dst), self.system), shard * k, m, "KV handover, prefill to decode")
            if len(self._cost) < 65536:
                self._cost[key] = c
        return c

    def send(self, p: int, d: int, tokens: int, ready_s: float) -> tuple[float, float, float]:
        """Queue the KV of ``tokens`` tokens from ``p`` to ``d``, ready at ``ready_s``: ``(start, land,
        bytes)``; counted."""
        c = self.cost(p, d, tokens)
        start = max(ready_s, self.egress[p], self.ingress[d])
        land = start + c.time_s
        self.egress[p] = self.ingress[d] = land
        self.bytes += c.bytes_sent_total
        for f, b in c.bytes_by_fabric.items():
            self.bytes_by_fabric[f] = self.bytes_by_fabric.get(f, 0.0) + b
        self.time_s += c.time_s
        self.energy_j += c.energy_j
        self.transfers += 1
        return start, land, c.bytes_sent_total

    def to_dict(self) -> dict:
        return {"prefill_instances": self.P, "decode_instances": self.D, "transfers": self.transfers,
                "bytes": self.bytes, "link_bytes_by_fabric": dict(self.bytes_by_fabric), "time_s": self.time_s,
                "energy_j": self.energy_j}
