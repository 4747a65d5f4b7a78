"""Start-up: a tiny ``tierlab replay`` and the README's quick start, from process start, cold and warm.

Each command runs as a fresh process (the ``tierlab`` script beside the running Python) with Numba's cache in a temporary directory (``NUMBA_CACHE_DIR``), so the checkout's own
caches are neither used nor touched: the first run of each command is **cold** (nothing compiled:
it compiles what the request needs and stores it), the next ``--repeat`` are **warm** (loaded from
that cache; best and median reported). Commands:

- ``replay_tiny``: ``tierlab replay TINY --chip h100`` of a tiny trace (Qwen2-0.5B, ``--context 16
  --generate 1``: 350 tensors, 1,232 access rows), written once before timing;
- ``quick_start``: ``tierlab run llama-3.1-8b --chip sn40l --context 1024 --generate 4``;
- ``help``: ``tierlab --help``;
- ``import_cli``: ``python -c "import tierlab.cli"`` (the floor every command pays).

Python's bytecode caches: by default every process writes and reads them under a temporary
``PYTHONPYCACHEPREFIX`` with ``PYTHONDONTWRITEBYTECODE`` unset, as on a user's machine (an installed
wheel has its ``.pyc`` files), whatever the calling shell says: a shell with
``PYTHONDONTWRITEBYTECODE=1`` and no ``__pycache__`` in the checkout would otherwise compile every
tierlab module from source in every process (~0.1 s here). ``--no-bytecode`` measures that case
(``bytecode`` in the JSON says which).

``--against REV``: also the warm tiny replay and ``tierlab --help`` of the checkout's revision REV
(``git archive``, laid out as the installed package in a temporary directory and put first on
``PYTHONPATH``) and of the working tree laid out the same way, in turns (REV, tree, tree, REV, ...)
after a cold run of each, so that a busy shared host's load falls on both alike: ``against`` in the
JSON, medians and bests of each.

Also reported: ``python -X importtime -c "import tierlab.cli"`` (its total and the five slowest
modules, cumulative), and a reference in the same run: ``python -c "import numpy, pyarrow"`` and
``python -c "import numba"`` (what no lazy import of ours can avoid once a replay compiles or loads
kernels).

``--compile-profile``: also the quick start and the tiny replay run once more each, in a fresh
process with an empty Numba cache, the command called in process with a listener on Numba's
compile events: the seconds spent compiling (``compile_s``, the outermost compiles summed) against
the whole process (``process_s``), and the compiled functions taking most of it (``top``, seconds
each without the functions it compiled in turn).

    python benchmarks/bench_startup.py [--repeat N] [--skip-quick-start] [--compile-profile] [--no-bytecode]
                                       [--against REV]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, emit, log


def timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


BASE_ENV = dict(os.environ)     # main() sets how bytecode is cached


def cold_and_warm(name: str, cmd: list[str], repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="tierlab-numba-") as cache:
        env = {**BASE_ENV, "NUMBA_CACHE_DIR": cache}
        cold = timed(cmd, env)
        warm = [timed(cmd, env) for _ in range(repeat)]
    log(f"{name}: cold {cold:.2f} s, warm best {min(warm):.2f} s")
    return {"command": " ".join([Path(cmd[0]).name, *cmd[1:]]), "cold_s": cold,
            "warm_best_s": min(warm), "warm_median_s": statistics.median(warm), "warm_s": warm}


def import_profile() -> dict:
    """``-X importtime`` of ``import tierlab.cli``: total (us) and the slowest modules (cumulative)."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import tierlab.cli"], cwd=REPO, env=BASE_ENV,
                         capture_output=True, text=True, check=True).stderr
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    top = next((r for r in rows if r[1].strip() == "tierlab.cli"), (0, ""))
    slow = sorted((r for r in rows if r[1].startswith("   ") or r[1].startswith("  ")), reverse=True)[:5]
    return {"emulator_cli_us": top[0], "slowest_cumulative_us": {m.strip(): us for us, m in slow}}


# Run in a fresh process (argv: the tierlab arguments): the command with Numba's compile events
# recorded, then one JSON line on stderr's last line.
PROFILE = r"""
import json, sys, time
t_start = time.perf_counter()
from numba.core import event
stack, own, outer = [], {}, [0.0]
class Listener(event.Listener):
    def on_start(self, ev):
        d = ev.data["dispatcher"]
        stack.append([getattr(d.py_func, "__qualname__", str(d)), time.perf_counter(), 0.0])
    def on_end(self, ev):
        name, t0, inner = stack.pop()
        took = time.perf_counter() - t0
        own[name] = own.get(name, 0.0) + took - inner
        if stack:
            stack[-1][2] += took
        else:
            outer[0] += took
event.register("numba:compile", Listener())
from click.testing import CliRunner
from tierlab.cli import main
r = CliRunner().invoke(main, sys.argv[1:])
top = sorted(own.items(), key=lambda kv: -kv[1])[:8]
print(json.dumps({"exit_code": r.exit_code, "process_s": time.perf_counter() - t_start, "compile_s": outer[0],
                  "top": {k: round(v, 3) for k, v in top}}), file=sys.__stderr__)
"""


def compile_profile(name: str, args: list[str]) -> dict:
    """The command's compile time in a fresh process with an empty Numba cache (see the module doc)."""
    with tempfile.TemporaryDirectory(prefix="tierlab-numba-") as cache:
        r = subprocess.run([sys.executable, "-c", PROFILE, *args], env={**BASE_ENV, "NUMBA_CACHE_DIR": cache},
                           cwd=REPO, capture_output=True, text=True, check=True)
    out = json.loads(r.stderr.strip().splitlines()[-1])
    log(f"{name}: compile {out['compile_s']:.2f} s of {out['process_s']:.2f} s in process")
    return {"command": " ".join(["tierlab", *args]), **out}


# the package's folders (pyproject.toml's package-dir): tierlab is emulator/, these its subpackages
SUBPACKAGES = ("common", "traces", "kernels", "configs")
RUN_SCRIPT = "import sys; from tierlab.cli import script; sys.argv = ['tierlab'] + sys.argv[1:]; script()"


def package_tree(rev: str | None, into: Path) -> Path:
    """A directory holding ``tierlab`` as installed, from revision ``rev`` (None: the working tree)."""
    src = into / "src"
    src.mkdir(parents=True)
    if rev is None:
        for d in ("emulator", *SUBPACKAGES):
            subprocess.run(["cp", "-r", str(REPO / d), str(src / d)], check=True)
    else:
        archive = subprocess.run(["git", "archive", rev, "emulator", *SUBPACKAGES], cwd=REPO, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    pkg = into / "path" / "tierlab"
    pkg.parent.mkdir()
    (src / "emulator").rename(pkg)
    for d in SUBPACKAGES:
        (pkg / d).symlink_to(src / d, target_is_directory=True)
    return pkg.parent


def against(rev: str, tiny: Path, repeat: int) -> dict:
    """Warm tiny replay and ``--help`` of revision ``rev`` and of the working tree, in turns."""
    cmds = {"replay_tiny": ["replay", str(tiny), "--chip", "h100"], "help": ["--help"]}
    with tempfile.TemporaryDirectory(prefix="tierlab-against-") as tmp:
        envs = {}
        for name, r in (("rev", rev), ("tree", None)):
            d = Path(tmp) / name
            envs[name] = {**BASE_ENV, "PYTHONPATH": str(package_tree(r, d)),
                          "PYTHONPYCACHEPREFIX": str(d / "pyc"), "NUMBA_CACHE_DIR": str(d / "numba")}
            for args in cmds.values():          # cold: compiles the kernels, writes the bytecode
                subprocess.run([sys.executable, "-c", RUN_SCRIPT, *args], env=envs[name], cwd=tmp, check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times = {(n, c): [] for n in envs for c in cmds}
        for i in range(repeat):
            for c, args in cmds.items():
                for n in (("rev", "tree") if i % 2 == 0 else ("tree", "rev")):
                    t0 = time.perf_counter()
                    subprocess.run([sys.executable, "-c", RUN_SCRIPT, *args], env=envs[n], cwd=tmp, check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    times[(n, c)].append(time.perf_counter() - t0)
    out = {"rev": rev, "rev_commit": subprocess.run(["git", "rev-parse", "--short", rev], cwd=REPO, text=True,
                                                    capture_output=True).stdout.strip(), "runs": repeat}
    for c in cmds:
        out[c] = {n: {"warm_median_s": statistics.median(times[(n, c)]), "warm_best_s": min(times[(n, c)])}
                  for n in envs}
        log(f"against {rev}: {c} median {out[c]['rev']['warm_median_s']:.3f} s -> "
            f"{out[c]['tree']['warm_median_s']:.3f} s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="warm runs after the cold one (default 3)")
    ap.add_argument("--skip-quick-start", action="store_true", help="only the tiny replay and the imports")
    ap.add_argument("--compile-profile", action="store_true",
                    help="also each command's compile time, in process, with an empty cache")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="run every process with PYTHONDONTWRITEBYTECODE=1 and no cached bytecode of tierlab")
    ap.add_argument("--against", metavar="REV", default=None,
                    help="also time revision REV and the working tree in turns (see the module doc)")
    args = ap.parse_args()
    py = sys.executable
    pyc = tempfile.TemporaryDirectory(prefix="tierlab-pyc-")
    if args.no_bytecode:       # the installed packages' own .pyc files are still read
        BASE_ENV["PYTHONDONTWRITEBYTECODE"] = "1"
        BASE_ENV.pop("PYTHONPYCACHEPREFIX", None)
    else:
        BASE_ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        BASE_ENV["PYTHONPYCACHEPREFIX"] = pyc.name
    tl = str(Path(py).parent / "tierlab")
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="tierlab-bench-") as tmp:
        tiny = Path(tmp) / "tiny.trace"
        subprocess.run([tl, "trace", "qwen2-0.5b", "--context", "16", "--generate", "1",
                        "-o", str(tiny)], cwd=REPO, env=BASE_ENV, check=True, stdout=subprocess.DEVNULL)
        out["replay_tiny"] = cold_and_warm("replay_tiny", [tl, "replay", str(tiny),
                                                           "--chip", "h100"], args.repeat)
        out["help"] = cold_and_warm("help", [tl, "--help"], args.repeat)
        quick = ["run", "llama-3.1-8b", "--chip", "sn40l", "--context", "1024", "--generate", "4"]
        if not args.skip_quick_start:
            out["quick_start"] = cold_and_warm("quick_start", [tl, *quick], args.repeat)
        if args.compile_profile:
            out["compile_profile"] = {"replay_tiny": compile_profile("replay_tiny", ["replay", str(tiny), "--chip", "h100"])}
            if not args.skip_quick_start:
                out["compile_profile"]["quick_start"] = compile_profile("quick_start", quick)
        if args.against:
            out["against"] = against(args.against, tiny, args.repeat)
    out["import_cli"] = cold_and_warm("import_cli", [py, "-c", "import tierlab.cli"], args.repeat)
    out["reference"] = {
        "import_numpy_pyarrow": cold_and_warm("numpy+pyarrow", [py, "-c", "import numpy, pyarrow"], args.repeat),
        "import_numba": cold_and_warm("numba", [py, "-c", "import numba"], args.repeat),
    }
    out["importtime"] = import_profile()
    out["targets"] = {"replay_tiny_warm_s": 0.4, "help_warm_s": 0.4,   # issue 42 (0.5 s before it)
                      "quick_start_cold_compile_s": 10.0}
    out["bytecode"] = ("none (PYTHONDONTWRITEBYTECODE=1)" if args.no_bytecode else
                       "cached (a temporary PYTHONPYCACHEPREFIX, written by the first run)")
    pyc.cleanup()
    emit("bench_startup", out)


if __name__ == "__main__":
    main()
