"""Coverage of Transformers' decoder-only causal LMs: for every model type of the installed Transformers
(``tierlab.traces.capture.census.decoder_only_types``), its default config (``architectures`` set to its
causal-LM class) read the way ``tierlab trace CONFIG.json`` reads it, and the parameters Transformers
builds on the meta device against tierlab's.

Per type: the path taken (``hand``: a family of traces/model/families.py; ``capture``: no hand lowering, so
the run is recorded from Transformers and lowered, as ``tierlab trace`` does; ``refused``: one line
saying why), Transformers' count (parameters, a tied one once, and persistent float buffers), tierlab's
(``ModelSpec.param_count`` on the hand path; the traced weight elements, ``capture.params``, on the
capture path), and the operators a capture ran that tierlab does not map. A capture traces
``--prompt 2 --generate 1`` at batch 1. A type Transformers cannot build from its own default config is
listed as not buildable (not counted). Any exception other than tierlab's one-line errors is a
``traceback`` row (a bug). Prints JSON; ``--docs`` writes the table into docs/models.md between its
coverage markers.
Usage: ``python benchmarks/bench_coverage.py [--types a,b] [--docs]``
"""

from __future__ import annotations

import argparse
import shutil
import signal
import tempfile
import time
import traceback
import warnings
from pathlib import Path

from _common import REPO, emit, log

from tierlab.common.errors import TierlabError, TraceError
from tierlab.traces.model.families import UnknownFamily
from tierlab.traces.model.spec import spec_from_config

MATMUL_OPS = ("aten.mm", "aten.bmm", "aten.matmul", "aten.baddbmm", "aten.addmm", "aten.einsum")
TOLERANCE = 0.005          # "within 0.5%" (the target)
TIME_LIMIT_S = 300         # one type's capture at most (a hang is a row, not a stuck benchmark)
START, END = "<!-- coverage:start -->", "<!-- coverage:end -->"


class _Slow(Exception):
    pass


def _alarm(signum, frame):
    raise _Slow()


def one(model_type: str, tmp: Path) -> dict:
    from tierlab.traces.capture import capture_trace
    from tierlab.traces.capture.census import default_config, meta_param_count
    from tierlab.traces.workload.run import RunConfig

    row: dict = {"type": model_type}
    try:
        config = default_config(model_type)
        row["hf_params"] = meta_param_count(config)
    except Exception as err:        # Transformers' own default config does not build: not counted
        row.update(path="not buildable", reason=f"{type(err).__name__}: {str(err).splitlines()[0][:160]}")
        return row
    row["architecture"] = config["architectures"][0]
    try:
        try:
            spec = spec_from_config(config, name=model_type)
            row.update(path="hand", family=spec.family, tierlab_params=spec.param_count(),
                       kv_bytes_per_token_bf16=spec.kv_bytes_per_token("bf16"))
        except UnknownFamily:
            run = RunConfig(prompt=2, generate=1, batch=1)
            out = tmp / f"{model_type}.trace"
            capture_trace(config, run, out, name=model_type, force=True, why="no hand lowering")
            from tierlab.traces.format.reader import open_trace

            m = open_trace(out).manifest
            row.update(path="capture", tierlab_params=m["capture"]["params"],
                       unmapped_ops=m["capture"].get("unmapped_ops", []),
                       unread_weights=len(m["capture"].get("unread_weights", [])))
            shutil.rmtree(out, ignore_errors=True)
    except TraceError as err:       # the writer caught the lowering writing outside a tensor: a tierlab bug
        row.update(path="traceback", reason=f"TraceError: {err}"[:200])
    except TierlabError as err:
        row.update(path="refused", reason=str(err).split(": ", 1)[-1][:200])
    except _Slow:
        row.update(path="refused", reason=f"capture over {TIME_LIMIT_S} s")
    except Exception:
        row.update(path="traceback", reason=traceback.format_exc().strip().splitlines()[-1][:200])
    if "tierlab_params" in row:
        diff = row["tierlab_params"] - row["hf_params"]
        row["exact"] = diff == 0
        row["rel_diff"] = diff / row["hf_params"] if row["hf_params"] else 0.0
    return row


def summary(rows: list[dict]) -> dict:
    built = [r for r in rows if r["path"] != "not buildable"]
    exact = [r for r in built if r.get("exact")]
    close = [r for r in built if "rel_diff" in r and not r["exact"] and abs(r["rel_diff"]) <= TOLERANCE]
    by = {p: sum(1 for r in built if r["path"] == p) for p in ("hand", "capture", "refused", "traceback")}
    cap = [r for r in exact if r["path"] == "capture"]
    matmul = [r["type"] for r in cap if any(o["op"] in MATMUL_OPS for o in r.get("unmapped_ops") or [])]
    return {"types": len(rows), "buildable": len(built), "read_exact": len(exact), "read_within_0.5pct": len(close),
            "capture_nothing_unmapped": sum(1 for r in cap if not r.get("unmapped_ops")),
            "capture_with_unread_weights": [r["type"] for r in cap if r.get("unread_weights")],
            # a matrix product no op maps: attention the model computes itself, or a weight used outside a
            # module (its bytes are not in the trace)
            "capture_unmapped_matmul": matmul,
            "read_share": round((len(exact) + len(close)) / max(1, len(built)), 4), "paths": by,
            "exact_by_path": {p: sum(1 for r in exact if r["path"] == p) for p in ("hand", "capture")},
            "tracebacks": [r["type"] for r in built if r["path"] == "traceback"]}


def table(rows: list[dict], head: dict) -> str:
    s = summary(rows)
    lines = [START, "",
             f"Transformers {head['transformers']}, {s['types']} decoder-only causal-LM types, {s['buildable']} "
             f"buildable from their default config; read with exact parameters: {s['read_exact']} "
             f"({s['exact_by_path']['hand']} by hand, {s['exact_by_path']['capture']} by capture), within 0.5%: "
             f"{s['read_within_0.5pct']}, refused: {s['paths']['refused']}, tracebacks: {s['paths']['traceback']} "
             f"({100 * s['read_share']:.1f}% read). Of the captures, {s['capture_nothing_unmapped']} ran nothing "
             f"tierlab does not map; {len(s['capture_unmapped_matmul'])} ran a matrix product no op maps "
             f"(attention the model computes itself, or a weight used outside its module: those bytes are not in "
             f"the trace): {', '.join(s['capture_unmapped_matmul']) or 'none'}; "
             f"{len(s['capture_with_unread_weights'])} have weights no op reads (besides unrouted experts): "
             f"{', '.join(s['capture_with_unread_weights']) or 'none'}. "
             f"`python benchmarks/bench_coverage.py --docs`, {head['date']}, {head['cpu']}, {head['seconds']:.0f} s.",
             "",
             "| type | path | Transformers params | tierlab params | note |", "|---|---|---|---|---|"]
    for r in rows:
        if r["path"] == "not buildable":
            continue
        hf, tl = r.get("hf_params"), r.get("tierlab_params")
        if r["path"] in ("hand", "capture"):
            note = "exact" if r.get("exact") else f"{100 * r['rel_diff']:+.4f}%"
            if r["path"] == "hand":
                note += f" (family {r['family']})"
            if r.get("unread_weights"):
                note += f"; {r['unread_weights']} weight(s) no op reads"
            if r.get("unmapped_ops"):
                note += "; unmapped: " + ", ".join(f"{o['op']} in {o['module']}" for o in r["unmapped_ops"][:3])
        else:
            note = r.get("reason", "").replace("|", "/")
        lines.append(f"| `{r['type']}` | {r['path']} | {hf:,} | {f'{tl:,}' if tl is not None else '-'} | {note} |")
    off = [r for r in rows if r["path"] == "not buildable"]
    if off:
        lines += ["", "Not buildable by Transformers from its own default config (not counted): "
                  + "; ".join(f"`{r['type']}` ({r['reason'][:80]})" for r in off) + "."]
    return "\n".join(lines + ["", END])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", help="comma-separated model types (default: every decoder-only type)")
    ap.add_argument("--docs", action="store_true", help="write the table into docs/models.md")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    try:
        import transformers
    except ImportError:
        raise SystemExit("bench_coverage: needs the optional extra 'capture' (PyTorch and Transformers): "
                         "pip install -e '.[capture]'") from None

    transformers.logging.set_verbosity_error()
    from tierlab.traces.capture.census import decoder_only_types

    types = args.types.split(",") if args.types else list(decoder_only_types())
    tmp = Path(tempfile.mkdtemp(prefix="bench-coverage-"))
    signal.signal(signal.SIGALRM, _alarm)
    rows, t0 = [], time.perf_counter()
    try:
        for t in types:
            s0 = time.perf_counter()
            signal.alarm(TIME_LIMIT_S)
            try:
                row = one(t, tmp)
            finally:
                signal.alarm(0)
            row["seconds"] = round(time.perf_counter() - s0, 2)
            log(f"{t}: {row['path']} {row.get('reason', '')[:100]}")
            rows.append(row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    seconds = time.perf_counter() - t0
    from _common import machine

    head = {"transformers": transformers.__version__, "date": time.strftime("%Y-%m-%d"),
            "cpu": f"{machine()['cpu']} ({machine()['cores']} cores)", "seconds": seconds}
    if args.docs:
        doc = REPO / "docs" / "models.md"
        text = doc.read_text()
        new = table(rows, head)
        text = text[:text.index(START)] + new + text[text.index(END) + len(END):] if START in text \
            else text.rstrip("\n") + "\n\n## Coverage of Transformers' decoder-only models\n\n" + new + "\n"
        from tierlab.common.atomic import atomic_path

        with atomic_path(doc, force=True) as p:
            p.write_text(text)
    emit("bench_coverage", {"transformers": transformers.__version__, "seconds": round(seconds, 1),
                            "summary": summary(rows), "types": rows})


if __name__ == "__main__":
    main()
