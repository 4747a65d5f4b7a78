"""The dispatch table: which kernel counts a replay, chosen in one place.

Each kernel declares once what it supports (:class:`Kernel`); a replay is described by the facts
the table is matched against (:class:`Request`). :func:`choose` takes the fastest kernel, in table
order, that supports the request — or the one the caller named (``ReplayOptions.kernel``), refused
with the reason when it cannot serve — and says why, for the result's ``provenance.kernel``.
Every kernel gives the same counts wherever it serves (``docs/design.md``, the dispatch table, says
why each is exact; the tests compare each against the plain-Python reference and the walk).

Adding a kernel is one module with its driver and one entry in :data:`KERNELS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tierlab.common.errors import UsageError

ANY = None   # a limit a kernel does not have


@dataclass(frozen=True)
class Request:
    """What a replay asks of its kernel.

    ``source``: ``"blocks"`` (a raw stream of tier-0 block addresses, one tensor) or
    ``"descriptors"`` (access descriptors of a trace or of arrays). ``policies``: the policy of each
    caching tier, nearest first. ``caches_over_home``: the tiers above one home tier are all caching
    and every tensor is homed there (so ``n_caching`` caches over one memory). ``lone_cache``: tier 0
    is the only caching tier and a tier lies below it. ``writes``: the stream may write (None:
    not known before it is read). ``flush``: dirty blocks are written back at the end.
    ``inclusive``: back-invalidation between two or more caching tiers. ``pim``: some access runs in
    memory. ``ops`` / ``kinds``: ops and tensor kinds the counts are split into. ``caching``: the
    caching tiers' indices."""

    source: str
    policies: tuple[str, ...]
    caches_over_home: bool
    lone_cache: bool
    writes: bool | None
    flush: bool
    inclusive: bool
    pim: bool
    ops: int
    kinds: int
    caching: tuple[int, ...] = ()

    @property
    def n_caching(self) -> int:
        return len(self.policies)


@dataclass(frozen=True)
class Kernel:
    """A kernel's declared support. ``layout``: ``"any"``, ``"caches_over_home"`` or
    ``"lone_cache"`` (see :class:`Request`); ``split``: counts per op and tensor kind (else one op
    of one kind only); ``hands_over``: for a kernel without writes, the kernel it hands its state
    over to at the first write of a stream whose writes are not known before it is read (None: such
    a stream is refused)."""

    name: str
    summary: str
    policies: frozenset = frozenset({"lru", "fifo", "random", "opt"})
    layout: str = "any"
    max_caching: int | None = ANY
    writes: bool = True
    flush: bool = True
    inclusive: bool = True
    pim: bool = True
    split: bool = True
    sources: frozenset = field(default=frozenset({"blocks", "descriptors"}))
    hands_over: str | None = None

    def refusal(self, req: Request) -> str | None:
        """Why this kernel cannot serve ``req`` (None: it can)."""
        if req.source not in self.sources:
            return f"takes {' or '.join(sorted(self.sources))}, not {req.source}"
        bad = sorted(set(req.policies) - self.policies)
        if bad:
            return f"no policy {bad[0]!r} (takes {', '.join(sorted(self.policies))})"
        if self.layout == "caches_over_home" and not req.caches_over_home:
            return "needs caches over one home tier holding every tensor"
        if self.layout == "lone_cache" and not req.lone_cache:
            return f"needs tier 0 as the only caching tier (caching here: tier {', '.join(map(str, req.caching)) or 'none'})"
        if self.max_caching is not ANY and req.n_caching > self.max_caching:
            return f"at most {self.max_caching} caching tiers ({req.n_caching} here)"
        if not self.writes and req.writes is not False and not (req.writes is None and self.hands_over):
            return "no writes" if req.writes else "no writes (not known before the trace is read)"
        if not self.flush and req.flush:
            return "no flush"
        if not self.inclusive and req.inclusive:
            return "no inclusive back-invalidation"
        if not self.pim and req.pim:
            return "no PIM"
        if not self.split and (req.ops > 1 or req.kinds > 1):
            return f"counts one op of one tensor kind ({req.ops} ops, {req.kinds} kinds here)"
        return None


# fastest first; "auto" takes the first that serves
KERNELS: tuple[Kernel, ...] = (
    Kernel("cache_stream_chain", "each block followed down at most three clean LRU/FIFO caches in one "
           "loop (tierlab.engine.stream.chain_pass)",
           policies=frozenset({"lru", "fifo"}), layout="caches_over_home", max_caching=3, writes=False,
           flush=False, inclusive=False, pim=False, split=False, hands_over="cache_stream_passes"),
    Kernel("cache_stream_passes", "chunk by chunk, each chunk one cache at a time "
           "(tierlab.engine.stream.tier_pass)",
           policies=frozenset({"lru", "fifo", "random"}), layout="caches_over_home", flush=False,
           inclusive=False, pim=False, split=False),
    Kernel("set_groups", "a lone LRU/FIFO caching tier kept as groups of sets that hold alike "
           "(tierlab.engine.setgroups)",
           policies=frozenset({"lru", "fifo"}), layout="lone_cache", inclusive=False),
    Kernel("walk_fast", "the per-block walk with the range fast path and lazy run stacks "
           "(tierlab.engine.walk, tierlab.engine.fastpath)", inclusive=False),
    Kernel("walk", "the plain per-block walk (tierlab.engine.walk)"),
)

BY_NAME = {k.name: k for k in KERNELS}
KERNEL_NAMES = tuple(BY_NAME)


@dataclass(frozen=True)
class Choice:
    """The kernel chosen and why (``provenance.kernel``)."""

    kernel: Kernel
    why: str

    def to_dict(self) -> dict:
        return {"name": self.kernel.name, "why": self.why}


def choose(req: Request, requested: str = "auto", *, exclude: frozenset = frozenset()) -> Choice:
    """The kernel for ``req``: the named one (refused, with the reason, if it cannot serve), or with
    ``"auto"`` the first in :data:`KERNELS` that serves and is not in ``exclude``."""
    if requested != "auto":
        k = BY_NAME.get(requested)
        if k is None:
            raise UsageError(f"unknown kernel {requested!r}; expected auto or one of {', '.join(BY_NAME)}",
                             field="kernel")
        why = k.refusal(req)
        if why is not None:
            raise UsageError(f"{requested!r} cannot serve this replay: {why}", field="kernel")
        return Choice(k, "asked for" + _handing_over(k, req))
    passed = []
    for k in KERNELS:
        why = "turned off" if k.name in exclude else k.refusal(req)
        if why is None:
            return Choice(k, "fastest that serves" + (f" (passed over: {'; '.join(passed)})" if passed else "")
                          + _handing_over(k, req))
        passed.append(f"{k.name}: {why}")
    raise AssertionError("the walk serves every request")   # pragma: no cover - 'walk' refuses nothing


def _handing_over(k: Kernel, req: Request) -> str:
    if req.writes is None and not k.writes and k.hands_over:
        return f"; writes not known before the stream is read: hands over to {k.hands_over} at the first write"
    return ""
