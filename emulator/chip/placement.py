"""Placement: give every tensor of a trace a home tier on a chip.

Semantics (the order matters, since tiers fill up):

1. Only ``memory`` and ``scratchpad`` tiers can be homes; a ``cache`` tier never is.
2. Rules pin tensors. The rules tried are ``extra_rules`` (e.g. from the command line) first, then
   the chip file's ``[[placement]]`` rules; for each tensor the first rule that matches wins, so a
   rule given for a run overrides the chip's own. A rule matches when all its given conditions hold:
   ``kind`` equals the tensor kind, ``name`` is an fnmatch glob on the tensor name, ``layers`` is an
   inclusive range holding the tensor's layer.
3. Pinned tensors are placed first, in tensor_id order, so a rule such as "KV in SRAM" is not
   defeated by weights that first-fit filled the SRAM earlier. A pinned tensor whose tier has no
   room raises :class:`CapacityError`, unless its rule has ``spill = true``: then it goes first-fit
   to the home tiers farther than the rule's tier.
4. Every other tensor goes first-fit: the nearest home tier with room, in tensor_id order.
5. A tensor that fits nowhere raises CapacityError with what was needed and what was free.
6. ``lent_bytes[i]``: a ``memory`` tier with ``lend = true`` lends the capacity left after placement
   as a cache for tensors homed farther away, rounded down to whole sets (``block × ways``; whole
   blocks when fully associative). 0 for every other tier.

Sizes are the tensors' ``nbytes`` rounded up to the trace alignment if given (``align_bytes``),
because aligned tensors really occupy that much of a tier. Units: bytes.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tierlab.chip.hierarchy import Chip, PlacementRule
from tierlab.chip.units import format_size
from tierlab.common.errors import CapacityError, ConfigError, UsageError

_REQUIRED = ("tensor_id", "name", "kind", "layer", "nbytes")


def parse_rule(text: str, *, field: str = "place") -> PlacementRule:
    """A placement rule from the command line: ``TIER[:COND,...]`` where COND is ``kind=K``,
    ``name=GLOB``, ``layers=A-B`` (or ``layers=A``) or ``spill``; e.g. ``sram:kind=kv,spill`` or
    ``ddr:kind=weight,name=*.experts.*``. The tier name is checked against the chip by :func:`place`."""
    tier, _, conds = str(text).partition(":")
    if not tier:
        raise UsageError(f"expected TIER[:kind=K,name=GLOB,layers=A-B,spill], got {text!r}", field=field)
    kw: dict = {}
    for cond in filter(None, conds.split(",")):
        key, eq, value = cond.partition("=")
        if key == "spill" and not eq:
            kw["spill"] = True
        elif key in ("kind", "name") and eq and value and key not in kw:
            kw[key] = value
        elif key == "layers" and eq and "layers" not in kw:
            a, dash, b = value.partition("-")
            try:
                first, last = int(a), int(b if dash else a)
            except ValueError:
                first, last = 1, 0
            if first > last:
                raise UsageError(f"expected layers=A-B with integers A <= B, got {cond!r}", field=field)
            kw["layers"] = (first, last)
        else:
            raise UsageError(f"unknown or repeated condition {cond!r}; expected kind=K, name=GLOB, "
                             f"layers=A-B or spill", field=field)
    return PlacementRule(tier=tier, **kw)


@dataclass(frozen=True)
class Placement:
    """Where each tensor lives. Arrays are indexed by tensor_id (``home``) or by tier index."""

    chip: str
    tier_names: tuple[str, ...]
    home: np.ndarray             # int32 per tensor_id: home tier index
    bytes_by_tier: np.ndarray    # int64 per tier: bytes of tensors homed there (aligned sizes)
    capacity_bytes: np.ndarray   # int64 per tier
    lent_bytes: np.ndarray       # int64 per tier: leftover capacity a lending memory tier caches with
    tensors_by_tier: np.ndarray  # int64 per tier: number of tensors homed there
    bytes_by_tier_kind: dict     # {tier name: {tensor kind: bytes}}
    pinned: int                  # tensors placed by a rule (without spilling)

    @property
    def free_bytes(self) -> np.ndarray:
        return self.capacity_bytes - self.bytes_by_tier

    def summary(self) -> dict:
        """JSON-able summary: per tier capacity, placed bytes, free and lent bytes, tensors, by kind."""
        return {
            "chip": self.chip,
            "pinned_by_rule": int(self.pinned),
            "tiers": [
                {
                    "name": name,
                    "capacity_bytes": int(self.capacity_bytes[i]),
                    "placed_bytes": int(self.bytes_by_tier[i]),
                    "free_bytes": int(self.free_bytes[i]),
                    "lent_bytes": int(self.lent_bytes[i]),
                    "tensors": int(self.tensors_by_tier[i]),
                    "bytes_by_kind": {k: int(v) for k, v in sorted(self.bytes_by_tier_kind.get(name, {}).items())},
                }
                for i, name in enumerate(self.tier_names)
            ],
        }

    def format(self) -> str:
        """An aligned table, one line per tier."""
        head = ("tier", "capacity", "placed", "free", "lent", "tensors", "by kind")
        rows = [head]
        for t in self.summary()["tiers"]:
            kinds = ", ".join(f"{k} {format_size(v)}" for k, v in t["bytes_by_kind"].items()) or "-"
            rows.append((t["name"], format_size(t["capacity_bytes"]), format_size(t["placed_bytes"]),
                         format_size(t["free_bytes"]), format_size(t["lent_bytes"]), str(t["tensors"]), kinds))
        widths = [max(len(r[c]) for r in rows) for c in range(len(head) - 1)]
        lines = []
        for r in rows:
            cells = [r[0].ljust(widths[0])] + [r[c].rjust(widths[c]) for c in range(1, len(head) - 1)] + [r[-1]]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)

    __str__ = format


def _column(table: pa.Table, name: str) -> np.ndarray:
    """A column as numpy (strings as an object array), dictionary-encoded strings decoded."""
    col = table.column(name).combine_chunks()
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return np.array(col.to_pylist(), dtype=object)
    return col.to_numpy(zero_copy_only=False)


def _first_rule(rules, names, kinds: list[str], layers: np.ndarray) -> np.ndarray:
    """For each tensor, the index of the first rule it matches (-1: none): a rule matches when
    each of its kind, name pattern (``fnmatch``, case-sensitive) and layer range that is given does.
    ``names()``: the tensors' names (read only if a rule has a name pattern)."""
    which = np.full(len(kinds), -1, np.int64)
    if not rules or not len(kinds):
        return which
    kind_arr = np.asarray(kinds, dtype=object)
    for k, r in enumerate(rules):
        m = which < 0
        if r.kind is not None:
            m &= kind_arr == r.kind
        if r.layers is not None:
            m &= (layers >= r.layers[0]) & (layers <= r.layers[1])
        idx = np.flatnonzero(m)
        if r.name is not None:
            idx = idx[np.array([fnmatch.fnmatchcase(names()[i], r.name) for i in idx.tolist()], bool)]
        which[idx] = k
    return which


def place(chip: Chip, tensors: pa.Table, extra_rules=(), *, align_bytes: int = 1) -> Placement:
    """Home every tensor of ``tensors`` (TENSORS_SCHEMA columns) on ``chip``; see the module doc."""
    for col in _REQUIRED:
        if col not in tensors.column_names:
            raise ConfigError(f"missing column {col!r}", file="tensors.arrow", field=col)
    names_t = [t.name for t in chip.tiers]
    homes = [i for i, t in enumerate(chip.tiers) if t.managed in ("memory", "scratchpad")]
    rules = tuple(extra_rules) + tuple(chip.placement)
    for k, r in enumerate(rules):
        if r.tier not in names_t:
            raise ConfigError(f"unknown tier {r.tier!r}; expected one of {', '.join(names_t)}",
                              field=f"placement rule {k}")
        if chip.tiers[names_t.index(r.tier)].managed == "cache":
            raise ConfigError(f"a 'cache' tier cannot be a home, got {r.tier!r}", field=f"placement rule {k}")

    ids = _column(tensors, "tensor_id").astype(np.int64)
    n = len(ids)
    if n and (ids.min() < 0 or ids.max() != n - 1 or len(np.unique(ids)) != n):
        raise ConfigError("tensor ids must be 0..n-1, each once", file="tensors.arrow", field="tensor_id")
    order = np.argsort(ids, kind="stable")
    kinds = [str(x) for x in np.asarray(_column(tensors, "kind"))[order]]
    named: list = []

    def names() -> list[str]:
        """The tensors' names by id (read when a rule or a message needs them)."""
        if not named:
            named.append([str(x) for x in np.asarray(_column(tensors, "name"))[order]])
        return named[0]
    layers = _column(tensors, "layer").astype(np.int64)[order]
    align = max(int(align_bytes), 1)
    sizes = (_column(tensors, "nbytes").astype(np.int64)[order] + align - 1) // align * align

    capacity = np.array([t.capacity_bytes for t in chip.tiers], dtype=np.int64)
    used = np.zeros(len(chip.tiers), dtype=np.int64)
    count = np.zeros(len(chip.tiers), dtype=np.int64)
    home = np.full(n, -1, dtype=np.int32)
    by_kind: dict[str, dict[str, int]] = {}

    def put(tid: int, tier: int) -> None:
        home[tid] = tier
        used[tier] += sizes[tid]
        count[tier] += 1
        d = by_kind.setdefault(names_t[tier], {})
        d[kinds[tid]] = d.get(kinds[tid], 0) + int(sizes[tid])

    def first_fit(tid: int, candidates, why: str) -> None:
        for t in candidates:
            if used[t] + sizes[tid] <= capacity[t]:
                put(tid, t)
                return
        free = ", ".join(f"{names_t[t]} {format_size(int(capacity[t] - used[t]))}" for t in candidates) or "no home tier"
        raise CapacityError(f"tensor {names()[tid]!r} ({kinds[tid]}, {format_size(int(sizes[tid]))}) fits in no "
                            f"{why}; free: {free}", field="placement")

    pinned = 0
    which = _first_rule(rules, names, kinds, layers)
    for tid in np.flatnonzero(which >= 0).tolist():
        rule = rules[which[tid]]
        t = names_t.index(rule.tier)
        if used[t] + sizes[tid] <= capacity[t]:
            put(tid, t)
            pinned += 1
        elif rule.spill:
            first_fit(tid, [h for h in homes if h > t], f"home tier beyond {rule.tier!r} (its rule spills)")
        else:
            raise CapacityError(f"tensor {names()[tid]!r} ({kinds[tid]}, {format_size(int(sizes[tid]))}) is pinned "
                                f"to {rule.tier!r} by a rule, but only {format_size(int(capacity[t] - used[t]))} "
                                f"of {format_size(int(capacity[t]))} is free", field="placement")
    rest = np.flatnonzero(which < 0)
    if len(rest) and homes and used[homes[0]] + int(sizes[rest].sum()) <= capacity[homes[0]]:
        h = homes[0]                    # first fit puts every one in the first home: at once
        home[rest] = h
        used[h] += int(sizes[rest].sum())
        count[h] += len(rest)
        d = by_kind.setdefault(names_t[h], {})
        kind_arr = np.asarray(kinds, dtype=object)[rest]
        for k in dict.fromkeys(kind_arr.tolist()):
            d[k] = d.get(k, 0) + int(sizes[rest][kind_arr == k].sum())
    else:
        for tid in rest.tolist():
            first_fit(tid, homes, "home tier")

    lent = np.zeros(len(chip.tiers), dtype=np.int64)
    for i, t in enumerate(chip.tiers):
        if t.managed == "memory" and t.lend:
            unit = t.block_bytes * (t.ways or 1)
            lent[i] = (capacity[i] - used[i]) // unit * unit
    return Placement(chip=chip.name, tier_names=tuple(names_t), home=home, bytes_by_tier=used,
                     capacity_bytes=capacity, lent_bytes=lent, tensors_by_tier=count,
                     bytes_by_tier_kind=by_kind, pinned=pinned)
