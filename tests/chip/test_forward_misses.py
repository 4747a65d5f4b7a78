"""A tier that forwards its misses (a GPU's memory-side L2) costs a streamed block one pass through
its port: checked in closed form from the replay's own counters, against the same chip without the
key, and on the presets, whose decode speed then follows their HBM bandwidth."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tierlab.analysis.result import to_json
from tierlab.chip.chipfile import load_chip
from tierlab.cost.model import cost
from tierlab.engine.counters import BYTES_READ, BYTES_WRITTEN, FILLS, UNFETCHED
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model


@pytest.fixture(scope="module")
def decode_trace(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fwd")
    return generate_trace(load_model("qwen2-0.5b"), RunConfig(context=256, generate=2), tmp / "q.trace")


def _without_forwarding(chip):
    return replace(chip, tiers=tuple(replace(t, forward_misses=False) for t in chip.tiers))


def test_port_time_is_read_plus_written_less_forwarded_fills(decode_trace):
    chip = load_chip("h100")
    assert chip.tiers[0].name == "l2" and chip.tiers[0].forward_misses
    tr = replay_trace(decode_trace, chip)
    per_op = tr.result.per_op
    c = cost(chip, per_op, tr.result.block_bytes, tr.trace.ops.column("flops").to_numpy())
    l2 = chip.tiers[0]
    rd = per_op[:, 0, BYTES_READ].astype(float)
    wr = per_op[:, 0, BYTES_WRITTEN].astype(float)
    fetched = (per_op[:, 0, FILLS] - per_op[:, 0, UNFETCHED]).astype(float) * l2.block_bytes
    want = (rd + wr - np.minimum(fetched, rd)) / l2.bandwidth_bytes_per_s
    got = c.time_s[:, c.resources.index("tier:l2")]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # the weights stream: their fills are most of the L2's traffic, and forwarding removes them
    plain = cost(_without_forwarding(chip), per_op, tr.result.block_bytes, tr.trace.ops.column("flops").to_numpy())
    t_plain = plain.time_s[:, plain.resources.index("tier:l2")].sum()
    assert got.sum() < 0.6 * t_plain
    # nothing else moves: the other resources' times are the same
    other = [i for i, r in enumerate(c.resources) if r != "tier:l2"]
    np.testing.assert_array_equal(c.time_s[:, other], plain.time_s[:, other])


def test_decode_follows_hbm_bandwidth_across_hopper_parts(decode_trace):
    """H100, H200 and GH200 share the L2; their decode steps must differ as their HBM does."""
    lat = {}
    for name in ("h100", "h200", "gh200"):
        chip = load_chip(name)
        pt = to_json(replay_trace(decode_trace, chip))["per_token"]
        assert pt["bound"] == "tier:hbm", name
        lat[name] = pt["latency_s"]
    hbm = {n: next(t for t in load_chip(n).tiers if t.name == "hbm").bandwidth_bytes_per_s for n in lat}
    ratio = lat["h100"] / lat["h200"]
    assert ratio == pytest.approx(hbm["h200"] / hbm["h100"], rel=0.02)
    assert lat["h100"] > lat["gh200"] > lat["h200"]


def test_forward_misses_on_a_memory_tier_is_refused(tmp_path):
    text = (Path(__file__).parents[2] / "configs" / "chips" / "h100.toml").read_text()
    bad = text.replace('managed = "memory"\n', 'managed = "memory"\nforward_misses = true\n', 1)
    p = tmp_path / "bad.toml"
    p.write_text(bad)
    from tierlab.common.errors import ConfigError
    with pytest.raises(ConfigError, match=r"forward_misses.*only a 'cache' tier"):
        load_chip(p)
