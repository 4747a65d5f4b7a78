"""``tierlab bench``: run the benchmark scripts of ``benchmarks/`` and gather their JSON.

Each ``benchmarks/bench_NAME.py`` is a standalone script printing one JSON object; this command
runs the chosen ones (all by default) in fresh subprocesses, one after the other (they time
themselves; running two at once would skew both), their progress going to stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click

from tierlab.cli.options import json_option
from tierlab.present.format import table
from tierlab.common.errors import UsageError

# Arguments that make a benchmark finish in seconds (--quick): for trying the harness, not for figures.
QUICK_ARGS = {
    "replay": ["--lines", "200000", "--policies", "lru,fifo", "--no-jit"],
    "mrc": ["--lines", "500000", "--naive-lines", "20000", "--repeat", "1"],
    "memory": ["--lines", "50000"],
    "model": ["--model", "tests/data/models/tiny-llama.json", "--context", "64", "--generate", "2"],
    "sweep": ["--lines", "200000"],
    "trace_path": ["--lines", "200000", "--levels", "2", "--repeat", "1"],
    "import": ["--records", "200000", "--repeat", "1", "--per-record-lines", "20000"],
    "serving_memory": ["--model", "tests/data/models/tiny-llama.json", "--chip", "h100", "--input", "64",
                       "--output", "16", "--concurrency", "1,4", "--repeat", "1"],
}


def benchmarks_dir() -> Path:
    d = Path(__file__).resolve().parents[2] / "benchmarks"
    if not d.is_dir():
        raise UsageError("benchmarks/ not found: run tierlab bench from a source checkout", field="NAME")
    return d


def available() -> dict[str, Path]:
    return {p.stem[len("bench_"):]: p for p in sorted(benchmarks_dir().glob("bench_*.py"))}


def run_benchmark(name: str, script: Path, args: list[str]) -> dict:
    """Run one script; its stdout must be one JSON object."""
    proc = subprocess.run([sys.executable, str(script), *args], cwd=script.parent.parent,
                          stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise UsageError(f"benchmark {name} failed with exit status {proc.returncode}", field=str(script.name))
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise UsageError("benchmark printed no JSON object on stdout", field=str(script.name)) from None


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _flatten(d, prefix=""):
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            yield from _flatten(v, key + ".")
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, x in enumerate(v):
                yield from _flatten(x, f"{key}[{i}].")
        else:
            yield key, v


def format_result(name: str, doc: dict) -> str:
    lines = [f"== {name}: {doc.get('command', '')}"]
    if name == "replay":
        head = ("levels", "policy", "tierlab M/s", "pycachesim M/s", "ratio", "ratio cpu", "floor ratio", "equal")
        rows = [(str(r["levels"]), r["policy"], f"{r['tierlab_blocks_per_s'] / 1e6:.2f}",
                 f"{r['pycachesim_blocks_per_s'] / 1e6:.2f}" if "pycachesim_blocks_per_s" in r else "-",
                 f"{r['ratio']:.2f}" if "ratio" in r else "-",
                 f"{r['ratio_cpu']:.2f}" if "ratio_cpu" in r else "-", f"{r['floor_ratio']:.4f}",
                 str(r.get("counts_equal", "-"))) for r in doc.get("runs", [])]
        lines.append(table(head, rows, align=">" * len(head), rule=False))
        doc = {k: v for k, v in doc.items() if k != "runs"}
    for key, v in _flatten({k: v for k, v in doc.items() if k not in ("machine", "command", "benchmark")}):
        lines.append(f"  {key} = {_fmt(v)}")
    return "\n".join(lines)


@click.command("bench")
@click.argument("names", nargs=-1, metavar="[NAME...]")
@click.option("--quick", is_flag=True, help="Tiny inputs: check the harness runs (figures meaningless).")
@click.option("--list", "list_only", is_flag=True, help="List the benchmarks and exit.")
@json_option
def command(names, quick, list_only, as_json):
    """Run benchmarks/bench_NAME.py scripts (default: all) and print their results."""
    scripts = available()
    if list_only:
        click.echo("\n".join(scripts))
        return
    for n in names:
        if n not in scripts:
            raise UsageError(f"unknown benchmark {n!r}; expected one of {', '.join(scripts)}", field="NAME")
    results = {}
    for n in names or scripts:
        click.echo(f"tierlab bench: running {n}", err=True)
        results[n] = run_benchmark(n, scripts[n], QUICK_ARGS.get(n, []) if quick else [])
        if not as_json:
            click.echo(format_result(n, results[n]))
    if as_json:
        click.echo(json.dumps(results, indent=2))
