"""Ring: the ranks in a ring (node by node, so it crosses each node boundary once); each step every
rank sends one S/n chunk to the next.

Closed forms (n ranks, S the full buffer, per rank):

* ``reduce_scatter``: n-1 steps of S/n: sends and receives (n-1)/n * S;
* ``all_gather``: n-1 steps of S/n: (n-1)/n * S;
* ``all_reduce``: a reduce-scatter then an all-gather: 2(n-1) steps, 2(n-1)/n * S.

Every link of the ring carries the same bytes; a ring spanning nodes puts its node-boundary edges on
the scale-out fabric and the rest on scale-up, all in one stage (the slowest fabric sets the pace).
On a ``direct`` mesh the ring uses one link to its neighbour (several rings over disjoint links, as
NCCL/RCCL build on meshes, are not modelled).
"""

from __future__ import annotations

from tierlab.network.schedule import Stage, account, ring_flows

NAME = "ring"
SUMMARY = "bandwidth-optimal ring: 2(n-1)/n*S per rank for all_reduce in 2(n-1) steps"
KINDS = ("all_reduce", "all_gather", "reduce_scatter")
ROUNDS = {"all_reduce": lambda n: 2 * (n - 1), "all_gather": lambda n: n - 1, "reduce_scatter": lambda n: n - 1}


def supports(kind, group, system) -> str | None:
    if kind not in KINDS:
        return f"a ring serves {', '.join(KINDS)}, not {kind}"
    return None


def stages(kind, group, size_bytes, ranks=None, name=None) -> tuple[Stage, ...]:
    ranks = group.ordered() if ranks is None else tuple(ranks)
    n = len(ranks)
    if n < 2:
        return ()
    rounds = ROUNDS[kind](n)
    return (Stage(name or f"ring {kind}", rounds, ring_flows(ranks, size_bytes / n, rounds)),)


def cost(kind, group, size_bytes, why=""):
    return account(kind, NAME, group, size_bytes, stages(kind, group, size_bytes), why)
