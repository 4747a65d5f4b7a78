"""DeepSeek-V3.2's lightning indexer in the one-device lowering: :class:`SparseIndexer` is a part of
:class:`tierlab.traces.lowering.device.Lowering` (its tensors, ``_lin``, ``_norm`` and the layer's index cache, tensor
kind ``kv_index``, are the lowering's), called from the MLA attention block before the rotary.
"""

from __future__ import annotations

from tierlab.kernels import attention as attn
from tierlab.kernels import norm as norm_k
from tierlab.kernels.base import Op
from tierlab.traces.workload.segments import Segment


class SparseIndexer:
    """The indexer's ops of an MLA layer (a mixin of the lowering)."""

    def _indexer(self, i: int, X: str, m: int, seg: Segment) -> list[Op]:
        """DeepSeek-V3.2's lightning indexer: its queries from the query latent (wq_b), its key (wk, a
        LayerNorm), the rotary of their first qk_rope_head_dim, the key appended to the layer's index cache,
        the per-head weights (weights_proj) and the scoring over every cached index key, which picks the
        index_topk KV rows the attention reads."""
        s, a, ab, cache = self.spec, self.act, self.ab, self.index_caches[i]
        D, rope = s.index_head_dim, s.qk_rope_head_dim
        return [self._lin("indexer.wq_b", X + "wq_b", "q_latent", "index_q", m, seg),
                self._lin("indexer.wk", X + "wk", "norm", "index_k", m, seg),
                self._norm("indexer.k_norm", X + "k_norm", "index_k", "index_k", m, D),
                norm_k.rotary("rotary", [a["index_q"], a["index_k"]], [s.index_heads * rope, rope], m=m, act_bytes=ab),
                attn.kv_append("index_append", [(a["index_k"], D * ab)], [cache], batch=self.mb, start=seg.start,
                               t=seg.tokens),
                self._lin("indexer.weights_proj", X + "weights_proj", "norm", "index_w", m, seg),
                attn.index_scores("index_scores", a["index_q"], a["index_w"], cache, batch=self.mb, start=seg.start,
                                  t=seg.tokens, heads=s.index_heads, dim=D, act_bytes=ab)]
