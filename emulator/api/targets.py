"""The chip or system a trace is replayed on, loaded and checked before any work: exactly one of
``chip`` and ``system``; a system's fabric against the collective algorithm; the calibrated latency's
settings applied; options that apply to one kind of target only refused on the other."""

from __future__ import annotations

from dataclasses import replace

from tierlab.api.settings import Collectives, Execution, ReplaySettings, defaults
from tierlab.common.errors import UsageError


def target_argument(v, name: str, *, optional: bool = True):
    """A chip or system argument as given: a name or path (as a string), a loaded Chip or System, or
    None where ``optional``."""
    from tierlab.api.settings import check_value
    from tierlab.chip.hierarchy import Chip
    from tierlab.system.model import System

    if (v is None and optional) or isinstance(v, (Chip, System)):
        return v
    try:
        return check_value(name, "text", v)
    except UsageError:
        raise UsageError(f"expected a name or path, or a loaded object, got {type(v).__name__} {v!r}",
                         field=name) from None


def check_target(chip, system) -> None:
    """Exactly one of ``chip`` and ``system``."""
    if bool(chip) == bool(system):
        raise UsageError("give exactly one of --chip and --system" if chip else "give --chip NAME or --system NAME",
                         field="chip")


def load_target_chip(chip, execution: Execution):
    """A chip (a preset name, a file or a loaded Chip) with the calibrated latency's settings applied."""
    from tierlab.chip.chipfile import load_chip
    from tierlab.chip.hierarchy import Chip

    return execution.apply(chip if isinstance(chip, Chip) else load_chip(chip))


def check_algorithm(system, algo: str) -> None:
    """An algorithm the system's scale-up fabric cannot run at all fails before any tracing."""
    from tierlab.network.collective import Group, refusal
    from tierlab.network.registry import ALGORITHMS

    if algo == "auto" or system.n_chips < 2:
        return
    group = Group(tuple(range(min(2, system.chips_per_node))), system) if system.chips_per_node >= 2 else \
        Group((0, system.chips_per_node), system)
    kind = ALGORITHMS[algo].kinds[0]
    why = refusal(algo, kind, group)
    if why is not None:
        raise UsageError(f"{algo!r} cannot run on {system.name}: {why}", field="collective_algo")


def load_target_system(system, collectives: Collectives, execution: Execution):
    """The system (a preset name, a file or a loaded System), its fabric checked against the collective
    algorithm, its chip with the calibrated latency's settings where given."""
    from tierlab.system.model import System
    from tierlab.system.systemfile import load_system

    s = system if isinstance(system, System) else load_system(system)
    check_algorithm(s, collectives.collective_algo)
    if collectives.no_overheads:
        execution = Execution(fusion="none", overlap="none", kernel_overhead="0 s", achievable=False)
    if execution.given():
        s = replace(s, chip=execution.apply(s.chip))
    return s


def collective_settings(collectives: Collectives, system):
    """The :class:`tierlab.network.protocols.Settings` (the system file's library and skew, the chip's
    kernel overhead as the launch, unless overridden)."""
    from tierlab.network.protocols import Settings

    return Settings(library=collectives.collective_lib or system.collective_library, protocol=collectives.protocol,
                    launch_s=system.chip.execution.kernel_overhead_s, skew_s=system.collective_skew_s,
                    overheads=not collectives.no_overheads).check()


def check_options(*, system: bool, replay: ReplaySettings, collectives: Collectives, output) -> None:
    """What applies to one kind of target only is refused on the other (before any work)."""
    if system:
        if output:
            raise UsageError("-o/--output (the per-op Parquet) applies to a --chip run", field="output")
    else:
        for name, default in defaults(Collectives).items():
            if name != "collective_algo" and getattr(collectives, name) != default:
                raise UsageError("applies to a --system run (collectives), not one chip", field=name)
    replay.rules()          # a malformed rule fails before the replay
