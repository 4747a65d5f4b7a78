"""A sweep's grid: axes (from a TOML file or comma-separated command-line lists) into points.

A grid names, for each axis, the values to sweep; its points are the product of all axes. Axes:
``model``, ``chip`` or ``system``, the run axes :data:`RUN_AXES` (``batch``, ``context``, ``prompt``,
``generate``, ``weights``, ``kv``, ``tp``, ``pp``, ``ep``, ``dp``) and chip-file overrides
(``[overrides]`` in the TOML, ``--override KEY=V1,V2`` on the command line) such as
``"tier.l2.capacity" = ["25 MiB", "50 MiB"]``, ``"link.l2-hbm.bandwidth" = [...]``, or for systems
``"scale_up.bandwidth"`` and ``"chip.tier.hbm.bandwidth"`` (every key: :mod:`tierlab.design_space.overrides`):
each is written into the chip's or system's TOML dict before it is validated, so values are parsed
and validated as in files. Every problem is a one-line :class:`tierlab.common.errors.UsageError`.

A point's hash (:attr:`Point.hash`) is the sha256 of its parameters' canonical JSON: the store
(:mod:`tierlab.design_space.store`) skips a point whose hash it already holds. The cost options of a sweep
(:data:`ECONOMICS`: ``--price``, ``--usd-per-kwh``, ``--utilisation``) change a row's ``usd_per_mtok``,
so each one given (not at its default) is part of the hash; at their defaults the hash is what it was
before they existed, so earlier sweep files resume.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tierlab.common.errors import TierlabError, UsageError
from tierlab.common.suggest import did_you_mean

RUN_AXES = ("batch", "context", "prompt", "generate", "weights", "kv", "tp", "pp", "ep", "dp")
# run axes that are a grid's columns (and part of its points' hashes) only when the grid names them,
# so the files and hashes of sweeps made before they existed stay as they were
OPTIONAL_AXES = ("pp_microbatches", "activations")
# the serving axes (issue 23): a grid naming them sweeps ``tierlab throughput`` points (each row one
# concurrency of a serving curve, tierlab.design_space.point.serving_rows); grid files only (the command
# line's --output is the sweep's file)
SERVING_AXES = ("input", "output", "concurrency")
INT_AXES = ("batch", "context", "prompt", "generate", "tp", "pp", "ep", "dp", "pp_microbatches", *SERVING_AXES)
AXES = ("model", "chip", "system", *RUN_AXES, *OPTIONAL_AXES)
# the grid's columns, in order, before any override column
BASE_COLUMNS = ("model", "chip", "system", *RUN_AXES)
DEFAULTS = {"batch": 1, "context": 0, "prompt": 0, "generate": 0, "weights": "bf16", "kv": "bf16",
            "tp": 1, "pp": 1, "ep": 1, "dp": 1}
DEFAULT_MAX_POINTS = 10_000
# cost options of a sweep and their defaults (None: the chip's or system's own [price]; no energy charge)
ECONOMICS = {"price_per_hour": None, "usd_per_kwh": None, "utilisation": 1.0}


@dataclass(frozen=True)
class Point:
    """One point of a grid: a model, a chip or a system, run values and chip overrides."""

    model: str
    chip: str | None
    system: str | None
    run: dict                     # every axis of RUN_AXES -> its value
    overrides: dict = field(default_factory=dict)   # override key -> value
    economics: dict = field(default_factory=dict)   # ECONOMICS key -> value, only those not at the default

    def params(self) -> dict:
        p = {"model": self.model, "chip": self.chip, "system": self.system, **self.run,
             "overrides": dict(sorted(self.overrides.items()))}
        econ = {k: v for k, v in self.economics.items() if v != ECONOMICS[k]}
        if econ:
            p["economics"] = dict(sorted(econ.items()))
        return p

    def economic(self, key: str):
        return self.economics.get(key, ECONOMICS[key])

    @property
    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.params(), sort_keys=True).encode()).hexdigest()

    @property
    def serving(self) -> bool:
        """A point of a serving curve (the grid names the serving axes)."""
        return "input" in self.run

    def trace_key(self) -> str:
        """Points with the same key replay the same trace (same model and run options); serving
        points of one curve (all but the concurrency alike) are one group, sharing their replays."""
        run = {k: v for k, v in self.run.items() if not (self.serving and k == "concurrency")}
        return json.dumps({"model": self.model, **run}, sort_keys=True)

    def columns(self, override_keys) -> dict:
        """The point's grid columns of a result row."""
        return {"model": self.model, "chip": self.chip, "system": self.system, **self.run,
                **{k: (None if k not in self.overrides else str(self.overrides[k])) for k in override_keys}}


@dataclass
class Grid:
    """Axis name -> list of values, and override key -> list of values."""

    axes: dict
    overrides: dict
    economics: dict = field(default_factory=dict)   # ECONOMICS key -> value for every point

    @property
    def override_keys(self) -> list[str]:
        return sorted(self.overrides)

    @property
    def optional_axes(self) -> list[str]:
        return [a for a in (*OPTIONAL_AXES, *SERVING_AXES) if a in self.axes]

    @property
    def columns(self) -> list[str]:
        return [*BASE_COLUMNS, *self.optional_axes, *self.override_keys]

    def size(self) -> int:
        n = 1
        for v in [*self.axes.values(), *self.overrides.values()]:
            n *= len(v)
        return n

    def points(self, max_points: int = DEFAULT_MAX_POINTS) -> list[Point]:
        n = self.size()
        if n > max_points:
            raise UsageError(f"the grid has {n:,} points, more than the limit of {max_points:,}; raise it with "
                             f"--max-points {n} or sweep fewer values", field="grid")
        target = "chip" if "chip" in self.axes else "system"
        run_axes = [a for a in (*RUN_AXES, *OPTIONAL_AXES, *SERVING_AXES) if a in self.axes]
        keys = self.override_keys
        econ = {k: v for k, v in self.economics.items() if v != ECONOMICS[k]}
        out = []
        for model, tgt, *rest in itertools.product(self.axes["model"], self.axes[target],
                                                   *(self.axes[a] for a in run_axes),
                                                   *(self.overrides[k] for k in keys)):
            run = dict(DEFAULTS)
            run.update(zip(run_axes, rest[:len(run_axes)]))
            ov = dict(zip(keys, rest[len(run_axes):]))
            out.append(Point(model, tgt if target == "chip" else None, tgt if target == "system" else None, run, ov,
                             dict(econ)))
        return out


def _scalar(axis: str, value):
    if axis in INT_AXES:
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"expected integers, got {value!r}", field=axis)
        return value
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"expected names, got {value!r}", field=axis)
    return value.strip()


def _values(name: str, raw) -> list:
    vals = raw if isinstance(raw, list) else [raw]
    if not vals:
        raise UsageError("empty axis: give at least one value", field=name)
    return vals


def grid_from_dict(d: dict, overrides: dict | None = None) -> Grid:
    """Validate axes (``axis -> value or list``) and overrides (``key -> value or list``)."""
    axes = {}
    for name, raw in d.items():
        if name not in AXES and name not in SERVING_AXES:
            raise UsageError(f"unknown axis; {did_you_mean(name, [*AXES, *SERVING_AXES, 'overrides'])}", field=name)
        axes[name] = [_scalar(name, v) for v in _values(name, raw)]
        if len(set(map(str, axes[name]))) != len(axes[name]):
            raise UsageError("a value appears twice", field=name)
    if "model" not in axes:
        raise UsageError("missing axis: give at least one model", field="model")
    if ("chip" in axes) == ("system" in axes):
        raise UsageError("give exactly one of the axes chip and system", field="chip")
    if any(a in axes for a in SERVING_AXES):
        for a in ("input", "output"):
            if a not in axes:
                raise UsageError("a serving grid (input, output, concurrency) needs both input and output", field=a)
        axes.setdefault("concurrency", [1])
    ov = {}
    for key, raw in (overrides or {}).items():
        vals = _values(f"overrides.{key}", raw)
        ov[key] = vals
    grid = Grid(axes, ov)
    check_overrides(grid)
    return grid


def load_grid(path: str | Path) -> Grid:
    """A grid TOML file: axes at the top level, ``[overrides]`` a table of chip-file keys."""
    p = Path(path)
    try:
        d = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError("no such grid file", file=str(p)) from None
    except (UnicodeDecodeError, IsADirectoryError):
        raise UsageError("not a UTF-8 TOML file", file=str(p)) from None
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"not valid TOML: {err}", file=str(p)) from None
    overrides = d.pop("overrides", {})
    if not isinstance(overrides, dict):
        raise UsageError("expected a table of chip-file keys", file=str(p), field="overrides")
    cost = d.pop("cost", {})
    try:
        grid = grid_from_dict(d, overrides)
        grid.economics = economics_from_table(cost)
        return grid
    except UsageError as err:
        err.file = str(p)
        raise


def economics_from_table(t) -> dict:
    """A grid file's ``[cost]`` table: ``price_per_hour`` (USD per hour, > 0), ``usd_per_kwh`` (>= 0),
    ``utilisation`` (0 < u <= 1); each optional, as the ``--price``, ``--usd-per-kwh`` and
    ``--utilisation`` options (which win where given)."""
    if not isinstance(t, dict):
        raise UsageError("expected a table of price_per_hour, usd_per_kwh, utilisation", field="cost")
    out = {}
    for k, v in t.items():
        if k not in ECONOMICS:
            raise UsageError(f"unknown key; {did_you_mean(k, ECONOMICS, cutoff=0.5)}", field=f"cost.{k}")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise UsageError(f"expected a number, got {v!r}", field=f"cost.{k}")
        ok = {"price_per_hour": v > 0, "usd_per_kwh": v >= 0, "utilisation": 0 < v <= 1}[k]
        if not ok:
            want = {"price_per_hour": "> 0", "usd_per_kwh": ">= 0", "utilisation": "in (0, 1]"}[k]
            raise UsageError(f"expected a number {want}, got {v!r}", field=f"cost.{k}")
        out[k] = float(v)
    return out


def grid_from_options(options: dict, override_specs=()) -> Grid:
    """Axes from comma-separated command-line lists (None: not given); ``override_specs`` are
    ``KEY=V1,V2`` strings."""
    d = {}
    for name, text in options.items():
        if text is None:
            continue
        d[name] = [v.strip() for v in str(text).split(",") if v.strip()]
    ov = {}
    for spec in override_specs:
        key, sep, vals = spec.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"expected KEY=VALUE[,VALUE...], e.g. tier.l2.capacity=25MiB,50MiB, got {spec!r}",
                             field="override")
        ov[key.strip()] = [_override_value(v.strip()) for v in vals.split(",") if v.strip()]
    return grid_from_dict(d, ov)


def _override_value(text: str):
    if text.isdigit():
        return int(text)
    if text in ("true", "false"):
        return text == "true"
    return text


# ---- overrides ------------------------------------------------------------------------------------

def check_overrides(grid: Grid) -> None:
    """Every chip or system of the grid with every combination of override values is valid (and
    every chip and system named exists): fails before anything is written or started."""
    from tierlab.chip.chipfile import load_chip
    from tierlab.design_space.overrides import build_target
    from tierlab.system.systemfile import load_system

    keys = grid.override_keys
    target = "chip" if "chip" in grid.axes else "system"
    for name in grid.axes[target]:
        (load_chip if target == "chip" else load_system)(name)
        for combo in itertools.product(*(grid.overrides[k] for k in keys)):
            try:
                build_target(name if target == "chip" else None, name if target == "system" else None,
                             dict(zip(keys, combo)))
            except UsageError:
                raise
            except TierlabError as err:
                raise UsageError(str(err)) from None
