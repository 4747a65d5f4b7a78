"""tierlab traces: model specs, lowering of a run into operators, and the Arrow trace format.

A trace is chip-independent: nothing here imports ``emulator/``.
"""
