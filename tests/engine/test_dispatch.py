"""The dispatch table picks each kernel for the case it exists for, falls back where it does not
apply, refuses a named kernel that cannot serve, and every path says which kernel ran — with the
same counts whichever kernel counts."""

from __future__ import annotations

import json
import dataclasses

import numpy as np
import pytest
from click.testing import CliRunner

from tierlab.common.errors import UsageError
from tierlab.chip.hierarchy import Chip, Compute, Link, Tier
from tierlab.cli import main
from tierlab.engine.dispatch import KERNEL_NAMES, KERNELS, Request, choose
from tierlab.engine.door import replay_blocks
from tierlab.engine.options import ReplayOptions
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.traces.format.writer import TraceWriter


def _req(**kw) -> Request:
    base = dict(source="descriptors", policies=("lru", "lru"), caches_over_home=True, lone_cache=False,
                writes=False, flush=False, inclusive=False, pim=False, ops=1, kinds=1, caching=(0, 1))
    return Request(**{**base, **kw})


@pytest.mark.parametrize("req, kernel", [
    (_req(), "cache_stream_chain"),                                          # clean caches over a memory
    (_req(writes=True), "cache_stream_passes"),                              # writes: tier passes
    (_req(writes=None), "cache_stream_chain"),                               # writes not known yet: the chain,
                                                                             # handing over at the first write
    (_req(policies=("lru", "random")), "cache_stream_passes"),               # random: passes only
    (_req(policies=("lru",) * 4, caching=(0, 1, 2, 3)), "cache_stream_passes"),   # > 3 tiers
    (_req(policies=("lru",), lone_cache=True, ops=5, kinds=2, caching=(0,)), "set_groups"),
    (_req(policies=("fifo",), lone_cache=True, flush=True, caching=(0,)), "set_groups"),
    (_req(ops=40, kinds=3, caches_over_home=False), "walk_fast"),            # a model on a chip
    (_req(policies=("lru", "opt")), "walk_fast"),                            # OPT: the walk (+ pre-pass)
    (_req(flush=True), "walk_fast"),
    (_req(pim=True, ops=3), "walk_fast"),
    (_req(inclusive=True), "walk"),                                          # back-invalidation
    (_req(source="blocks", policies=("fifo",), lone_cache=True, caching=(0,)), "cache_stream_chain"),
])
def test_auto_takes_the_fastest_kernel_that_serves(req, kernel):
    c = choose(req)
    assert c.kernel.name == kernel
    # every kernel ahead of it in the table is named with the reason it was passed over
    ahead = KERNEL_NAMES[:KERNEL_NAMES.index(kernel)]
    assert all(f"{k}:" in c.why for k in ahead), c.why
    assert c.to_dict() == {"name": kernel, "why": c.why}


def test_the_walk_serves_everything_and_every_kernel_declares_its_support():
    anything = _req(policies=("random", "opt", "lru"), writes=True, flush=True, inclusive=True, pim=True,
                    ops=9, kinds=4, caches_over_home=False, caching=(0, 1, 2))
    assert KERNELS[-1].name == "walk" and KERNELS[-1].refusal(anything) is None
    assert [k.refusal(anything) is None for k in KERNELS] == [False] * (len(KERNELS) - 1) + [True]


def test_a_named_kernel_is_used_or_refused_with_its_reason():
    assert choose(_req(writes=True), "walk").to_dict() == {"name": "walk", "why": "asked for"}
    with pytest.raises(UsageError, match="'cache_stream_chain' cannot serve this replay: no writes"):
        choose(_req(writes=True), "cache_stream_chain")
    with pytest.raises(UsageError, match="needs tier 0 as the only caching tier"):
        choose(_req(), "set_groups")
    with pytest.raises(UsageError, match="unknown kernel 'fastest'"):
        choose(_req(), "fastest")


def test_aliases_and_exclusions():
    assert choose(_req(policies=("lru",), lone_cache=True, ops=2, caching=(0,)),
                  exclude=frozenset({"set_groups"})).kernel.name == "walk_fast"
    assert ReplayOptions(fast_path=False).requested_kernel == "walk"
    assert ReplayOptions(kernel="set_groups").requested_kernel == "set_groups"
    with pytest.raises(UsageError, match="fast_path off asks for kernel 'walk'"):
        ReplayOptions(fast_path=False, kernel="set_groups")


def _cache(name, sets, ways, block, policy="lru"):
    return Tier(name, sets * ways * block, block, ways, policy, "cache", 1e12, 0.0, 0.0)


def _stream(n=4000, seed=1):
    rng = np.random.default_rng(seed)
    a = np.where(rng.random(n) < 0.5, rng.integers(0, 1 << 12, n), (rng.integers(0, 1 << 10) + np.arange(n)) % (1 << 12))
    return a * 64


@pytest.mark.parametrize("policy, writes, flush, levels, inclusive, kernel", [
    ("lru", False, False, 2, False, "cache_stream_chain"),
    ("fifo", True, False, 2, False, "cache_stream_passes"),
    ("random", False, False, 1, False, "cache_stream_passes"),
    ("lru", True, True, 1, False, "set_groups"),
    ("lru", True, True, 2, False, "walk_fast"),
    ("opt", False, False, 2, False, "walk_fast"),
    ("lru", True, False, 2, True, "walk"),
])
def test_replay_blocks_reports_the_kernel_and_every_kernel_counts_alike(policy, writes, flush, levels,
                                                                         inclusive, kernel):
    a = _stream()
    w = (np.arange(len(a)) % 7 == 0) if writes else None
    tiers = [_cache("l1", 8, 4, 64, policy), _cache("l2", 32, 8, 64, policy)][:levels]
    opts = ReplayOptions(flush=flush, inclusive=inclusive)
    auto = replay_blocks(a, w, tiers=tiers, options=opts)
    assert auto.meta["kernel"]["name"] == kernel
    walk = replay_blocks(a, w, tiers=tiers, options=dataclasses.replace(opts, kernel="walk"))
    assert walk.meta["kernel"] == {"name": "walk", "why": "asked for"}
    for r in (auto, walk):
        assert r.meta["geometry"]["caching"] == [True] * levels + [False]
    np.testing.assert_array_equal(auto.tiers, walk.tiers)
    np.testing.assert_array_equal(auto.flush, walk.flush)


def _fine_trace(path, n_lines=6000, write_every=0, seed=3):
    """One op reading (and optionally writing) single 64-byte lines of one tensor, one row each."""
    a = _stream(n_lines, seed)
    with TraceWriter(path, run=None, alignment=4096) as w:
        t = w.add_tensor("buf", "activation", 1 << 18, "bf16")
        op = w.add_op("loads", "other", -1, "decode", 0, 1, 0)
        for i, off in enumerate(a.tolist()):
            w.add_access(op, t, off, 64, is_write=bool(write_every and i % write_every == 0))
    return path


def _two_level_chip(policy="lru"):
    tiers = (_cache("l1", 8, 4, 64, policy), _cache("l2", 64, 8, 64, policy),
             Tier("mem", 1 << 30, 64, None, "lru", "memory", 1e11, 1e-12, 1e-12))
    links = tuple(Link(x.name, y.name, 1e11, 1e-12) for x, y in zip(tiers[:-1], tiers[1:]))
    return Chip("two-level", tiers, links, Compute({"bf16": 1e15}, {"bf16": 1e-12}))


@pytest.mark.parametrize("write_every", [0, 5])
def test_a_trace_of_fine_descriptors_reaches_the_stream_kernels(tmp_path, write_every):
    """A trace of single-line loads replays on the stream kernels where they apply, with the walk's
    counts per op, per kind and per tier."""
    trace = _fine_trace(tmp_path / "fine.trace", write_every=write_every)
    chip = _two_level_chip()
    auto = replay_trace(trace, chip).result
    # whether a trace writes is not known before it is read: the chain serves it and hands its
    # state over to the tier passes at the first write (block 0 here when it writes at all)
    assert auto.meta["kernel"]["name"] == "cache_stream_chain"
    assert "hands over to cache_stream_passes at the first write" in auto.meta["kernel"]["why"]
    if write_every:
        assert (auto.meta["kernel"]["then"], auto.meta["kernel"]["at_block"]) == ("cache_stream_passes", 0)
    else:
        assert "then" not in auto.meta["kernel"]
    walk = replay_trace(trace, chip, ReplayOptions(kernel="walk")).result
    fast = replay_trace(trace, chip, ReplayOptions(kernel="walk_fast")).result
    for other in (walk, fast):
        np.testing.assert_array_equal(auto.per_op, other.per_op)
        np.testing.assert_array_equal(auto.by_kind, other.by_kind)
        np.testing.assert_array_equal(auto.tiers, other.tiers)
        assert (auto.n_accesses, auto.n_blocks) == (other.n_accesses, other.n_blocks)
    assert auto.n_blocks == 6000 and auto.tiers[0, 0] + auto.tiers[0, 1] == 6000   # hits + misses


def test_a_trace_the_stream_kernels_cannot_split_falls_back_to_the_walk(tmp_path):
    with TraceWriter(tmp_path / "two.trace", run=None, alignment=4096) as w:
        t = w.add_tensor("buf", "activation", 1 << 16, "bf16")
        for s in range(2):
            op = w.add_op(f"op{s}", "other", -1, "decode", s, 1, 0)
            w.add_access(op, t, 0, 64, count=512, stride=128)
    r = replay_trace(tmp_path / "two.trace", _two_level_chip()).result
    assert r.meta["kernel"]["name"] == "walk_fast"
    assert "counts one op of one tensor kind (2 ops, 1 kinds here)" in r.meta["kernel"]["why"]
    with pytest.raises(UsageError, match="'cache_stream_passes' cannot serve"):
        replay_trace(tmp_path / "two.trace", _two_level_chip(), ReplayOptions(kernel="cache_stream_passes"))


def test_replay_json_names_the_kernel(tmp_path):
    trace = _fine_trace(tmp_path / "fine.trace", n_lines=500)
    chip_file = tmp_path / "two.toml"
    chip_file.write_text("""
name = "two-level"
[compute]
flops = { bf16 = "1 PFLOP/s" }
energy = { bf16 = "1 pJ" }
[[tier]]
name = "l1"
capacity = "2 KiB"
block = "64 B"
ways = 4
policy = "lru"
managed = "cache"
bandwidth = "1 TB/s"
read_energy = "0.1 pJ/bit"
write_energy = "0.1 pJ/bit"
[[tier]]
name = "mem"
capacity = "1 GiB"
block = "64 B"
managed = "memory"
bandwidth = "100 GB/s"
read_energy = "1 pJ/bit"
write_energy = "1 pJ/bit"
[[link]]
from = "l1"
to = "mem"
bandwidth = "100 GB/s"
energy = "1 pJ/bit"
""")
    runner = CliRunner()
    got = {}
    for kernel in ("auto", "walk", "set_groups"):
        res = runner.invoke(main, ["replay", str(trace), "--chip", str(chip_file), "--kernel", kernel, "--json"])
        assert res.exit_code == 0, res.output
        d = json.loads(res.stdout)
        got[kernel] = d
        assert d["provenance"]["options"]["kernel"] == kernel
    assert got["auto"]["provenance"]["kernel"]["name"] == "cache_stream_chain"
    assert got["walk"]["provenance"]["kernel"] == {"name": "walk", "why": "asked for"}
    assert got["set_groups"]["provenance"]["kernel"]["name"] == "set_groups"
    assert got["auto"]["tiers"] == got["walk"]["tiers"] == got["set_groups"]["tiers"]
    res = runner.invoke(main, ["replay", str(trace), "--chip", str(chip_file), "--kernel", "cache_stream_passes",
                               "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["tiers"] == got["auto"]["tiers"]
    res = runner.invoke(main, ["replay", str(trace), "--chip", str(chip_file), "--kernel", "cache_stream_chain",
                               "--flush"])
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1].startswith("tierlab: error: ")
    assert "cannot serve this replay: no flush" in res.output
