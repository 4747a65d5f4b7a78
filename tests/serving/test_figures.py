"""The figures read straight from a replay and its cost (tierlab.analysis.figures) are exactly those
of the ``--json`` dict: a serving step's StepCost, and a sweep row's run figures, on a chip (with and
without PIM units) and on a system (tensor parallel, the slices deduplicated and twinned)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlab.analysis import result, system_result
from tierlab.analysis.figures import chip_per_token, run_figures, system_cost, system_per_token
from tierlab.chip.chipfile import load_chip
from tierlab.cost.system_cost import cost_system
from tierlab.cost.trace_cost import cost_of
from tierlab.engine.options import ReplayOptions
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.pipeline.system_replay import replay_system
from tierlab.serving.replay import StepReplayer, step_cost
from tierlab.system.systemfile import load_system
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.lowering.serving_step import MixedStep, lower_step
from tierlab.traces.model.spec import load_model
from tierlab.traces.workload.run import RunConfig

TINY = str(Path(__file__).resolve().parents[1] / "data" / "models" / "tiny-llama.json")
STEPS = [MixedStep(decode=(40,)), MixedStep(decode=(17, 90, 300)),
         MixedStep(decode=(64,) * 5, prefill=((0, 48, False), (96, 32, True)))]


def tiers_of(d: dict) -> list[dict]:
    tiers = d["tiers"] if "tiers" in d else [t for dev in d["devices"] for t in dev["tiers"]]
    return [{"name": t["name"], "hits": t["hits"], "misses": t["misses"]} for t in tiers]


def same_run(fig: dict, d: dict) -> None:
    assert fig["per_token"] == d["per_token"]
    assert list(fig["per_token"]) == list(d["per_token"])          # key order: the row's per_token_json
    assert fig["latency_s"] == d["latency_s"]
    assert fig["energy_j"]["total"] == d["energy_j"]["total"]
    assert fig["tiers"] == tiers_of(d)


@pytest.mark.parametrize("chip", ["h100", "h100-hbm-pim"])
def test_chip_step_figures_are_the_json(tmp_path, chip):
    spec, run, c = load_model(TINY), RunConfig(generate=1), load_chip(chip)
    with StepReplayer(spec, run, chip=c) as rep:
        for i, step in enumerate(STEPS):
            tr = replay_trace(lower_step(spec, run, step, tmp_path / f"{i}.trace"), c, ReplayOptions())
            d = result.to_json(tr, cost_of(tr))
            assert chip_per_token(tr, cost_of(tr)) == d["per_token"]
            same_run(run_figures(tr, cost_of(tr)), d)
            assert rep.cost(step) == step_cost(d["per_token"])
            assert rep.cost(step).latency_s == d["per_token"]["latency_calibrated_s"]


def test_system_step_figures_are_the_json(tmp_path):
    spec, run, system = load_model(TINY), RunConfig(generate=1, tp=2), load_system("dgx-h100")
    with StepReplayer(spec, run, system=system) as rep:
        for i, step in enumerate(STEPS):
            sr = replay_system(lower_step(spec, run, step, tmp_path / f"{i}.trace"), system, ReplayOptions())
            d = system_result.to_json(sr, cost_system(sr))
            assert system_per_token(sr, cost_system(sr)) == d["per_token"]
            assert system_per_token(sr, system_cost(sr)) == d["per_token"]
            same_run(run_figures(sr, system_cost(sr)), d)
            assert rep.cost(step) == step_cost(d["per_token"])
            assert rep.cost(step).energy_j == d["per_token"]["energy_j"] * d["per_token"]["batch"]


@pytest.mark.parametrize("where", ["h100", "dgx-h100"])
def test_run_figures_of_a_whole_run_are_the_json(tmp_path, where):
    """A sweep's trace: a prompt's prefill, then decode steps, a batch of 3."""
    spec = load_model(TINY)
    tp = 1 if where == "h100" else 2
    path = generate_trace(spec, RunConfig(prompt=100, generate=3, batch=3, tp=tp), tmp_path / "run.trace")
    if where == "h100":
        tr = replay_trace(path, load_chip(where), ReplayOptions())
        same_run(run_figures(tr, cost_of(tr)), result.to_json(tr, cost_of(tr)))
    else:
        sr = replay_system(path, load_system(where), ReplayOptions())
        same_run(run_figures(sr, system_cost(sr)), system_result.to_json(sr, cost_system(sr)))
        same_run(run_figures(sr, cost_system(sr)), system_result.to_json(sr, cost_system(sr)))


@pytest.mark.parametrize("where", [{"chip": ["h100"]}, {"system": ["dgx-h100"], "tp": [2]}])
def test_sweep_row_from_the_figures_is_the_row_from_the_json(tmp_path, where):
    """A sweep's row built from :func:`replay_point`'s figures equals the one built from the whole dict."""
    from tierlab.design_space.grid import grid_from_dict
    from tierlab.design_space.point import replay_point, row_of, run_config

    grid = grid_from_dict({"model": [TINY], "prompt": [64], "generate": [2], "batch": [2], **where})
    (p,) = grid.points()
    path = generate_trace(load_model(TINY), run_config(p), tmp_path / "run.trace")
    if p.system is not None:
        sr = replay_system(path, load_system(p.system), ReplayOptions())
        d = system_result.to_json(sr, cost_system(sr))
    else:
        tr = replay_trace(path, load_chip(p.chip), ReplayOptions())
        d = result.to_json(tr, cost_of(tr))
    keys = grid.override_keys
    assert row_of(p, keys, replay_point(path, p), None) == row_of(p, keys, d, None)
