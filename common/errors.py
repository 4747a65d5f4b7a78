"""tierlab's own error types.

The library raises these with the file and field at fault; only the CLI turns them into one line on
stderr and exit status 2. ``str(err)`` is that line: ``FILE: FIELD: what was expected``.
"""

from __future__ import annotations


class TierlabError(Exception):
    """Base of every error tierlab raises on bad input."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.file = None if file is None else str(file)
        self.field = field

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.field) if p]
        return ": ".join(parts + [self.message])


class ConfigError(TierlabError):
    """A model config or chip file is wrong (unknown key, missing field, bad unit, impossible value)."""


class TraceError(TierlabError):
    """A trace is missing, truncated, corrupt, of an unknown version or inconsistent."""


class UsageError(TierlabError):
    """A command-line argument is wrong (negative length, unknown dtype, unwritable output)."""


class CapacityError(TierlabError):
    """The model (or its KV cache) does not fit the hierarchy or the budget."""
