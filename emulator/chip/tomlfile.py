"""Reading the project's TOML files (chips, systems) strictly: every error names the file and field.

:func:`read_toml` parses a file and hashes its bytes (for provenance); :class:`FileReader` checks
the parsed tables — unknown keys (with a did-you-mean), missing required keys, strings, flags,
counts and quantities with units (:mod:`tierlab.chip.units`).
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path

from tierlab.common.errors import ConfigError
from tierlab.common.suggest import did_you_mean
from tierlab.chip.units import parse_quantity


def read_toml(path: Path, data: bytes | None = None) -> tuple[dict, str]:
    """``(parsed dict, sha256 of the file's bytes)``; not UTF-8 or not TOML is a ConfigError.
    ``data``: the file's bytes if already read."""
    data = path.read_bytes() if data is None else data
    try:
        d = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError("not a UTF-8 text file", file=str(path)) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"not valid TOML: {err}", file=str(path)) from None
    return d, hashlib.sha256(data).hexdigest()


def toml_key(key) -> str:
    """A key as it appears in a message: bare if it is a plain TOML bare key, else quoted (one line)."""
    key = str(key)
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


class FileReader:
    """The file being read, so every error names it (``file`` None: a dict built in code)."""

    def __init__(self, file):
        self.file = None if file is None else str(file)

    def error(self, field: str | None, message: str) -> ConfigError:
        return ConfigError(message, file=self.file, field=field or None)

    def table(self, value, field: str, keys: dict[str, bool]) -> dict:
        """Check ``value`` is a table with only known keys (``keys``: name -> required) and all
        required ones."""
        if not isinstance(value, dict):
            raise self.error(field, f"expected a table, got {type(value).__name__}")
        for key in value:
            if key not in keys:
                name = f"{field}.{toml_key(key)}" if field else toml_key(key)
                raise self.error(name, f"unknown key; {did_you_mean(key, keys)}")
        for key, required in keys.items():
            if required and key not in value:
                raise self.error(f"{field}.{key}" if field else key, "missing required key")
        return value

    def array(self, value, field: str) -> list:
        if not isinstance(value, list):
            raise self.error(field, f"expected an array of tables ([[{field}]]), got {type(value).__name__}")
        return value

    def string(self, value, field: str, *, empty: bool = False) -> str:
        if not isinstance(value, str) or (not empty and not value.strip()):
            raise self.error(field, f"expected a {'' if empty else 'non-empty '}string, got {value!r}")
        return value

    def boolean(self, value, field: str) -> bool:
        if not isinstance(value, bool):
            raise self.error(field, f"expected true or false, got {value!r}")
        return value

    def count(self, value, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.error(field, f"expected a positive integer, got {value!r}")
        return value

    def choice(self, value, field: str, choices) -> str:
        if not isinstance(value, str) or value not in choices:
            raise self.error(field, f"unknown value {value!r}; {did_you_mean(value, choices)}")
        return value

    def quantity(self, value, kind: str, field: str, *, positive: bool = True):
        q = parse_quantity(value, kind, file=self.file, field=field)
        if positive and q <= 0:
            raise self.error(field, f"must be positive, got {value!r}")
        if q < 0:
            raise self.error(field, f"must not be negative, got {value!r}")
        return q
