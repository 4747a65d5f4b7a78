"""Collectives costed as they run: the calibrated time of one collective, by algorithm and protocol.

The roofline (:func:`tierlab.network.collective.plan_collective`) charges a collective its
stages' ``steps x latency + busiest link bytes / bandwidth``. A real library adds, per collective, a
kernel launch and a fixed latency, and per step a latency that depends on the protocol and on the
link class; and its protocols move data at a fraction of the link's rate. This module times the
same stages (each algorithm's :func:`stages`, the same bytes on the same links) that way:

    T(A, P) = launch + base[A][P]
              + sum over A's stages of  max over the stage's fabrics of
                    ( steps x step[class][A][P] + busiest bytes / (bandwidth x achievable x eff[P] x eff[A]) )
              + skew

* ``launch``: the collective's kernel, the chip's ``[execution] kernel_overhead``;
* ``base``, ``step``, ``eff``: the library file ``configs/collectives/nccl.toml`` (NCCL's own tuning
  constants, cited there); ``class``: the fabric's ``link_class`` (``nvlink``, ``pci``, ``net``);
  ``achievable``: the fabric's fraction of line rate its Simple protocol reaches (cited in each
  system file);
* ``skew``: the system's ``[collectives] skew``, the last rank's expected late arrival beyond what
  the critical path already models (ranks whose work differs arrive apart there).

``auto`` (the algorithm) and ``auto`` (the protocol) take the pair with the least time among those
the library runs, as NCCL's tuner does. Library ``nccl``: ring, tree, in-network (NVLS / SHARP where
the switch reduces) with LL / LL128 / Simple; p2p (``direct``) for all_to_all and send_recv.
Library ``custom`` adds vLLM's / TensorRT-LLM's one-shot (``direct``) and ``two_shot`` all-reduce
on one node up to the custom buffer's size (a kernel, then ``barrier`` per round). On a ``torus`` /
``mesh`` scale-up fabric the ``torus`` algorithm (rings along each axis) is a candidate too (its
constants are the ring's, an estimate).

With every overhead off (:data:`ROOFLINE`: no launch, base, step latency or skew, every efficiency
1) and the roofline's algorithm, the time is the roofline's but for its per-message latency (the
roofline charges the fabric's ``latency``; this model charges the protocol's instead).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import lru_cache

from tierlab.common.errors import ConfigError, UsageError
from tierlab.common.paths import configs_dir
from tierlab.network import direct
from tierlab.network.choices import LIBRARIES, PROTOCOLS
from tierlab.network.registry import ALGORITHMS
from tierlab.network.schedule import SCALE_UP, Group, fabric_obj, stage_loads

PROTOCOL_FIELD = "protocol"
LIBRARY_FIELD = "collective_lib"
CUSTOM = ("direct", "two_shot")         # the custom all-reduce's algorithms (library "custom")
NCCL = {"all_reduce": ("ring", "tree", "in_network"), "all_gather": ("ring",),
        "reduce_scatter": ("ring",), "all_to_all": ("direct",), "send_recv": ("direct",)}


@dataclass(frozen=True)
class Library:
    """The constants of ``configs/collectives/NAME.toml`` (microseconds as seconds)."""

    name: str
    efficiency: dict                     # protocol -> fraction of the link's bandwidth
    base_s: dict                         # algorithm -> protocol -> seconds per collective
    step_s: dict                         # link class -> algorithm -> protocol -> seconds per step
    algorithm_efficiency: dict           # algorithm -> fraction (the switch's reduction)
    barrier_s: float                     # custom all-reduce: seconds per round
    custom_max_bytes: float
    source_file: str = ""

    def protocols(self, algorithm: str) -> tuple[str, ...]:
        """The protocols ``algorithm`` runs with (those it has a base latency for)."""
        if algorithm in CUSTOM and algorithm not in self.base_s:
            return ("Simple",)
        return tuple(p for p in PROTOCOLS if p in self.base_s.get(algorithm, {}))


@lru_cache(maxsize=None)
def load_library(name: str = "nccl") -> Library:
    """The library file ``configs/collectives/nccl.toml`` (the one shipped)."""
    path = configs_dir("collectives") / "nccl.toml"
    try:
        d = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"cannot read the collectives library: {err}", file=str(path)) from None
    us = 1e-6
    return Library(
        name=str(d.get("name", name)),
        efficiency={p: float(v) for p, v in d["efficiency"].items()},
        base_s={a: {p: float(v) * us for p, v in row.items()} for a, row in d["base"].items()},
        step_s={c: {a: {p: float(v) * us for p, v in row.items()} for a, row in t.items()}
                for c, t in d["step"].items()},
        algorithm_efficiency={a: float(v) for a, v in d.get("algorithm_efficiency", {}).items()},
        barrier_s=float(d["custom"]["barrier"]) * us,
        custom_max_bytes=float(d["custom"]["max_bytes"]),
        source_file=str(path))


@dataclass(frozen=True)
class Settings:
    """How collectives are timed for the calibrated latency: ``library`` (``nccl`` | ``custom``),
    ``protocol`` (``auto`` or one of :data:`PROTOCOLS`), ``launch_s`` (per collective), ``skew_s``
    (per collective), ``overheads`` (False: :data:`ROOFLINE`-like, no fixed costs, efficiencies 1)."""

    library: str = "nccl"
    protocol: str = "auto"
    launch_s: float = 0.0
    skew_s: float = 0.0
    overheads: bool = True

    def check(self):
        if self.library not in LIBRARIES:
            raise UsageError(f"unknown collective library {self.library!r}; expected one of "
                             f"{', '.join(LIBRARIES)}", field=LIBRARY_FIELD)
        if self.protocol != "auto" and self.protocol not in PROTOCOLS:
            raise UsageError(f"unknown protocol {self.protocol!r}; expected auto or one of "
                             f"{', '.join(PROTOCOLS)}", field=PROTOCOL_FIELD)
        return self


@dataclass(frozen=True)
class Timed:
    """One collective's calibrated time and its parts: ``launch_s``, ``latency_s`` (base and per-step
    latencies), ``transfer_s`` (bytes over the protocol's bandwidth), ``skew_s``; the ``algorithm``
    and ``protocol`` chosen and ``candidates`` (``"ALG/PROTO"`` -> time of each pair considered)."""

    kind: str
    algorithm: str
    protocol: str
    time_s: float
    launch_s: float
    latency_s: float
    transfer_s: float
    skew_s: float
    candidates: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def link_class(fab) -> str:
    """The fabric's link class: its ``link_class`` where set, else ``nvlink`` for scale-up and
    ``net`` for scale-out."""
    c = getattr(fab, "link_class", "") or ""
    return c if c else ("nvlink" if fab.name == SCALE_UP else "net")


def tree_latency(group: Group, lib: Library, protocol: str) -> float:
    """NCCL's tree latency (N1: ``2 x ((ranks per node - 1) x intra + log2(nodes) x inter)``): inside
    a node NCCL's tree is a chain, across nodes a double binary tree; the tree's stages give its
    bytes, this its steps' latency."""
    system = group.system
    ppn = max(len(v) for v in group.nodes().values())
    up = lib.step_s.get(link_class(system.scale_up), {}).get("tree", {}).get(protocol, 0.0)
    t = 2 * (ppn - 1) * up
    if group.n_nodes > 1 and system.scale_out is not None:
        out = lib.step_s.get(link_class(system.scale_out), {}).get("tree", {}).get(protocol, 0.0)
        t += 2 * (group.n_nodes - 1).bit_length() * out       # ceil(log2(nodes))
    return t


def _stages(name: str, kind: str, group: Group, size_bytes: float, send_bytes):
    if kind == "all_to_all" and send_bytes is not None and len(send_bytes) and name == "direct":
        return direct.matrix_stages(group, send_bytes)
    return ALGORITHMS[name].stages(kind, group, size_bytes)


def time_of(name: str, protocol: str, kind: str, group: Group, size_bytes: float, lib: Library,
            settings: Settings, send_bytes=None) -> Timed:
    """:math:`T(A, P)` of the module docstring for algorithm ``name`` and ``protocol``."""
    system = group.system
    on = settings.overheads
    stages = _stages(name, kind, group, size_bytes, send_bytes)
    custom = name in CUSTOM and kind == "all_reduce"
    eff_p = lib.efficiency.get(protocol, 1.0) if on else 1.0
    eff_a = lib.algorithm_efficiency.get(name, 1.0) if on else 1.0
    latency = transfer = 0.0
    if on and stages:
        latency = (lib.barrier_s * len(stages)) if custom else lib.base_s.get(name, {}).get(protocol, 0.0)
    for st in stages:
        loads = stage_loads(group, st)
        if not loads:
            continue
        best, best_lat, best_xfer = -1.0, 0.0, 0.0
        for role, busiest in loads.items():
            fab = fabric_obj(system, role)
            step = 0.0
            if on and not custom:
                step = lib.step_s.get(link_class(fab), {}).get(name, {}).get(protocol, 0.0)
            ach = getattr(fab, "achievable", 1.0) if on else 1.0
            lat = st.steps * step
            xfer = busiest / (fab.bandwidth_bytes_per_s * ach * eff_p * eff_a)
            if lat + xfer > best:
                best, best_lat, best_xfer = lat + xfer, lat, xfer
        latency += best_lat
        transfer += best_xfer
    if name == "tree" and on and stages:
        latency = lib.base_s.get(name, {}).get(protocol, 0.0) + tree_latency(group, lib, protocol)
    moves = bool(stages)
    launch = settings.launch_s if (on and moves) else 0.0
    skew = settings.skew_s if (on and moves) else 0.0
    return Timed(kind, name, protocol, launch + latency + transfer + skew, launch, latency, transfer, skew)


def candidates(kind: str, group: Group, size_bytes: float, lib: Library, settings: Settings,
               algorithm: str = "auto") -> list[tuple[str, str]]:
    """The (algorithm, protocol) pairs considered: the library's algorithms for ``kind`` that can run
    on ``group`` (or ``algorithm`` alone where asked and it serves the kind), each with its
    protocols (or ``settings.protocol`` alone, where the algorithm runs it)."""
    if algorithm != "auto":
        names = [algorithm]
    else:
        names = list(NCCL.get(kind, ()))
        if getattr(group.system.scale_up, "is_grid", False):      # a grid's own rings (TPU ICI, NeuronLink)
            names.append("torus")
        if settings.library == "custom" and kind == "all_reduce" and group.n_nodes <= 1 \
                and size_bytes <= lib.custom_max_bytes:
            names += list(CUSTOM)
    out = []
    for a in names:
        if a not in ALGORITHMS or ALGORITHMS[a].supports(kind, group, group.system) is not None:
            continue
        protos = ("Simple",) if (a in CUSTOM and kind == "all_reduce") else lib.protocols(a)
        if settings.protocol != "auto":
            protos = tuple(p for p in protos if p == settings.protocol)
        out += [(a, p) for p in protos]
    return out


def time_collective(kind: str, group: Group, size_bytes: float, settings: Settings, *,
                    algorithm: str = "auto", send_bytes=None, library: Library | None = None) -> Timed:
    """The calibrated time of one collective: the least :func:`time_of` over :func:`candidates`.
    An asked protocol no considered algorithm runs is a UsageError naming ``--protocol``."""
    lib = library or load_library(settings.library)
    if group.n_ranks < 2:
        return Timed(kind, "direct", "Simple", 0.0, 0.0, 0.0, 0.0, 0.0)
    pairs = candidates(kind, group, size_bytes, lib, settings, algorithm)
    if not pairs:
        what = f"{algorithm!r}" if algorithm != "auto" else f"the {settings.library} library's {kind} algorithms"
        raise UsageError(f"protocol {settings.protocol!r} is not one {what} can run on "
                         f"{group.system.name!r}", field=PROTOCOL_FIELD)
    timed = [time_of(a, p, kind, group, size_bytes, lib, settings, send_bytes) for a, p in pairs]
    best = min(timed, key=lambda t: t.time_s)
    return Timed(**{**best.__dict__, "candidates": {f"{t.algorithm}/{t.protocol}": t.time_s for t in timed}})
