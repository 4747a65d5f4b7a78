"""A serving step's time and energy from exact replays: a surface fitted over a small grid of step
shapes, interpolated between them.

A step of continuous batching (:class:`tierlab.traces.lowering.serving_step.MixedStep`) is described by ``D`` decodes, the
sum ``S`` of their positions, ``P`` prefill tokens in ``chunks`` chunks and the chunks' causal
query-key pairs ``Q`` (as :mod:`tierlab.serving.steps` classes them). Its ops' times grow with
``T = D + P`` (the rows through every linear layer), with ``S`` (keys the decodes read) and with
``Q`` (the chunks' attention), so the surface is, per mode:

- **decodes alone** (``chunks == 0``, GEMMs streaming weights as decode does)::

      t = a(D) + b(D) x S

  ``a`` and ``b`` at nodes ``D`` in :data:`DECODE_NODES`, from two replays each (every decode at a
  short and at a long context), linear in ``D`` between nodes.
- **with a prefill chunk** (GEMMs tiled as prefill)::

      t = t0(T) + q(T) x (Q - T (T + 1) / 2) + s(T) x S

  at nodes ``T`` in :data:`MIXED_NODES`, from three replays each: one chunk of ``T`` tokens from
  position 0 (``t0``), the same chunk from a far position (``q``), and a step of ``T / 4`` decodes
  at a long context with a chunk of the rest (``s``); linear in ``T`` between nodes.

Energy is fitted the same way from the same replays. Every replay is
:class:`tierlab.serving.replay.StepReplayer`'s (the calibrated latency and energy that
``throughput`` uses). The error against exact replays of random shapes is measured by
``tests/requests/test_kvstream_steptime.py`` (see :data:`ERROR_BOUND`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from tierlab.serving.replay import StepReplayer
from tierlab.traces.lowering.serving_step import MixedStep

DECODE_NODES = (1, 8, 32, 128, 512)
MIXED_NODES = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
SHORT_CONTEXT = 256
FAR_START = 16384
ERROR_BOUND = 0.10   # |surface / replay - 1| on random steps (tests/requests/test_kvstream_steptime.py)

_CACHE: dict = {}


@dataclass
class StepSurface:
    """The fitted surface (module docstring). ``dec_*`` at :attr:`dec_nodes`; ``mix_*`` at :attr:`mix_nodes`;
    index 0 of the last axis is time (s), 1 energy (J)."""

    dec_nodes: list
    dec_a: np.ndarray
    dec_b: np.ndarray
    mix_nodes: list
    mix_t0: np.ndarray
    mix_q: np.ndarray
    mix_s: np.ndarray
    replays: int
    max_context: int

    def _lerp(self, nodes: list, vals: np.ndarray, x: float, k: int) -> float:
        i = bisect.bisect_right(nodes, x) - 1
        if i < 0:
            return float(vals[0, k])
        if i >= len(nodes) - 1:
            i = len(nodes) - 2
        x0, x1 = nodes[i], nodes[i + 1]
        w = (x - x0) / (x1 - x0)
        return float(vals[i, k] + w * (vals[i + 1, k] - vals[i, k]))

    def _eval(self, D: int, S: float, P: int, Q: float, chunks: int, k: int) -> float:
        if chunks == 0:
            if D == 0:
                return 0.0
            return self._lerp(self.dec_nodes, self.dec_a, D, k) + self._lerp(self.dec_nodes, self.dec_b, D, k) * S
        T = D + P
        t = (self._lerp(self.mix_nodes, self.mix_t0, T, k)
             + self._lerp(self.mix_nodes, self.mix_q, T, k) * (Q - T * (T + 1) / 2)
             + self._lerp(self.mix_nodes, self.mix_s, T, k) * S)
        return max(t, 0.0)

    def time(self, D: int, S: float, P: int = 0, Q: float = 0, chunks: int = 0) -> float:
        """Seconds of a step of ``D`` decodes at summed positions ``S`` and ``P`` prefill tokens in
        ``chunks`` chunks with ``Q`` query-key pairs."""
        return self._eval(D, S, P, Q, chunks, 0)

    def energy(self, D: int, S: float, P: int = 0, Q: float = 0, chunks: int = 0) -> float:
        """Joules of the same step (the replays' energy, interpolated alike)."""
        return self._eval(D, S, P, Q, chunks, 1)

    def step_time(self, step: MixedStep) -> float:
        """:meth:`time` of a :class:`~tierlab.traces.lowering.serving_step.MixedStep`."""
        return self.time(*shape_of(step))

    def prefill_time(self, tokens: int, start: int = 0) -> float:
        """Seconds to prefill ``tokens`` prompt tokens after ``start`` cached ones, alone, in chunks of
        at most the largest node (the step-time cost of recomputing them)."""
        B = self.mix_nodes[-1]
        t, pos, left = 0.0, start, tokens
        while left > 0:
            n = min(B, left)
            t += self.time(0, 0, n, n * pos + n * (n + 1) / 2, 1)
            pos += n
            left -= n
        return t


def shape_of(step: MixedStep) -> tuple[int, int, int, int, int]:
    """``(D, S, P, Q, chunks)`` of a step (as :mod:`tierlab.serving.schedule` counts them)."""
    D = len(step.decode)
    S = sum(step.decode)
    P = sum(t for _, t, _ in step.prefill)
    Q = sum(t * s + t * (t + 1) // 2 for s, t, _ in step.prefill)
    return D, S, P, Q, len(step.prefill)


def _grid(max_batch_tokens: int, max_context: int, kv_tokens: int | None = None):
    """The replayed shapes: ``(kind, node, step)``: no step past the model's positions, and no step
    holding more KV than the HBM keeps (``kv_tokens``), which the scheduler never runs and whose
    replay would spill KV to a farther tier."""
    max_batch_tokens = min(max_batch_tokens, max_context)
    kv_cap = kv_tokens if kv_tokens else None
    out = []
    long_ctx = max(SHORT_CONTEXT * 2, max_context - 1)
    for D in DECODE_NODES:
        if D > max_batch_tokens:
            break
        c_hi = max(SHORT_CONTEXT * 2, min(long_ctx, int(long_ctx * 8 / D) if D > 8 else long_ctx))
        if kv_cap is not None:
            c_hi = max(SHORT_CONTEXT * 2, min(c_hi, kv_cap // D))
        out.append(("dec_lo", D, MixedStep(decode=(SHORT_CONTEXT,) * D)))
        out.append(("dec_hi", D, MixedStep(decode=(c_hi,) * D)))
    nodes = [T for T in MIXED_NODES if T <= max_batch_tokens]
    if not nodes or nodes[-1] < max_batch_tokens:
        nodes.append(max_batch_tokens)
    far = max(0, min(FAR_START, max_context - max(nodes)))
    for T in nodes:
        out.append(("mix_0", T, MixedStep(prefill=((0, T, True),))))
        if far > 0:
            out.append(("mix_q", T, MixedStep(prefill=((far, T, True),))))
        ds = max(1, T // 4)
        c_s = max(SHORT_CONTEXT, min(long_ctx, int(long_ctx * 8 / ds) if ds > 8 else long_ctx))
        if kv_cap is not None:
            c_s = max(SHORT_CONTEXT, min(c_s, (kv_cap - T) // ds))
        out.append(("mix_s", T, MixedStep(decode=(c_s,) * ds, prefill=((0, T - ds, True),))))
    return out


def fit_surface(replayer: StepReplayer, *, max_batch_tokens: int, max_context: int,
                workers: int | None = None, kv_tokens: int | None = None) -> StepSurface:
    """Replay the grid (:func:`_grid`) with ``replayer`` and fit the surface. ``max_context``: the
    longest decode position to plan for (a long-context node; keep it within the KV that fits, lest
    the replay spill KV to a farther tier); ``workers``: processes for the replays."""
    grid = _grid(max_batch_tokens, max_context, kv_tokens)
    before = replayer.replays
    replayer.prefetch([s for _, _, s in grid], workers=workers)
    cost = {}
    for kind, node, step in grid:
        c = replayer.cost(step)
        cost[(kind, node)] = (np.array([c.latency_s, c.energy_j]), shape_of(step))
    dn = sorted({n for k, n, _ in grid if k.startswith("dec")})
    a, b = [], []
    for D in dn:
        (t_lo, s_lo), (t_hi, s_hi) = cost[("dec_lo", D)], cost[("dec_hi", D)]
        slope = (t_hi - t_lo) / max(1, s_hi[1] - s_lo[1])
        b.append(slope)
        a.append(t_lo - slope * s_lo[1])
    mn = sorted({n for k, n, _ in grid if k.startswith("mix")})
    t0, q, s = [], [], []
    for T in mn:
        v0, sh0 = cost[("mix_0", T)]
        if ("mix_q", T) in cost:
            v1, sh1 = cost[("mix_q", T)]
            qs = (v1 - v0) / max(1, sh1[3] - sh0[3])
        else:
            qs = np.zeros(2)
        v2, sh2 = cost[("mix_s", T)]
        ss = (v2 - v0 - qs * (sh2[3] - sh0[3])) / max(1, sh2[1])
        t0.append(v0)
        q.append(qs)
        s.append(np.maximum(ss, 0.0))
    if len(dn) == 1:
        dn, a, b = dn + [dn[0] + 1], a + a, b + b
    if len(mn) == 1:
        mn, t0, q, s = mn + [mn[0] + 1], t0 + t0, q + q, s + s
    return StepSurface(dec_nodes=dn, dec_a=np.array(a), dec_b=np.array(b), mix_nodes=mn, mix_t0=np.array(t0),
                       mix_q=np.array(q), mix_s=np.array(s), replays=replayer.replays - before,
                       max_context=max_context)


def surface_for(spec, run, *, chip=None, system=None, max_batch_tokens: int, max_context: int,
                workers: int | None = None, replayer: StepReplayer | None = None,
                kv_tokens: int | None = None) -> StepSurface:
    """The surface of one deployment, fitted once per process (cached by model, dtypes, parallelism,
    target, token budget, context and the KV tokens the HBM holds)."""
    target = system.name if system is not None else chip.name
    key = (spec.name, spec.num_layers, run.weights, run.kv, run.activations, run.tp, run.pp, run.ep,
           target, max_batch_tokens, max_context, kv_tokens)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    own = replayer is None
    rep = replayer or StepReplayer(spec, run, chip=chip, system=system)
    try:
        surf = fit_surface(rep, max_batch_tokens=max_batch_tokens, max_context=max_context, workers=workers,
                           kv_tokens=kv_tokens)
    finally:
        if own:
            rep.close()
    _CACHE[key] = surf
    return surf


def break_even_bandwidth(surface: StepSurface, prefix_tokens: int, kv_bytes_per_token_per_device: float) -> float:
    """Mooncake's Eq. 2, tierlab's way: the load bandwidth per device (bytes/s) at which loading a
    cached prefix of ``prefix_tokens`` tokens takes as long as prefilling it on the deployment
    (the surface's time for those tokens alone, in chunks of the token budget). Slower links lose
    to recomputation."""
    if prefix_tokens < 1:
        from tierlab.common.errors import UsageError

        raise UsageError(f"expected a positive number of tokens, got {prefix_tokens!r}", field="prefix_tokens")
    return prefix_tokens * kv_bytes_per_token_per_device / surface.prefill_time(prefix_tokens)


def break_even_for(spec, *, chip=None, system=None, tp: int = 1, pp: int = 1, prefix_tokens: int = 8192,
                   max_batch_tokens: int = 8192, kv: str = "bf16", weights: str = "bf16",
                   workers: int | None = None) -> dict:
    """:func:`break_even_bandwidth` of ``spec`` on a deployment, per device and for the replica: the
    prefix's prefill replayed exactly, chunk by chunk of ``max_batch_tokens`` (the step surface is
    not needed for it, nor fitted)."""
    from tierlab.serving.capacity import device_terms
    from tierlab.traces.workload.run import RunConfig

    if isinstance(prefix_tokens, bool) or not isinstance(prefix_tokens, int) or prefix_tokens < 1:
        from tierlab.common.errors import UsageError

        raise UsageError(f"expected a positive number of tokens, got {prefix_tokens!r}", field="prefix_tokens")
    run = RunConfig(generate=1, weights=weights, kv=kv, activations="bf16", tp=tp, pp=pp)
    positions = 4096
    kv_dev = max(t[2] for t in device_terms(spec, run, positions, max_batch_tokens)) / positions
    rep = StepReplayer(spec, run, chip=chip, system=system)
    try:
        prefill_s, pos = 0.0, 0
        while pos < prefix_tokens:
            n = min(max_batch_tokens, prefix_tokens - pos)
            prefill_s += rep.cost(MixedStep(prefill=((pos, n, True),))).latency_s
            pos += n
    finally:
        rep.close()
    per_dev = prefix_tokens * kv_dev / prefill_s
    return {"prefix_tokens": prefix_tokens, "prefill_s": prefill_s,
            "kv_bytes_per_token": kv_dev * run.devices, "bandwidth_per_device_bytes_per_s": per_dev,
            "bandwidth_bytes_per_s": per_dev * run.devices}
