"""``tierlab mrc``: exact miss-ratio curves of one tier of a chip, from a trace, in one pass.

Given a request trace instead (Mooncake ``.jsonl``, Azure or plain ``.csv``, ``.parquet``, each
maybe ``.gz``/``.xz``) and no ``--tier``, the prefix cache's hit curve of the request stream:
:func:`tierlab.kvstream.hitcurve.hit_curve` (``--block-tokens``, ``--capacity`` in tokens, ``--policy``).

The work is :func:`tierlab.analysis.tier_mrc.tier_mrc` (which stream the tier sees, what each row
means); its text is :func:`tierlab.present.mrc.format_mrc` and its plot
:func:`tierlab.present.plots.plot_mrc`.
"""

from __future__ import annotations

import json

import click

from tierlab.cli.options import force_option, json_option

# the library's default (tierlab.api.tier_curves.OPT_LIMIT_BLOCKS, itself the analysis's; a test holds
# them equal): the analysis, and Numba with it, is imported only when the command runs
OPT_LIMIT_BLOCKS = 1 << 24
REQUEST_SUFFIXES = (".jsonl", ".json", ".ndjson", ".csv", ".parquet", ".pq")


def _is_request_trace(path: str) -> bool:
    name = path.lower().removesuffix(".gz").removesuffix(".xz")
    return name.endswith(REQUEST_SUFFIXES)


def _token_counts(text: str) -> list[int]:
    from tierlab.common.errors import UsageError

    out = []
    for s in text.split(","):
        try:
            v = float(s.strip())
        except ValueError:
            raise UsageError(f"{s.strip()!r} is not a number of tokens", field="--capacity") from None
        if not (v > 0 and v == int(v)):
            raise UsageError(f"{s.strip()!r}: expected a whole number of tokens > 0", field="--capacity")
        out.append(int(v))
    return out


def _requests_mrc(trace_path: str, block_tokens: int | None, capacity: str | None, policy: str,
                  as_json: bool) -> None:
    """The prefix hit curve of a request trace, as JSON or a table."""
    from tierlab.kvstream.hitcurve import hit_curve
    from tierlab.kvstream.reader import read_requests

    trace = read_requests(trace_path, block_tokens=block_tokens)
    d = hit_curve(trace, capacities_tokens=_token_counts(capacity) if capacity else None,
                  policy=policy).to_dict()
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    lines = [f"{trace_path}: {d['requests']} requests, {d['input_tokens']} input tokens, "
             f"{d['unique_blocks']} distinct blocks of {d['block_tokens']} tokens; {policy}",
             f"{'capacity (tokens)':>18}  {'hit ratio (tokens)':>18}  {'hit ratio (blocks)':>18}"]
    lines += [f"{p['capacity_tokens']:>18}  {p['hit_ratio_tokens']:>18.4f}  {p['hit_ratio_blocks']:>18.4f}"
              for p in d["curve"]]
    lines.append(f"{'infinite':>18}  {d['max_hit_ratio_tokens']:>18.4f}")
    click.echo("\n".join(lines))


@click.command("mrc")
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@click.option("--tier", "tier_name", help="Tier of the chip to study (a tensor trace; required).")
@click.option("--chip", "chip_name", default="h100", show_default=True, help="Chip preset name or TOML file.")
@click.option("--sizes", help="Capacities for the table, e.g. 1MiB,2MiB,4MiB (default: around the tier's).")
@click.option("--max-ways", type=click.IntRange(1, 4096), help="Deepest way count of the per-set curve "
              "(set-associative tiers; default 2x the tier's ways).")
@click.option("--opt/--no-opt", default=None, help="Compute the OPT curve (default: when the stream fits --opt-limit).")
@click.option("--opt-limit", type=click.IntRange(1), default=OPT_LIMIT_BLOCKS, show_default=True,
              help="Longest block stream OPT may hold in memory (blocks).")
@click.option("--plot", type=click.Path(), help="Write the curve as an image (png/svg/pdf; needs matplotlib).")
@click.option("--block-tokens", type=click.IntRange(1), help="Request trace: tokens per hash-id block (default 512).")
@click.option("--capacity", help="Request trace: cache capacities in tokens, e.g. 1e6,3e6 (default: 24 points "
              "from one block to every distinct block).")
@click.option("--policy", type=click.Choice(["lru", "fifo", "opt"]), default="lru", show_default=True,
              help="Request trace: the prefix cache's policy.")
@force_option
@json_option
def command(trace_path, tier_name, chip_name, sizes, max_ways, opt, opt_limit, plot, block_tokens, capacity,
            policy, force, as_json):
    """Exact LRU (and OPT) miss-ratio curve of one tier, every capacity in one pass; or, given a
    request trace and no --tier, the prefix cache's hit curve."""
    from tierlab.common.errors import UsageError

    if tier_name is None:
        if not _is_request_trace(trace_path):
            raise UsageError("required for a tensor trace (a request trace is .jsonl, .csv or .parquet)",
                             field="--tier")
        if plot:
            raise UsageError("not available for a request trace yet", field="--plot")
        _requests_mrc(trace_path, block_tokens, capacity, policy, as_json)
        return
    if block_tokens is not None or capacity is not None or policy != "lru":
        raise UsageError("--block-tokens, --capacity and --policy are for a request trace (without --tier)",
                         field="--tier")
    from tierlab.api.tier_curves import mrc
    from tierlab.cli.views import show

    show(mrc(trace_path, tier_name, chip_name, sizes=sizes, max_ways=max_ways, opt=opt, opt_limit=opt_limit,
             plot=plot, force=force), as_json)
