"""Direct (one-shot): every rank sends straight to every peer in one step.

Closed forms (n ranks, S the full buffer, per rank; n-1 peers, one message each):

* ``all_reduce``: each rank sends its whole buffer to each peer and reduces locally: (n-1) * S sent
  and received, 1 step (vLLM's and TensorRT-LLM's one-shot all-reduce);
* ``all_gather``: each sends its S/n shard to each peer: (n-1)/n * S;
* ``reduce_scatter``: each sends shard j of its input to rank j: (n-1)/n * S;
* ``all_to_all``: each sends S/n of its send buffer to each peer: (n-1)/n * S;
* ``send_recv`` (two ranks, the first sends): S from one to the other, 1 step.

Latency-optimal (one step) at the price of bytes; it uses every link of a mesh at once.
"""

from __future__ import annotations

from tierlab.network.schedule import Flow, Stage, account

NAME = "direct"
SUMMARY = "one-shot: each rank sends straight to every peer in 1 step"
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


def supports(kind, group, system) -> str | None:
    if kind not in KINDS:
        return f"direct serves {', '.join(KINDS)}, not {kind}"
    if kind == "send_recv" and group.n_ranks != 2:
        return f"send_recv is between two ranks ({group.n_ranks} here)"
    return None


def per_peer_bytes(kind, n, size_bytes) -> float:
    return size_bytes if kind in ("all_reduce", "send_recv") else size_bytes / n


def stages(kind, group, size_bytes) -> tuple[Stage, ...]:
    ranks = group.devices
    n = len(ranks)
    if n < 2:
        return ()
    if kind == "send_recv":
        return (Stage("direct send_recv", 1, (Flow(ranks[0], ranks[1], size_bytes),)),)
    b = per_peer_bytes(kind, n, size_bytes)
    return (Stage(f"direct {kind}", 1, tuple(Flow(s, d, b) for s in ranks for d in ranks if s != d)),)


def cost(kind, group, size_bytes, why=""):
    return account(kind, NAME, group, size_bytes, stages(kind, group, size_bytes), why)


def matrix_stages(group, send_bytes) -> tuple[Stage, ...]:
    """An all-to-all of the exact split: ``send_bytes`` is the n x n matrix (row-major, rows and
    columns in group order), row i what rank i sends each rank; the diagonal stays on the chip. One
    step; a rank sends its row sum without the diagonal and receives its column sum without it."""
    ranks = group.devices
    n = len(ranks)
    m = [float(v) for v in send_bytes]
    if len(m) != n * n:
        raise ValueError(f"an all_to_all of {n} ranks has an {n} x {n} send matrix, got {len(m)} values")
    flows = tuple(Flow(ranks[i], ranks[j], m[i * n + j]) for i in range(n) for j in range(n)
                  if i != j and m[i * n + j] > 0)
    return (Stage("direct all_to_all (send matrix)", 1, flows),) if flows else ()


def matrix_cost(group, size_bytes, send_bytes, why=""):
    """:func:`matrix_stages` accounted (see :mod:`tierlab.network.schedule`)."""
    return account("all_to_all", NAME, group, size_bytes, matrix_stages(group, send_bytes), why)
