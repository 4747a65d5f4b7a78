"""tierlab traces: model specs, lowering of a run into operators, and the Arrow trace format."""

from traces.errors import CapacityError, ConfigError, TierlabError, TraceError, UsageError

__all__ = ["TierlabError", "ConfigError", "TraceError", "UsageError", "CapacityError"]
