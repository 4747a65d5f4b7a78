"""The names a user picks how collectives run by (``--collective-lib``, ``--protocol``,
``--comm-overlap``): plain tuples, importable where a command's options are declared without loading
the cost models they select (:mod:`tierlab.network.protocols`, :mod:`tierlab.cost.system_cost`).
The libraries and link classes are a system file's data (:mod:`tierlab.system.model`)."""

from tierlab.system.model import COLLECTIVE_LIBRARIES as LIBRARIES, LINK_CLASSES  # noqa: F401

PROTOCOLS = ("LL", "LL128", "Simple")          # NCCL's protocols
OVERLAPS = ("none", "tp", "ep")                # tierlab.cost.system_cost: what runs beside compute
