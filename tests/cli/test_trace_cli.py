"""CLI: tierlab trace / info / models — output keys, numbers against closed forms, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.cli import main
from tierlab.traces.model.spec import list_presets, load_model

DATA = Path(__file__).parents[1] / "data"
TINY = str(DATA / "models" / "tiny-llama.json")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_trace_then_info_json(tmp_path):
    out = tmp_path / "t.trace"
    r = run("trace", TINY, "-o", out, "--prompt", 6, "--generate", 3, "--batch", 2, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tables"]["ops"] > 0
    r = run("info", out, "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    spec = load_model(TINY)
    assert s["params"] == spec.param_count()
    assert s["decode_steps"] == 3 and len(s["steps"]) == 3
    assert set(s["tables"]) == {"tensors", "ops", "accesses"}
    assert set(s["bytes"]) == {"prefill", "decode"}
    row = 2 * 2 * 16 * 2 * spec.num_layers                     # K+V, 2 kv heads x 16, bf16, all layers
    assert s["bytes"]["decode"]["kv"]["read"] == 2 * row * sum(6 + k + 1 for k in range(3))
    assert s["bytes"]["decode"]["kv"]["write"] == 2 * row * 3
    assert s["bytes"]["prefill"]["kv"]["write"] == 2 * row * 6
    assert s["bytes"]["decode"]["weight"]["read"] == sum(st["bytes"]["weight"]["read"] for st in s["steps"])
    assert s["bytes"]["decode"]["weight"]["write"] == 0
    assert s["flops"]["total"] == s["flops"]["prefill"] + s["flops"]["decode"]


def test_info_human_and_golden(tmp_path):
    r = run("info", DATA / "golden-v1-synthetic.trace")
    assert r.exit_code == 0, r.output
    assert "(synthetic)" in r.stdout and "accesses" in r.stdout
    r = run("info", DATA / "golden-v1-synthetic.trace", "--json")
    s = json.loads(r.stdout)
    # hand-computed from make_golden.SYN_ACCESSES
    assert s["bytes"]["prefill"]["weight"]["read"] == 8192
    assert s["bytes"]["prefill"]["kv"]["write"] == 4096
    assert s["bytes"]["decode"]["kv"]["read"] == 2048
    assert s["bytes"]["decode"]["weight"]["read"] == 8192
    assert s["params"] is None and s["decode_steps"] == 1
    r = run("info", DATA / "golden-v1-tiny-llama.trace")
    assert r.exit_code == 0 and "params" in r.stdout and "step" in r.stdout


def test_models():
    r = run("models", "--json")
    assert r.exit_code == 0
    models = {m["name"]: m for m in json.loads(r.stdout)}
    assert set(models) == set(list_presets())
    assert models["llama-3.1-8b"]["params"] == 8_030_261_248
    r = run("models")
    assert r.exit_code == 0 and "deepseek-v3" in r.stdout and "MLA" in r.stdout


@pytest.mark.parametrize("args,match", [
    (["trace", "no-such-model", "-o", "{tmp}/x", "--generate", "1"], "no such model preset"),
    (["trace", "{bad}", "-o", "{tmp}/x", "--generate", "1"], "malformed JSON"),
    (["trace", TINY, "-o", "{tmp}/x", "--prompt", "-4"], "must not be negative"),
    (["trace", TINY, "-o", "{tmp}/x", "--generate", "1", "--kv", "int2"], "unknown dtype 'int2'"),
    (["trace", TINY, "-o", "{tmp}/x", "--generate", "many"], "generate: expected an integer, got 'many'"),
    (["trace", TINY, "-o", "{tmp}/x", "--generate", "1", "--router", "zipf:x"], "zipf exponent"),
    (["trace", TINY, "-o", "{tmp}/nodir/x", "--generate", "1"], "does not exist"),
    (["trace", TINY, "-o", "{tmp}", "--generate", "1"], "pass --force"),
    (["trace", TINY, "-o", "{tmp}/x", "--generate", "1", "--align", "lots"], "align"),
    (["info", "{tmp}"], "no manifest.json"),
    (["info", "{tmp}/none"], "no such trace"),
])
def test_bad_input_one_line_exit_2(tmp_path, args, match):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = run(*[a.format(tmp=tmp_path, bad=bad) for a in args])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tierlab: error:") and match in lines[0]
    assert "Traceback" not in r.output


def test_every_command_is_registered():
    # The README's commands all exist (a missing module would fail the import, not vanish silently).
    import click

    from tierlab.cli import main

    names = {"trace", "info", "models", "mrc", "bench", "chips", "replay", "run",
             "compare", "capacity", "systems", "sweep", "export", "import", "collectives", "throughput", "requests"}
    ctx = click.Context(main)
    assert set(main.list_commands(ctx)) == names
    for name in names:                  # each module loads and defines the command of that name
        assert main.get_command(ctx, name).name == name
