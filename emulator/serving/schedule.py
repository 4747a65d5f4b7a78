"""Continuous batching, step by step: which tokens each step of a serving engine processes.

The scheduler of vLLM (V1) and SGLang, for a closed loop of ``concurrency`` clients each sending a
request of ``isl`` prompt tokens that generates ``osl`` output tokens (every request alike, as the
benchmarks' fixed ISL/OSL runs), a new request arriving as soon as one finishes:

- A step has a budget of ``max_batch_tokens`` tokens. Every running decode takes one (decodes
  first, as vLLM's chunked prefill schedules them); what is left goes to prompts being prefilled,
  oldest request first, each as large a chunk as the budget leaves (**chunked prefill**).
- The step that ends a prompt samples the request's first output token (its time to first token
  ends there); each later step decodes one more. A request with ``osl`` tokens is done after its
  ``osl - 1``-th decode, and its client's next request arrives at the end of that step.
- A decode of a request holding ``isl + g - 1`` positions (``g`` tokens generated) processes its
  token at that position (its context) and attends to every position up to it.

**Steady state.** The slots start with requests part-way through their decode, the ``k``-th of
``C`` having generated ``1 + k (osl - 1) // C`` tokens (an even spread of contexts, the state a
long run settles into), so the requests that replace them arrive spread out too. The **warm-up**
ends when the last of these first requests is done; the **window** measured then runs until every
request in flight at its start is done, twice over (at least two requests' lifetimes). Only the
window's steps are timed (:mod:`tierlab.serving.curve`).

Pure integer bookkeeping over the slots (no engine); a few thousand steps take milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.traces.lowering.serving_step import MixedStep

MAX_STEPS = 1 << 20      # a schedule longer than this is refused (a run that long is not a steady state)


@dataclass
class Schedule:
    """The window's steps and requests. Per window step ``k`` (arrays of length ``n_steps``):
    ``decodes`` (D), ``prefill_tokens`` (P), ``chunks``, ``context_sum`` (S: sum of the decodes'
    positions), ``prefill_pairs`` (query-key pairs of the chunks, causal), ``sampled`` (output tokens
    the step produces). ``contexts[k]`` and ``chunk_list[k]`` give the step's shape
    (:meth:`step`). Per request arriving in the window (``arrive``/``first``/``finish``: step
    indices; ``arrive`` = the step after its predecessor's last; -1 when past the window)."""

    isl: int
    osl: int
    concurrency: int
    max_batch_tokens: int
    warmup_steps: int
    decodes: np.ndarray
    prefill_tokens: np.ndarray
    chunks: np.ndarray
    context_sum: np.ndarray
    prefill_pairs: np.ndarray
    sampled: np.ndarray
    contexts: list
    chunk_list: list
    arrive: np.ndarray
    first: np.ndarray
    finish: np.ndarray

    @property
    def n_steps(self) -> int:
        return len(self.decodes)

    def step(self, k: int) -> MixedStep:
        """The shape of window step ``k`` as a :class:`tierlab.traces.lowering.serving_step.MixedStep`."""
        return MixedStep(decode=tuple(self.contexts[k].tolist()), prefill=self.chunk_list[k])


def check_lengths(isl: int, osl: int, concurrency: int, max_batch_tokens: int) -> None:
    for name, v in (("input", isl), ("output", osl), ("concurrency", concurrency),
                    ("max_batch_tokens", max_batch_tokens)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise UsageError(f"expected a positive integer, got {v!r}", field=name)
    if max_batch_tokens < concurrency:
        raise UsageError(f"--max-batch-tokens {max_batch_tokens} is below one decode batch of {concurrency} "
                         f"sequences (every running decode takes a token of a step)", field="max_batch_tokens")


def schedule(isl: int, osl: int, concurrency: int, max_batch_tokens: int) -> Schedule:
    """Simulate the scheduler (module docstring) and return the window's steps and requests."""
    check_lengths(isl, osl, concurrency, max_batch_tokens)
    C, B = int(concurrency), int(max_batch_tokens)
    pos = np.full(C, isl, np.int64)                       # prompt positions prefilled
    gen = 1 + (np.arange(C) * (osl - 1)) // C if osl > 1 else np.zeros(C, np.int64)
    gen = np.asarray(gen, np.int64)
    if osl == 1:
        pos[:] = 0
    rid = np.full(C, -1, np.int64)                        # -1: a first (warm-up) request
    next_rid = 0
    arrive, first, finish = [], [], []                    # by request id
    phase, marks = 0, []                                  # 0 warm-up, 1 and 2 the window's two rounds
    waiting = set(range(C))                               # slots whose request must finish to end a round
    rec = {k: [] for k in ("D", "P", "n", "S", "Q", "s", "ctx", "ch")}
    k = 0
    while True:
        if k >= MAX_STEPS:
            raise UsageError(f"the schedule did not reach a steady state within {MAX_STEPS} steps",
                             field="output")
        dec = (pos == isl) & (gen >= 1) & (gen < osl)
        ctx = isl + gen[dec] - 1
        left = B - int(dec.sum())
        pre = np.flatnonzero(pos < isl)
        pre = pre[np.argsort(rid[pre], kind="stable")]    # oldest request first (warm-up ones have none here)
        need = isl - pos[pre]
        before = np.cumsum(need) - need
        take = np.clip(left - before, 0, need)
        sel = take > 0
        pre, take = pre[sel], take[sel]
        chunks = tuple((int(pos[j]), int(t), bool(pos[j] + t == isl)) for j, t in zip(pre, take))
        timed = phase > 0
        if timed:
            rec["D"].append(len(ctx))
            rec["P"].append(int(take.sum()))
            rec["n"].append(len(chunks))
            rec["S"].append(int(ctx.sum()))
            rec["Q"].append(sum(t * s + t * (t + 1) // 2 for s, t, _ in chunks))
            rec["s"].append(len(ctx) + sum(1 for c in chunks if c[2]))
            rec["ctx"].append(ctx.astype(np.int64))
            rec["ch"].append(chunks)
        gen[dec] += 1
        pos[pre] += take
        done_pf = pre[pos[pre] == isl]
        gen[done_pf] = 1
        for j in done_pf:
            if rid[j] >= 0:
                first[rid[j]] = k
        fin = np.flatnonzero((pos == isl) & (gen >= osl))
        for j in fin:
            if rid[j] >= 0:
                finish[rid[j]] = k
            waiting.discard(int(j))
            rid[j] = next_rid
            next_rid += 1
            arrive.append(k + 1)
            first.append(-1)
            finish.append(-1)
            pos[j], gen[j] = 0, 0
        k += 1
        if not waiting:
            marks.append(k)
            phase += 1
            if phase == 3:
                break
            waiting = set(range(C))
    w0 = marks[0]
    arrive_a = np.array(arrive, np.int64) - w0
    first_a = np.array(first, np.int64)
    finish_a = np.array(finish, np.int64)
    first_a = np.where(first_a >= 0, first_a - w0, -1)
    finish_a = np.where(finish_a >= 0, finish_a - w0, -1)
    keep = arrive_a >= 0
    return Schedule(isl=isl, osl=osl, concurrency=C, max_batch_tokens=B, warmup_steps=w0,
                    decodes=np.array(rec["D"], np.int64), prefill_tokens=np.array(rec["P"], np.int64),
                    chunks=np.array(rec["n"], np.int64), context_sum=np.array(rec["S"], np.int64),
                    prefill_pairs=np.array(rec["Q"], np.int64), sampled=np.array(rec["s"], np.int64),
                    contexts=rec["ctx"], chunk_list=rec["ch"], arrive=arrive_a[keep], first=first_a[keep],
                    finish=finish_a[keep])
