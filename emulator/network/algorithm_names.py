"""The collective algorithms' names (``--collective-algo``), in the registry's order: a plain tuple,
importable where a command's options are declared without loading the algorithms themselves
(:mod:`tierlab.network.registry` and its seven modules, ~30 ms of a one-chip replay's start-up that
never costs a collective). ``tests/cli/test_cli_imports.py`` holds it equal to the registry's."""

ALGORITHM_NAMES = ("ring", "tree", "direct", "hierarchical", "in_network", "two_shot", "torus")
