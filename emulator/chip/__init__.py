"""The chip: its hierarchy (tiers, links, compute, PIM units), chip files and their units, and placement
(which tier is each tensor's home).
"""
