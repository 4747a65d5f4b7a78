"""Hierarchical all-reduce over nodes (k ranks in each of m nodes):

1. within each node a ring **reduce-scatter**: k-1 steps, each rank sends (k-1)/k * S on scale-up and
   is left with its reduced 1/k share;
2. across nodes, the m ranks with the same local index run a ring **all-reduce** of their S/k share:
   2(m-1) steps, each rank sends 2(m-1)/m * S/k on scale-out;
3. within each node a ring **all-gather**: k-1 steps, (k-1)/k * S on scale-up.

Per rank: scale-up 2(k-1)/k * S, scale-out 2(m-1)/(m*k) * S, in 2(k-1) + 2(m-1) steps; the stages
run one after another (their times add). On one node (m = 1) it is the intra-node reduce-scatter
followed by the all-gather, i.e. the ring all-reduce on k ranks. Needs the same number of ranks in
every node of the group (rank j of each node pairs with rank j of every other).
"""

from __future__ import annotations

from tierlab.network import ring
from tierlab.network.schedule import Stage, account

NAME = "hierarchical"
SUMMARY = "reduce-scatter in each node, all-reduce of each 1/k share across nodes, all-gather in each node"
KINDS = ("all_reduce",)


def supports(kind, group, system) -> str | None:
    if kind not in KINDS:
        return f"hierarchical serves all_reduce, not {kind}"
    sizes = sorted({len(v) for v in group.nodes().values()})
    if len(sizes) > 1:
        return f"needs the same number of ranks in every node (the group has {', '.join(map(str, sizes))})"
    return None


def stages(kind, group, size_bytes):
    nodes = list(group.nodes().values())
    k = len(nodes[0]) if nodes else 0
    out = []
    for devs in nodes:
        out += ring.stages("reduce_scatter", group, size_bytes, devs, "intra-node reduce_scatter")
    for j in range(k):
        out += ring.stages("all_reduce", group, size_bytes / k, [devs[j] for devs in nodes],
                           "inter-node all_reduce")
    for devs in nodes:
        out += ring.stages("all_gather", group, size_bytes, devs, "intra-node all_gather")
    return merge(out)


def merge(stages):
    """Stages of one name run at once (the nodes' rings, the local indices' rings): one stage each."""
    by = {}
    for st in stages:
        if st.name in by:
            prev = by[st.name]
            by[st.name] = Stage(st.name, max(prev.steps, st.steps), prev.flows + st.flows)
        else:
            by[st.name] = st
    return tuple(by.values())


def cost(kind, group, size_bytes, why=""):
    return account(kind, NAME, group, size_bytes, stages(kind, group, size_bytes), why)
