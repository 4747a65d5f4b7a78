"""Costing, from counts and the chip's numbers (no re-simulation): energy and latency per op, step and
token (:mod:`emulator.cost.model`), and where processing in memory runs (:mod:`emulator.cost.pim`).
"""
