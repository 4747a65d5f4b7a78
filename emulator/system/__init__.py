"""The system: many chips grouped into nodes, and the fabrics between them (scale-up within a node,
scale-out across nodes); system files and their presets in ``configs/systems/``.
"""
