"""The text of ``tierlab mrc``: :func:`format_mrc` of :func:`tierlab.analysis.tier_mrc.tier_mrc`'s result."""

from __future__ import annotations

from tierlab.present.format import format_percent, format_size, table


def format_mrc(result: dict) -> str:
    """The text of ``tierlab mrc``: the tier and its stream, then the miss ratio of every row."""
    ways = result["ways"]
    head = (f"{result['chip']} / {result['tier']}: {format_size(result['tier_capacity_bytes'])}, "
            f"{result['block_bytes']} B blocks, "
            + ("fully associative" if ways is None else f"{ways}-way, {result['n_sets']} sets")
            + f"; {result['accesses']:,} block accesses, "
            + (f"{result['distinct_blocks']:,} distinct ({format_size(result['footprint_bytes'])})"
               if result["distinct_blocks"] is not None else
               f"footprint above {format_size(result['tracked_blocks'] * result['block_bytes'])}"))
    cols = ["capacity", "LRU full", f"LRU {result['n_sets']} sets" if ways else None, "OPT full", ""]
    rows = []
    for r in result["rows"]:
        pct = [None if x is None else format_percent(x, 3) for x in
               (r["lru_miss_ratio"], r["set_lru_miss_ratio"], r["opt_miss_ratio"])]
        mark = "<- tier" if r["capacity_bytes"] == result["tier_capacity_bytes"] else ""
        row = [format_size(r["capacity_bytes"]), pct[0], pct[1] if ways else None, pct[2] or "-", mark]
        rows.append([x if x is not None else "-" for x, c in zip(row, cols) if c is not None])
    cols = [c for c in cols if c is not None]
    return table(cols, rows, title=head + "\nmiss ratio by capacity (" + (result["opt"] or "") + ")",
                 align=">" * len(cols), rule=False)
