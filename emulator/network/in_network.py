"""In-network reduction: the switch adds the ranks' buffers (NVLink SHARP, "NVLS", inside a node;
SHARP across nodes). All-reduce only; refused where the switch cannot reduce or the fabric is a
``direct`` mesh (no switch to reduce in).

* **one node, NVLS-like** (scale-up switch with ``in_network_reduction``): (1) each rank pushes its
  whole buffer S into the switch, which reduces shard j of the n buffers and returns it to rank j
  (S/n down: a reduce-scatter in the switch); (2) each rank pushes its reduced shard S/n back up and
  the switch multicasts it to all n ranks (S down). Each rank sends S + S/n and receives S/n + S:
  **S(n+1)/n per rank each way**, in 2 steps (against the ring's 2(n-1)/n * S in 2(n-1) steps).
* **across nodes, SHARP-like** (scale-out switch with ``in_network_reduction``): each rank sends its
  buffer S up the switch tree and receives the reduced S back: **S sent and S received per rank**, in
  2 steps (up, down), on the scale-out fabric only (the ranks are the tree's leaves; a combined
  NVLS-in-the-node then SHARP-across-nodes schedule is not modelled).

Not modelled: the switch's reduction throughput and multicast limits (the fabric's port bandwidth
is taken as the bound), NVLS's fewer SMs.
"""

from __future__ import annotations

from tierlab.network.schedule import SCALE_OUT, SCALE_UP, SWITCH, Flow, Stage, account

NAME = "in_network"
SUMMARY = "switch-side reduction: NVLS-like S(n+1)/n per rank in a node, SHARP-like S across nodes"
KINDS = ("all_reduce",)


def fabric_role(group) -> str:
    return SCALE_UP if group.n_nodes <= 1 else SCALE_OUT


def supports(kind, group, system) -> str | None:
    if kind not in KINDS:
        return f"in-network reduction serves all_reduce, not {kind}"
    role = fabric_role(group)
    fab = system.scale_up if role == SCALE_UP else system.scale_out
    if fab is None:
        return f"the system has no {role} fabric"
    if fab.topology != "switch":
        return f"the {role} fabric {fab.name!r} is a {fab.topology} mesh, with no switch to reduce in"
    if not fab.in_network_reduction:
        return f"the {role} switch {fab.name!r} cannot reduce (in_network_reduction is false)"
    return None


def stages(kind, group, size_bytes):
    ranks = group.devices
    n = len(ranks)
    if n < 2:
        return ()
    if fabric_role(group) == SCALE_UP:
        shard = size_bytes / n      # the two halves are pipelined on the ports: one stage of 2 steps
        return (Stage("switch reduce_scatter + multicast all_gather", 2, tuple(
            f for r in ranks for f in (Flow(r, SWITCH, size_bytes, 1, SCALE_UP), Flow(SWITCH, r, shard, 1, SCALE_UP),
                                       Flow(r, SWITCH, shard, 1, SCALE_UP), Flow(SWITCH, r, size_bytes, 1, SCALE_UP)))),)
    return (Stage("switch tree all_reduce", 2, tuple(
        f for r in ranks for f in (Flow(r, SWITCH, size_bytes, 1, SCALE_OUT),
                                   Flow(SWITCH, r, size_bytes, 1, SCALE_OUT)))),)


def cost(kind, group, size_bytes, why=""):
    return account(kind, NAME, group, size_bytes, stages(kind, group, size_bytes), why)
