"""Which of a chip's peak rates costs a run's arithmetic, and what happens when the chip lacks the
run's dtype (FP4 on a chip without FP4 tensor cores).

The rule (:func:`resolve_compute_dtype`), for a run of activations dtype ``a`` and weights ``w``:

1. ``a`` if the chip lists a peak for it (``[compute] flops``);
2. an FP4 activation format the chip lacks (``nvfp4``, ``mxfp4``: a W4A4 run) falls to the next
   supported dtype, ``fp8`` then ``bf16``, with a note saying so (a chip such as H100 has FP8 tensor
   cores but none for FP4; MI355X runs MXFP4 but not NVFP4's E4M3-scaled blocks); asked strictly, it
   is a :class:`~tierlab.common.errors.UsageError` instead;
3. else, as tierlab always did, ``w`` if the chip has it, then ``bf16``, then the chip's first
   listed dtype (synthetic traces have no run).
"""

from __future__ import annotations

import warnings

from tierlab.common.errors import UsageError
from tierlab.chip.hierarchy import Chip

FP4_FORMATS = ("nvfp4", "mxfp4")
FP4_FALLBACK = ("fp8", "bf16")


class DtypeFallbackWarning(UserWarning):
    """The chip has no peak rate for the run's FP4 format; its arithmetic is costed at another dtype."""


def resolve_compute_dtype(chip: Chip, activations: str | None, weights: str | None = None, *,
                          strict: bool = False, field: str = "activations") -> tuple[str, str | None]:
    """``(dtype, note)``: the dtype whose peak and energy per FLOP cost the run, and, when an FP4
    format fell back, one line saying so (None otherwise). ``strict``: an FP4 format the chip lacks
    raises a UsageError naming ``field`` instead of falling back."""
    rates = chip.compute.flop_per_s
    if activations in rates:
        return activations, None
    if activations in FP4_FORMATS:
        have = [d for d in FP4_FORMATS if d in rates]
        what = (f"{chip.name} has no {activations} compute (its FP4 rate is for {', '.join(have)})" if have
                else f"{chip.name} has no FP4 compute")
        if strict:
            raise UsageError(f"{what}; expected one of the chip's dtypes ({', '.join(rates)})", field=field)
        for d in FP4_FALLBACK:
            if d in rates:
                return d, f"{what}: its arithmetic runs at {d}, the next supported dtype"
        d = next(iter(rates))
        return d, f"{what}: its arithmetic runs at {d}, the chip's first listed dtype"
    for d in (weights, "bf16"):
        if d and d in rates:
            return d, None
    return next(iter(rates)), None


def compute_dtype_of_run(chip: Chip, manifest: dict | None, *, strict: bool = False) -> str:
    """:func:`resolve_compute_dtype` for a trace's ``manifest["run"]``, the note given as a
    :class:`DtypeFallbackWarning` (the CLI prints it as one line)."""
    run = (manifest or {}).get("run") or {}
    dtype, note = resolve_compute_dtype(chip, run.get("activations"), run.get("weights"), strict=strict)
    if note is not None:
        warnings.warn(DtypeFallbackWarning(note), stacklevel=2)
    return dtype
