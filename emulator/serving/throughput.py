"""``tierlab throughput`` as a library call: :func:`throughput` returns the dict behind ``--json``.

Keys: ``model``, ``chip`` or ``system``, ``parallelism`` (``tp``, ``pp``, ``ep``, ``dp``, ``chips``),
``input_tokens``/``output_tokens`` (ISL/OSL per request), ``max_batch_tokens``,
``max_output_tokens_per_s`` (the best point within the SLOs given, else of every point that fits
in memory) and ``best_concurrency`` (its concurrency), ``max_concurrency`` (the KV limit,
:mod:`tierlab.serving.capacity`, its terms in ``kv_limit``), ``curve`` (one entry a concurrency,
the keys of :data:`tierlab.serving.curve.CURVE_KEYS`), ``beyond_memory`` (concurrencies asked for
above the limit, not run), ``slo`` (``tpot_s``, ``ttft_s`` as given) with ``meets`` (per curve entry)
and ``cheapest_within_slo`` (the point of lowest ``usd_per_mtok`` meeting them), ``token_counting``
(the two conventions) and ``provenance`` (how the steps were chosen and replayed).
"""

from __future__ import annotations

from tierlab.common.errors import UsageError
from tierlab.common.version import tierlab_version
from tierlab.serving.capacity import UTILISATION, kv_limit
from tierlab.serving.curve import concurrencies, plan, point
from tierlab.serving.replay import StepReplayer
from tierlab.serving.steps import CONTEXT_REL, TOKENS_REL
from tierlab.traces.workload.run import RunConfig

MAX_BATCH_TOKENS = 8192        # vLLM V1's default max_num_batched_tokens for a server on a large GPU (estimate)

TOKEN_COUNTING = {
    "output_tokens_per_s": "output tokens per second of the whole deployment (TensorRT-LLM perf overview, MLPerf "
                           "Inference: the system's output tokens)",
    "output_tokens_per_s_per_chip": "the same over the chips",
    "total_tokens_per_s_per_chip": "input + output tokens per second over the chips (SemiAnalysis InferenceMAX's "
                                   "throughput per GPU)",
    "tokens_per_s_per_user": "1 / tpot_s (InferenceMAX's interactivity)",
}

SELECTION = ("steps in classes by the number of prefill chunks (exactly) and geometric bins of the decodes, "
             "prefill tokens and prefill query-key pairs (ratio 1 + tokens_rel) and of the decodes' summed "
             "positions (ratio 1 + context_rel); each class's step nearest its mean in those logs replayed exactly, "
             "its calibrated latency and energy standing for the class; a shape met again is not replayed again")
BOUND = ("within a class the token counts differ by less than a factor 1 + tokens_rel and the summed positions by "
         "less than 1 + context_rel, so a step's time by less than the larger (op times grow at most in proportion "
         "to them); measured against replaying every step of short runs: within 2% (tests/serving/test_throughput_steps.py)")


def throughput(spec, *, chip=None, system=None, isl: int, osl: int, concurrency: str | None = "auto",
               weights: str = "bf16", kv: str = "bf16", activations: str = "bf16", max_batch_tokens: int = MAX_BATCH_TOKENS, tp: int = 1,
               pp: int = 1, ep: int = 1, dp: int = 1, slo_tpot_s: float | None = None,
               slo_ttft_s: float | None = None, utilisation: float = UTILISATION, collective_algo: str = "auto",
               options=None, replayer: StepReplayer | None = None, progress=None, workers: int | None = None) -> dict:
    """The serving curve of ``spec`` (a ModelSpec) on ``chip`` (a Chip) or ``system`` (a System)."""
    for name, v in (("input", isl), ("output", osl), ("max_batch_tokens", max_batch_tokens)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UsageError(f"expected a positive integer, got {v!r}", field=name)
    if isl + osl > spec.max_position_embeddings:
        raise UsageError(f"--input {isl} + --output {osl} = {isl + osl} positions exceeds {spec.name}'s "
                         f"max_position_embeddings {spec.max_position_embeddings}", field="input")
    for name, v in (("slo_tpot", slo_tpot_s), ("slo_ttft", slo_ttft_s)):
        if v is not None and not v > 0:
            raise UsageError(f"expected a positive time in milliseconds, got {v!r}", field=name)
    run = RunConfig(generate=1, weights=weights, kv=kv, activations=activations, tp=tp, pp=pp, ep=ep)  # one replica
    devices = run.devices * dp
    target = chip if system is None else system.chip
    if system is not None and devices > system.n_chips:
        raise UsageError(f"dp x pp x tp = {devices} devices; {system.name} has {system.n_chips} chips",
                         field="tp")
    if system is None and run.devices > 1:
        raise UsageError(f"--tp/--pp/--ep make {run.devices} devices; serve them on a system (--system NAME), "
                         "not one chip", field="chip")
    if system is None and dp > 1:
        raise UsageError("--dp replicas need a system (--system NAME)", field="dp")
    limit = kv_limit(spec, run, target, isl, osl, max_batch_tokens, utilisation=utilisation)
    limit = limit.__class__(**{**limit.__dict__, "dp": dp, "max_concurrency": limit.max_concurrency * dp})
    asked = concurrencies(concurrency, limit.max_concurrency, max_batch_tokens * dp)
    fit = [c for c in asked if c <= limit.max_concurrency]
    beyond = [c for c in asked if c > limit.max_concurrency]
    if not fit:
        raise UsageError(f"concurrency {beyond[0]}: the KV of {beyond[0]} requests of {isl}+{osl} tokens does not fit; "
                         f"at most {limit.max_concurrency} do ({limit.memory_tier} of {target.name})",
                         field="concurrency")
    for c in fit:
        if c > max_batch_tokens * dp:
            raise UsageError(f"--max-batch-tokens {max_batch_tokens} is below one decode batch of {c // dp} "
                             "sequences (every running decode takes a token of each step)", field="max_batch_tokens")
    price = _price(chip, system, devices)
    own = replayer is None
    rep = replayer or StepReplayer(spec, run, chip=chip, system=system, options=options,
                                   collective_algo=collective_algo)
    try:
        plans = [plan(isl, osl, c, max_batch_tokens, dp=dp) for c in fit]
        seen, new = set(rep.cache), []
        for _, _, shapes in plans:                 # the shapes each point replays first, in order
            fresh = list(dict.fromkeys(x for x in shapes if x not in seen))
            seen.update(fresh)
            new.append(len(fresh))
        rep.prefetch([x for _, _, shapes in plans for x in shapes], workers=workers)
        points = []
        for i, (c, pl, n) in enumerate(zip(fit, plans, new)):
            points.append(point(rep, isl, osl, c, max_batch_tokens, chips=devices, dp=dp, price_per_hour=price,
                                planned=pl, replays=n))
            if progress is not None:
                progress(i + 1, len(fit))
    finally:
        if own:
            rep.close()
    meets = [(slo_tpot_s is None or (p.tpot_s is not None and p.tpot_s <= slo_tpot_s)) and
             (slo_ttft_s is None or p.ttft_s <= slo_ttft_s) for p in points]
    if not any(meets):
        near = min(points, key=lambda p: _miss(p, slo_tpot_s, slo_ttft_s))
        raise UsageError(f"no point meets the SLO ({_slo_text(slo_tpot_s, slo_ttft_s)}); the nearest is concurrency "
                         f"{near.concurrency}: TPOT {_ms(near.tpot_s)}, TTFT {_ms(near.ttft_s)}",
                         field="slo_tpot" if slo_tpot_s is not None else "slo_ttft")
    ok = [p for p, m in zip(points, meets) if m]
    best = max(ok, key=lambda p: p.output_tokens_per_s)
    priced = [p for p in ok if p.usd_per_mtok is not None]
    cheapest = min(priced, key=lambda p: p.usd_per_mtok) if priced else None
    where = {"system": system.name, "chip": system.chip.name} if system is not None else {"chip": chip.name}
    return {
        "model": spec.name, **where,
        "parallelism": {"tp": tp, "pp": pp, "ep": ep, "dp": dp, "chips": devices},
        "input_tokens": isl, "output_tokens": osl, "max_batch_tokens": max_batch_tokens,
        "weights": weights, "kv": kv, "activations": activations,
        "max_output_tokens_per_s": best.output_tokens_per_s, "best_concurrency": best.concurrency,
        "max_concurrency": limit.max_concurrency, "kv_limit": limit.to_dict(),
        "curve": [p.to_dict() for p in points], "beyond_memory": beyond,
        "slo": {"tpot_s": slo_tpot_s, "ttft_s": slo_ttft_s, "meets": meets},
        "cheapest_within_slo": None if cheapest is None else cheapest.to_dict(),
        "price_usd_per_hour": price,
        "token_counting": TOKEN_COUNTING,
        "provenance": {
            "tierlab": tierlab_version(),
            "scheduler": "continuous batching, chunked prefill (decodes first, then prompts oldest first, within "
                         "max_batch_tokens), a closed loop of `concurrency` clients; steady-state window "
                         "(emulator/serving/schedule.py)",
            "representative_steps": {"rule": SELECTION, "tokens_rel": TOKENS_REL, "context_rel": CONTEXT_REL,
                                     "bound": BOUND, "replays": rep.replays,
                                     "per_point": [dict(concurrency=p.concurrency, **p.steps) for p in points]},
            "latency": "per_token.latency_calibrated_s of each representative step's replay (the step is the "
                       "trace's one decode step); energy per_token.energy_j",
            "memory_utilisation": utilisation,
        },
    }


def _price(chip, system, devices: int) -> float | None:
    if system is not None:
        if system.price is None:
            return None
        return system.price.usd_per_hour * devices / system.n_chips
    return None if chip.price is None else chip.price.usd_per_hour


def _miss(p, tpot, ttft) -> float:
    out = 0.0
    if tpot is not None:
        out += max(0.0, (p.tpot_s or float("inf")) / tpot - 1)
    if ttft is not None:
        out += max(0.0, p.ttft_s / ttft - 1)
    return out


def _ms(v) -> str:
    return "n/a" if v is None else f"{v * 1e3:.3g} ms"


def _slo_text(tpot, ttft) -> str:
    return ", ".join(x for x in (f"TPOT <= {_ms(tpot)}" if tpot is not None else "",
                                 f"TTFT <= {_ms(ttft)}" if ttft is not None else "") if x)
