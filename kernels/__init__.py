"""Operator kernels: how each operator family walks memory (access descriptors and FLOPs)."""
