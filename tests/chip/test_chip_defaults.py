"""Chip files ask only for what they use (issue 16).

``policy`` is optional (default ``lru``) and, like ``ways``, takes effect only where a tier caches (a
``cache``, or a ``memory`` tier with ``lend = true``); given anywhere else it draws a
:class:`NoEffectWarning` saying so (the CLI prints it as one ``tierlab: warning:`` line). The
presets dropped their "not used" ``policy`` lines: each still builds the same Chip as the file with
those lines put back, and a replay gives the same counts with any policy written on its
non-caching tiers -- the test that the key really has no effect there.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.chip.chipfile import NoEffectWarning, chip_from_dict, list_presets, load_chip, read_chip_toml
from tierlab.cli import main
from tierlab.engine.options import ReplayOptions
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model

DATA = Path(__file__).parents[1] / "data"


def caches(t: dict) -> bool:
    return t["managed"] == "cache" or (t["managed"] == "memory" and t.get("lend") is True)


def with_policy(d: dict, policy: str) -> dict:
    """The chip dict with ``policy`` written on every tier that does not cache."""
    tiers = [dict(t, policy=policy) if not caches(t) else dict(t) for t in d["tier"]]
    return {**d, "tier": tiers}


@pytest.mark.parametrize("name", list_presets())
def test_presets_load_without_warnings_and_equal_their_old_form(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chip = load_chip(name)
    d, path, sha = read_chip_toml(name)
    assert any(not caches(t) for t in d["tier"])            # every preset has a home tier at least
    with pytest.warns(NoEffectWarning):
        old = chip_from_dict(with_policy(d, "lru"), file=str(path), sha256=sha)
    assert old == chip           # the policy lines the presets dropped said what the default says


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    spec = load_model(str(DATA / "models" / "tiny-mixtral.json"))
    return generate_trace(spec, RunConfig(prompt=16, generate=2, batch=2), tmp_path_factory.mktemp("t") / "t.trace")


@pytest.mark.parametrize("name", ["sn40l", "h100"])
@pytest.mark.parametrize("policy", ["fifo", "opt"])
def test_policy_on_a_tier_that_does_not_cache_changes_no_count(trace, name, policy):
    """The second path: a replay with another policy written where it 'has no effect' counts alike."""
    d, path, _ = read_chip_toml(name)
    base = replay_trace(trace, load_chip(name), ReplayOptions()).result
    with pytest.warns(NoEffectWarning):
        other = chip_from_dict(with_policy(d, policy), file=str(path))
    assert [t.policy for t in other.tiers if t.managed != "cache" and not t.lend] != \
        [t.policy for t in load_chip(name).tiers if t.managed != "cache" and not t.lend]
    r = replay_trace(trace, other, ReplayOptions()).result
    assert (r.per_op == base.per_op).all() and (r.tiers == base.tiers).all() and (r.links == base.links).all()


def _toy(**tier1) -> dict:
    t0 = {"name": "sram", "capacity": "1 MiB", "block": "128 B", "ways": 4, "managed": "cache",
          "bandwidth": "10 TB/s", "read_energy": "0.2 pJ/bit", "write_energy": "0.2 pJ/bit"}
    t1 = {"name": "hbm", "capacity": "1 GiB", "block": "4 KiB", "managed": "memory", "bandwidth": "1 TB/s",
          "read_energy": "3 pJ/bit", "write_energy": "3 pJ/bit", **tier1}
    return {"name": "toy", "compute": {"flops": {"bf16": "1 TFLOP/s"}, "energy": {"bf16": "1 pJ"}},
            "tier": [t0, t1], "link": [{"from": "sram", "to": "hbm", "bandwidth": "1 TB/s", "energy": "1 pJ/bit"}]}


def test_policy_defaults_to_lru_where_a_tier_caches():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = chip_from_dict(_toy(lend=True), file="t.toml")        # no policy anywhere
    assert [t.policy for t in c.tiers] == ["lru", "lru"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = chip_from_dict(_toy(lend=True, policy="fifo", ways=8), file="t.toml")   # lends: both apply
    assert (c.tiers[1].policy, c.tiers[1].ways) == ("fifo", 8)


@pytest.mark.parametrize("tier1, key, why", [
    ({"policy": "fifo"}, "policy", "a 'memory' tier without lend = true caches nothing"),
    ({"ways": 8}, "ways", "a 'memory' tier without lend = true caches nothing"),
    ({"lend": False, "policy": "lru"}, "policy", "a 'memory' tier without lend = true caches nothing"),
    ({"managed": "scratchpad", "policy": "lru"}, "policy", "a 'scratchpad' holds only tensors placed there"),
    ({"managed": "scratchpad", "ways": 4}, "ways", "a 'scratchpad' holds only tensors placed there"),
])
def test_a_key_without_effect_is_warned_about(tier1, key, why):
    with pytest.warns(NoEffectWarning) as w:
        c = chip_from_dict(_toy(**tier1), file="t.toml")
    assert [str(x.message) for x in w] == [f"t.toml: tier[1].{key}: has no effect: {why}; remove it"]
    assert c.tiers[1].policy == tier1.get("policy", "lru")        # still read (and validated) as given


def test_cli_prints_the_warning_as_one_line(tmp_path):
    text = (Path(__file__).parents[2] / "configs" / "chips" / "h100.toml").read_text()
    text = text.replace('managed = "memory"', 'managed = "memory"\npolicy = "fifo"', 1)
    (tmp_path / "c.toml").write_text(text)
    r = CliRunner().invoke(main, ["chips", str(tmp_path / "c.toml")], catch_exceptions=False)
    assert r.exit_code == 0
    assert r.stderr == (f"tierlab: warning: {tmp_path / 'c.toml'}: tier[1].policy: has no effect: a 'memory' "
                        "tier without lend = true caches nothing; remove it\n")
    assert "hbm" in r.stdout

