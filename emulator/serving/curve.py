"""The serving curve: at each concurrency, the steady state of continuous batching, timed by replayed steps.

Per concurrency ``C`` (:func:`point`): the scheduler's window (:mod:`tierlab.serving.schedule`), its
steps in classes (:mod:`tierlab.serving.steps`), each class's representative replayed exactly
(:class:`tierlab.serving.replay.StepReplayer`), every step given its class's time. Then, with
``T(k)`` the end of window step ``k``:

- ``output_tokens_per_s``: output tokens the window's steps sample (first tokens included) over the
  window's time, for the whole deployment (``dp`` replicas): how TensorRT-LLM and MLPerf count.
- ``output_tokens_per_s_per_chip``: that over the chips (``dp x pp x tp``).
- ``total_tokens_per_s_per_chip``: input and output tokens (``output x (isl + osl) / osl``) per
  second per chip: how SemiAnalysis's InferenceMAX counts.
- ``ttft_s``: mean over the window's requests of ``T(first token's step) - T(step before arrival)``;
  ``tpot_s``: mean of ``(T(last step) - T(first token's step)) / (osl - 1)``;
  ``tokens_per_s_per_user`` = 1 / ``tpot_s``.
- ``energy_j_per_token``: the window's replayed energy over its output tokens.
- ``usd_per_mtok``: the hardware's price per hour (the system's, pro rata for the chips used, or the
  chip's) over the output tokens per second (:func:`tierlab.cost.price.usd_per_mtok`), null
  without a ``[price]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.serving.schedule import schedule
from tierlab.serving.steps import CONTEXT_REL, TOKENS_REL, classify

CURVE_KEYS = ("concurrency", "output_tokens_per_s", "output_tokens_per_s_per_chip", "total_tokens_per_s_per_chip",
              "tokens_per_s_per_user", "ttft_s", "tpot_s", "usd_per_mtok", "energy_j_per_token",
              "j_per_token", "j_per_token_dynamic")


@dataclass
class Point:
    """One concurrency's figures (:data:`CURVE_KEYS`) and how they were made (``steps``)."""

    concurrency: int
    output_tokens_per_s: float
    output_tokens_per_s_per_chip: float
    total_tokens_per_s_per_chip: float
    tokens_per_s_per_user: float | None
    ttft_s: float
    tpot_s: float | None
    usd_per_mtok: float | None
    energy_j_per_token: float
    steps: dict = field(default_factory=dict)
    j_per_token: float | None = None           # board: dynamic + static power x step time, per output token
    j_per_token_dynamic: float | None = None   # = energy_j_per_token

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in CURVE_KEYS}


def window_figures(s, step_s: np.ndarray, step_j: np.ndarray, board_j: np.ndarray | None = None) -> dict:
    """The figures of a window whose steps took ``step_s`` seconds and ``step_j`` joules (module
    docstring), for one replica."""
    end = np.cumsum(step_s)
    total = float(end[-1])
    out = int(s.sampled.sum())
    ok = s.first >= 0
    start = np.where(s.arrive > 0, end[np.maximum(s.arrive - 1, 0)], 0.0)
    ttft = float(np.mean(end[s.first[ok]] - start[ok])) if ok.any() else float("nan")
    tpot = None
    done = ok & (s.finish >= 0)
    if s.osl > 1 and done.any():
        tpot = float(np.mean((end[s.finish[done]] - end[s.first[done]]) / (s.osl - 1)))
    return {"time_s": total, "output_tokens": out, "output_tokens_per_s": out / total, "ttft_s": ttft,
            "tpot_s": tpot, "energy_j_per_token": float(step_j.sum()) / out, "requests": int(ok.sum()),
            "j_per_token_dynamic": float(step_j.sum()) / out,
            "j_per_token": float((step_j if board_j is None else board_j).sum()) / out}


def plan(isl: int, osl: int, concurrency: int, max_batch_tokens: int, *, dp: int = 1,
         tokens_rel: float = TOKENS_REL, context_rel: float = CONTEXT_REL):
    """The window (one replica's) and its classes at ``concurrency``; ``(schedule, classes, shapes)``,
    ``shapes`` the representatives' :class:`~tierlab.traces.lowering.serving_step.MixedStep` s."""
    if concurrency % dp:
        raise UsageError(f"concurrency {concurrency} is not a multiple of --dp {dp} (each replica serves its share)",
                         field="concurrency")
    s = schedule(isl, osl, concurrency // dp, max_batch_tokens)
    cl = classify(s, tokens_rel, context_rel)
    return s, cl, [s.step(int(k)) for k in cl.rep]


def point(replayer, isl: int, osl: int, concurrency: int, max_batch_tokens: int, *, chips: int, dp: int = 1,
          price_per_hour: float | None = None, tokens_rel: float = TOKENS_REL,
          context_rel: float = CONTEXT_REL, planned=None, replays: int | None = None) -> Point:
    """The figures at ``concurrency`` (over the ``dp`` replicas; ``chips`` in all). ``planned``: its
    :func:`plan`, when made already; ``replays``: the replays it took, when made beforehand."""
    s, cl, shapes = planned or plan(isl, osl, concurrency, max_batch_tokens, dp=dp, tokens_rel=tokens_rel,
                                    context_rel=context_rel)
    before = replayer.replays
    costs = [replayer.cost(x) for x in shapes]
    step_s = np.array([c.latency_s for c in costs])[cl.of_step]
    step_j = np.array([c.energy_j for c in costs])[cl.of_step]
    board_j = np.array([c.energy_j if c.energy_board_j is None else c.energy_board_j for c in costs])[cl.of_step]
    f = window_figures(s, step_s, step_j, board_j)
    out = f["output_tokens_per_s"] * dp
    usd = None
    if price_per_hour is not None:
        from tierlab.cost.price import usd_per_mtok

        usd = usd_per_mtok(price_per_hour, out)[0]
    tpot = f["tpot_s"]
    return Point(concurrency=concurrency, output_tokens_per_s=out, output_tokens_per_s_per_chip=out / chips,
                 total_tokens_per_s_per_chip=out * (isl + osl) / osl / chips,
                 tokens_per_s_per_user=None if not tpot else 1.0 / tpot, ttft_s=f["ttft_s"], tpot_s=tpot,
                 usd_per_mtok=usd, energy_j_per_token=f["energy_j_per_token"],
                 j_per_token=f["j_per_token"], j_per_token_dynamic=f["j_per_token_dynamic"],
                 steps={"window_steps": s.n_steps, "warmup_steps": s.warmup_steps, "classes": cl.n,
                        "replays": replayer.replays - before if replays is None else replays,
                        "requests": f["requests"],
                        "window_s": f["time_s"],
                        "bounds": sorted({c.bound for c in costs})})


def concurrencies(text: str | None, limit: int, max_batch_tokens: int) -> list[int]:
    """``1,2,4`` or ``auto`` (powers of two up to the KV limit and the token budget, and the limit)."""
    cap = min(limit, max_batch_tokens)
    if text is None or str(text).strip() == "auto":
        out = [1 << k for k in range(0, 31) if (1 << k) <= cap]
        if out[-1] != cap:
            out.append(cap)
        return out
    try:
        out = sorted({int(x) for x in str(text).split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"expected concurrencies separated by commas (e.g. 1,8,64) or auto, got {text!r}",
                         field="concurrency") from None
    if not out or out[0] < 1:
        raise UsageError(f"every concurrency must be at least 1, got {text!r}", field="concurrency")
    return out
