"""The representative steps' error, measured: every step of short runs replayed against the classes'
representatives (docs/serving.md). The curve's figures at each concurrency are within 2% of those
from replaying every window step, and the classes are fewer than the steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tierlab.chip.chipfile import load_chip
from tierlab.serving.curve import window_figures
from tierlab.serving.replay import StepReplayer
from tierlab.serving.schedule import schedule
from tierlab.serving.steps import classify, log_bin
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model

TINY = str(Path(__file__).resolve().parents[1] / "data" / "models" / "tiny-llama.json")
BOUND = 0.02


@pytest.fixture(scope="module")
def replayer():
    with StepReplayer(load_model(TINY), RunConfig(generate=1), chip=load_chip("h100")) as r:
        yield r


@pytest.mark.parametrize("c", [1, 3, 8])
def test_representatives_against_every_step(replayer, c):
    s = schedule(600, 24, c, 320)
    cl = classify(s)
    every = [replayer.cost(s.step(k)) for k in range(s.n_steps)]
    exact_s = np.array([x.latency_s for x in every])
    exact_j = np.array([x.energy_j for x in every])
    rep_s = exact_s[cl.rep][cl.of_step]
    rep_j = exact_j[cl.rep][cl.of_step]
    a, b = window_figures(s, exact_s, exact_j), window_figures(s, rep_s, rep_j)
    for k in ("output_tokens_per_s", "ttft_s", "tpot_s", "energy_j_per_token"):
        assert b[k] == pytest.approx(a[k], rel=BOUND), k
    assert cl.n < s.n_steps
    # each step within the class bound of its representative (the stated per-step bound)
    ratio = exact_s / rep_s
    assert np.all(np.abs(ratio - 1) <= max(cl.tokens_rel, cl.context_rel))


def test_bins():
    b = log_bin(np.array([0, 1, 2, 19, 20, 21, 104, 106, 109]), 0.05)
    assert b[0] == -1 and len(set(b[1:5])) == 4        # small counts their own bins
    assert b[6] == b[7] != b[8]                        # 104 and 106 in one bin [103.2, 108.4), 109 past its edge


def test_learned_positions_read_each_tokens_own_row(tmp_path):
    """GPT-2 (learned positions): a step with decodes at positions 5 and 900 and a chunk of 100 prompt
    tokens from 0 reads rows 5 and 900 and the run 0..99 of the position table, nothing else."""
    from tierlab.traces.lowering.serving_step import MixedStep, lower_step
    from tierlab.traces.format.reader import open_trace
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model

    spec = load_model("gpt2")
    t = open_trace(lower_step(spec, RunConfig(generate=1), MixedStep(decode=(5, 900), prefill=((0, 100, True),)),
                              tmp_path / "g.trace"))
    names = t.tensors.column("name").to_pylist()
    pos = names.index(next(n for n in names if "embed_positions" in n or n == "wpe"))
    row = spec.hidden_size * 2
    cols = t.access_columns()
    sel = cols["tensor_id"] == pos
    got = sorted(zip(cols["offset"][sel].tolist(), cols["nbytes"][sel].tolist()))
    assert got == [(0, 100 * row), (5 * row, row), (900 * row, row)]
