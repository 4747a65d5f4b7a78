"""Double binary tree all-reduce (NCCL's "tree"): two binary trees over the ranks, each reducing
half the buffer up to its root and broadcasting it back down, the halves pipelined.

The construction (position p = 0..n-1 in the group's node-by-node order):

* **tree A** — position 0 is the root with one child, the largest power of two P <= n-1; below it the
  positions 1..n-1 form the in-order "lowest set bit" tree: p with lowest set bit b has natural
  children p - b/2 and p + b/2; a natural parent beyond n-1 is skipped (its node's first ancestor
  below n takes the child), so every position has at most two children and the depth is
  ceil(log2 n). Odd positions are leaves.
* **tree B** — tree A mirrored (p -> n-1-p) when n is even, so A's leaves are B's interior nodes and
  the reverse; shifted by one (p -> p+1 mod n) when n is odd.

Bytes, exactly for this construction: every tree edge carries S/2 up (reduce) and S/2 down
(broadcast), so a rank sends and receives ``deg_A(r) + deg_B(r)`` halves, deg = tree edges at the
rank. Each tree has n-1 edges, so over the group 2(n-1)*S is sent and the **mean** per rank is
2(n-1)/n * S (the ring's figure); the **most** any rank sends is S/2 * max_r(deg_A + deg_B): an
interior node of one tree (parent + two children = 3) is a leaf of the other (1), so 2*S for every
n >= 4 (n = 2: S; n = 3: 1.5*S) — checked for each n in the tests. Steps: reduce up and broadcast
down the deeper tree: 2*ceil(log2 n). One message per edge per direction is counted (NCCL's chunk pipelining is not).
"""

from __future__ import annotations

from tierlab.network.schedule import Flow, Stage, account

NAME = "tree"
SUMMARY = "double binary tree (NCCL): two trees each carrying S/2, 2*ceil(log2 n) steps"
KINDS = ("all_reduce",)


def supports(kind, group, system) -> str | None:
    if kind not in KINDS:
        return f"the double binary tree serves all_reduce, not {kind}"
    return None


def bit_tree_parents(n: int) -> list[int]:
    """Tree A's parent of each position 0..n-1 (-1 for the root, position 0)."""
    parent = [-1] * n
    if n < 2:
        return parent
    top = 1 << ((n - 1).bit_length() - 1)       # the largest power of two <= n-1
    parent[top] = 0
    for p in range(1, n):
        if p == top:
            continue
        q = p
        while True:                              # climb natural ancestors to the first one below n
            b = q & -q
            q = q + b if (q & (2 * b)) == 0 else q - b
            if q < n:
                break
        parent[p] = q
    return parent


def depth(parent: list[int]) -> int:
    best = 0
    for p in range(len(parent)):
        d, q = 0, p
        while parent[q] != -1:
            q, d = parent[q], d + 1
        best = max(best, d)
    return best


def trees(n: int) -> tuple[list[int], list[int]]:
    """(parents of tree A, parents of tree B) over positions."""
    a = bit_tree_parents(n)
    perm = [n - 1 - p for p in range(n)] if n % 2 == 0 else [(p + 1) % n for p in range(n)]
    b = [-1] * n
    for p in range(n):
        if a[p] != -1:
            b[perm[p]] = perm[a[p]]
    return a, b


def stages(kind, group, size_bytes) -> tuple[Stage, ...]:
    ranks = group.ordered()
    n = len(ranks)
    if n < 2:
        return ()
    a, b = trees(n)
    half = size_bytes / 2
    flows = []
    for parent in (a, b):
        for p, q in enumerate(parent):
            if q != -1:
                flows.append(Flow(ranks[p], ranks[q], half))    # reduce: child to parent
                flows.append(Flow(ranks[q], ranks[p], half))    # broadcast: parent to child
    return (Stage("tree all_reduce", 2 * max(depth(a), depth(b)), tuple(flows)),)


def cost(kind, group, size_bytes, why=""):
    return account(kind, NAME, group, size_bytes, stages(kind, group, size_bytes), why)
