"""Operator kernels: how each operator family walks memory (access descriptors and FLOPs).

One module per family: :mod:`kernels.embedding` (gather), :mod:`kernels.norm` (norms, rotary,
element-wise), :mod:`kernels.linear` (decode GEMV / prefill tiled GEMM), :mod:`kernels.attention`
(flash and naive, GQA/MQA/MLA-aware, KV append, sliding and chunked rings), :mod:`kernels.mlp`
(gated and ungated), :mod:`kernels.moe` (router, dispatch, experts, combine) and :mod:`kernels.ssm`
(Mamba / Gated DeltaNet convolution and scan over a fixed recurrent state). Each returns :class:`kernels.base.Op`
objects; :data:`ATTENTION` is the registry of attention kernels by name (all share one signature:
``kernel(name, q, o, key_caches, value_caches, *, scores=..., attn_tile=..., ...)``).
"""

from kernels.attention import flash_attention, naive_attention

ATTENTION = {"flash": flash_attention, "naive": naive_attention}
