"""The ``auto`` rule: which algorithm serves a collective, by kind, size and topology — one function,
:func:`choose_auto`, in the spirit of NCCL's tuner (which picks by modelled latency and bandwidth per
algorithm and protocol; here fixed thresholds stand in for that model).

On a ``torus`` / ``mesh`` scale-up fabric, a collective the ``torus`` algorithm serves (a box of the
grid in one node) takes it: its rings run between neighbours, the only links a grid has.

For ``all_reduce`` (S the buffer, n ranks), first match wins:

1. one rank: ``direct`` (nothing moves);
2. one node, S <= :data:`ONE_SHOT_MAX_BYTES`, and n <= :data:`ONE_SHOT_MAX_RANKS` or the node a
   full mesh (``direct`` topology: every pair its own link, so the one-shot's (n-1) sends go out on
   n-1 links at once and its one step beats a tree's 2 ceil(log2 n)): ``direct`` (latency
   dominates small buffers — vLLM's / TensorRT-LLM's one-shot all-reduce);
3. the switch of the fabric the group spans reduces: ``in_network`` (NVLS in a node, SHARP across);
4. S <= :data:`TREE_MAX_BYTES` and (more than one node, or n > ONE_SHOT_MAX_RANKS): ``tree``
   (2 ceil(log2 n) steps instead of the ring's 2(n-1));
5. more than one node, the same number of ranks in each: ``hierarchical``;
6. otherwise ``ring`` (bandwidth-optimal).

``all_gather`` / ``reduce_scatter``: ``direct`` in one node at or below ONE_SHOT_MAX_BYTES with at
most ONE_SHOT_MAX_RANKS ranks, else ``ring``. ``all_to_all`` and ``send_recv``: ``direct``.
"""

from __future__ import annotations

ONE_SHOT_MAX_BYTES = 512 << 10   # vLLM's custom all-reduce keeps one-shot up to ~512 KiB on 8 GPUs
ONE_SHOT_MAX_RANKS = 8           # one-shot sends (n-1)*S per rank: past 8 ranks the bytes dominate
TREE_MAX_BYTES = 8 << 20         # NCCL picks tree over ring across nodes up to a few MiB


def choose_auto(kind, group, size_bytes, supported) -> tuple[str, str]:
    """(algorithm name, why) for ``kind`` on ``group`` moving ``size_bytes``; ``supported(name)`` is
    the algorithm's refusal (None when it serves)."""
    n, nodes = group.n_ranks, group.n_nodes
    mesh = group.system.scale_up.topology == "direct"
    one_shot = nodes <= 1 and (n <= ONE_SHOT_MAX_RANKS or mesh) and size_bytes <= ONE_SHOT_MAX_BYTES
    if kind in ("all_to_all", "send_recv"):
        return "direct", f"{kind} goes straight to its peers"
    if n <= 1:
        return "direct", "one rank: nothing moves"
    if getattr(group.system.scale_up, "is_grid", False) and supported("torus") is None:
        return "torus", "a torus/mesh grid: dimension-ordered rings over neighbour links"
    if kind in ("all_gather", "reduce_scatter"):
        if one_shot:
            return "direct", f"one node, {n} <= {ONE_SHOT_MAX_RANKS} ranks, {size_bytes:g} B <= ONE_SHOT_MAX_BYTES"
        return "ring", "bandwidth-optimal"
    if one_shot:
        ranks = f"{n} ranks on a full mesh" if n > ONE_SHOT_MAX_RANKS else f"{n} <= {ONE_SHOT_MAX_RANKS} ranks"
        return "direct", f"one node, {ranks}, {size_bytes:g} B <= ONE_SHOT_MAX_BYTES"
    if supported("in_network") is None:
        return "in_network", "the switch reduces"
    if size_bytes <= TREE_MAX_BYTES and (nodes > 1 or n > ONE_SHOT_MAX_RANKS):
        return "tree", (f"{size_bytes:g} B <= TREE_MAX_BYTES across "
                        + (f"{nodes} nodes" if nodes > 1 else f"{n} ranks"))
    if nodes > 1 and supported("hierarchical") is None:
        return "hierarchical", f"{nodes} nodes of equal rank counts, {size_bytes:g} B > TREE_MAX_BYTES"
    return "ring", "bandwidth-optimal for large buffers"
