"""Seeded synthetic request streams with shared system prompts and multi-turn sessions.

A block id stands for a block's content *and everything before it* (Mooncake's prefix hashes), so
two prompts share block ``j`` iff their first ``(j + 1) x block_tokens`` tokens are equal. Here:

* every request starts with one of ``n_system_prompts`` system prompts (chosen uniformly) of
  ``system_prompt_tokens`` tokens: requests with the same one share its *full* blocks
  (``system_prompt_tokens // block_tokens``); the block where it ends and the user's text begins is
  the request's own;
* with ``sessions = K > 0`` each request is the next turn of one of ``K`` conversations (chosen
  uniformly; a conversation keeps the system prompt of its first turn). A turn's prompt is the
  previous turn's prompt + its output + ``input_tokens`` new user tokens, so it shares the previous
  prompt's full blocks (``previous_prompt // block_tokens``) and nothing after them. Arrivals do
  not wait for answers (an open loop: a turn may arrive before its predecessor would finish);
* everything else gets fresh ids, numbered densely by first appearance as a read trace's are.

Arrivals: gaps drawn ``exponential`` (``poisson``) or ``gamma`` with coefficient of variation
``cv`` (shape ``1 / cv^2``), mean ``1 / rate``; the first request arrives after one gap. Lengths are
fixed, or drawn (with replacement) from a :class:`RequestTrace`'s; with a trace for
``input_tokens`` and no ``output_tokens``, (input, output) pairs are drawn together.
"""

from __future__ import annotations

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.engine.jit import njit
from tierlab.kvstream.trace import RequestTrace, dense_block_ids

__all__ = ["synthetic_requests"]


@njit
def _build_blocks(n_blocks, share, parent):
    """CSR block ids of rows whose first ``share[r]`` ids are row ``parent[r]``'s (an earlier row)
    and the rest fresh."""
    n = n_blocks.shape[0]
    off = np.zeros(n + 1, np.int64)
    for r in range(n):
        off[r + 1] = off[r] + n_blocks[r]
    out = np.empty(off[n], np.int64)
    fresh = 0
    for r in range(n):
        base = off[r]
        k = share[r]
        if k > 0:
            pb = off[parent[r]]
            for j in range(k):
                out[base + j] = out[pb + j]
        for j in range(k, n_blocks[r]):
            out[base + j] = fresh
            fresh += 1
    return off, out


def _whole(name: str, v, least: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
        raise UsageError(f"expected a whole number >= {least}, got {v!r}", field=name)
    return int(v)


def _draw(name: str, spec, n: int, rng: np.random.Generator, least: int, column: str) -> np.ndarray:
    if isinstance(spec, RequestTrace):
        if len(spec) == 0:
            raise UsageError("the trace to draw lengths from has no requests", file=spec.source, field=name)
        return np.maximum(rng.choice(getattr(spec, column), n), least).astype(np.int64)
    return np.full(n, _whole(name, spec, least), np.int64)


def synthetic_requests(n: int, *, rate: float, arrival: str = "poisson", cv: float = 1.0,
                       input_tokens: int | RequestTrace = 1024, output_tokens: int | RequestTrace | None = None,
                       system_prompt_tokens: int = 0, n_system_prompts: int = 1, sessions: int = 0,
                       block_tokens: int = 512, seed: int = 0) -> RequestTrace:
    """A seeded synthetic request stream (see the module docstring).

    Parameters
    ----------
    n : int
        Requests.
    rate : float
        Mean arrivals per second.
    arrival : {"poisson", "gamma"}
        Exponential gaps, or gamma gaps with coefficient of variation ``cv``.
    input_tokens : int or RequestTrace
        New (unshared) prompt tokens per request, fixed or drawn from a trace's input lengths.
    output_tokens : int or RequestTrace, optional
        Answer tokens; default 128, or drawn with the input from the same trace request.
    system_prompt_tokens, n_system_prompts : int
        Length and number of the shared system prompts (0 tokens: none).
    sessions : int
        Concurrent multi-turn conversations (0: every request stands alone).
    block_tokens : int
        Tokens per block id.
    seed : int
        The same arguments and seed give the same stream.

    Returns
    -------
    RequestTrace
        ``format`` ``"synthetic"``; ``session`` the conversation (-1 without sessions).
    """
    n = _whole("n", n, 1)
    bt = _whole("block_tokens", block_tokens, 1)
    sys_tok = _whole("system_prompt_tokens", system_prompt_tokens, 0)
    n_sys = _whole("n_system_prompts", n_system_prompts, 1)
    n_sess = _whole("sessions", sessions, 0)
    if not (isinstance(rate, (int, float)) and np.isfinite(rate) and rate > 0):
        raise UsageError(f"expected a rate > 0 requests/s, got {rate!r}", field="rate")
    if arrival not in ("poisson", "gamma"):
        raise UsageError(f"unknown arrival process {arrival!r}; expected poisson or gamma", field="arrival")
    if not (np.isfinite(cv) and cv > 0):
        raise UsageError(f"expected a coefficient of variation > 0, got {cv!r}", field="cv")
    rng = np.random.default_rng(seed)
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, n)
    else:
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
    arrival_s = np.cumsum(gaps)
    if isinstance(input_tokens, RequestTrace) and output_tokens is None:
        if len(input_tokens) == 0:
            raise UsageError("the trace to draw lengths from has no requests", file=input_tokens.source,
                             field="input_tokens")
        pick = rng.integers(0, len(input_tokens), n)
        new_in = np.maximum(input_tokens.input_tokens[pick], 1)
        out = input_tokens.output_tokens[pick].copy()
    else:
        new_in = _draw("input_tokens", input_tokens, n, rng, 1, "input_tokens")
        out = _draw("output_tokens", 128 if output_tokens is None else output_tokens, n, rng, 0, "output_tokens")
    which_sys = rng.integers(0, n_sys, n) if sys_tok else np.zeros(n, np.int64)
    session = rng.integers(0, n_sess, n) if n_sess else np.full(n, -1, np.int64)

    # rows 0 .. n_sys-1: the system prompts (virtual); then the requests
    sys_blocks = sys_tok // bt
    prompt = np.empty(n, np.int64)
    share = np.zeros(n_sys + n, np.int64)
    parent = np.zeros(n_sys + n, np.int64)
    share_tok = np.zeros(n, np.int64)            # tokens of the prefix equal to the parent's
    last_row = np.full(max(n_sess, 1), -1, np.int64)
    last_len = np.zeros(max(n_sess, 1), np.int64)
    sess_sys = np.zeros(max(n_sess, 1), np.int64)
    for r in range(n):                            # per request (not per block): the conversations' state
        s = session[r]
        if s >= 0 and last_row[s] >= 0:
            base = last_len[s]
            parent[n_sys + r] = n_sys + last_row[s]
            share_tok[r] = base - out[last_row[s]]              # the previous prompt
            which_sys[r] = sess_sys[s]
        else:
            base = sys_tok
            parent[n_sys + r] = which_sys[r]
            share_tok[r] = sys_tok
            if s >= 0:
                sess_sys[s] = which_sys[r]
        prompt[r] = base + new_in[r]
        if s >= 0:
            last_row[s] = r
            last_len[s] = prompt[r] + out[r]
    share[n_sys:] = share_tok // bt
    n_blocks = np.concatenate([np.full(n_sys, sys_blocks, np.int64), -(-prompt // bt)])
    off, raw = _build_blocks(n_blocks, share, parent)
    lo = int(off[n_sys])
    blocks, n_unique = dense_block_ids(raw[lo:])
    source = (f"synthetic(n={n}, rate={rate}, arrival={arrival}, cv={cv}, system_prompt_tokens={sys_tok}, "
              f"n_system_prompts={n_sys}, sessions={n_sess}, seed={seed})")
    return RequestTrace(arrival_s, prompt, out.astype(np.int64), session.astype(np.int64),
                        off[n_sys:] - lo, blocks, bt, n_unique, source, "synthetic")
