"""Install as users do: build the wheel with ``python -m build``, install it into a fresh virtual
environment (its dependencies from the package index, not this checkout), and run the README's
quick start from a directory outside the checkout, so nothing is read from the source tree; the
environment already holds the package index's ``traces`` and ``common`` distributions, whose import
names tierlab's folders once took: the wheel installs ``tierlab`` alone, beside them.

The install is slow (a fresh environment installs numba, pyarrow and dask: a minute or more with a
warm pip cache, and the quick start compiles the engine), so not in the default run; ``.ci/run``
runs the same steps in CI after the suite. The default run checks that every package is listed for
the wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from test_quickstart import quickstart_command

ROOT = Path(__file__).resolve().parents[2]


def _packages() -> set[str]:
    """Every package directory of the project (a folder of modules), as the dotted name it is
    imported by: emulator/ is ``tierlab``, kernels/ ``tierlab.kernels`` (pyproject.toml's package-dir)."""
    out = set()
    for name, top in (("tierlab.common", "common"), ("tierlab", "emulator"), ("tierlab.traces", "traces"),
                      ("tierlab.kernels", "kernels"), ("tierlab.configs", "configs")):
        for module in (ROOT / top).rglob("*.py"):
            rel = module.parent.relative_to(ROOT / top)
            if "__pycache__" not in rel.parts:
                out.add(".".join((name,) + rel.parts))
    return out


def test_every_package_is_listed_for_the_wheel():
    """The wheel ships the packages pyproject.toml lists (not found automatically): a new package
    left out of the list would be missing from every installed copy."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    missing = _packages() - listed
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
    assert (ROOT / "emulator" / "py.typed").is_file()


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, **kw)
    assert r.returncode == 0, f"{cmd}: {r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.mark.slow
def test_wheel_installs_and_runs_the_quick_start(tmp_path):
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(ROOT)])
    wheel = next((tmp_path / "dist").glob("tierlab-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    # every package of the source tree is in the wheel, with the presets and the typing marker
    shipped = {n.rsplit("/", 1)[0].replace("/", ".") for n in names if n.endswith(".py") and "/" in n}
    missing = _packages() - shipped
    assert not missing, f"packages not in the wheel (add them to [tool.setuptools] packages): {sorted(missing)}"
    assert "tierlab/py.typed" in names
    top_level = {n.split("/", 1)[0] for n in names if "/" in n and ".dist-info" not in n}
    assert top_level == {"tierlab"}, top_level          # one import name, nothing of anyone else's
    assert "tierlab/kernels/attention.py" in names and "tierlab/kernels.py" in names
    for preset in ("tierlab/configs/chips/sn40l.toml", "tierlab/configs/models/llama-3.1-8b.json",
                   "tierlab/configs/systems/dgx-h100.toml"):
        assert preset in names, preset

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    _run([str(py), "-m", "pip", "install", "-q", "traces", "common"])     # the index's owners of those names
    _run([str(py), "-m", "pip", "install", "-q", str(wheel)])
    away = tmp_path / "elsewhere"          # not the checkout: nothing can come from the source tree
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    where = _run([str(py), "-c", "import tierlab, traces, common; print(tierlab.__file__, traces.__file__); "
                  "import traces.timeseries"], cwd=away, env=env).stdout
    assert str(ROOT) not in where and str(venv) in where
    command = quickstart_command().split("&&", 1)[1].strip()        # the run, after `pip install -e .`
    assert command.startswith("tierlab run ")
    r = _run(["bash", "-c", command + " --json"], cwd=away, env=env)
    import json

    d = json.loads(r.stdout)
    assert d["chip"] == "sn40l" and d["per_token"]["tokens_per_s"] > 0
    # the installed API gives the same figure
    api = _run([str(py), "-c", "import tierlab; print(tierlab.run('llama-3.1-8b', chip='sn40l', context=1024, "
                "generate=4).tokens_per_s)"], cwd=away, env=env).stdout
    assert float(api) == d["per_token"]["tokens_per_s"]
