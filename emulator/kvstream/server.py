"""Serving a request stream through a tiered KV cache: an open-loop continuous-batching simulator.

Each request arrives at its own time (or, with ``closed_loop=C``, when one of ``C`` clients' last
request is done: its ``arrival_s``, TTFT and latency count from then). Per replica, each step (the
scheduler of :mod:`tierlab.serving.schedule`):

1. **Admission**, first come first served: a waiting request is admitted when its KV, ``input +
   output`` positions in whole blocks, fits in the HBM left by weights and workspace (the terms of
   :func:`tierlab.serving.capacity.device_terms`), evicting unpinned cached blocks (LRU) as
   needed; blocks of running requests are pinned. A request that does not fit blocks those behind it.
2. **Prefix lookup**: its leading blocks are looked up block by block in HBM, then ``dram``, ``ssd``,
   ``remote`` (the highest tier holding each); the run stops at the first block no tier holds. Hit
   tokens are ``min(k x block_tokens, input - 1)`` (the last prompt token is always computed, for
   its logits, as vLLM does).
3. **Load or recompute**: the hit blocks of the lower tiers are loaded over each tier's link
   (``bytes per device / bandwidth + latency`` per tier, one transfer each) up to the cut that
   minimises the estimated time to the end of the prefill (load, optionally overlapped layer by
   layer with the prefill of the rest: ``max(0, load - prefill) + load / layers``; prefill times from
   the step-time surface); blocks past the cut are recomputed. Tokens of each choice are counted.
   The request waits for its load, then its remaining prompt is prefilled in chunks.
4. **Steps**: every running decode takes a token of ``max_batch_tokens``, the rest goes to prompts
   being prefilled (oldest first, chunked). A step's time and energy come from the surface of
   :mod:`.steptime` (exact replays of a grid of steps, interpolated).
5. **Tiers**: new blocks land in HBM. An HBM block evicted moves to the next tier (``write-back``), or
   was written there when it was made (``write-through``); each lower tier is LRU and passes its own
   evictions down (write-back). A request done unpins its prompt blocks last block first, so LRU
   evicts a prefix's tail before its head (vLLM's free-block order).

With ``dp > 1``: replicas with their own HBM, ``dram`` and ``ssd``; ``remote`` is one pool shared by
all (``shared_remote``, as Mooncake Store) or one per replica. A router places each request on
arrival: ``round-robin``, ``least-loaded`` (fewest tokens outstanding: input + output of the requests
routed there and not done), ``prefix`` (the replica holding its longest prefix in any of its tiers,
then the least loaded) or ``ttft`` (Mooncake's cache-aware scheduling, FAST'25 Algorithm 1 with each
replica's own prefix: the shortest estimated TTFT, the prefills queued there by this estimate plus
the prompt's prefill after the prefix the replica holds, both from the step-time surface); ties go
round the replicas.

Disaggregated (``prefill_instances``, ``decode_instances``): the router places a request on a prefill
replica, which serves its prompt as above (its own prefix cache and tiers) and holds only the prompt's
blocks; then the prompt's KV moves to the decode replica with the fewest blocks held and awaited, over
the system's links (:mod:`.transfer`). The decode replica admits it when its ``input + output``
positions fit (no prefix cache there), and its first token goes out then: TTFT counts the prefill, the
handover and any wait for decode HBM; TPOT the decode replica's steps.
"""

from __future__ import annotations

import os

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.serving.capacity import UTILISATION, device_terms, memory_tier
from tierlab.traces.workload.run import RunConfig

from .sim import Sim
from .steptime import surface_for
from .summary import RequestsResult, build_result
from .tiers import build_tiers

POLICIES = ("write-back", "write-through")
ROUTERS = ("round-robin", "least-loaded", "prefix", "ttft")
MOONCAKE_BLOCK = 512


def serve_requests(trace, spec, *, chip=None, system=None, tp: int = 1, pp: int = 1, ep: int = 1, dp: int = 1,
                   kv_tiers: dict | None = None, block_tokens: int | None = None, rate_scale: float = 1.0,
                   write_policy: str = "write-back", overlap_load: bool = True, router: str = "round-robin",
                   shared_remote: bool = True, max_batch_tokens: int = 8192, slo_ttft_s: float | None = None,
                   slo_tpot_s: float | None = None, weights: str = "bf16", kv: str = "bf16",
                   activations: str = "bf16", utilisation: float = UTILISATION, closed_loop: int | None = None, hbm_tokens: int | None = None,
                   workers: int | None = None, surface=None, prefill_instances: int | None = None,
                   decode_instances: int | None = None) -> RequestsResult:
    """Serve ``trace`` (a ``tierlab.kvstream.trace.RequestTrace``) with ``spec`` on ``chip`` or ``system`` (module
    docstring). ``kv_tiers``: tier name -> capacity (bytes, a size string, or None for the file's
    default). ``hbm_tokens``: KV tokens a replica's HBM holds, to override the KV limit (what-ifs,
    tests). ``surface``: a fitted :class:`.steptime.StepSurface` to reuse. ``prefill_instances`` and
    ``decode_instances`` (both, instead of ``dp``): disaggregated serving (:mod:`.transfer`)."""
    roles = _roles(dp, prefill_instances, decode_instances)
    _check(trace, spec, chip, system, len(roles) if prefill_instances is None else prefill_instances, router,
           write_policy, rate_scale, max_batch_tokens, closed_loop)
    spec, chip, system = _loaded(spec, chip, system)
    for name, v in (("slo_ttft_s", slo_ttft_s), ("slo_tpot_s", slo_tpot_s)):
        if v is not None and not v > 0:
            raise UsageError(f"expected a positive time in seconds, got {v!r}", field=name)
    if block_tokens is not None and block_tokens != trace.block_tokens:
        raise UsageError(f"the trace's ids are of {trace.block_tokens}-token blocks; re-read it with "
                         f"block_tokens={block_tokens}", field="block_tokens")
    bt = int(trace.block_tokens)
    inp = np.asarray(trace.input_tokens, np.int64)
    out = np.maximum(np.asarray(trace.output_tokens, np.int64), 1)
    too_long = np.flatnonzero(inp + out > spec.max_position_embeddings)
    if too_long.size:
        i = int(too_long[0])
        raise trace.request_error(i, f"{inp[i]} + {out[i]} positions exceed {spec.name}'s "
                                  f"max_position_embeddings {spec.max_position_embeddings}")
    run = RunConfig(generate=1, weights=weights, kv=kv, activations=activations, tp=tp, pp=pp, ep=ep)
    target = chip if system is None else system.chip
    devices = run.devices
    if system is not None and devices * len(roles) > system.n_chips:
        if prefill_instances is not None:
            raise UsageError(f"(prefill + decode instances) x tp x pp = {devices * len(roles)} devices; "
                             f"{system.name} has {system.n_chips} chips", field="prefill_instances")
        raise UsageError(f"dp x pp x tp = {devices * dp} devices; {system.name} has {system.n_chips} chips", field="tp")
    if system is None and prefill_instances is not None:
        raise UsageError("disaggregated prefill and decode move KV over a system's links; give a system",
                         field="chip")
    if system is None and (devices > 1 or dp > 1):
        raise UsageError("tp/pp/ep/dp above 1 need a system, not one chip", field="chip")
    positions = bt * 256
    terms = device_terms(spec, run, positions, max_batch_tokens)
    cap = int(utilisation * memory_tier(target).capacity_bytes)
    kv_tok_dev = max(t[2] for t in terms) / positions                  # the busiest device's KV per token
    hbm_dev = min(cap - w - a for w, a, _ in terms)
    if hbm_dev <= 0:
        raise UsageError(f"{spec.name}'s weights and workspace leave no HBM for KV on {target.name}", field="spec")
    if hbm_tokens is None:
        hbm_tokens = int(hbm_dev // kv_tok_dev)
    elif isinstance(hbm_tokens, bool) or not isinstance(hbm_tokens, int) or hbm_tokens < bt:
        raise UsageError(f"expected at least one block of tokens, got {hbm_tokens!r}", field="hbm_tokens")
    kv_tok = kv_tok_dev * devices                                       # the replica's KV per token
    tiers = build_tiers(kv_tiers, target, system, devices, hbm_tokens * kv_tok)
    max_ctx = int(min(spec.max_position_embeddings, hbm_tokens))
    surf = surface or surface_for(spec, run, chip=chip, system=system, max_batch_tokens=max_batch_tokens,
                                  max_context=max_ctx, workers=workers, kv_tokens=int(hbm_tokens))
    arrival = np.asarray(trace.arrival_s, np.float64) / float(rate_scale)
    handover = None
    if prefill_instances is not None:
        from .transfer import KvHandover

        handover = KvHandover(system, devices, prefill_instances, decode_instances, kv_tok_dev)
    sim = Sim(trace, tiers, surf, bt, kv_tok, kv_tok_dev, hbm_tokens // bt, len(roles), router, write_policy,
              overlap_load, shared_remote, max_batch_tokens, spec.num_layers, inp, out, roles=roles,
              handover=handover)
    sim.run(arrival, closed_loop)
    return build_result(sim, spec=spec, chip=chip, system=system, tiers=tiers, devices=devices, dp=len(roles),
                        arrival=sim.issued, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s, surface=surf,
                        settings=dict(block_tokens=bt, rate_scale=rate_scale, write_policy=write_policy,
                                      overlap_load=overlap_load, router=router, shared_remote=shared_remote,
                                      max_batch_tokens=max_batch_tokens, utilisation=utilisation,
                                      closed_loop=closed_loop, weights=weights, kv=kv, activations=activations,
                                      tp=tp, pp=pp, ep=ep, dp=dp, prefill_instances=prefill_instances,
                                      decode_instances=decode_instances))


def _roles(dp, prefill, decode) -> list:
    """Each replica's role: ``dp`` co-located (``both``), or ``prefill`` prefill then ``decode`` decode."""
    if prefill is None and decode is None:
        return ["both"] * (dp if isinstance(dp, int) and not isinstance(dp, bool) and dp > 0 else 1)
    for name, v in (("prefill_instances", prefill), ("decode_instances", decode)):
        if v is None:
            other = "decode_instances" if name == "prefill_instances" else "prefill_instances"
            raise UsageError(f"disaggregated serving needs both prefill and decode instances ({other} is given)",
                             field=name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UsageError(f"expected a positive integer, got {v!r}", field=name)
    if dp != 1:
        raise UsageError("give dp or prefill and decode instances, not both", field="dp")
    return ["prefill"] * prefill + ["decode"] * decode


def _loaded(spec, chip, system):
    """A model, chip or system given by name or path, loaded (objects pass through)."""
    if isinstance(spec, (str, os.PathLike)):
        from tierlab.traces.model.spec import load_model

        spec = load_model(spec)
    if isinstance(chip, (str, os.PathLike)):
        from tierlab.chip.chipfile import load_chip

        chip = load_chip(chip)
    if isinstance(system, (str, os.PathLike)):
        from tierlab.system.systemfile import load_system

        system = load_system(system)
    return spec, chip, system


def _check(trace, spec, chip, system, dp, router, write_policy, rate_scale, max_batch_tokens, closed_loop) -> None:
    from tierlab.common.suggest import did_you_mean

    if (chip is None) == (system is None):
        raise UsageError("give a chip or a system", field="chip")
    if router not in ROUTERS:
        raise UsageError(f"unknown router {router!r}; {did_you_mean(router, ROUTERS)}", field="router")
    if router in ("prefix", "ttft") and dp < 2:
        raise UsageError(f"router {router!r} chooses among replicas; it needs dp > 1 (or prefill instances > 1)",
                         field="router")
    if write_policy not in POLICIES:
        raise UsageError(f"unknown write policy {write_policy!r}; {did_you_mean(write_policy, POLICIES)}",
                         field="write_policy")
    if not (rate_scale > 0 and np.isfinite(rate_scale)):
        raise UsageError(f"expected a positive rate scale, got {rate_scale!r}", field="rate_scale")
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise UsageError(f"expected a positive integer, got {dp!r}", field="dp")
    if not isinstance(max_batch_tokens, int) or max_batch_tokens < 1:
        raise UsageError(f"expected a positive integer, got {max_batch_tokens!r}", field="max_batch_tokens")
    if closed_loop is not None and (not isinstance(closed_loop, int) or closed_loop < 1):
        raise UsageError(f"expected a positive number of clients, got {closed_loop!r}", field="closed_loop")
    if len(trace) == 0:
        raise UsageError("the trace has no requests", field="trace")
