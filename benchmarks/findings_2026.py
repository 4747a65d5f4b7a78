"""The 2026 candidate systems side by side (docs/findings/chips-2026.md): for Llama-3.1-70B, DeepSeek-R1 and
gpt-oss-120b, each system at batch 1 (``tierlab run``) and at a serving point (``tierlab throughput``
at one concurrency), in tokens/s per user, tokens/s per chip, J/token and $/Mtok, with the bound.

Every figure is the calibrated model's (``per_token.*_calibrated``, the serving curve's point), made by
the command printed beside it, through the Python API (``tierlab.run``, ``tierlab.throughput``: the
same functions as the CLI). A setup that does not fit its system's memory is listed with the reason.

    python benchmarks/findings_2026.py                 # the Markdown tables on stdout
    python benchmarks/findings_2026.py --json          # the rows
    python benchmarks/findings_2026.py --from rows.json   # the tables of an earlier --json run
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tierlab.common.errors import TierlabError  # noqa: E402

# model: (display name, trace options); the weights each is deployed in
MODELS = {
    "llama-3.1-70b": ("Llama-3.1-70B", {"weights": "bf16", "kv": "bf16"}),
    "deepseek-r1": ("DeepSeek-R1 (671B MoE)", {"weights": "fp8", "kv": "fp8"}),
    "gpt-oss-120b": ("gpt-oss-120b (MoE)", {"weights": "mxfp4", "kv": "bf16"}),
}
# system: parallelism used (tensor-parallel over one node, EP over the same devices for MoE)
SYSTEMS = {
    "dgx-h100": {"tp": 8}, "dgx-b200": {"tp": 8}, "gb200-nvl72": {"tp": 8}, "mi300x-8": {"tp": 8},
    "mi355x-8": {"tp": 8}, "gaudi3-8": {"tp": 8}, "trn2-16": {"tp": 16}, "tpu-v7-4x4x4": {"tp": 8},
    "tpu-v6e-256": {"tp": 32}, "sn40l-16": {"tp": 16}, "cs-3": {"tp": 1},
}
MOE = ("deepseek-r1", "gpt-oss-120b")
CONTEXT, INPUT, OUTPUT, CONCURRENCY = 1024, 1000, 1000, 32


def command(kind: str, model: str, system: str, par: dict, opts: dict) -> str:
    p = " ".join(f"--{k} {v}" for k, v in par.items())
    o = " ".join(f"--{k} {v}" for k, v in opts.items())
    if kind == "run":
        return f"tierlab run {model} --system {system} {p} {o} --context {CONTEXT} --generate 2"
    return (f"tierlab throughput {model} --system {system} {p} {o} --input {INPUT} --output {OUTPUT} "
            f"--concurrency {CONCURRENCY}")


def one(model: str, system: str) -> dict:
    import tierlab

    _, opts = MODELS[model]
    par = dict(SYSTEMS[system])
    if model in MOE and par["tp"] > 1:
        par["ep"] = par["tp"]
    row = {"model": model, "system": system, **par, **opts,
           "run_command": command("run", model, system, par, opts),
           "serving_command": command("throughput", model, system, par, opts)}
    chips = par["tp"]
    try:
        d = tierlab.run(model, system=system, context=CONTEXT, generate=2, **par, **opts).to_dict()
    except TierlabError as err:
        row["reason"] = str(err)
        return row
    pt = d["per_token"]
    sysd = tierlab.load_system(system)
    price = sysd.price.usd_per_hour * chips / sysd.n_chips if sysd.price else None
    tps = pt["tokens_per_s_calibrated"]
    row.update({"batch1_tokens_per_s_per_user": tps, "batch1_tokens_per_s_per_chip": tps / chips,
                "batch1_j_per_token": pt.get("j_per_token", pt["energy_j"]),
                "batch1_j_per_token_dynamic": pt["energy_j"], "energy_basis": pt.get("energy_board_basis"),
                "batch1_bound": pt["bound_calibrated"],
                "batch1_usd_per_mtok": price / 3600 / tps * 1e6 if price else None,
                "collective_share": d["coordination"].get("collective_time_share_calibrated")})
    try:
        c = tierlab.throughput(model, system=system, input=INPUT, output=OUTPUT, concurrency=str(CONCURRENCY),
                                **par, **opts).to_dict()
        pts = c["curve"]
        if pts:
            p = pts[-1]
            row.update({"serving_concurrency": p["concurrency"], "serving_tokens_per_s_per_user": p["tokens_per_s_per_user"],
                        "serving_tokens_per_s_per_chip": p["output_tokens_per_s_per_chip"],
                        "serving_j_per_token": p.get("j_per_token", p["energy_j_per_token"]),
                        "serving_j_per_token_dynamic": p["energy_j_per_token"], "serving_usd_per_mtok": p["usd_per_mtok"]})
        row["kv_limit"] = c.get("max_concurrency")
    except TierlabError as err:
        row["serving_reason"] = str(err)
    return row


def _f(v, fmt="{:,.1f}"):
    return "-" if v is None else fmt.format(v)


def _energy(r: dict, where: str) -> str:
    """Board J/token with the dynamic share beside it; the dynamic alone (marked) where the chip file
    has no ``[power]`` (or a row of an older run has no board figure)."""
    board, dyn = r.get(f"{where}_j_per_token"), r.get(f"{where}_j_per_token_dynamic")
    if board is None:
        return "-"
    if dyn is None or r.get("energy_basis") in (None, "dynamic only"):
        return f"{_f(dyn if dyn is not None else board, '{:.3f}')} (dynamic only)"
    return f"{_f(board, '{:.3f}')} ({_f(dyn, '{:.3f}')})"


def markdown(rows: list[dict]) -> str:
    out = []
    for model, (name, opts) in MODELS.items():
        out += [f"### {name}, {opts['weights']} weights, {opts['kv']} KV", "",
                f"Batch 1 at {CONTEXT} tokens of context; serving: {INPUT} in / {OUTPUT} out, concurrency "
                f"{CONCURRENCY} (or the KV limit, if lower).", "",
                "| system | chips | batch 1 tok/s/user | tok/s/chip | J/token board (dynamic) | $/Mtok | bound | "
                f"collectives | serving tok/s/user | tok/s/chip | J/token board (dynamic) | $/Mtok |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if r["model"] != model:
                continue
            if "reason" in r:
                out.append(f"| {r['system']} | {r['tp']} | does not fit: {r['reason']} | | | | | | | | | |")
                continue
            out.append(
                f"| {r['system']} | {r['tp']} | {_f(r['batch1_tokens_per_s_per_user'])} | "
                f"{_f(r['batch1_tokens_per_s_per_chip'])} | {_energy(r, 'batch1')} | "
                f"{_f(r['batch1_usd_per_mtok'], '{:,.2f}')} | {r['batch1_bound']} | "
                f"{_f(r['collective_share'] and 100 * r['collective_share'], '{:.0f}%')} | "
                + (f"{_f(r.get('serving_tokens_per_s_per_user'))} | {_f(r.get('serving_tokens_per_s_per_chip'))} | "
                   f"{_energy(r, 'serving')} | {_f(r.get('serving_usd_per_mtok'), '{:,.2f}')} |"
                   if "serving_tokens_per_s_per_user" in r else
                   f"{r.get('serving_reason', '-')} | | | |"))
        out += ["", "The commands behind each row:", "", "```sh"]
        out += [line for r in rows if r["model"] == model for line in (r["run_command"], r["serving_command"])]
        out += ["```", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--from", dest="src", default=None, metavar="JSON",
                    help="render the rows of an earlier --json run instead of running them")
    a = ap.parse_args(argv)
    if a.src:
        print(markdown(json.loads(Path(a.src).read_text())["rows"]))
        return 0
    rows = []
    for m in a.models.split(","):
        for s in a.systems.split(","):
            print(f"{m} on {s}", file=sys.stderr)
            rows.append(one(m, s))
    print(json.dumps({"rows": rows}, indent=2) if a.json else markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
