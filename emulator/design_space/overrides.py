"""What-if overrides of a sweep: dotted keys written into a chip's or a system's TOML dict before it
is validated, so values are parsed (units included) and checked exactly as in a file.

Chip keys (a grid with a ``chip`` axis):

* ``tier.NAME.KEY``: a key of the tier named NAME (``capacity``, ``block``, ``ways``, ``policy``,
  ``bandwidth``, ``read_energy``, ...);
* ``tier.NAME.pim.KEY``: a key of that tier's PIM unit (a unit is created if the tier has none, so
  its other keys must be given too);
* ``link.UPPER-LOWER.KEY``: a key of the link from UPPER to LOWER (``bandwidth``, ``energy``);
* ``compute.flops.DTYPE`` and ``compute.energy.DTYPE``: the peak rate or the energy per FLOP of one
  data type; ``compute.achievable`` (the calibrated latency's fraction of peak);
* ``execution.KEY``: ``kernel_overhead``, ``fusion``, ``overlap`` (the calibrated latency).

System keys (a grid with a ``system`` axis): ``chips``, ``chips_per_node``; ``scale_up.KEY`` and
``scale_out.KEY`` (``bandwidth``, ``latency``, ``energy``, ``ports``, ``topology``,
``in_network_reduction``); and ``chip.`` followed by any chip key above, applied to the system's chip
(``chip.tier.hbm.bandwidth``). Prices are not overridden here: ``--price`` and the grid's ``[cost]``
table set them. Every problem is a one-line :class:`tierlab.common.errors.UsageError` naming
``overrides.KEY``, with a did-you-mean.
"""

from __future__ import annotations

import copy
import hashlib

from tierlab.common.errors import ConfigError, UsageError
from tierlab.common.suggest import did_you_mean

ID_KEYS = ("name", "from", "to")
CHIP_SECTIONS = ("tier", "link", "compute", "execution")
SYSTEM_SECTIONS = ("chips", "chips_per_node", "scale_up", "scale_out", "chip")


def _named(section: str, table: dict) -> str:
    return str(table.get("name")) if section == "tier" else f"{table.get('from')}-{table.get('to')}"


def _key(section: str, key: str, allowed, field: str) -> None:
    allowed = [k for k in allowed if k not in ID_KEYS]
    if key not in allowed:
        raise UsageError(f"unknown {section} key {key!r}; {did_you_mean(key, allowed)}", field=field)


def _set_chip(d: dict, parts: list[str], value, field: str) -> None:
    from tierlab.chip.chipfile import file_keys

    head = parts[0]
    if head not in CHIP_SECTIONS:
        raise UsageError("expected tier.NAME.KEY, tier.NAME.pim.KEY, link.UPPER-LOWER.KEY or "
                         f"compute.KEY[.DTYPE], execution.KEY; {did_you_mean(head, CHIP_SECTIONS)}", field=field)
    if head == "execution" or (head == "compute" and len(parts) == 2):
        if len(parts) != 2:
            raise UsageError(f"expected {head}.KEY", field=field)
        _key(head, parts[1], file_keys(head), field)
        d.setdefault(head, {})[parts[1]] = value
        return
    if head == "compute":
        if len(parts) != 3:
            raise UsageError("expected compute.flops.DTYPE, compute.energy.DTYPE or compute.KEY", field=field)
        _key("compute", parts[1], file_keys("compute"), field)
        table = d.setdefault("compute", {}).setdefault(parts[1], {})
        if not isinstance(table, dict):
            raise UsageError(f"the chip's compute.{parts[1]} is not a table of data types", field=field)
        table[parts[2]] = value
        return
    shape = "tier.NAME.KEY or tier.NAME.pim.KEY" if head == "tier" else "link.UPPER-LOWER.KEY"
    if len(parts) < 3 or len(parts) > (4 if head == "tier" else 3):
        raise UsageError(f"expected {shape}", field=field)
    tables = d.get(head) or []
    names = [_named(head, t) for t in tables]
    if parts[1] not in names:
        raise UsageError(f"{d.get('name')!r} has no {head} {parts[1]!r}; {did_you_mean(parts[1], names)}",
                         field=field)
    table = tables[names.index(parts[1])]
    if len(parts) == 4:
        if parts[2] != "pim":
            raise UsageError(f"expected {shape}; {did_you_mean(parts[2], ['pim'])}", field=field)
        _key("pim", parts[3], file_keys("pim"), field)
        table.setdefault("pim", {})[parts[3]] = value
        return
    _key(head, parts[2], file_keys(head), field)
    table[parts[2]] = value


def apply_chip_overrides(d: dict, overrides: dict, prefix: str = "") -> dict:
    """A copy of a chip's TOML dict with each override key set (see the module docstring); errors
    name ``overrides.PREFIX KEY`` (``chip.`` for a system's chip)."""
    d = copy.deepcopy(d)
    for key, value in overrides.items():
        _set_chip(d, key.split("."), value, f"overrides.{prefix}{key}")
    return d


def split_system_overrides(overrides: dict) -> tuple[dict, dict]:
    """(the system's own keys, the chip's keys without their ``chip.`` prefix)."""
    own = {k: v for k, v in overrides.items() if not k.startswith("chip.")}
    chip = {k[len("chip."):]: v for k, v in overrides.items() if k.startswith("chip.")}
    return own, chip


def apply_system_overrides(d: dict, overrides: dict) -> dict:
    """A copy of a system's TOML dict with each of its own override keys set (``chip.`` keys are
    the chip's: :func:`build_system` applies them)."""
    from tierlab.system.systemfile import file_keys

    d = copy.deepcopy(d)
    for key, value in overrides.items():
        field = f"overrides.{key}"
        parts = key.split(".")
        head = parts[0]
        if head not in SYSTEM_SECTIONS or head == "chip":
            raise UsageError("expected chips, chips_per_node, scale_up.KEY, scale_out.KEY or chip.CHIP_KEY; "
                             f"{did_you_mean(head, SYSTEM_SECTIONS)}", field=field)
        if head in ("chips", "chips_per_node"):
            if len(parts) != 1:
                raise UsageError(f"expected {head} alone (an integer)", field=field)
            d[head] = value
            continue
        if len(parts) != 2:
            raise UsageError(f"expected {head}.KEY", field=field)
        if head not in d:
            raise UsageError(f"{d.get('name')!r} has no [{head}] fabric", field=field)
        _key(head, parts[1], file_keys(head), field)
        d[head][parts[1]] = value
    return d


def _tag(overrides: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))


def build_chip(name: str, overrides: dict, prefix: str = ""):
    """The chip ``name`` (preset or file) with ``overrides`` applied, validated as a chip file is."""
    from tierlab.chip.chipfile import chip_from_dict, load_chip, read_chip_toml

    if not overrides:
        return load_chip(name)
    d, path, sha = read_chip_toml(name)
    tag = _tag(overrides)
    try:
        return chip_from_dict(apply_chip_overrides(d, overrides, prefix), file=f"{path} [{tag}]",
                              sha256=hashlib.sha256(f"{sha} {tag}".encode()).hexdigest())
    except ConfigError as err:
        raise UsageError(str(err), field=None) from None


def build_system(name: str, overrides: dict):
    """The system ``name`` (preset or file) with ``overrides`` applied: its own keys to its file,
    ``chip.`` keys to its chip; validated as system and chip files are."""
    from tierlab.system.systemfile import chip_path, load_system, read_system_toml, system_from_dict

    if not overrides:
        return load_system(name)
    d, path, sha = read_system_toml(name)
    own, chip_ov = split_system_overrides(overrides)
    chip = build_chip(chip_path(d, path), chip_ov, "chip.") if chip_ov else None
    tag = _tag(overrides)
    try:
        return system_from_dict(apply_system_overrides(d, own), file=f"{path} [{tag}]",
                                sha256=hashlib.sha256(f"{sha} {tag}".encode()).hexdigest(), chip=chip)
    except ConfigError as err:
        raise UsageError(str(err), field=None) from None


def build_target(chip: str | None, system: str | None, overrides: dict):
    """A point's chip or system, overrides applied."""
    return build_system(system, overrides) if system is not None else build_chip(chip, overrides)
