"""A serving step replayed exactly: lowered (:func:`tierlab.traces.lowering.serving_step.lower_step`), replayed on one chip
(:func:`tierlab.pipeline.chip_replay.replay_trace`) or a system (:func:`tierlab.pipeline.system_replay.replay_system`),
and costed with the calibrated latency: ``per_token.latency_calibrated_s`` of ``tierlab run``'s
``--json`` (the step is the trace's one decode step) and ``per_token.energy_j`` (the trace's batch is
one, so that is the step's energy). The figures are read from the replay and its cost
(:mod:`tierlab.analysis.figures`), the same calls as the ``--json`` dict's ``per_token``, without
building the rest of the dict.

:class:`StepReplayer` keeps every step it has replayed by its exact shape: a shape met again (at
another concurrency, or twice in one window) is one replay. Traces are written under one temporary
directory for the replayer's life, each removed once replayed: the lowering writes a trace directory,
and writing and reading it back is a few milliseconds of a step's second or so (lowering, replay and
costing are the rest: docs/performance.md).

A large batch's decodes each read their own span of the KV cache, cutting the cache's sets into
thousands of groups; the engine's default bound on groups (a quarter of the sets) takes them, so the
replays need no setting of their own.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tierlab.engine.options import ReplayOptions
from tierlab.traces.lowering.serving_step import MixedStep, lower_step
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import ModelSpec


@dataclass(frozen=True)
class StepCost:
    """One replayed step: calibrated and roofline latency (s), dynamic energy (J), the bound, and the
    board energy (J: dynamic + static power x the calibrated step time; the dynamic where the chip has no
    ``[power]``)."""

    latency_s: float
    latency_roofline_s: float
    energy_j: float
    bound: str
    energy_board_j: float | None = None


class StepReplayer:
    """Replays :class:`~tierlab.traces.lowering.serving_step.MixedStep` s of ``spec`` under ``run`` (dtypes, parallelism) on
    ``chip`` (a Chip) or ``system`` (a System), one replay per distinct shape."""

    def __init__(self, spec: ModelSpec, run: RunConfig, *, chip=None, system=None,
                 options: ReplayOptions | None = None, collective_algo: str = "auto"):
        if (chip is None) == (system is None):
            raise ValueError("give a chip or a system")
        self.spec, self.run, self.chip, self.system = spec, run, chip, system
        self.options = options or ReplayOptions()
        self.collective_algo = collective_algo
        self.cache: dict[MixedStep, StepCost] = {}
        self.replays = 0
        self._tmp = tempfile.TemporaryDirectory(prefix="tierlab-serving-")

    def close(self) -> None:
        self._tmp.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def cost(self, step: MixedStep) -> StepCost:
        """The step's cost, replayed the first time its shape is asked for."""
        hit = self.cache.get(step)
        if hit is None:
            hit = self.cache[step] = self._replay(step)
        return hit

    def prefetch(self, steps, *, workers: int | None = None) -> None:
        """Replay the steps not yet costed, on ``workers`` processes (default 1: here, one after
        another). Each replay is deterministic, so where it ran changes no figure.
        The workers are forked from this process (compiled kernels and loaded files shared), each
        replaying what it is handed; the costs come back to this replayer's cache."""
        todo = list(dict.fromkeys(s for s in steps if s not in self.cache))
        n = min(workers or 1, len(todo))
        if n <= 1 or "fork" not in multiprocessing.get_all_start_methods() or multiprocessing.current_process().daemon:
            for s in todo:
                self.cost(s)
            return
        global _FORKED
        _FORKED = self
        try:
            with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as ex:
                # the dearest first (most tokens), so the last to finish is a short one
                order = sorted(todo, key=lambda s: -s.tokens)
                for s, c in zip(order, ex.map(_replay_forked, order)):
                    self.cache[s] = c
        finally:
            _FORKED = None
        self.replays += len(todo)

    def _replay(self, step: MixedStep) -> StepCost:
        path = Path(self._tmp.name) / f"step-{os.getpid()}-{self.replays}.trace"
        trace = lower_step(self.spec, self.run, step, path)
        self.replays += 1
        try:
            if self.system is None:
                from tierlab.analysis.figures import chip_per_token
                from tierlab.cost.trace_cost import cost_of
                from tierlab.pipeline.chip_replay import replay_trace

                tr = replay_trace(trace, self.chip, self.options)
                pt = chip_per_token(tr, cost_of(tr))
            else:
                from tierlab.analysis.figures import system_cost, system_per_token
                from tierlab.pipeline.system_replay import replay_system

                sr = replay_system(trace, self.system, self.options, collective_algo=self.collective_algo)
                pt = system_per_token(sr, system_cost(sr))
        finally:
            _remove(path)
        return step_cost(pt)


def step_cost(pt: dict) -> StepCost:
    """The :class:`StepCost` of a step trace's ``per_token`` figures (the trace's one decode step)."""
    return StepCost(latency_s=float(pt["latency_calibrated_s"]), latency_roofline_s=float(pt["latency_s"]),
                    energy_j=float(pt["energy_j"]) * int(pt.get("batch", 1)),
                    bound=str(pt.get("bound_calibrated", pt.get("bound"))),
                    energy_board_j=float(pt.get("energy_board_j", pt["energy_j"]))
                    * int(pt.get("tokens_per_step", pt.get("batch", 1))))


_FORKED: StepReplayer | None = None     # the replayer a forked worker inherits (prefetch)


def _replay_forked(step: MixedStep) -> StepCost:
    return _FORKED._replay(step)


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
