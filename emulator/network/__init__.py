"""The network between chips: collective algorithms as small registered modules (ring, tree, direct,
hierarchical, in-network reduction), each giving per-rank bytes, steps, time and energy on a
system's fabrics.
"""
