"""Chip files (TOML) to validated, frozen :class:`tierlab.chip.hierarchy.Chip` objects.

Validated once, here, at the edge; everything downstream trusts the Chip. Every problem is a
:class:`ConfigError` whose text is one line, ``FILE: FIELD: what was expected``, e.g.
``chips/x.toml: tier[1].blok: unknown key; did you mean 'block'?``. Tiers and links are numbered
from 0 (``tier[0]`` is nearest to compute).

Layout (quantities are strings with units, see :mod:`tierlab.chip.units`)::

    name = "h100"
    description = "..."
    [compute]
    flops = { bf16 = "989.4 TFLOP/s", fp8 = "1978.9 TFLOP/s" }   # peak per dtype
    energy = { bf16 = "0.16 pJ", fp8 = "0.1 pJ" }              # per FLOP, same dtypes
    [[tier]]                      # nearest to compute first
    name = "l2"; capacity = "50 MiB"; block = "128 B"; ways = 16   # ways omitted = fully associative
    policy = "lru"; managed = "cache"                              # see POLICIES / MANAGED
    # policy (default lru) and ways apply where the tier caches (a cache, or a memory with lend):
    # elsewhere they have no effect and draw a NoEffectWarning. Every key's default: docs/chip-files.md
    bandwidth = "5.5 TB/s"; read_energy = "0.8 pJ/bit"; write_energy = "0.8 pJ/bit"
    lend = false                  # memory tiers only: lend leftover capacity as a cache
    [tier.pim]                    # optional, memory tiers only
    internal_bandwidth = "13.4 TB/s"; flops = "6 TFLOP/s"; read_energy = "0.55 pJ/bit"
    energy = "1 pJ"; ops = ["linear", "attention"]
    [[link]]                      # exactly one per adjacent pair, in order
    from = "l2"; to = "hbm"; bandwidth = "3.35 TB/s"; energy = "0.3 pJ/bit"
    [[placement]]                 # optional home-tier rules, first match wins
    tier = "sram"; kind = "kv"; name = "*"; layers = [0, 31]; spill = true
    [sources]
    S14 = "AnandTech, NVIDIA at SC23 spec table"
    [price]                       # optional: rental price of one chip (tierlab.cost.price)
    per_hour = "3.00 USD/h"; source = "https://..."; date = "2026-05-01"   # source and date required
    [execution]                   # optional: the calibrated latency (tierlab.cost.organisation)
    kernel_overhead = "1.3 us"; fusion = "none"; overlap = "none"     # defaults "0 s", none, none
    [power]                       # optional: board power, for board energy (energy_j = dynamic + static x time)
    idle = "70 W"; tdp = "700 W"; static = "267 W"; memory_background = "20 W"   # static, memory_background optional
    [reserve]                     # optional: the memory a runtime keeps per device (tierlab.serving.capacity)
    context = "164 MiB"; workspace = "369 MiB"; fragmentation = 0.0   # all optional, default 0

``achievable`` (optional, a number in (0, 1], default 1) in ``[compute]``, a ``[[tier]]`` or a
``[[link]]`` is the fraction of its peak FLOP/s or bandwidth a kernel reaches; like ``[execution]``
it changes only the calibrated latency, never the counts, the energy or the roofline.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import warnings
from dataclasses import asdict, replace
from pathlib import Path

from tierlab.chip.hierarchy import MANAGED, POLICIES, Chip, Price, Compute, Link, PimUnit, PlacementRule, Tier
from tierlab.chip.hierarchy import FUSIONS, OVERLAPS, Execution, Power, Reserve
from tierlab.chip.units import format_size
from tierlab.common.paths import resolve_toml, toml_presets
from tierlab.common.suggest import did_you_mean
from tierlab.chip.tomlfile import FileReader, read_toml, toml_key

# Op kinds a PIM unit may run: the ``kind`` strings of ops.arrow written by the trace generator
# (kernels/: the LM head is a ``linear``; MoE experts are ``linear`` ops with ``expert`` set).
OP_KINDS = ("linear", "attention", "norm", "elementwise", "rotary", "embedding", "kv_append",
            "moe_router", "moe_dispatch", "moe_combine")
# Dtype names of peak FLOP/s and energy per FLOP (those of tierlab.traces.model.dtypes plus tf32; nvfp4 and mxfp4:
# the FP4 tensor-core rate with that block format, see tierlab.chip.compute).
COMPUTE_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp4")

_TOP_KEYS = {"name": True, "description": False, "compute": True, "tier": True, "link": False,
             "placement": False, "sources": False, "price": False}
_COMPUTE_KEYS = {"flops": True, "energy": True}
_TIER_KEYS = {"name": True, "capacity": True, "block": True, "ways": False, "policy": False,
              "managed": True, "bandwidth": True, "read_energy": True, "write_energy": True,
              "lend": False, "pim": False}
_PIM_KEYS = {"internal_bandwidth": True, "flops": True, "read_energy": True, "energy": True, "ops": True}
_LINK_KEYS = {"from": True, "to": True, "bandwidth": True, "energy": True}
_RULE_KEYS = {"tier": True, "kind": False, "name": False, "layers": False, "spill": False}


def _compute(ctx: FileReader, d) -> Compute:
    d = ctx.table(d, "compute", _COMPUTE_KEYS)
    flops, energy = {}, {}
    for key, out, kind, positive in (("flops", flops, "rate", True), ("energy", energy, "energy", False)):
        tab = d[key]
        if not isinstance(tab, dict) or not tab:
            raise ctx.error(f"compute.{key}", "expected a table of dtype = quantity, e.g. { bf16 = ... }")
        for dtype, text in tab.items():
            if dtype not in COMPUTE_DTYPES:
                raise ctx.error(f"compute.{key}.{toml_key(dtype)}", f"unknown dtype; {did_you_mean(dtype, COMPUTE_DTYPES)}")
            out[dtype] = ctx.quantity(text, kind, f"compute.{key}.{dtype}", positive=positive)
    for dtype in flops:
        if dtype not in energy:
            raise ctx.error(f"compute.energy.{dtype}", "missing: every dtype in compute.flops needs an energy per FLOP")
    for dtype in energy:
        if dtype not in flops:
            raise ctx.error(f"compute.flops.{dtype}", "missing: every dtype in compute.energy needs a peak rate")
    return Compute(flop_per_s=flops, energy_j_per_flop=energy,
                   achievable=achievable(ctx, d.get("achievable", 1.0), "compute.achievable"))


def _pim(ctx: FileReader, d, field: str) -> PimUnit:
    d = ctx.table(d, field, _PIM_KEYS)
    ops = d["ops"]
    if not isinstance(ops, list) or not ops:
        raise ctx.error(f"{field}.ops", f"expected a non-empty array of op kinds ({', '.join(OP_KINDS)})")
    for j, op in enumerate(ops):
        if op not in OP_KINDS:
            raise ctx.error(f"{field}.ops[{j}]", f"unknown op kind {op!r}; {did_you_mean(op, OP_KINDS)}")
    if len(set(ops)) != len(ops):
        raise ctx.error(f"{field}.ops", "duplicate op kind")
    return PimUnit(
        internal_bandwidth_bytes_per_s=ctx.quantity(d["internal_bandwidth"], "bandwidth", f"{field}.internal_bandwidth"),
        flop_per_s=ctx.quantity(d["flops"], "rate", f"{field}.flops"),
        read_energy_j_per_byte=ctx.quantity(d["read_energy"], "energy_per_byte", f"{field}.read_energy", positive=False),
        energy_j_per_flop=ctx.quantity(d["energy"], "energy", f"{field}.energy", positive=False),
        op_kinds=tuple(ops),
    )


DEFAULT_POLICY = "lru"


class NoEffectWarning(UserWarning):
    """A chip-file key given where it has no effect (the CLI prints it as one line)."""


def _tier(ctx: FileReader, d, i: int) -> Tier:
    f = f"tier[{i}]"
    d = ctx.table(d, f, _TIER_KEYS)
    name = ctx.string(d["name"], f"{f}.name")
    managed = ctx.choice(d["managed"], f"{f}.managed", MANAGED)
    policy = ctx.choice(d.get("policy", DEFAULT_POLICY), f"{f}.policy", POLICIES)
    lend = ctx.boolean(d.get("lend", False), f"{f}.lend")     # a malformed lend fails before any warning
    if managed == "scratchpad" or (managed == "memory" and not lend):
        why = ("a 'scratchpad' holds only tensors placed there" if managed == "scratchpad" else
               "a 'memory' tier without lend = true caches nothing")
        for key in ("policy", "ways"):
            if key in d:
                warnings.warn(NoEffectWarning(str(ctx.error(f"{f}.{key}", f"has no effect: {why}; remove it"))),
                              stacklevel=2)
    capacity = ctx.quantity(d["capacity"], "size", f"{f}.capacity")
    block = ctx.quantity(d["block"], "size", f"{f}.block")
    if block & (block - 1):
        raise ctx.error(f"{f}.block", f"must be a power of two, got {format_size(block)} ({block} B)")
    if capacity % block:
        raise ctx.error(f"{f}.capacity", f"must be a multiple of the block ({format_size(block)}), got {d['capacity']!r}")
    n_blocks = capacity // block
    ways = d.get("ways")
    if ways is not None:
        if isinstance(ways, bool) or not isinstance(ways, int) or ways <= 0:
            raise ctx.error(f"{f}.ways", f"expected a positive integer (omit for fully associative), got {ways!r}")
        if n_blocks % ways:
            raise ctx.error(f"{f}.ways", f"must divide the number of blocks ({n_blocks}), got {ways}")
    if lend and managed != "memory":
        raise ctx.error(f"{f}.lend", f"only a 'memory' tier can lend capacity, got managed = {managed!r}")
    pim = None
    if "pim" in d:
        if managed != "memory":
            raise ctx.error(f"{f}.pim", f"a PIM unit needs a 'memory' tier, got managed = {managed!r}")
        pim = _pim(ctx, d["pim"], f"{f}.pim")
    return Tier(
        name=name, capacity_bytes=capacity, block_bytes=block, ways=ways, policy=policy, managed=managed,
        bandwidth_bytes_per_s=ctx.quantity(d["bandwidth"], "bandwidth", f"{f}.bandwidth"),
        read_energy_j_per_byte=ctx.quantity(d["read_energy"], "energy_per_byte", f"{f}.read_energy", positive=False),
        write_energy_j_per_byte=ctx.quantity(d["write_energy"], "energy_per_byte", f"{f}.write_energy", positive=False),
        lend=lend, pim=pim,
    )


def _tier_ref(ctx: FileReader, value, field: str, names: list[str]) -> int:
    if not isinstance(value, str) or value not in names:
        raise ctx.error(field, f"unknown tier {value!r}; {did_you_mean(value, names)}")
    return names.index(value)


def _links(ctx: FileReader, raw, tiers: tuple[Tier, ...]) -> tuple[Link, ...]:
    raw = ctx.array(raw, "link")
    names = [t.name for t in tiers]
    links = []
    for k, d in enumerate(raw):
        f = f"link[{k}]"
        d = ctx.table(d, f, _LINK_KEYS)
        a = _tier_ref(ctx, d["from"], f"{f}.from", names)
        b = _tier_ref(ctx, d["to"], f"{f}.to", names)
        if k >= len(tiers) - 1 or (a, b) != (k, k + 1):
            want = (f"{names[k]!r} -> {names[k + 1]!r}" if k < len(tiers) - 1
                    else f"no link (the chip has {len(tiers)} tiers, so {len(tiers) - 1} links)")
            raise ctx.error(f, f"links must join adjacent tiers in order: expected {want}, got {names[a]!r} -> {names[b]!r}")
        links.append(Link(
            upper=names[a], lower=names[b],
            bandwidth_bytes_per_s=ctx.quantity(d["bandwidth"], "bandwidth", f"{f}.bandwidth"),
            energy_j_per_byte=ctx.quantity(d["energy"], "energy_per_byte", f"{f}.energy", positive=False),
            achievable=achievable(ctx, d.get("achievable", 1.0), f"{f}.achievable"),
        ))
    if len(links) != len(tiers) - 1:
        k = len(links)
        raise ctx.error("link", f"expected {len(tiers) - 1} links (one per adjacent pair of tiers), got {k}; "
                                f"missing {names[k]!r} -> {names[k + 1]!r}")
    return tuple(links)


def _rules(ctx: FileReader, raw, tiers: tuple[Tier, ...]) -> tuple[PlacementRule, ...]:
    raw = ctx.array(raw, "placement")
    names = [t.name for t in tiers]
    rules = []
    for k, d in enumerate(raw):
        f = f"placement[{k}]"
        d = ctx.table(d, f, _RULE_KEYS)
        t = _tier_ref(ctx, d["tier"], f"{f}.tier", names)
        if tiers[t].managed == "cache":
            raise ctx.error(f"{f}.tier", f"a 'cache' tier cannot be a home; expected a 'memory' or 'scratchpad' tier, got {names[t]!r}")
        kind = ctx.string(d["kind"], f"{f}.kind") if "kind" in d else None
        name = ctx.string(d["name"], f"{f}.name") if "name" in d else None
        layers = None
        if "layers" in d:
            lv = d["layers"]
            if (not isinstance(lv, list) or len(lv) != 2 or any(isinstance(x, bool) or not isinstance(x, int) for x in lv)
                    or lv[0] > lv[1]):
                raise ctx.error(f"{f}.layers", f"expected [first, last] integers with first <= last, got {lv!r}")
            layers = (lv[0], lv[1])
        spill = ctx.boolean(d.get("spill", False), f"{f}.spill")
        rules.append(PlacementRule(tier=names[t], kind=kind, name=name, layers=layers, spill=spill))
    return tuple(rules)


# ---- [price] (chip and system files; tierlab.cost.price uses it) --------------------------------

PRICE_KEYS = {"per_hour": True, "source": True, "date": True}
_PER_HOUR = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*USD/h\s*")


def parse_per_hour(value) -> float:
    """``"2.99 USD/h"`` -> 2.99; a ValueError (one line) for anything else."""
    m = _PER_HOUR.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise ValueError(f'expected a price such as "2.99 USD/h" (a number, then USD/h), got {value!r}')
    v = float(m.group(1))
    if v <= 0:
        raise ValueError(f"must be positive, got {value!r}")
    return v


def price_from_table(d, error, table_check) -> Price:
    """Validate a ``[price]`` table. ``table_check(value, field, keys)`` is the file reader's table
    check (unknown keys with a did-you-mean, missing keys); ``error(field, message)`` builds its error."""
    d = table_check(d, "price", PRICE_KEYS)
    try:
        per_hour = parse_per_hour(d["per_hour"])
    except ValueError as err:
        raise error("price.per_hour", str(err)) from None
    source = d["source"]
    if not isinstance(source, str) or not source.strip():
        raise error("price.source", f"expected a non-empty string (where the price comes from), got {source!r}")
    date = d["date"]
    if isinstance(date, datetime.date):      # a bare TOML date
        date = date.isoformat()
    ok = isinstance(date, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", date)
    if ok:
        try:
            datetime.date.fromisoformat(date)
        except ValueError:
            ok = False
    if not ok:
        raise error("price.date", f"expected a date YYYY-MM-DD, got {date!r}")
    return Price(usd_per_hour=per_hour, source=source, date=date)


# ---- [power]: board power (tierlab.cost.model's board energy) -----------------------------------

POWER_KEYS = {"idle": True, "tdp": True, "static": False, "memory_background": False}


def power_from_table(ctx: FileReader, d) -> Power:
    """Validate a ``[power]`` table: watts, none negative (``static`` defaults to ``idle``)."""
    d = ctx.table(d, "power", POWER_KEYS)
    w = {k: float(ctx.quantity(d[k], "power", f"power.{k}", positive=False)) for k in POWER_KEYS if k in d}
    if w["tdp"] <= 0:
        raise ctx.error("power.tdp", f"must be positive, got {d['tdp']!r}")
    for k in ("idle", "static", "memory_background"):
        if k in w and w[k] > w["tdp"]:
            raise ctx.error(f"power.{k}", f"must not exceed power.tdp ({d['tdp']}), got {d[k]!r}")
    return Power(idle_w=w["idle"], tdp_w=w["tdp"], static_w=w.get("static"),
                 memory_background_w=w.get("memory_background"))


# ---- [reserve]: the memory a runtime keeps for itself (tierlab.serving.capacity) -----------------

RESERVE_KEYS = {"context": False, "workspace": False, "fragmentation": False}


def reserve_from_table(ctx: FileReader, d) -> Reserve:
    """Validate a ``[reserve]`` table: sizes not negative, a fragmentation share in [0, 1)."""
    d = ctx.table(d, "reserve", RESERVE_KEYS)
    sizes = {k: int(ctx.quantity(d[k], "size", f"reserve.{k}", positive=False)) for k in ("context", "workspace")
             if k in d}
    frag = d.get("fragmentation", 0.0)
    if isinstance(frag, str):
        try:
            frag = float(frag)
        except ValueError:
            pass
    if isinstance(frag, bool) or not isinstance(frag, (int, float)) or not 0 <= frag < 1:
        raise ctx.error("reserve.fragmentation", f"expected a share of memory in [0, 1), e.g. 0.02, got {frag!r}")
    return Reserve(context_bytes=sizes.get("context", 0), workspace_bytes=sizes.get("workspace", 0),
                   fragmentation=float(frag))


# ---- the calibrated latency's keys: achievable fractions, [execution] (tierlab.cost.organisation) ----

# the optional keys of the calibrated latency, added to the layout's tables here (kept apart from them);
# a tier's ``achievable`` is read around _tier (calibrated_tier), so _TIER_KEYS stays the layout's
_TOP_KEYS = {**_TOP_KEYS, "execution": False, "power": False, "reserve": False}
_COMPUTE_KEYS = {**_COMPUTE_KEYS, "achievable": False}
_LINK_KEYS = {**_LINK_KEYS, "achievable": False}
_TIER_KEYS_CALIBRATION = {"achievable": False, "forward_misses": False}
_EXECUTION_KEYS = {"kernel_overhead": False, "fusion": False, "overlap": False, "gemv": False}
# a [execution] gemv key: a weight dtype as traced, int8/int4 optionally with its quantisation group
GEMV_FORMAT = re.compile(r"^(bf16|fp16|fp32|fp8|fp8-block|nvfp4|mxfp4|int8|int4|(int8|int4)-g[1-9][0-9]*)$")


def calibrated_tier(ctx: FileReader, d, i: int) -> Tier:
    """:func:`_tier` plus the tier's optional ``achievable`` and ``forward_misses`` (a read miss's block
    is forwarded to the reader as it fills: one pass through the tier's port, :mod:`tierlab.cost.model`)."""
    if not isinstance(d, dict) or not ({"achievable", "forward_misses"} & set(d)):
        return _tier(ctx, d, i)
    rest = {k: v for k, v in d.items() if k not in ("achievable", "forward_misses")}
    t = _tier(ctx, rest, i)
    if "achievable" in d:
        t = replace(t, achievable=achievable(ctx, d["achievable"], f"tier[{i}].achievable"))
    if "forward_misses" in d:
        fwd = ctx.boolean(d["forward_misses"], f"tier[{i}].forward_misses")
        if fwd and t.managed != "cache":
            raise ctx.error(f"tier[{i}].forward_misses", f"only a 'cache' tier forwards its misses, got managed = {t.managed!r}")
        t = replace(t, forward_misses=fwd)
    return t


def achievable(ctx: FileReader, value, field: str) -> float:
    """A fraction of peak in (0, 1]: a TOML number, or a string of one (as a sweep's
    ``--override tier.hbm.achievable=0.8,0.9`` writes it)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ctx.error(field, f"expected a fraction of peak in (0, 1], e.g. 0.9, got {value!r}")
    return float(value)


def execution_from_table(ctx: FileReader, d) -> Execution:
    """Validate an ``[execution]`` table (every key optional; defaults add nothing)."""
    d = ctx.table(d, "execution", _EXECUTION_KEYS)
    overhead = 0.0
    if "kernel_overhead" in d:
        overhead = ctx.quantity(d["kernel_overhead"], "time", "execution.kernel_overhead", positive=False)
    gemv = d.get("gemv", {})
    if not isinstance(gemv, dict):
        raise ctx.error("execution.gemv", f"expected a table of weight format = fraction, got {gemv!r}")
    for k in gemv:
        if not GEMV_FORMAT.match(k):
            raise ctx.error(f"execution.gemv.{k}", "expected a weight format: bf16, fp16, fp32, fp8, fp8-block, "
                                                   "int8, int4, nvfp4, mxfp4, or int8/int4 with -gN (e.g. int4-g32)")
    return Execution(kernel_overhead_s=float(overhead),
                     fusion=ctx.choice(d.get("fusion", "none"), "execution.fusion", FUSIONS),
                     overlap=ctx.choice(d.get("overlap", "none"), "execution.overlap", OVERLAPS),
                     gemv=tuple(sorted((k, achievable(ctx, v, f"execution.gemv.{k}")) for k, v in gemv.items())))


def chip_from_dict(d, *, file=None, sha256: str | None = None) -> Chip:
    """Validate a parsed chip file (a dict as tomllib returns it) and build the :class:`Chip`."""
    ctx = FileReader(None if file is None else str(file))
    d = ctx.table(d, "", _TOP_KEYS)
    name = ctx.string(d["name"], "name")
    description = d.get("description", "")
    if not isinstance(description, str):
        raise ctx.error("description", f"expected a string, got {description!r}")
    compute = _compute(ctx, d["compute"])
    raw_tiers = ctx.array(d["tier"], "tier")
    if not raw_tiers:
        raise ctx.error("tier", "expected at least one [[tier]]")
    tiers = tuple(calibrated_tier(ctx, t, i) for i, t in enumerate(raw_tiers))
    seen: dict[str, int] = {}
    for i, t in enumerate(tiers):
        if t.name in seen:
            raise ctx.error(f"tier[{i}].name", f"duplicate tier name {t.name!r} (also tier[{seen[t.name]}])")
        seen[t.name] = i
    for i in range(1, len(tiers)):
        near, far = tiers[i - 1], tiers[i]
        if far.block_bytes % near.block_bytes:
            raise ctx.error(f"tier[{i}].block", f"must be a multiple of (so not smaller than) the nearer tier's block "
                                                f"(tier[{i - 1}] {near.name!r}: {format_size(near.block_bytes)}), "
                                                f"got {format_size(far.block_bytes)}")
    if tiers[-1].managed == "cache":
        raise ctx.error(f"tier[{len(tiers) - 1}].managed", "the farthest tier must be 'memory' or 'scratchpad' "
                                                           "(a cache has nowhere to fetch from), got 'cache'")
    links = _links(ctx, d.get("link", []), tiers)
    rules = _rules(ctx, d.get("placement", []), tiers)
    sources = d.get("sources", {})
    if not isinstance(sources, dict) or any(not isinstance(v, str) for v in sources.values()):
        raise ctx.error("sources", "expected a table of TAG = \"citation\" strings")
    price = None
    if "price" in d:
        price = price_from_table(d["price"], ctx.error, ctx.table)
    execution = execution_from_table(ctx, d["execution"]) if "execution" in d else Execution()
    power = power_from_table(ctx, d["power"]) if "power" in d else None
    reserve = reserve_from_table(ctx, d["reserve"]) if "reserve" in d else None
    return Chip(name=name, tiers=tiers, links=links, compute=compute, placement=rules,
                description=description, source_file=ctx.file, sources=dict(sources), source_sha256=sha256,
                price=price, execution=execution, power=power, reserve=reserve)


def list_presets() -> list[str]:
    """Names of the shipped chip presets (``configs/chips/*.toml``), sorted."""
    return toml_presets("chips")


def _resolve(name_or_path) -> Path:
    return resolve_toml(name_or_path, "chips", "chip")


def read_chip_toml(name_or_path) -> tuple[dict, Path, str]:
    """A chip file parsed but not validated: ``(dict, path, sha256 of its bytes)`` (what what-if
    sweeps edit before :func:`chip_from_dict`)."""
    path = _resolve(name_or_path)
    d, sha256 = read_toml(path)
    return d, path, sha256


def file_keys(section: str) -> tuple[str, ...]:
    """The keys a chip file's top level (``""``) or a ``tier``, ``link``, ``compute``, ``pim``,
    ``execution``, ``price`` or ``power`` table may hold."""
    return tuple({"": _TOP_KEYS, "tier": {**_TIER_KEYS, **_TIER_KEYS_CALIBRATION}, "link": _LINK_KEYS,
                  "compute": _COMPUTE_KEYS, "pim": _PIM_KEYS, "execution": _EXECUTION_KEYS,
                  "price": PRICE_KEYS, "power": POWER_KEYS, "reserve": RESERVE_KEYS}[section])


def strip_calibration_defaults(d: dict) -> None:
    """Drop the calibration fields at their defaults from a Chip's ``asdict`` (so a chip built in
    code hashes as it did before they existed)."""
    if isinstance(d.get("execution"), dict) and not d["execution"].get("gemv", ()):
        d["execution"].pop("gemv", None)
    if d.get("execution") == {"kernel_overhead_s": 0.0, "fusion": "none", "overlap": "none"}:
        d.pop("execution")
    for part in [d.get("compute") or {}, *(d.get("tiers") or ()), *(d.get("links") or ())]:
        if part.get("achievable") == 1.0:
            part.pop("achievable")
        if part.get("forward_misses") is False:
            part.pop("forward_misses")


_LOADED: dict[tuple[str, str], tuple[Chip, list]] = {}


def load_chip(name_or_path) -> Chip:
    """Load a chip: a preset name (``h100``) or a path to a ``.toml`` file.

    A file read before with the same bytes (its sha256) gives the same Chip (frozen) without parsing
    and checking it again, and the same warnings: sweeps, ``compare`` and repeated replays load a
    preset many times. A Chip (built in code, or by the Python API) is returned as it is."""
    if isinstance(name_or_path, Chip):
        return name_or_path
    path = _resolve(name_or_path)
    data = path.read_bytes()
    key = (str(path), hashlib.sha256(data).hexdigest())
    if key not in _LOADED:
        d, sha = read_toml(path, data)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            chip = chip_from_dict(d, file=str(path), sha256=sha)
        _LOADED[key] = chip, [w.message for w in said]
    chip, said = _LOADED[key]
    for message in said:
        warnings.warn(message, stacklevel=2)
    return chip


def chip_hash(chip_or_path) -> str:
    """A stable content hash for provenance: sha256 (hex) of the chip file's bytes.

    For a Chip loaded from a file, the hash taken when it was read; for a Chip built in code, the
    hash of its canonical JSON; for a path or preset name, the file's bytes now.
    """
    if isinstance(chip_or_path, Chip):
        if chip_or_path.source_sha256:
            return chip_or_path.source_sha256
        d = asdict(chip_or_path)
        for key in ("price", "power", "reserve"):      # chips without them hash as before they existed
            if d.get(key) is None:
                d.pop(key, None)
        strip_calibration_defaults(d)
        canon = json.dumps(d, sort_keys=True, default=str)
        return hashlib.sha256(canon.encode()).hexdigest()
    return hashlib.sha256(_resolve(chip_or_path).read_bytes()).hexdigest()
