"""The network between chips: collective algorithms as small registered modules (ring, tree, direct,
hierarchical, in-network reduction), each giving per-rank bytes, steps, time and energy on a
system's fabrics.

The entry is :func:`tierlab.network.collective.plan_collective`; the types and the accounting are in
:mod:`tierlab.network.schedule`, the table of algorithms in :mod:`tierlab.network.registry`, the
``auto`` rule in :mod:`tierlab.network.auto`. ``docs/collectives.md`` gives the closed forms.
"""
