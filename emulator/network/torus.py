"""Torus: dimension-ordered bidirectional rings on a ``torus`` or ``mesh`` scale-up fabric (TPU ICI,
Trainium's NeuronLink), every byte between grid neighbours.

The group is a box of the node's grid (the chips whose coordinates range over a block of each axis;
the whole torus, a row, a plane). Along an axis of the box of m chips, a collective runs as rings of
m chips, one per line of the box along that axis:

* a **torus** axis the box spans whole (m >= 3: its wraparound link closes the ring) runs a
  *bidirectional* ring: each step a chip sends half its chunk to each neighbour, so each link
  carries, per direction, half of what a one-way ring's would;
* an axis without its wraparound (a mesh, or part of a torus axis) embeds a one-way ring of the m
  chips in the line (0 -> 2 -> 4 ... -> 5 -> 3 -> 1 -> 0: each link used once each way, a ring edge of
  two hops forwarded by the chip between); an axis of 2 chips is their one link.

With d axes of more than one chip the buffer is cut into d parts and part j takes the axes in the
order rotated by j (axis j first), so in every phase each axis carries one part and all 2d links of
a chip are busy (TPU's "all-reduce over four links"). A phase is one :class:`Stage` (its flows on
every axis at once; its steps the longest ring's m - 1).

Closed forms for a k^d box (n = k^d chips, S the full buffer, per chip; see docs/collectives.md):

* ``all_reduce``: reduce-scatter over the axes, then all-gather back: sends and receives
  2(n-1)/n * S, as a ring does, in 2d(k-1) steps (4(k-1) on k x k) instead of 2(n-1); each link
  carries 2(n-1)/n * S / (2d) per direction on a torus (twice that on a mesh's busiest link);
* ``reduce_scatter`` / ``all_gather``: half of that: (n-1)/n * S in d(k-1) steps.

A 1 x n torus is a bidirectional ring: the ring's bytes and steps, half its per-link bytes.
"""

from __future__ import annotations

from collections import defaultdict

from tierlab.network.schedule import Flow, Stage, account

NAME = "torus"
SUMMARY = "dimension-ordered bidirectional rings on a torus/mesh: 2(n-1)/n*S per chip in 2d(k-1) steps"
KINDS = ("all_reduce", "all_gather", "reduce_scatter")


def _box(group):
    """(node, axes): the group's node and, per grid axis, its sorted coordinates, if the group is a
    box of the grid (every combination of those coordinates, each axis's a contiguous range); else
    (None, reason)."""
    system = group.system
    coords = {d: system.grid_coord(d) for d in group.devices}
    dims = system.scale_up.dims
    axes = [sorted({c[a] for c in coords.values()}) for a in range(len(dims))]
    for a, vals in enumerate(axes):
        if vals != list(range(vals[0], vals[-1] + 1)):
            return None, f"its chips' coordinates on axis {a} ({vals}) are not a contiguous range"
    size = 1
    for vals in axes:
        size *= len(vals)
    if size != group.n_ranks:
        return None, (f"its {group.n_ranks} chips are not a box of the {'x'.join(map(str, dims))} grid "
                      f"(their coordinates span {size} chips)")
    return group.system.node_of(group.devices[0]), axes


def supports(kind, group, system) -> str | None:
    if kind not in KINDS:
        return f"torus serves {', '.join(KINDS)}, not {kind}"
    fab = system.scale_up
    if not fab.is_grid:
        return (f"torus needs a 'torus' or 'mesh' scale-up fabric (topology = \"torus\", dims = [..]), "
                f"not a '{fab.topology}'")
    if group.n_nodes > 1:
        return f"torus runs inside one node's grid; the group spans {group.n_nodes} nodes"
    node, why = _box(group)
    if node is None:
        return why
    return None


def _line_order(m: int) -> list[int]:
    """A one-way ring of the m chips of a line, each link used once each way: evens up, odds down."""
    return list(range(0, m, 2)) + list(range(m - 1 if m % 2 == 0 else m - 2, 0, -2))


def _axis_flows(system, node, axes, axis: int, data_bytes: float, out: dict):
    """Add to ``out`` ((src, dst) -> [bytes, messages]) one ring phase along ``axis`` over every line
    of the box, each chip starting with ``data_bytes`` (it sends (m-1)/m of it in all)."""
    vals = axes[axis]
    m = len(vals)
    if m < 2:
        return 0
    full = system.scale_up.wraps and m >= 3 and m == system.scale_up.dims[axis]
    others = [range(0, 1) if a == axis else axes[a] for a in range(len(axes))]

    def lines(prefix, a):
        if a == len(axes):
            yield prefix
            return
        for v in (others[a] if a != axis else (0,)):
            yield from lines(prefix + (v,), a + 1)

    sent = (m - 1) / m * data_bytes
    for base in lines((), 0):
        dev = [system.grid_device(node, base[:axis] + (v,) + base[axis + 1:]) for v in vals]
        if full:                                   # bidirectional ring: half each way
            for i in range(m):
                for j in ((i + 1) % m, (i - 1) % m):
                    f = out[dev[i], dev[j]]
                    f[0] += sent / 2
                    f[1] += m - 1
        elif m == 2:                               # the pair's one link
            for i in range(2):
                f = out[dev[i], dev[1 - i]]
                f[0] += sent
                f[1] += 1
        else:                                      # a one-way ring embedded in the line
            order = _line_order(m)
            for i in range(m):
                a, b = order[i], order[(i + 1) % m]
                step = 1 if b > a else -1
                for x in range(a, b, step):        # each hop of the ring edge (two at most)
                    f = out[dev[x], dev[x + step]]
                    f[0] += sent
                    f[1] += m - 1
    return m - 1


def stages(kind, group, size_bytes) -> tuple[Stage, ...]:
    system = group.system
    node, axes = _box(group)
    if node is None or group.n_ranks < 2:
        return ()
    active = [a for a in range(len(axes)) if len(axes[a]) > 1]
    d = len(active)
    part = size_bytes / d
    orders = [active[j:] + active[:j] for j in range(d)]

    def data_at(order, p):                         # a part's bytes per chip entering RS phase p
        b = part
        for a in order[:p]:
            b /= len(axes[a])
        return b

    phases = []                                    # (name, [(axis, bytes per chip entering) per part])
    if kind in ("reduce_scatter", "all_reduce"):
        phases += [(f"reduce-scatter {p}", [(o[p], data_at(o, p)) for o in orders]) for p in range(d)]
    if kind in ("all_gather", "all_reduce"):
        phases += [(f"all-gather {q}", [(o[d - 1 - q], data_at(o, d - 1 - q)) for o in orders]) for q in range(d)]
    out = []
    for name, work in phases:
        flows = defaultdict(lambda: [0.0, 0])
        steps = max(_axis_flows(system, node, axes, a, b, flows) for a, b in work)
        out.append(Stage(f"torus {kind} {name}", steps,
                         tuple(Flow(s, t, v[0], v[1]) for (s, t), v in sorted(flows.items()))))
    return tuple(out)


def cost(kind, group, size_bytes, why=""):
    return account(kind, NAME, group, size_bytes, stages(kind, group, size_bytes), why)
