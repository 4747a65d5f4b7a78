"""The one entry: :func:`plan_collective` — what a collective costs on a group of a system, by the
named algorithm or the ``auto`` rule (:mod:`tierlab.network.auto`).

The types live in :mod:`tierlab.network.schedule` and are re-exported here: :class:`Group`,
:data:`KINDS`, :class:`CollectiveCost`.
"""

from __future__ import annotations

from tierlab.common.errors import UsageError
from tierlab.network import direct
from tierlab.network.auto import choose_auto
from tierlab.network.registry import ALGORITHM_NAMES, ALGORITHMS
from tierlab.network.schedule import FIELD, KINDS, CollectiveCost, Group

__all__ = ["plan_collective", "refusal", "Group", "KINDS", "CollectiveCost", "ALGORITHM_NAMES"]


def refusal(name: str, kind: str, group: Group) -> str | None:
    """Why algorithm ``name`` cannot serve ``kind`` on ``group`` (None: it can)."""
    return ALGORITHMS[name].supports(kind, group, group.system)


def plan_collective(kind: str, group: Group, size_bytes: float, algorithm: str = "auto", *,
                    send_bytes=None) -> CollectiveCost:
    """The cost of collective ``kind`` over ``group`` with ``size_bytes`` the full buffer (see
    :class:`CollectiveCost`): by ``algorithm``, or by the ``auto`` rule. An unknown name, or one that
    cannot serve this collective, is a :class:`~tierlab.common.errors.UsageError` (field ``--collective-algo``)
    naming the algorithm and why. ``send_bytes`` (an all_to_all's n x n matrix, row-major, group
    order; None or empty: the uniform split of ``size_bytes``) costs the exact split when the
    algorithm is ``direct`` (:func:`tierlab.network.direct.matrix_cost`): per rank, sent = its row
    sum without the diagonal, received = its column sum without it, the busiest port bounding."""
    if kind not in KINDS:
        raise UsageError(f"unknown collective {kind!r}; expected one of {', '.join(KINDS)}", field="collective")
    if not size_bytes >= 0:
        raise UsageError(f"a collective moves a size >= 0 bytes (got {size_bytes!r})", field="size_bytes")
    if algorithm == "auto":
        name, why = choose_auto(kind, group, size_bytes, lambda a: refusal(a, kind, group))
        why = "auto: " + why
    elif algorithm not in ALGORITHMS:
        raise UsageError(f"unknown collective algorithm {algorithm!r}; expected auto or one of "
                         f"{', '.join(ALGORITHM_NAMES)}", field=FIELD)
    else:
        name, why = algorithm, "asked for"
    reason = refusal(name, kind, group)
    if reason is not None:
        raise UsageError(f"{name!r} cannot serve {kind} on these {group.n_ranks} ranks: {reason}", field=FIELD)
    if kind == "all_to_all" and send_bytes is not None and len(send_bytes) and name == "direct":
        return direct.matrix_cost(group, size_bytes, send_bytes, why)
    return ALGORITHMS[name].cost(kind, group, size_bytes, why)
