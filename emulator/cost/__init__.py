"""Costing, from counts and the chip's numbers (no re-simulation): energy and latency per op, step and
token (:mod:`tierlab.cost.model`), and where processing in memory runs (:mod:`tierlab.pipeline.pim_plan`).
"""
