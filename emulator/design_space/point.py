"""One trace group of a sweep into result rows, through the existing pipeline.

:func:`run_group` is the task a sweep's worker runs: it generates the group's trace once into a
temporary directory on that worker, replays it on every chip (with its overrides) or system of the
group's points, removes the trace and returns one row per point. A point that fails records its
one-line error in ``error`` and the others go on. A row's figures are those of ``tierlab run`` of
the point: its ``--json`` dict's ``per_token``, whole-run latency and energy and tiers' hit rates,
read from the replay and its cost by :mod:`tierlab.analysis.figures` (the same calls as
:func:`tierlab.analysis.result.to_json` and its system twin, without building the rest of the dict).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from tierlab.common.version import tierlab_version
from tierlab.common.errors import TierlabError
from tierlab.design_space.grid import Point
from tierlab.design_space.overrides import build_chip, build_system

RESULT_COLUMNS = ("tokens_per_s", "steady_tokens_per_s", "latency_s", "energy_j_per_token", "bound",
                  "run_latency_s", "run_energy_j", "j_per_token", "j_per_token_dynamic")
# cost columns of every row (tierlab.cost.price.usd_per_mtok); usd_per_mtok is None without a price
# usd_per_mtok_steady: the same at steady_tokens_per_s (a system's pipeline kept full; a chip's equals usd_per_mtok)
COST_COLUMNS = ("devices", "price_per_hour", "price_source", "utilisation", "usd_per_kwh", "usd_per_mtok",
                "usd_per_mtok_steady")


def run_config(point: Point):
    """The :class:`tierlab.traces.workload.run.RunConfig` of a point (every other run option at its default, as
    ``tierlab run`` has it)."""
    from tierlab.traces.workload.run import RunConfig

    return RunConfig(**{k: v for k, v in point.run.items() if k not in ("input", "output", "concurrency")})


def error_line(err: BaseException) -> str:
    text = str(err) if isinstance(err, TierlabError) else f"{type(err).__name__}: {err}"
    return (text.splitlines() or [type(err).__name__])[0]


def replay_point(trace_path, point: Point) -> dict:
    """The figures of ``tierlab run`` of ``point`` on an already written trace that a row takes
    (:func:`tierlab.analysis.figures.run_figures`: ``per_token``, ``latency_s``, ``energy_j.total``
    and the tiers' hits and misses, each exactly the ``--json`` dict's), read from the replay and its
    cost without building the rest of the dict."""
    from tierlab.analysis.figures import run_figures
    from tierlab.engine.options import ReplayOptions

    if point.system is not None:
        from tierlab.analysis.figures import system_cost
        from tierlab.pipeline.system_replay import check_fits, replay_system
        from tierlab.traces.format.reader import open_trace

        system = build_system(point.system, point.overrides)
        trace = open_trace(trace_path)
        check_fits(trace, system)
        sr = replay_system(trace, system, ReplayOptions())
        return run_figures(sr, system_cost(sr))
    from tierlab.cost.trace_cost import cost_of
    from tierlab.pipeline.chip_replay import replay_trace

    tr = replay_trace(trace_path, build_chip(point.chip, point.overrides), ReplayOptions())
    return run_figures(tr, cost_of(tr))


def _tiers(d: dict) -> dict:
    """Hit rate per tier name (a system: over all its devices; ``d`` a ``--json`` dict or
    :func:`replay_point`'s figures)."""
    tiers = d["tiers"] if "tiers" in d else [t for dev in d["devices"] for t in dev["tiers"]]
    acc: dict[str, list] = {}
    for t in tiers:
        a = acc.setdefault(t["name"], [0, 0])
        a[0] += t["hits"]
        a[1] += t["hits"] + t["misses"]
    return {f"hit_rate.{k}": (h / n if n else None) for k, (h, n) in acc.items()}


def price_of(point: Point) -> tuple[int, float | None, str | None]:
    """(devices, USD per hour, where the price comes from) of a point: ``--price`` if given, else the
    chip's or system's own ``[price]`` (None when it has none)."""
    if point.system is not None:
        s = build_system(point.system, point.overrides)
        devices, own = s.n_chips, s.price
    else:
        devices, own = 1, build_chip(point.chip, point.overrides).price
    given = point.economic("price_per_hour")
    if given is not None:
        return devices, float(given), "--price"
    if own is None:
        return devices, None, None
    return devices, own.usd_per_hour, f"{own.source} ({own.date})"


def cost_columns(point: Point, row: dict) -> dict:
    """The :data:`COST_COLUMNS` of a row whose result columns are filled in."""
    from tierlab.cost.price import usd_per_mtok

    out = dict.fromkeys(COST_COLUMNS)
    out["utilisation"] = float(point.economic("utilisation"))
    kwh = point.economic("usd_per_kwh")
    out["usd_per_kwh"] = None if kwh is None else float(kwh)
    try:
        out["devices"], out["price_per_hour"], out["price_source"] = price_of(point)
    except TierlabError:
        return out
    e = row.get("energy_j_per_token")
    for col, tps in (("usd_per_mtok", row.get("tokens_per_s")), ("usd_per_mtok_steady", row.get("steady_tokens_per_s"))):
        if out["price_per_hour"] is not None and tps and (kwh is None or e is not None):
            out[col] = usd_per_mtok(out["price_per_hour"], tps, utilisation=out["utilisation"],
                                    energy_j_per_token=e, usd_per_kwh=out["usd_per_kwh"])[0]
    return out


def row_of(point: Point, override_keys, d: dict | None, error: str | None) -> dict:
    row = point.columns(override_keys)
    row.update(dict.fromkeys(RESULT_COLUMNS))
    pt = (d or {}).get("per_token")
    if d is not None:
        row["run_latency_s"] = float(d["latency_s"])
        row["run_energy_j"] = float(d["energy_j"]["total"])
        row.update(_tiers(d))
    if pt:
        row["tokens_per_s"] = pt["tokens_per_s"]
        row["steady_tokens_per_s"] = pt.get("steady_tokens_per_s", pt["tokens_per_s"])
        row["latency_s"] = pt["latency_s"]
        row["energy_j_per_token"] = pt["energy_j"]
        row["j_per_token_dynamic"] = pt["energy_j"]
        row["j_per_token"] = pt.get("j_per_token", pt["energy_j"])
        row["bound"] = pt["bound"]
        for link, b in pt["bytes_by_link"].items():
            row[f"bytes_per_token.{link}"] = float(b)
    row.update(cost_columns(point, row))
    row["per_token_json"] = None if d is None else json.dumps(pt)
    row["error"] = error
    row["point_hash"] = point.hash
    row["tierlab_version"] = (tierlab_version() or "unknown")
    return row


SERVING_COLUMNS = ("output_tokens_per_s", "output_tokens_per_s_per_chip", "total_tokens_per_s_per_chip",
                   "tokens_per_s_per_user", "ttft_s", "tpot_s", "max_concurrency")


def serving_rows(points: list[Point], override_keys: list[str]) -> list[dict]:
    """The rows of serving points (one curve: model, target and run alike, concurrencies differing):
    each the curve entry ``tierlab throughput`` gives at the point's concurrency (one replayer per
    chip or system, so a step shape met at two concurrencies replays once). ``tokens_per_s`` is the
    output tokens/s, ``latency_s`` the TPOT, ``energy_j_per_token`` per output token."""
    from tierlab.serving.replay import StepReplayer
    from tierlab.serving.throughput import throughput
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model

    rows, replayers = [], {}
    try:
        for p in points:
            r = p.run
            try:
                spec = load_model(p.model)
                where = ({"system": build_system(p.system, p.overrides)} if p.system is not None
                         else {"chip": build_chip(p.chip, p.overrides)})
                key = json.dumps([p.chip, p.system, p.overrides], sort_keys=True, default=str)
                if key not in replayers:
                    replayers[key] = StepReplayer(spec, RunConfig(
                        generate=1, weights=r["weights"], kv=r["kv"], activations=r.get("activations", "bf16"),
                        tp=r["tp"], pp=r["pp"], ep=r["ep"]), **where)
                d = throughput(spec, **where, isl=r["input"], osl=r["output"], concurrency=str(r["concurrency"]),
                               weights=r["weights"], kv=r["kv"], activations=r.get("activations", "bf16"),
                               tp=r["tp"], pp=r["pp"], ep=r["ep"], dp=r["dp"], replayer=replayers[key],
                               workers=1)      # the sweep's workers are the parallelism
            except Exception as err:  # noqa: BLE001 - a failing point records its error, the sweep goes on
                rows.append(row_of(p, override_keys, None, error_line(err)))
                continue
            row = row_of(p, override_keys, None, None)
            c = d["curve"][0]
            row.update({k: c.get(k, d.get(k)) for k in SERVING_COLUMNS})
            row.update(tokens_per_s=c["output_tokens_per_s"], steady_tokens_per_s=c["output_tokens_per_s"],
                       latency_s=c["tpot_s"], energy_j_per_token=c["energy_j_per_token"],
                       j_per_token=c.get("j_per_token"), j_per_token_dynamic=c.get("j_per_token_dynamic"),
                       serving_usd_per_mtok=c["usd_per_mtok"])
            row.update(cost_columns(p, row))
            row["per_token_json"] = json.dumps(c)
            rows.append(row)
    finally:
        for rep in replayers.values():
            rep.close()
    return rows


def run_group(points: list[Point], override_keys: list[str]) -> list[dict]:
    """Trace once, replay every point of the group; one row per point (errors recorded). Serving
    points: :func:`serving_rows`."""
    from tierlab.traces.lowering.generate import generate_trace
    from tierlab.traces.model.spec import load_model

    if points[0].serving:
        return serving_rows(points, override_keys)

    tmp = Path(tempfile.mkdtemp(prefix="tierlab-sweep-"))
    try:
        try:
            spec = load_model(points[0].model)
            path = generate_trace(spec, run_config(points[0]), tmp / f"{spec.name}.trace")
        except Exception as err:  # noqa: BLE001 - the group's error goes into each of its rows
            return [row_of(p, override_keys, None, error_line(err)) for p in points]
        rows = []
        for p in points:
            try:
                rows.append(row_of(p, override_keys, replay_point(path, p), None))
            except Exception as err:  # noqa: BLE001 - a failing point records its error, the sweep goes on
                rows.append(row_of(p, override_keys, None, error_line(err)))
        return rows
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
