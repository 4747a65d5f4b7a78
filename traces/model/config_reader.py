"""Typed access to a config's fields: :class:`Reader` names the file and field of every error."""

from __future__ import annotations

from tierlab.common.errors import ConfigError

MAX_DIMENSION = 2**31 - 1    # one dimension of a model; a larger value is a broken config


class Reader:
    """Typed field access that names the file and field on error."""

    _MISSING = object()

    def __init__(self, config: dict, file: str | None, prefix: str = ""):
        self.config, self.file, self.prefix = config, file, prefix

    def err(self, msg: str, key: str) -> ConfigError:
        return ConfigError(msg, file=self.file, field=self.prefix + key)

    def int(self, key: str, default=_MISSING):
        if key not in self.config or self.config[key] is None:
            if default is self._MISSING:
                raise self.err("missing required field", key)
            return default
        v = self.config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise self.err(f"expected a non-negative integer, got {v!r}", key)
        if v > MAX_DIMENSION:
            raise self.err(f"expected at most {MAX_DIMENSION}, got {v}", key)
        return v

    def pos(self, key: str, default=_MISSING):
        """A dimension: an integer of at least 1 (a zero-sized model is a broken config)."""
        if key not in self.config or self.config[key] is None:
            return self.int(key, default)
        v = self.config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise self.err(f"expected a positive integer, got {v!r}", key)
        return self.int(key)

    def flag(self, key, default: bool = False) -> bool:
        """``key`` a bool (the trait itself), a config key holding true/false, or (key, default)."""
        if isinstance(key, bool):
            return key
        if isinstance(key, tuple):
            key, default = key
        v = self.config.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.err(f"expected true or false, got {v!r}", key)
        return v

    def int_list(self, key: str, n: int | None = None, allowed=None) -> list:
        v = self.config.get(key)
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, (int, str)) for x in v):
            raise self.err(f"expected a list, got {v!r}", key)
        if n is not None and len(v) != n:
            raise self.err(f"expected {n} entries (one per layer), got {len(v)}", key)
        if allowed is not None:
            for x in v:
                if x not in allowed:
                    raise self.err(f"unknown entry {x!r}; expected one of {', '.join(map(str, allowed))}", key)
        return v
