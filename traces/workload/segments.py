"""A run as a list of segments: the prefill, each decode step, and a conversation's turns and KV copies.

:func:`plan_segments` turns a :class:`~tierlab.traces.workload.run.RunConfig` into the segments
:func:`tierlab.traces.lowering.generate.lower_segments` writes; :func:`plan_turns` does it for a conversation (see
:mod:`tierlab.traces.lowering.generate` for the semantics), and :func:`conversation_table` summarises its turns for the
manifest. Lengths are tokens (positions) per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

from tierlab.traces.workload.run import RunConfig


@dataclass(frozen=True)
class Segment:
    """``tokens`` new positions per sequence starting at KV position ``start``; ``step`` is the
    decode step (-1 in prefill). ``turn`` is the conversation turn (-1 outside a conversation);
    ``action`` is ``compute``, or ``offload``/``restore`` for a KV copy of positions
    ``start .. start+tokens-1`` of every sequence."""

    phase: str
    step: int
    tokens: int
    start: int
    turn: int = -1
    action: str = "compute"

    def to_dict(self) -> dict:
        d = {"phase": self.phase, "step": self.step, "tokens": self.tokens, "start": self.start}
        if self.turn >= 0:
            d.update(turn=self.turn, action=self.action)
        return d


COPY_ACTIONS = ("offload", "restore")


def plan_turns(run: RunConfig) -> list[Segment]:
    """The segments of a conversation (see the module docstring)."""
    segs: list[Segment] = []
    history = run.context      # KV positions per sequence before the turn
    step = 0
    for t, (prompt, answer) in enumerate(run.turns):
        if run.kv_offload and t > 0:
            segs.append(Segment("prefill", -1, history, 0, t, "restore"))
        if run.kv_reuse:
            segs.append(Segment("prefill", -1, prompt, history, t))
        else:
            segs.append(Segment("prefill", -1, history - run.context + prompt, run.context, t))
        base = history + prompt
        segs += [Segment("decode", step + s, 1, base + s, t) for s in range(answer)]
        step += answer
        history = base + answer
        if run.kv_offload and t < len(run.turns) - 1:
            segs.append(Segment("prefill", -1, history, 0, t, "offload"))
    return segs


def plan_segments(run: RunConfig) -> list[Segment]:
    """Prefill of the prompt (after ``context`` cached positions), then one segment per decode step;
    a conversation's segments come from :func:`plan_turns`."""
    if run.turns:
        return plan_turns(run)
    segs = []
    if run.prompt:
        segs.append(Segment("prefill", -1, run.prompt, run.context))
    base = run.context + run.prompt
    segs += [Segment("decode", s, 1, base + s) for s in range(run.generate)]
    return segs


def conversation_table(run: RunConfig, segments: list[Segment], op_ranges: list[tuple[int, int]]) -> list[dict]:
    """Per turn (tokens per sequence): ``prompt_tokens``/``answer_tokens`` (the turn's new tokens),
    ``history_positions`` (KV positions before the turn, context included), ``prefill_tokens``
    (positions actually prefilled: the prompt with reuse, history + prompt without),
    ``decode_tokens``, op ids ``[op_start, op_end)``, decode steps ``[step_start, step_end)``, and the
    op id ranges of its KV copies ``restore_ops``/``offload_ops`` (``[lo, hi)`` or null)."""
    out, history = [], run.context
    for t, (prompt, answer) in enumerate(run.turns):
        out.append({"turn": t, "prompt_tokens": prompt, "answer_tokens": answer, "history_positions": history,
                    "prefill_tokens": 0, "decode_tokens": 0, "op_start": None, "op_end": None,
                    "step_start": None, "step_end": None, "restore_ops": None, "offload_ops": None})
        history += prompt + answer
    for seg, (lo, hi) in zip(segments, op_ranges):
        if not 0 <= seg.turn < len(out):
            continue
        t = out[seg.turn]
        t["op_start"] = lo if t["op_start"] is None else t["op_start"]
        t["op_end"] = hi
        if seg.action in COPY_ACTIONS:
            t[f"{seg.action}_ops"] = [lo, hi]
        elif seg.phase == "prefill":
            t["prefill_tokens"] += seg.tokens
        else:
            t["decode_tokens"] += seg.tokens
            t["step_start"] = seg.step if t["step_start"] is None else t["step_start"]
            t["step_end"] = seg.step + 1
    return out
