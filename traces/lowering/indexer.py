"""DeepSeek-V3.2's lightning indexer in the one-device lowering: :class:`SparseIndexer` is a part
:class:`tierlab.traces.lowering.device.Lowering` makes of itself (``low``; its tensors, ``lin``, ``norm``,
``declare_act`` and the layer's index cache, tensor kind ``kv_index``, are the lowering's), called from the MLA
attention block before the rotary.
"""

from __future__ import annotations

from tierlab.kernels import attention as attn
from tierlab.kernels import norm as norm_k
from tierlab.kernels.base import Op
from tierlab.traces.workload.segments import Segment


class SparseIndexer:
    """The indexer's ops of an MLA layer, given the lowering ``low``."""

    def __init__(self, low):
        self.low = low

    def declare_activations(self, m: int) -> dict:
        """The indexer's scratch buffers of ``m`` rows: its queries, its key, its per-head weights."""
        low, s = self.low, self.low.spec
        return {name: low.declare_act(name, m, width)
                for name, width in (("index_q", s.index_heads * s.index_head_dim), ("index_k", s.index_head_dim),
                                     ("index_w", s.index_heads))}

    def ops(self, i: int, X: str, m: int, seg: Segment) -> list[Op]:
        """DeepSeek-V3.2's lightning indexer: its queries from the query latent (wq_b), its key (wk, a
        LayerNorm), the rotary of their first qk_rope_head_dim, the key appended to the layer's index cache,
        the per-head weights (weights_proj) and the scoring over every cached index key, which picks the
        index_topk KV rows the attention reads."""
        low = self.low
        s, a, ab, cache = low.spec, low.act, low.ab, low.index_caches[i]
        D, rope = s.index_head_dim, s.qk_rope_head_dim
        return [low.lin("indexer.wq_b", X + "wq_b", "q_latent", "index_q", m, seg),
                low.lin("indexer.wk", X + "wk", "norm", "index_k", m, seg),
                low.norm("indexer.k_norm", X + "k_norm", "index_k", "index_k", m, D),
                norm_k.rotary("rotary", [a["index_q"], a["index_k"]], [s.index_heads * rope, rope], m=m, act_bytes=ab),
                attn.kv_append("index_append", [(a["index_k"], D * ab)], [cache], batch=low.mb, start=seg.start,
                               t=seg.tokens),
                low.lin("indexer.weights_proj", X + "weights_proj", "norm", "index_w", m, seg),
                attn.index_scores("index_scores", a["index_q"], a["index_w"], cache, batch=low.mb, start=seg.start,
                                  t=seg.tokens, heads=s.index_heads, dim=D, act_bytes=ab)]
