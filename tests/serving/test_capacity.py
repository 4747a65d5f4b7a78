"""Capacity planning against trace byte counts, closed-form arithmetic and brute force."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.analysis.capacity import Budget, activation_tensor_bytes, capacity, weight_bytes
from tierlab.chip.chipfile import load_chip
from tierlab.cli.capacity import command
from tierlab.common.errors import CapacityError, UsageError
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.format.reader import open_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model

DATA = Path(__file__).parents[1] / "data" / "models"
TINY = ("llama", "qwen2", "mixtral", "deepseek-v3", "chatglm", "mistral", "qwen3-moe")


def tiny(name):
    return load_model(DATA / f"tiny-{name}.json")


def trace_of(tmp_path, spec, **run):
    return open_trace(generate_trace(spec, RunConfig(**run), tmp_path / "t.trace", force=True))


def tensor_sizes(trace, kind):
    t = trace.tensors.to_pydict()
    return [n for n, k in zip(t["nbytes"], t["kind"]) if k == kind]


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("wd", ["bf16", "int4", "fp8"])
def test_weight_bytes_equal_the_traced_weight_tensors(tmp_path, name, wd):
    spec = tiny(name)
    tr = trace_of(tmp_path, spec, context=2, generate=1, weights=wd)
    assert weight_bytes(spec, wd) == sum(tensor_sizes(tr, "weight"))


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("batch,chunk", [(1, 1), (3, 1), (2, 5)])
def test_activation_workspace_equals_the_traced_activation_tensors(tmp_path, name, batch, chunk):
    spec = tiny(name)
    # chunk 1: decode only (context in the cache); chunk > 1: a prefill of that many tokens
    run = dict(context=4, generate=2) if chunk == 1 else dict(prompt=chunk)
    tr = trace_of(tmp_path, spec, batch=batch, **run)
    assert Counter(activation_tensor_bytes(spec, batch, chunk)) == Counter(tensor_sizes(tr, "activation"))


@pytest.mark.parametrize("name,kv", [("llama", "bf16"), ("llama", "fp8"), ("deepseek-v3", "bf16"),
                                     ("qwen2", "int8"), ("mixtral", "fp32")])
def test_kv_bytes_per_token_equal_what_the_trace_writes(tmp_path, name, kv):
    spec = tiny(name)
    batch = 3
    tr = trace_of(tmp_path, spec, context=5, generate=2, batch=batch, kv=kv)
    tens = tr.tensors.to_pydict()
    ops = tr.ops.to_pydict()
    written = Counter()
    for b in tr.iter_accesses():
        c = b.to_pydict()
        for op, t, nb, cnt, w in zip(c["op_id"], c["tensor_id"], c["nbytes"], c["count"], c["is_write"]):
            if w and tens["kind"][t] == "kv" and ops["phase"][op] == "decode":
                written[ops["step"][op]] += nb * cnt
    plan = capacity(spec, Budget.of_size(10**9), kv=kv)
    assert set(written.values()) == {plan.kv_bytes_per_token * batch}


def test_kv_bytes_per_token_closed_form_llama_8b():
    spec = load_model("llama-3.1-8b")
    plan = capacity(spec, Budget.of_size(10**11))
    assert plan.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16


@pytest.mark.parametrize("budget", [10**6, 3 * 10**6 + 17, 2**24])
@pytest.mark.parametrize("batch", [1, 4])
def test_memory_context_is_the_largest_that_fits(budget, batch):
    spec = tiny("llama")
    plan = capacity(spec, Budget.of_size(budget), batch=batch)
    used = lambda ctx: weight_bytes(spec) + ctx * batch * plan.kv_bytes_per_token + plan.activation_bytes
    assert used(plan.memory_context) <= budget < used(plan.memory_context + 1)
    assert plan.context == min(plan.memory_context, spec.max_position_embeddings)
    d = plan.to_dict()
    br = d["breakdown"]
    assert br["weights_bytes"] + br["kv_bytes"] + br["activation_bytes"] + br["free_bytes"] == budget


@pytest.mark.parametrize("context", [1, 100, 3000])
def test_largest_batch_matches_brute_force(context):
    spec = tiny("mixtral")
    budget = Budget.of_size(5 * 10**6)
    plan = capacity(spec, budget, context=context)
    w = weight_bytes(spec)

    def fits(b):
        return w + b * context * plan.kv_bytes_per_token + sum(activation_tensor_bytes(spec, b)) <= budget.total_bytes

    brute = max(b for b in range(0, 2000) if b == 0 or fits(b))
    assert plan.max_batch == brute and brute >= 1
    assert plan.to_dict()["breakdown"]["free_bytes"] >= 0


def test_position_limit_stated_separately():
    spec = tiny("llama")  # max_position_embeddings 4096
    d = capacity(spec, Budget.of_size(10**9)).to_dict()
    assert d["memory_context"] > 4096
    assert d["position_limit"] == 4096 and d["usable_context"] == 4096 and d["limited_by"] == "positions"
    d = capacity(spec, Budget.of_size(5 * 10**5)).to_dict()
    assert d["limited_by"] == "memory" and d["usable_context"] == d["memory_context"] < 4096


def test_gqa_context_longer_than_mha_in_the_same_budget():
    gqa = load_model("llama-3.1-8b")
    mha = load_model(Path(__file__).parents[2] / "configs" / "variants" / "llama-3.1-8b-mha.json")
    assert mha.num_kv_heads == mha.num_heads == 32 and gqa.num_kv_heads == 8
    b = Budget.of_size(8 * 10**9)
    g, m = capacity(gqa, b, weights="int4"), capacity(mha, b, weights="int4")
    assert m.kv_bytes_per_token == 4 * g.kv_bytes_per_token == 4 * 131072
    # MHA's k_proj and v_proj are 4096 x 4096 instead of 1024 x 4096: int4 plus fp16 scales per 128
    extra = 32 * 2 * (4096 - 1024) * 4096
    assert m.weight_bytes - g.weight_bytes == extra // 2 + extra // 128 * 2
    assert g.memory_context > 4 * m.memory_context  # 4x less KV per token and more room left for it
    mqa = load_model(Path(__file__).parents[2] / "configs" / "variants" / "llama-3.1-8b-mqa.json")
    q = capacity(mqa, b, weights="int4")
    assert q.kv_bytes_per_token * 8 == g.kv_bytes_per_token and q.limited_by == "positions"


def test_chip_budget_is_its_home_tiers():
    chip = load_chip("h100")
    b = Budget.of_chip(chip)
    assert b.tiers == {t.name: t.capacity_bytes for t in chip.tiers if t.managed != "cache"}
    assert b.total_bytes + b.reserve_bytes == sum(b.tiers.values())     # less the runtime's [reserve]
    hbm = chip.tiers[chip.tier_index("hbm")].capacity_bytes
    assert Budget.of_chip(chip, ["hbm"]).total_bytes == hbm - chip.reserve.bytes_of(hbm)
    assert Budget.of_chip(chip, ["hbm"], reserve=0).total_bytes == hbm
    with pytest.raises(UsageError, match="is a cache"):
        Budget.of_chip(chip, ["l2"])
    with pytest.raises(UsageError, match="no tier 'hbx'"):
        Budget.of_chip(chip, ["hbx"])


def test_budget_smaller_than_the_weights_is_refused():
    spec = load_model("llama-3.1-8b")
    with pytest.raises(CapacityError, match="more than the 8000000000 B budget"):
        capacity(spec, Budget.of_size(8 * 10**9))
    r = CliRunner().invoke(command, ["llama-3.1-8b", "--memory", "8GB"])
    assert isinstance(r.exception, CapacityError)  # the bare command raises; the group prints one line


def _cli(args):
    from tierlab.cli import main

    return CliRunner().invoke(main, args)


def test_cli_one_line_errors():
    for args, msg in [(["capacity", "llama-3.1-8b", "--memory", "8GB"], "more than the 8000000000 B budget"),
                      (["capacity", "llama-3.1-8b"], "exactly one of --chip NAME or --memory SIZE"),
                      (["capacity", "llama-3.1-8b", "--memory", "1TB", "--tier", "hbm"], "--tier needs --chip"),
                      (["capacity", "llama-3.1-8b", "--chip", "nochip"], "nochip"),
                      (["capacity", "llama-3.1-8b", "--memory", "lots"], "--memory"),
                      (["capacity", "llama-3.1-8b", "--memory", "1TB", "--batch", "0"], "--batch")]:
        r = _cli(args)
        assert r.exit_code == 2, (args, r.output)
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and msg in lines[0], (args, r.output)


def test_cli_json_and_table_agree():
    r = _cli(["capacity", "llama-3.1-8b", "--memory", "24GB", "--weights", "int4", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    plan = capacity(load_model("llama-3.1-8b"), Budget.of_size(24 * 10**9), weights="int4")
    assert d["memory_context"] == plan.memory_context and d["kv_bytes_per_token"] == 131072
    r = _cli(["capacity", "llama-3.1-8b", "--chip", "h100", "--tier", "hbm", "--context", "8192"])
    assert r.exit_code == 0, r.output
    assert "largest batch at context 8192" in r.output and "position limit: 131072" in r.output
