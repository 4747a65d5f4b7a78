"""The KV copies between conversation turns in the one-device lowering (``run.kv_offload``, see
:mod:`tierlab.traces.lowering.generate`): :class:`KVOffload` is a part :class:`tierlab.traces.lowering.device.Lowering`
makes of itself (``low``). It declares a twin of every KV tensor (and of the indexer's keys), kind ``kv_offload``, and
writes the ops of a copy segment (``offload`` or ``restore``) through the lowering's ``emit``.
"""

from __future__ import annotations

from tierlab.kernels import attention as attn
from tierlab.kernels.base import Op, Ten
from tierlab.traces.workload.segments import Segment


class KVOffload:
    """The KV tensors' ``kv_offload`` twins and the copies between them, given the lowering ``low``."""

    def __init__(self, low):
        self.low = low
        self.twins: dict[int, list[attn.Cache]] = {}     # layer -> the twins of its KV caches
        self.index_twins: dict[int, attn.Cache] = {}      # layer -> the twin of its index keys

    def declare(self) -> None:
        """A twin of every KV tensor (same size and layout), kind ``kv_offload``, declared last so the
        other tensors keep their ids."""
        low = self.low
        parts = ["latent"] if low.spec.attention == "mla" else ["k", "v"]
        for i, layer in low.caches.items():
            twins = []
            for c, part in zip(layer, parts):
                twins.append(c._replace(ten=Ten(low.w.add_tensor(f"layers.{i}.kv_offload.{part}", "kv_offload",
                                                                 c.ten.nbytes, low.run.kv, i, device=low.device),
                                                c.ten.nbytes)))
            self.twins[i] = twins
        for i, c in low.index_caches.items():      # the indexer's keys go with the KV they pick from
            self.index_twins[i] = c._replace(ten=Ten(low.w.add_tensor(f"layers.{i}.kv_offload.index", "kv_offload",
                                                                      c.ten.nbytes, low.run.kv, i, device=low.device),
                                                     c.ten.nbytes))

    def copy(self, seg: Segment) -> None:
        """One op per layer copying positions ``start .. start+tokens-1`` of every sequence between
        each KV tensor and its ``kv_offload`` twin (``offload``: KV -> twin; ``restore``: back)."""
        low = self.low
        for i, layer in low.caches.items():
            op = Op(f"kv_{seg.action}", f"kv_{seg.action}", 0, 0)
            pairs = list(zip(layer, self.twins[i])) + ([(low.index_caches[i], self.index_twins[i])]
                                                       if i in self.index_twins else [])
            for c, o in pairs:
                src, dst = (c, o) if seg.action == "offload" else (o, c)
                attn.read_positions(op, src, 0, seg.start, seg.start + seg.tokens, count=low.B)
                attn.read_positions(op, dst, 0, seg.start, seg.start + seg.tokens, count=low.B, write=True)
            low.emit(op, i, seg)
