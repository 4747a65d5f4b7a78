"""Two-shot: the custom all-reduce of vLLM and TensorRT-LLM for mid-sized buffers on one node — a
direct reduce-scatter (each rank reads shard j of every peer's buffer and reduces it: rank j owns
shard j), then a direct all-gather of the reduced shards.

Closed forms (n ranks, S the full buffer, per rank): 2 steps; each step sends (n-1)/n * S, so
2(n-1)/n * S sent and received in all — a ring's bytes in 2 steps instead of 2(n-1). One node only
(the peers' buffers are read over the scale-up fabric).
"""

from __future__ import annotations

from tierlab.network.schedule import Flow, Stage, account

NAME = "two_shot"
SUMMARY = "custom two-shot all-reduce: direct reduce-scatter + all-gather, 2(n-1)/n*S per rank in 2 steps"
KINDS = ("all_reduce",)


def supports(kind, group, system) -> str | None:
    if kind not in KINDS:
        return f"two-shot serves all_reduce, not {kind}"
    if group.n_nodes > 1:
        return f"two-shot reads its peers' buffers within one node (the group spans {group.n_nodes} nodes)"
    return None


def stages(kind, group, size_bytes) -> tuple[Stage, ...]:
    ranks = group.devices
    n = len(ranks)
    if n < 2:
        return ()
    shard = size_bytes / n
    flows = tuple(Flow(s, d, shard) for s in ranks for d in ranks if s != d)
    return (Stage("two-shot reduce_scatter", 1, flows), Stage("two-shot all_gather", 1, flows))


def cost(kind, group, size_bytes, why=""):
    return account(kind, NAME, group, size_bytes, stages(kind, group, size_bytes), why)
