"""Did-you-mean hints for one-line errors: the closest known name to what was given."""

from __future__ import annotations

import difflib


def closest(word, choices, *, cutoff: float = 0.6) -> str | None:
    """The choice most like ``word`` (difflib's ratio at least ``cutoff``), or None."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=cutoff)
    return close[0] if close else None


def did_you_mean(word, choices, *, cutoff: float = 0.6) -> str:
    """``did you mean 'x'?`` for the closest of ``choices``, else ``expected one of a, b, c``."""
    near = closest(word, choices, cutoff=cutoff)
    return f"did you mean {near!r}?" if near else f"expected one of {', '.join(map(str, choices))}"
