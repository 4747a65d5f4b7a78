"""Questions asked of many replays or of one tier: miss-ratio curves, capacity, conversations (turns),
chip comparisons and sweeps.
"""
