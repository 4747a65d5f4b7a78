"""The Python API (tierlab.api, re-exported by tierlab): each function's result against the CLI's
--json for the same arguments, its rows against the CLI's Parquet and CSV, and bad arguments as
typed errors naming them."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tierlab
from tierlab.common.errors import TierlabError, UsageError
from tierlab.cli import main

DATA = Path(__file__).parents[1] / "data"
TINY = DATA / "models" / "tiny-llama.json"


def _cli_json(*args) -> dict:
    r = CliRunner().invoke(main, [str(a) for a in args] + ["--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _same(a, b, path=""):
    """Equal JSON values (NaN equal to NaN), naming the first difference."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), (path, sorted(set(a) ^ set(b)))
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), path
    else:
        assert a == b and type(a) is type(b), (path, a, b)


@pytest.fixture(scope="module")
def tiny_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("api") / "t.trace"
    return tierlab.trace(TINY, context=32, prompt=8, generate=3, path=out)


def test_trace_is_the_cli_trace(tiny_trace, tmp_path):
    d = tiny_trace.to_dict()
    cli = _cli_json("trace", TINY, "--context", 32, "--prompt", 8, "--generate", 3, "-o", tmp_path / "c.trace")
    assert cli.pop("path") != d.pop("path")
    _same(d, cli)                              # same tables and bytes on disk
    ops = tiny_trace.to_arrow()
    assert ops.num_rows == d["tables"]["ops"]
    assert Path(tiny_trace.path).is_dir() and os.fspath(tiny_trace) == tiny_trace.path


def test_replay_is_the_cli_replay(tiny_trace, tmp_path):
    r = tierlab.replay(tiny_trace, chip="h100", flush=True)
    cli = _cli_json("replay", tiny_trace.path, "--chip", "h100", "--flush", "-o", tmp_path / "ops.parquet")
    _same(r.to_dict(), cli)
    # the rows: the CLI's per-op Parquet, column for column
    assert r.to_arrow().equals(pq.read_table(tmp_path / "ops.parquet"))
    assert r.tokens_per_s == cli["per_token"]["tokens_per_s"] and r.bound == cli["per_token"]["bound"]


def test_options_reach_the_replay(tiny_trace):
    on = tierlab.replay(tiny_trace, chip="h100").to_dict()
    off = tierlab.replay(tiny_trace, chip="h100", set_groups=False, kernel="walk", policy_seed=3).to_dict()
    assert off["provenance"]["options"]["set_groups"] is False and off["provenance"]["options"]["seed"] == 3
    assert off["provenance"]["kernel"]["name"] != on["provenance"]["kernel"]["name"]
    assert off["tiers"] == on["tiers"]                     # identical counts, another kernel
    cli = _cli_json("replay", tiny_trace.path, "--chip", "h100", "--no-set-groups", "--kernel", "walk",
                    "--policy-seed", 3)
    _same(off, cli)


def test_run_is_the_cli_run(tmp_path):
    args = dict(context=16, generate=2, batch=2, weights="int8")
    r = tierlab.run(TINY, chip="sn40l", keep_trace=tmp_path / "a.trace", **args)
    cli = _cli_json("run", TINY, "--chip", "sn40l", "--context", 16, "--generate", 2, "--batch", 2, "--weights",
                    "int8", "--keep-trace", tmp_path / "b.trace")
    d = r.to_dict()
    assert d["provenance"].pop("trace") == str(tmp_path / "a.trace")
    assert cli["provenance"].pop("trace") == str(tmp_path / "b.trace")
    _same(d, cli)
    assert r.to_arrow().num_rows == d["counts"]["ops"]


def test_run_on_a_system(tmp_path):
    r = tierlab.run(TINY, system="dgx-h100", context=16, generate=2, tp=2)
    cli = _cli_json("run", TINY, "--system", "dgx-h100", "--context", 16, "--generate", 2, "--tp", 2)
    d = r.to_dict()
    for x in (d, cli):
        x["provenance"].pop("trace", None)
        for dev in x.get("devices", []):
            dev.get("provenance", {}).pop("trace", None)
    _same(d, cli)
    t = r.to_arrow()
    assert t.column_names[0] == "device" and set(t.column("device").to_pylist()) == {0, 1}
    html = r._repr_html_()
    assert "dgx-h100 (2 x h100)" in html and d["per_token"]["bound"] in html
    assert r.bound == d["per_token"]["bound"] and r.system
    # each device's rows are its own replay's ops
    assert t.num_rows == sum(dev["counts"]["ops"] for dev in d["devices"])


def test_compare_is_the_cli_compare(tiny_trace, tmp_path):
    chip = tierlab.load_chip("h100", {"tier.l2.capacity": "100 MiB"})
    c = tierlab.compare(tiny_trace, chips=["a100", chip], systems=["dgx-h100"])
    d = c.to_dict()
    assert [x["chip"] for x in d["chips"]] == ["a100", "h100"] and d["systems"][0]["system"] == "dgx-h100"
    # the CLI cannot take a Chip object: compare the a100 and the system against it
    cli = _cli_json("compare", tiny_trace.path, "--chips", "a100", "--systems", "dgx-h100",
                    "--csv", tmp_path / "c.csv")
    _same(d["chips"][0], cli["chips"][0])
    _same(d["systems"], cli["systems"])
    assert d["chips"][1]["replay"]["tiers"][0]["home_bytes"] is not None
    assert "100 MiB" not in json.dumps(cli) and "tier.l2.capacity=100 MiB" in d["chips"][1]["replay"]["provenance"]["chip_file"]
    rows = c.to_arrow().to_pylist()
    assert [r["chip"] for r in rows] == ["a100", "h100", "dgx-h100"]
    with open(tmp_path / "c.csv") as f:
        header, a100, system = list(csv.reader(f))
    assert list(rows[0]) == header
    for row, cells in ((rows[0], a100), (rows[2], system)):     # the CSV's cells, read back
        for k, v in zip(header, cells):
            got = row[k]
            if v == "":
                assert got in (None, ""), k
            elif isinstance(got, (str, bool)):
                assert str(got) == v, k
            else:
                assert float(v) == pytest.approx(got, rel=1e-12), k
    assert "<table>" in c._repr_html_() and "a100" in c._repr_html_()


def test_sweep_is_the_cli_sweep(tmp_path):
    grid = {"model": [str(TINY)], "chip": ["h100", "a100"], "context": 16, "generate": 2,
            "overrides": {"tier.l2.capacity": ["25 MiB", "50 MiB"]}}
    s = tierlab.sweep(grid, workers=1, output=tmp_path / "api.parquet")
    d = s.to_dict()
    assert d["points"] == 4 and d["computed"] == 4 and d["failed"] == 0 and d["output"] == str(tmp_path / "api.parquet")
    t = s.to_arrow()
    assert t.num_rows == 4 and sorted(t.column("tier.l2.capacity").to_pylist()) == ["25 MiB", "25 MiB", "50 MiB", "50 MiB"]
    assert t.equals(pq.read_table(tmp_path / "api.parquet").select(t.column_names))
    # rerun through the CLI on the same file: every point already there, the same summary keys
    cli = _cli_json("sweep", "--model", TINY, "--chip", "h100,a100", "--context", 16, "--generate", 2,
                    "--override", "tier.l2.capacity=25 MiB,50 MiB", "-o", tmp_path / "api.parquet")
    assert cli["present"] == 4 and cli["computed"] == 0 and list(cli) == list(d)
    # and the API resumes the CLI's file the same way
    again = tierlab.sweep(grid, output=tmp_path / "api.parquet").to_dict()
    _same(again, cli)
    assert tierlab.sweep is not None and callable(tierlab.sweep)
    assert "<table>" in s._repr_html_()


def test_api_names_stay_functions_after_every_room_is_imported():
    import importlib
    import inspect

    for room in ("tierlab.design_space.grid", "tierlab.pipeline.chip_replay", "tierlab.analysis.compare",
                 "tierlab.kvstream.server", "tierlab.serving.replay"):
        importlib.import_module(room)      # binds each package to its name on tierlab
    for name in tierlab.__all__:
        assert inspect.isfunction(getattr(tierlab, name)), name
    with pytest.raises(UsageError) as e:
        tierlab.sweep({"model": ["gpt2"], "chip": ["h100"], "colour": [1]})
    assert e.value.field == "colour"


def test_throughput_is_the_cli_throughput(tmp_path):
    c = tierlab.throughput(TINY, chip="h100", input=32, output=8, concurrency=[1, 4], tp=1)
    cli = _cli_json("throughput", TINY, "--chip", "h100", "--input", 32, "--output", 8, "--concurrency", "1,4",
                    "-o", tmp_path / "curve.parquet")
    _same(c.to_dict(), cli)
    assert c.to_arrow().equals(pq.read_table(tmp_path / "curve.parquet"))
    assert c.to_arrow().column("concurrency").to_pylist() == [1, 4]
    both = tierlab.throughput(TINY, chips=["h100", "a100"], input=32, output=8, concurrency="1,4")
    _same(both.to_dict(), _cli_json("throughput", TINY, "--chips", "h100,a100", "--input", 32, "--output", 8,
                                    "--concurrency", "1,4"))
    assert both.to_arrow().num_rows == 4 and "TPOT" in both._repr_html_()


def test_load_chip_and_system_overrides():
    base = tierlab.load_chip("h100")
    big = tierlab.load_chip("h100", {"tier.l2.capacity": "100 MiB"})
    assert base.tiers[0].capacity_bytes != big.tiers[0].capacity_bytes == 100 << 20
    s = tierlab.load_system("dgx-h100", {"chips": 4, "chips_per_node": 4, "chip.tier.hbm.bandwidth": "4 TB/s"})
    assert s.n_chips == 4 and tierlab.load_system("dgx-h100").n_chips == 8
    hbm = [t for t in s.chip.tiers if t.name == "hbm"][0]
    assert hbm.bandwidth_bytes_per_s == 4e12
    assert tierlab.load_chip(Path(base.source_file)).tiers == base.tiers


def test_results_as_tables(tiny_trace):
    r = tierlab.replay(tiny_trace, chip="h100")
    pl = r.to_polars()
    assert pl.shape == (r.to_arrow().num_rows, r.to_arrow().num_columns)
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(UsageError, match="pandas"):
            r.to_pandas()
    else:
        assert r.to_pandas().shape == pl.shape
    html = r._repr_html_()
    assert html.startswith("<table>") and "h100" in html and r.bound in html
    assert isinstance(r.to_dict(), dict) and r.to_dict() is not r.to_dict()   # a fresh copy each time
    assert "tiny" in tiny_trace._repr_html_() or "llama" in tiny_trace._repr_html_()


def test_temporary_trace_removed_with_its_result():
    t = tierlab.trace(TINY, context=8, generate=1)
    p = Path(t.path)
    assert p.is_dir() and tierlab.replay(t, chip="h100").to_dict()["provenance"]["trace"] == str(p)
    del t
    import gc

    gc.collect()
    assert not p.exists()


# ---- bad arguments: the typed error naming the argument, before any work ------------------------

BAD = [
    ("trace", lambda: tierlab.trace(TINY, context=8, generate=1, colour=3), None, "colour"),
    ("trace", lambda: tierlab.trace(TINY, context="8", generate=1), "context", "expected an integer"),
    ("trace", lambda: tierlab.trace(TINY, context=8, generate=True), "generate", "expected an integer"),
    ("trace", lambda: tierlab.trace(TINY, context=8, generate=1, weights=4), "weights", "expected a string"),
    ("trace", lambda: tierlab.trace(42, context=8, generate=1), "model", "expected a string or path"),
    ("trace", lambda: tierlab.trace(TINY, context=8, generate=1, path=3.5), "path", "expected a string or path"),
    ("trace", lambda: tierlab.trace(TINY, context=8, generate=1, collective_buffers="both"), None, None),
    ("replay", lambda t: tierlab.replay(t, chip="h100", pim="yes"), "pim", "expected True or False"),
    ("replay", lambda t: tierlab.replay(t, chip="h100", kernel="fastest"), "kernel", "fastest"),
    ("replay", lambda t: tierlab.replay(t, chip="h100", flsh=True), None, "flsh"),
    ("replay", lambda t: tierlab.replay(t, chip=3), "chip", "loaded object"),
    ("replay", lambda t: tierlab.replay(t), "chip", "give --chip"),
    ("replay", lambda t: tierlab.replay(None, chip="h100"), "trace", "expected a string or path"),
    ("replay", lambda t: tierlab.replay(t, chip="h100", place=5), "place", "list of strings"),
    ("run", lambda: tierlab.run(TINY, chip="h100", generate=1.5), "generate", "expected an integer"),
    ("run", lambda: tierlab.run(TINY, chip="h100", json=True), None, "json"),
    ("run", lambda: tierlab.run(TINY, chip="h100", system="dgx-h100"), "chip", "exactly one"),
    ("run", lambda: tierlab.run(TINY, chip="nope-chip", generate=1), None, "nope-chip"),
    ("compare", lambda: tierlab.compare(TINY, chips=["h100"], chip="a100"), None, "chip"),
    ("compare", lambda: tierlab.compare(TINY, chips=[3]), "chips", "expected a name or path"),
    ("compare", lambda: tierlab.compare(TINY, chips=5), "chips", "expected a list"),
    ("compare", lambda: tierlab.compare(TINY), "chips", "give --chips"),
    ("compare", lambda: tierlab.compare(DATA / "golden-v1-tiny-llama.trace", chips=["h100"], context=5), "model",
     "got --context"),
    ("sweep", lambda: tierlab.sweep({"model": ["gpt2"], "chip": ["h100"]}, workers=0), "workers", "at least 1"),
    ("sweep", lambda: tierlab.sweep({"model": ["gpt2"], "chip": ["h100"]}, workers="2"), "workers", "integer"),
    ("sweep", lambda: tierlab.sweep({"model": ["gpt2"], "chip": ["h100"]}, price=-1.0), "price", "above 0"),
    ("sweep", lambda: tierlab.sweep({"model": ["gpt2"], "chip": ["h100"]}, batch=[1]), None, "batch"),
    ("sweep", lambda: tierlab.sweep(7), "grid", "expected a string or path"),
    ("sweep", lambda: tierlab.sweep({"model": ["gpt2"], "chip": ["h100"], "overrides": 3}), "overrides", "dict"),
    ("throughput", lambda: tierlab.throughput(TINY, chip="h100", input="32", output=8), "input", "integer"),
    ("throughput", lambda: tierlab.throughput(TINY, chip="h100", input=32, output=8, concurrency=[1.5]),
     "concurrency", "list of integers"),
    ("throughput", lambda: tierlab.throughput(TINY, chip="h100", input=32, output=8, slo_tpot="fast"), "slo_tpot",
     "a number"),
    ("throughput", lambda: tierlab.throughput(TINY, chip="h100", input=32, output=8, batch=4), None, "batch"),
    ("throughput", lambda: tierlab.throughput(TINY, input=32, output=8), "chip", "give --chip"),
    ("load_chip", lambda: tierlab.load_chip(None), "name_or_path", "expected a string or path"),
    ("load_chip", lambda: tierlab.load_chip("h100", {"tier.l2.capacity": True}), "overrides.tier.l2.capacity",
     "string or number"),
    ("load_chip", lambda: tierlab.load_chip("h100", ["tier.l2.capacity"]), "overrides", "expected a dict"),
    ("load_chip", lambda: tierlab.load_chip("h100", {"tier.l9.capacity": "1 MiB"}), None, "l9"),
    ("load_system", lambda: tierlab.load_system(3), "name_or_path", "expected a string or path"),
    ("mrc", lambda: tierlab.mrc(DATA / "golden-v1-tiny-llama.trace", "l9"), "tier", "l9"),
    ("mrc", lambda: tierlab.mrc(DATA / "golden-v1-tiny-llama.trace", "l2", max_ways=0), "max_ways", "1 to 4096"),
    ("mrc", lambda: tierlab.mrc(DATA / "golden-v1-tiny-llama.trace", "l2", sizes="big"), "sizes", None),
    ("load_system", lambda: tierlab.load_system("dgx-h100", {"chips": None}), "overrides.chips", "string or number"),
    ("load_system", lambda: tierlab.load_system("no-such-system"), None, "no-such-system"),
    ("read_requests", lambda: tierlab.read_requests("/nonexistent/requests.jsonl"), None, "requests.jsonl"),
    ("synthetic_requests", lambda: tierlab.synthetic_requests(4, rate=-1.0), "rate", None),
    ("hit_curve", lambda: tierlab.hit_curve(tierlab.synthetic_requests(4, rate=1.0), policy="mru"), "policy", "mru"),
    ("serve_requests", lambda: tierlab.serve_requests(tierlab.synthetic_requests(4, rate=1.0), None, chip="h100",
                                                      router="prefix"), "router", "dp > 1"),
]


@pytest.mark.parametrize("function,call,field,text", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_arguments(function, call, field, text, tiny_trace):
    """A wrong value is a UsageError naming the parameter; a parameter the function does not have is
    Python's own TypeError naming it (the signatures are explicit)."""
    with pytest.raises((TierlabError, TypeError)) as e:
        call(tiny_trace) if function == "replay" else call()
    if isinstance(e.value, TypeError):
        assert field is None and "unexpected keyword argument" in str(e.value), str(e.value)
    elif field is not None:
        assert e.value.field == field, str(e.value)
    if text is not None:
        assert text in str(e.value)


def test_every_public_function_has_bad_argument_cases():
    assert set(tierlab.__all__) == {b[0] for b in BAD}


def test_import_is_cheap():
    """``import tierlab`` (and so every command's start) loads none of the API's machinery."""
    code = ("import sys, tierlab; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('numpy', 'numba', 'pyarrow', 'click') or m.startswith('tierlab.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert {"trace", "run", "sweep"} <= set(dir(tierlab))


# ---- defaults are written once: the signatures and the click options agree with the option groups ----

def test_signatures_and_commands_take_the_groups_defaults():
    import inspect

    import click

    from tierlab.api.settings import Collectives, Execution, ReplaySettings, Views, Workload, defaults
    from tierlab.cli import main

    groups = {**defaults(Workload), **defaults(ReplaySettings), **defaults(Execution), **defaults(Collectives),
              **defaults(Views)}
    checked = 0
    for name in ("trace", "replay", "run", "compare"):
        sig = inspect.signature(getattr(tierlab, name))
        assert not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()), name   # help() lists them all
        for pname, p in sig.parameters.items():
            if pname in groups:
                assert p.default == groups[pname], (name, pname, p.default, groups[pname])
                checked += 1
        ctx = click.Context(main)
        command = main.get_command(ctx, name)
        by_name = {p.name: p for p in command.params}
        for pname in sig.parameters:
            if pname in groups and pname in by_name:
                option = by_name[pname]
                default = option.get_default(ctx)
                if option.multiple:
                    default = tuple(default) if isinstance(default, (list, tuple)) else ()
                assert default == groups[pname], (name, pname)
                checked += 1
    assert checked > 200


def test_help_lists_the_parameters():
    import pydoc

    text = pydoc.render_doc(tierlab.run, renderer=pydoc.plaintext)
    for p in ("context : int, default 0", "pim : bool, default True", "max_batch_tokens", "kernel_overhead"):
        if p == "max_batch_tokens":
            continue
        assert p in text, p
    assert "**" not in text.split("\n")[2]


def test_flags_named_at_the_cli_edge_only():
    from tierlab.cli import main
    import click

    from tierlab.cli.params import flag_of

    ctx = click.Context(main)
    run = main.get_command(ctx, "run")
    assert flag_of("max_batch_tokens", main.get_command(ctx, "throughput")) == "--max-batch-tokens"
    assert flag_of("system or tp", run) == "--system or --tp"
    assert flag_of("system or tp", main.get_command(ctx, "compare")) == "--systems or --tp"
    assert flag_of("model", run) == "MODEL"
    assert flag_of("tier[2].policy", run) == "tier[2].policy" and flag_of("colour", run) == "colour"
    with pytest.raises(UsageError) as e:
        tierlab.throughput(TINY, chip="h100", input=32, output=8, max_batch_tokens=-1)
    assert e.value.field == "max_batch_tokens"
