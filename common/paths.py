"""Where the shipped presets live: ``configs/`` of the checkout, or the installed copy of it."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def configs_dir(sub: str) -> Path:
    """Directory of preset files (``sub`` is ``"chips"`` or ``"models"``).

    From a checkout (or an editable install) it is ``configs/SUB`` beside the packages; a wheel
    install carries the same files as the data-only package ``tierlab_configs.SUB``.
    """
    here = Path(__file__).resolve().parent.parent / "configs" / sub
    if here.is_dir():
        return here
    spec = importlib.util.find_spec(f"tierlab_configs.{sub}")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            if Path(loc).is_dir():
                return Path(loc)
    return here  # missing: callers report "no such preset" against the expected place
