"""The network between chips: collective algorithms as small registered modules (ring, tree, direct,
hierarchical, in-network reduction), each giving per-rank bytes, steps, time and energy on a
system's fabrics.

The entry is :func:`emulator.network.collective.plan_collective`; the types and the accounting are in
:mod:`emulator.network.schedule`, the table of algorithms in :mod:`emulator.network.registry`, the
``auto`` rule in :mod:`emulator.network.auto`. ``docs/collectives.md`` gives the closed forms.
"""
