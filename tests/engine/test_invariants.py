"""Debug mode: the invariant checker accepts real replays and catches every kind of broken count.

Real replays (presets with caches, scratchpads, lending memory, PIM; every policy; flush on and off)
must pass :func:`tierlab.engine.invariants.check_result`; the same results with one counter nudged must
fail it, each with the law it breaks. ``ReplayOptions(debug=True)`` (or ``TIERLAB_DEBUG=1``, which
conftest.py sets for the whole suite) runs the check after every replay; with both off a wrong
count goes unnoticed, which the sabotage test shows.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import tierlab.engine.door as replay_mod
from tierlab.engine.counters import C
from tierlab.chip.hierarchy import Tier
from tierlab.engine.invariants import InvariantError, check_result, debug_from_env
from tierlab.engine.door import replay_blocks
from tierlab.engine.options import ReplayOptions
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.common.errors import TierlabError
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model


@pytest.fixture(scope="module")
def moe_trace(tmp_path_factory):
    spec = load_model("tests/data/models/tiny-mixtral.json")
    return generate_trace(spec, RunConfig(prompt=8, generate=3, batch=2, router="zipf:1.1"),
                          tmp_path_factory.mktemp("inv") / "t.trace")


def _stream(n=6000, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 1 << 14, n) * 16, rng.random(n) < 0.3


@pytest.mark.parametrize("policy", ["lru", "fifo", "random", "opt"])
@pytest.mark.parametrize("flush", [False, True])
def test_real_block_replays_pass(policy, flush):
    a, w = _stream()
    tiers = [Tier("l1", 4096, 64, 4, policy, "cache", 1.0, 0, 0),
             Tier("l2", 32768, 128, None, policy, "cache", 1.0, 0, 0)]
    r = replay_blocks(a, w, tiers=tiers, options=ReplayOptions(flush=flush, fetch_on_write_miss=False))
    check_result(r)


@pytest.mark.parametrize("chip", ["h100", "sn40l", "h100-hbm-pim", "attacc", "groq-lpu"])
def test_real_trace_replays_pass(moe_trace, chip):
    tr = replay_trace(moe_trace, chip, ReplayOptions(flush=True))
    check_result(tr.result, expected_accesses=tr.trace.n_accesses)


def _nudge(result, where: str, tier: int, counter: str, delta: int = 1):
    r = copy.deepcopy(result)
    arr = {"tiers": r.tiers, "per_op": r.per_op, "by_kind": r.by_kind, "flush": r.flush}[where]
    if where == "tiers":
        arr[tier, C[counter]] += delta
    else:
        arr[-1, tier, C[counter]] += delta
    return r


@pytest.fixture(scope="module")
def sn40l_result(moe_trace):
    return replay_trace(moe_trace, "sn40l").result


@pytest.fixture(scope="module")
def h100_result(moe_trace):
    return replay_trace(moe_trace, "h100", ReplayOptions(flush=True)).result


@pytest.mark.parametrize("where,tier,counter,law", [
    ("tiers", 1, "hits", "per-op counters sum"),
    ("per_op", 1, "hits", "per-op counters sum"),
    ("by_kind", 0, "misses", "per-kind counters sum"),
])
def test_breakdowns_must_sum(h100_result, where, tier, counter, law):
    with pytest.raises(InvariantError, match=law):
        check_result(_nudge(h100_result, where, tier, counter))


def _consistent(result, tier: int, counter: str, delta: int = 1):
    """Nudge one counter in the whole run, its last op and the kind whose row holds the most, so the
    breakdown sums still hold and only the law under test can fail."""
    r = copy.deepcopy(result)
    k = int(np.argmax(r.by_kind[:, tier, :].sum(axis=1)))
    for arr, idx in ((r.tiers, (tier,)), (r.per_op, (-1, tier)), (r.by_kind, (k, tier))):
        arr[idx + (C[counter],)] += delta
    return r


@pytest.mark.parametrize("fixture,tier,counter,delta,law", [
    ("h100_result", 1, "hits", 1, "requests arriving at tier i\\+1"),
    ("h100_result", 0, "misses", 1, "fills = misses"),
    ("h100_result", 0, "fills", -1, "fills = misses"),
    ("h100_result", 1, "bytes_read", 64, "bytes_read\\(i\\+1\\)"),
    ("h100_result", 1, "bytes_written", 1, "bytes_written\\(i\\+1\\)"),
    ("h100_result", 0, "unfetched", 10**9, "unfetched <= misses"),
    ("h100_result", 0, "evictions", 10**9, "writebacks <= evictions|evictions <= fills"),
    ("h100_result", 0, "hits", 1, "tier-0 requests"),
    ("h100_result", 2, "bypasses", 1, "farthest tier only hits|requests arriving"),
    ("sn40l_result", 0, "writethroughs", 1, "requests arriving"),
    ("sn40l_result", 1, "bytes_written", 1, "bytes_written\\(i\\+1\\)"),
    ("h100_result", 0, "hits", -10**12, "every counter >= 0"),
])
def test_each_law_catches_its_violation(request, fixture, tier, counter, delta, law):
    result = request.getfixturevalue(fixture)
    check_result(result)                       # the unmodified result passes
    with pytest.raises(InvariantError, match=law):
        check_result(_consistent(result, tier, counter, delta))


def test_resident_blocks_must_fit(h100_result):
    r = copy.deepcopy(h100_result)
    r.meta["geometry"]["n_ways"] = [1] * len(r.tier_names)
    r.meta["geometry"]["n_sets"] = [1] * len(r.tier_names)
    with pytest.raises(InvariantError, match="resident blocks"):
        check_result(r)


def test_expected_accesses(h100_result):
    with pytest.raises(InvariantError, match="every access replayed"):
        check_result(h100_result, expected_accesses=h100_result.n_accesses + 1)


def test_error_type_and_one_line(h100_result):
    with pytest.raises(TierlabError) as info:
        check_result(_consistent(h100_result, 0, "fills", -1))
    assert isinstance(info.value, InvariantError)
    assert "\n" not in str(info.value) and str(info.value).startswith("invariant ")


def test_debug_option_and_env_run_the_check(monkeypatch, moe_trace):
    """Sabotage the replay's block count: caught in debug mode, unnoticed with debug off."""
    real = replay_mod.run_replay

    def off_by_one(*args, **kw):
        out = real(*args, **kw)
        return {**out, "blocks": out["blocks"] + 1}

    monkeypatch.setattr(replay_mod, "run_replay", off_by_one)
    with pytest.raises(InvariantError, match="tier-0 requests"):
        replay_trace(moe_trace, "h100", ReplayOptions(debug=True))
    monkeypatch.setenv("TIERLAB_DEBUG", "0")
    assert not debug_from_env()
    replay_trace(moe_trace, "h100", ReplayOptions(debug=False))       # wrong, and nobody checks
    monkeypatch.setenv("TIERLAB_DEBUG", "1")
    assert debug_from_env()
    with pytest.raises(InvariantError):
        replay_trace(moe_trace, "h100", ReplayOptions(debug=False))


def test_suite_runs_in_debug_mode():
    assert debug_from_env(), "tests/conftest.py should set TIERLAB_DEBUG=1"
