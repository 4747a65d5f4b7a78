"""tierlab emulator: the chip, the counting engine, costing, analyses, presentation and the CLI.

Data walks one way: ``chip`` (hierarchy, placement) -> ``engine`` (door -> kernel -> counters) ->
``cost`` (energy, latency) -> ``analysis`` / ``present`` -> ``cli``. See ``docs/design.md``.
"""
