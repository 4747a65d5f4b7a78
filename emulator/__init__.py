"""tierlab emulator: hierarchies, placement, the Numba replay engine, energy and latency, the CLI."""
