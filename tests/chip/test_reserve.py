"""The runtime's reserve (issue 39): the chip file's [reserve] comes off the memory that weights, KV and
activations may use, in `capacity`, in throughput's closed form (kv_limit) and in memory_tier, which the
request-stream server reads; each figure here is recomputed by hand from the chip file's numbers."""

import dataclasses

import pytest

from tierlab.analysis.capacity import Budget, activation_bytes, capacity, weight_bytes
from tierlab.chip.chipfile import load_chip
from tierlab.chip.hierarchy import Reserve
from tierlab.serving.capacity import BLOCK_TOKENS, kv_limit, memory_tier
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model

MIB = 2 ** 20
H100_RESERVE = 164 * MIB + 369 * MIB      # configs/chips/h100.toml: context 164 MiB + workspace 369 MiB


def test_reserve_bytes_by_hand():
    r = Reserve(context_bytes=100, workspace_bytes=50, fragmentation=0.1)
    assert r.bytes_of(1150) == 150 + 100          # 0.1 x (1150 - 150)
    assert Reserve().bytes_of(10 ** 9) == 0


def test_h100_preset_reserve():
    chip = load_chip("h100")
    assert chip.reserve == Reserve(context_bytes=164 * MIB, workspace_bytes=369 * MIB, fragmentation=0.0)
    t = memory_tier(chip)
    assert t.raw_capacity_bytes == 80 * 10 ** 9 and t.reserve_bytes == H100_RESERVE
    assert t.capacity_bytes == 80 * 10 ** 9 - H100_RESERVE


def test_capacity_budget_less_reserve():
    spec = load_model("llama-3.1-8b")
    chip = load_chip("h100")
    b = Budget.of_chip(chip, ["hbm"])
    assert b.total_bytes == 80 * 10 ** 9 - H100_RESERVE and b.reserve_bytes == H100_RESERVE
    plan = capacity(spec, b)
    room = 80 * 10 ** 9 - H100_RESERVE - weight_bytes(spec) - activation_bytes(spec)
    per_token = 32 * 2 * 8 * 128 * 2            # layers x (K, V) x KV heads x head dim x bf16
    assert spec.kv_bytes_per_token("bf16") == per_token
    assert plan.memory_context == room // per_token
    # --reserve overrides the chip's; 0 gives the whole tier back
    assert Budget.of_chip(chip, ["hbm"], reserve=0).total_bytes == 80 * 10 ** 9
    assert Budget.of_size(6 * 2 ** 30, reserve=2 ** 30).total_bytes == 5 * 2 ** 30


def test_kv_limit_uses_the_reserve():
    spec = load_model("llama-3.1-8b")
    chip = load_chip("h100")
    run = RunConfig(generate=1)
    lim = kv_limit(spec, run, chip, 1000, 1000, 8192)
    positions = -(-2000 // BLOCK_TOKENS) * BLOCK_TOKENS
    w, act = weight_bytes(spec), activation_bytes(spec, 1, 8192)
    cap = int(0.9 * (80 * 10 ** 9 - H100_RESERVE))
    assert lim.max_concurrency == (cap - w - act) // (positions * spec.kv_bytes_per_token("bf16"))
    assert lim.runtime_reserve_bytes == H100_RESERVE
    bare = kv_limit(spec, run, dataclasses.replace(chip, reserve=None), 1000, 1000, 8192)
    assert bare.runtime_reserve_bytes == 0 and bare.max_concurrency > lim.max_concurrency


def test_a_reserve_larger_than_the_memory_is_refused():
    from tierlab.common.errors import CapacityError, UsageError

    chip = dataclasses.replace(load_chip("h100"), reserve=Reserve(context_bytes=81 * 10 ** 9))
    with pytest.raises(UsageError):
        memory_tier(chip)
    with pytest.raises(CapacityError):
        Budget.of_chip(chip, ["hbm"])
