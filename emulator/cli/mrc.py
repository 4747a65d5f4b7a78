"""``tierlab mrc``: exact miss-ratio curves of one tier of a chip, from a trace, in one pass.

The tier sees the trace's accesses at its own block size, in issue order (loads and stores alike:
with write-allocate and store-hit recency update, the replay's defaults, both are references to the
LRU stack). Accesses to tensors homed in a nearer tier never reach it and are left out (placement
as the replay computes it); tensors homed in the tier itself are kept, so for a scratchpad or
memory tier the curve answers "what if this capacity were a cache of everything reaching it".
Nearer *cache* tiers are not simulated: the curve is that of the tier as the first cache of the
traffic that reaches its level. Every row is exact; OPT is fully associative Belady MIN.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor

import click
import numpy as np

from emulator.engine.blocks import BlockExpander, tensor_addresses
from emulator.cli.options import force_option, json_option
from emulator.analysis.mrc import LruDistances, SetLruDistances
from emulator.analysis.mrc_opt import opt_misses
from common.errors import UsageError

DEFAULT_OPT_LIMIT_BLOCKS = 1 << 24   # OPT holds the stream in memory: ~24 bytes per block access


def _sizes(text: str | None) -> list[int]:
    from emulator.chip.units import parse_quantity

    if not text:
        return []
    return [int(parse_quantity(s.strip(), "size", field="--sizes")) for s in text.split(",") if s.strip()]


def _default_rows(tier, max_ways: int | None) -> list[int]:
    if tier.ways is None:                           # powers of two around the tier's capacity
        cap = tier.capacity_bytes
        top = 1 << (4 * cap - 1).bit_length()
        caps = {1 << k for k in range(top.bit_length()) if cap // 1024 <= 1 << k <= 4 * cap} | {cap}
        return sorted(c for c in caps if c >= tier.block_bytes and c % tier.block_bytes == 0)
    unit = tier.n_sets * tier.block_bytes
    ways = {1 << k for k in range(max_ways.bit_length()) if 1 << k <= max_ways} | {tier.ways}
    return sorted(w * unit for w in ways)


def tier_mrc(trace, chip, tier_name: str, *, sizes=(), max_ways: int | None = None, opt: bool | None = None,
             opt_limit_blocks: int = DEFAULT_OPT_LIMIT_BLOCKS, progress: bool = False):
    """Miss ratios of tier ``tier_name`` of ``chip`` at every row capacity.

    Returns ``(result, curves)``: a JSON-able dict (the ``--json`` output) and the curve objects
    ``(fully-associative MissRatioCurve, per-set MissRatioCurve or None, {capacity: OPT misses})``.

    ``opt``: True computes the fully-associative OPT misses of every row (an error if the stream
    is longer than ``opt_limit_blocks``), False skips it, None computes it when the stream fits.
    ``max_ways`` (set-associative tiers) bounds the per-set curve; default twice the tier's ways.
    """
    names = [t.name for t in chip.tiers]
    if tier_name not in names:
        raise UsageError(f"unknown tier {tier_name!r}; chip {chip.name} has {', '.join(names)}", field="--tier")
    idx = names.index(tier_name)
    tier = chip.tiers[idx]
    include = None
    if idx > 0:
        from emulator.chip.placement import place

        include = place(chip, trace.tensors, align_bytes=trace.alignment or 1).home >= idx
    n_sets = None if tier.ways is None else tier.n_sets
    if n_sets is not None:
        max_ways = max_ways or 2 * tier.ways
    rows = sorted(set(sizes) or set(_default_rows(tier, max_ways)))
    for c in rows:
        if c <= 0 or c % tier.block_bytes:
            raise UsageError(f"size {c} B is not a positive multiple of the {tier.block_bytes} B block",
                             field="--sizes")

    # the fully-associative curve tracks only as deep as the largest row: memory stays bounded by
    # that capacity, not by the trace's footprint (a model's weights are ~10^8 distinct blocks)
    limit_blocks = max(max(rows), tier.capacity_bytes) // tier.block_bytes
    full = LruDistances(limit=limit_blocks)
    per_set = SetLruDistances(n_sets, max_ways) if n_sets is not None else None
    kept, opt_note = [], None
    expander = BlockExpander(tensor_addresses(trace.tensors), tier.block_bytes, include=include)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=trace.n_accesses, unit="row", file=sys.stderr, desc=f"mrc {tier_name}")
    if opt is not False:                            # descriptors are coarse: counting blocks is cheap
        total = sum(expander.count(*(batch.column(c).to_numpy(zero_copy_only=False) for c in
                                     ("tensor_id", "offset", "nbytes", "count", "stride")))
                    for batch in trace.iter_accesses(1 << 18))
        if total > opt_limit_blocks:
            if opt:
                raise UsageError(f"OPT needs the whole stream in memory: {total} blocks exceed --opt-limit "
                                 f"{opt_limit_blocks} (raise it or pass --no-opt)", field="--opt")
            kept, opt_note = None, f"OPT skipped: {total} blocks exceed --opt-limit {opt_limit_blocks}"

    # the two curves are independent and their kernels release the GIL: the per-set one runs on
    # a second core while this thread computes the fully-associative one
    with ThreadPoolExecutor(1) as pool:
        for batch in trace.iter_accesses(1 << 18):
            for blocks, _ in expander.expand_batch(batch):
                other = pool.submit(per_set.update, blocks) if per_set is not None else None
                full.update(blocks)
                if other is not None:
                    other.result()
                if opt is not False and kept is not None:
                    kept.append(blocks.copy())
            if bar is not None:
                bar.update(batch.num_rows)
    if bar is not None:
        bar.close()

    curve = full.curve(tier.block_bytes)
    set_curve = per_set.curve(tier.block_bytes) if per_set is not None else None
    opt_by_row: dict[int, int] = {}
    if opt is False:
        opt_note = "not computed (--no-opt)"
    elif kept is not None:
        stream = np.concatenate(kept) if kept else np.empty(0, np.int64)
        got = opt_misses(stream, [c // tier.block_bytes for c in rows])
        opt_by_row = {c: got[c // tier.block_bytes] for c in rows}
        opt_note = "OPT = Belady MIN, fully associative, no bypass"

    n = curve.accesses

    def ratio(m):
        return None if m is None else (m / n if n else 0.0)

    out_rows = []
    for c in rows:
        set_m = None
        if set_curve is not None:
            unit = n_sets * tier.block_bytes
            if c % unit == 0 and c // unit <= max_ways:
                set_m = set_curve.misses(c)
        lru_m = curve.misses(c)
        out_rows.append({
            "capacity_bytes": c,
            "lru_misses": lru_m, "lru_miss_ratio": ratio(lru_m),
            "set_lru_misses": set_m, "set_lru_miss_ratio": ratio(set_m),
            "opt_misses": opt_by_row.get(c), "opt_miss_ratio": ratio(opt_by_row.get(c)),
        })
    return {
        "trace": str(trace.path), "chip": chip.name, "tier": tier.name, "tier_index": idx,
        "tier_capacity_bytes": tier.capacity_bytes, "block_bytes": tier.block_bytes,
        "ways": tier.ways, "n_sets": n_sets, "max_ways": max_ways,
        "accesses": n, "tracked_blocks": limit_blocks,
        "distinct_blocks": curve.cold_misses,       # None when more than tracked_blocks
        "footprint_bytes": None if curve.cold_misses is None else curve.cold_misses * tier.block_bytes,
        "rows": out_rows, "opt": opt_note,
        "stream": ("every access" if idx == 0 else
                   f"accesses to tensors homed at or beyond {tier.name}; nearer tiers not simulated"),
    }, (curve, set_curve, opt_by_row)


def _format(result: dict) -> str:
    from emulator.chip.units import format_size

    ways = result["ways"]
    head = (f"{result['chip']} / {result['tier']}: {format_size(result['tier_capacity_bytes'])}, "
            f"{result['block_bytes']} B blocks, "
            + ("fully associative" if ways is None else f"{ways}-way, {result['n_sets']} sets")
            + f"; {result['accesses']:,} block accesses, "
            + (f"{result['distinct_blocks']:,} distinct ({format_size(result['footprint_bytes'])})"
               if result["distinct_blocks"] is not None else
               f"footprint above {format_size(result['tracked_blocks'] * result['block_bytes'])}"))
    cols = ["capacity", "LRU full", f"LRU {result['n_sets']} sets" if ways else None, "OPT full", ""]
    table = []
    for r in result["rows"]:
        pct = [None if x is None else f"{100 * x:.3f}%" for x in
               (r["lru_miss_ratio"], r["set_lru_miss_ratio"], r["opt_miss_ratio"])]
        mark = "<- tier" if r["capacity_bytes"] == result["tier_capacity_bytes"] else ""
        row = [format_size(r["capacity_bytes"]), pct[0], pct[1] if ways else None, pct[2] or "-", mark]
        table.append([x if x is not None else "-" for x, c in zip(row, cols) if c is not None])
    cols = [c for c in cols if c is not None]
    widths = [max(len(c), *(len(t[i]) for t in table)) if table else len(c) for i, c in enumerate(cols)]
    lines = [head, "miss ratio by capacity (" + (result["opt"] or "") + ")",
             "  ".join(c.rjust(w) for c, w in zip(cols, widths)).rstrip()]
    lines += ["  ".join(x.rjust(w) for x, w in zip(t, widths)).rstrip() for t in table]
    return "\n".join(lines)


def write_plot(result: dict, curves, path, *, force: bool = False) -> None:
    """Miss ratio against capacity (log scale) as a PNG/SVG/PDF (by suffix), written atomically."""
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'tierlab[plot]'", field="--plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from emulator.chip.units import format_size
    from common.atomic import atomic_path

    curve, set_curve, opt_by_row = curves
    n = max(curve.accesses, 1)
    caps_b, misses = curve.curve()
    pick = np.unique(np.geomspace(1, max(len(caps_b) - 1, 1), 2000).astype(np.int64))
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    xs, ys = caps_b[pick], misses[pick] / n
    right = max([r["capacity_bytes"] for r in result["rows"]] + [result["tier_capacity_bytes"]])
    if right > xs[-1]:                              # flat beyond the footprint: every miss is cold
        xs, ys = np.append(xs, right), np.append(ys, ys[-1])
    ax.step(xs, ys, where="post", label="LRU, fully associative")
    if set_curve is not None:
        c, m = set_curve.curve()
        ax.plot(c[1:], m[1:] / n, "o-", ms=3, label=f"LRU, {set_curve.n_sets} sets (per way count)")
    if opt_by_row:
        ks = sorted(opt_by_row)
        ax.plot(ks, [opt_by_row[k] / n for k in ks], "s--", ms=4, label="OPT (Belady), fully associative")
    ax.axvline(result["tier_capacity_bytes"], color="grey", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: format_size(int(x))))
    ax.set_xlabel("capacity (bytes)")
    ax.set_ylabel("miss ratio")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{result['chip']} / {result['tier']} ({result['block_bytes']} B blocks)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    suffix = str(path).rsplit(".", 1)[-1] if "." in str(path) else "png"
    with atomic_path(path, force=force) as tmp:
        fig.savefig(tmp, format=suffix)
    plt.close(fig)


@click.command("mrc")
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@click.option("--tier", "tier_name", required=True, help="Tier of the chip to study.")
@click.option("--chip", "chip_name", default="h100", show_default=True, help="Chip preset name or TOML file.")
@click.option("--sizes", help="Capacities for the table, e.g. 1MiB,2MiB,4MiB (default: around the tier's).")
@click.option("--max-ways", type=click.IntRange(1, 4096), help="Deepest way count of the per-set curve "
              "(set-associative tiers; default 2x the tier's ways).")
@click.option("--opt/--no-opt", default=None, help="Compute the OPT curve (default: when the stream fits --opt-limit).")
@click.option("--opt-limit", type=click.IntRange(1), default=DEFAULT_OPT_LIMIT_BLOCKS, show_default=True,
              help="Longest block stream OPT may hold in memory (blocks).")
@click.option("--plot", type=click.Path(), help="Write the curve as an image (png/svg/pdf; needs matplotlib).")
@force_option
@json_option
def command(trace_path, tier_name, chip_name, sizes, max_ways, opt, opt_limit, plot, force, as_json):
    """Exact LRU (and OPT) miss-ratio curve of one tier, every capacity in one pass."""
    from emulator.chip.chipfile import load_chip
    from common.atomic import check_output
    from traces.reader import open_trace

    if plot:
        check_output(plot, force=force)
    chip = load_chip(chip_name)
    trace = open_trace(trace_path)
    result, curves = tier_mrc(trace, chip, tier_name, sizes=_sizes(sizes), max_ways=max_ways, opt=opt,
                      opt_limit_blocks=opt_limit, progress=sys.stderr.isatty())
    if plot:
        write_plot(result, curves, plot, force=force)
    click.echo(json.dumps(result, indent=2) if as_json else _format(result))
