"""Where the shipped presets live: ``configs/`` of the checkout, or the installed copy of it."""

from __future__ import annotations

from pathlib import Path


def configs_dir(sub: str) -> Path:
    """Directory of preset files (``sub`` is ``"chips"`` or ``"models"``)."""
    here = Path(__file__).resolve().parent.parent / "configs" / sub
    if here.is_dir():
        return here
    from importlib.resources import files

    return Path(str(files(f"tierlab_configs.{sub}")))
