"""Gemma 4's layer in the one-device lowering (:mod:`tierlab.traces.model.gemma4`): :class:`Gemma4Layer` is a part
:class:`~tierlab.traces.lowering.device.Lowering` makes of itself (``low``) when the spec has a Gemma 4 layout
(``spec.gemma4``); the lowering then runs it in place of the generic layer, sizes its scratch buffers for Gemma 4's
widest layer (``act_least``) and has it lower a prefill past the KV-shared layers. Every other op (embedding, norms,
linear layers, the dense MLP) is the lowering's.

Per segment, after the embedding gather, the per-layer inputs (with ``hidden_size_per_layer_input``):
the gather of ``embed_tokens_per_layer`` rows (``layers * P`` each), ``per_layer_model_projection`` of the
embeddings, its RMSNorm over each layer's P, and their sum (scaled) into ``act.per_layer_inputs``. Per
layer: input norm; attention with the layer's own head width and KV heads (q_proj, k_proj, v_proj or
none with ``attention_k_eq_v``, q/k norms and the gainless v_norm, rotary over the whole head: Gemma 4's
proportional rotary turns every dimension, some at frequency 0; KV append) or, on a KV-shared layer,
q_proj, q_norm and rotary of q alone, attending over the cache of the layer it shares; o_proj; the
sandwich norms around the dense MLP; with the MoE block, the router over the residual (a gainless norm,
its ``scale``, ``proj``, top-k with ``per_expert_scale``), the experts over the residual's own norm, their
output norm, added to the MLP's; the per-layer input (gate, times the layer's slice, projection, norm,
residual add); ``layer_scalar`` scaling the layer's output. KV-shared layers declare no cache and, in a
prefill, run each sequence's last token only, as Gemma4TextModel does when it keeps the last logits
(``_maybe_slice_kv_shared_inputs``; Transformers' flash-attention path and engines that run the whole
prompt through them do more work there): the residual's last rows are gathered to its front first.
Transformers' embedding scales (``embed_scale``, ``per_layer_model_projection_scale``) are scalars folded
into the ops they follow, and the logit soft-cap a scalar too: no bytes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tierlab.kernels.attention import ATTENTION
from tierlab.kernels import attention as attn
from tierlab.kernels import embedding as emb
from tierlab.kernels import moe as moe_k
from tierlab.kernels import norm as norm_k
from tierlab.kernels.base import Op
from tierlab.traces.model.dtypes import nbytes_of, scale_bytes
from tierlab.traces.workload.routing import log_routes
from tierlab.traces.workload.segments import Segment


class Gemma4Layer:
    """Gemma 4's layer, given the lowering ``low`` of a spec with a Gemma 4 layout (``spec.gemma4``)."""

    def __init__(self, low):
        self.low = low

    # ---- buffers ------------------------------------------------------------------------------
    def least_elements(self, segments: list[Segment]) -> dict[str, int]:
        """Elements each generic buffer needs at least, for Gemma 4's widest layer (the lowering's
        ``act_least``): q, attn, k, v and the MLP's at ``max_m`` rows, and naive attention's scores (a
        prefill's KV-shared layers score each sequence's last query at once)."""
        low = self.low
        s, g, m = low.spec, low.spec.gemma4, low.max_m
        q = max(s.num_heads * x.head_dim for x in g.layers)
        kv = max(x.kv_heads * x.head_dim for x in g.layers)
        f = max(x.intermediate_size for x in g.layers)
        least = {name: m * w for name, w in dict(q=q, attn=q, k=kv, v=kv, mlp_gate=f, mlp_up=f, mlp_act=f).items()}
        least["scores"] = max([low.mb * s.num_heads * (x.start + x.tokens) for x in segments] + [0])
        return least

    def declare_activations(self) -> None:
        """After the generic buffers: the dense MLP's (every layer runs it, MoE or not), the per-layer
        inputs' and the MoE block's."""
        low = self.low
        s, g, m = low.spec, low.spec.gemma4, low.max_m
        f = max(x.intermediate_size for x in g.layers)
        a, h, P, n = low.act, s.hidden_size, g.per_layer_input, s.num_layers
        for name in ("mlp_gate", "mlp_up", "mlp_act"):
            a.setdefault(name, low.declare_act(name, m, f))
        if P:
            a["per_layer_inputs"] = low.declare_act("per_layer_inputs", m, n * P)
            a["per_layer_projection"] = low.declare_act("per_layer_projection", m, n * P)
            a["per_layer_gate"] = low.declare_act("per_layer_gate", m, P)
        if s.num_experts:
            a["router_in"] = low.declare_act("router_in", m, h)
            a["moe_sum"] = low.declare_act("moe_sum", m, h)

    # ---- ops ----------------------------------------------------------------------------------
    def first_shared(self) -> int | None:
        """The lowering's first KV-shared layer (None: none)."""
        return next((i for i in self.low.layers if self.low.spec.gemma4.shares_kv(i)), None)

    def slices(self, seg: Segment) -> bool:
        """Whether the compute segment ``seg`` is a prefill of several tokens reaching KV-shared layers
        (:meth:`segment` lowers it; any other segment is the lowering's generic one)."""
        return seg.tokens > 1 and self.first_shared() is not None

    def segment(self, seg: Segment) -> None:
        """A prefill of several tokens runs the KV-shared layers on each sequence's last token only, as
        Gemma4TextModel does when it keeps the last logits (``_maybe_slice_kv_shared_inputs``): those layers
        cache nothing, and only the last token's output reaches the LM head."""
        low, t, first = self.low, seg.tokens, self.first_shared()
        s, B, h = low.spec, low.run.batch, low.spec.hidden_size
        low.emit(low.embed(seg), -1, seg)
        last = replace(seg, start=seg.start + t - 1, tokens=1)
        for i in low.layers:
            if i == first:      # each sequence's last row of the residual (and of the per-layer inputs) on
                low.emit(self._last_rows(t), i, seg)
            low.emit(self.layer(i, f"layers.{i}.", B * t if i < first else B, seg if i < first else last), i, seg)
        low.emit([low.norm("norm", "norm", "hidden", "norm", B, h),
                  low.lin("lm_head", "embed_tokens" if s.tie_word_embeddings else "lm_head", "norm", "logits", B,
                          seg)], -1, seg)

    def _last_rows(self, t: int) -> Op:
        """Gather each sequence's last of ``t`` rows to the front of the residual and the per-layer inputs."""
        low = self.low
        a, ab, B = low.act, low.ab, low.run.batch
        op = Op("kv_shared_slice", "elementwise", B, 0)
        for name, width in (("hidden", low.spec.hidden_size),
                            ("per_layer_inputs", low.spec.num_layers * low.spec.gemma4.per_layer_input)):
            if width and name in a:
                row = width * ab
                op.read(a[name], (t - 1) * row, row, count=B, stride=t * row).write(a[name], 0, B * row)
        return op

    def _per_layer_inputs(self, m: int, seg: Segment) -> list[Op]:
        """The per-layer inputs of the segment's tokens (the token ids the embedding gathered)."""
        low = self.low
        s, g, run, a, ab = low.spec, low.spec.gemma4, low.run, low.act, low.ab
        width = s.num_layers * g.per_layer_input
        ids = low.token_ids(seg) % g.per_layer_vocab
        table, tsc = low.weights["embed_tokens_per_layer"]
        d = low.wdtype["embed_tokens_per_layer"]
        ops = [emb.embedding("embed_tokens_per_layer", table, a["per_layer_inputs"], ids,
                             row_bytes=nbytes_of(width, d), act_row_bytes=width * ab, scales=tsc,
                             scale_row_bytes=scale_bytes(1, width, d, run.quant_group)),
               low.lin("per_layer_model_projection", "per_layer_model_projection", "hidden", "per_layer_projection",
                       m, seg),
               low.norm("per_layer_projection_norm", "per_layer_projection_norm", "per_layer_projection",
                        "per_layer_projection", m * s.num_layers, g.per_layer_input),
               norm_k.elementwise("per_layer_inputs", [a["per_layer_projection"], a["per_layer_inputs"]],
                                  a["per_layer_inputs"], m=m, width=width, act_bytes=ab, flops_per_element=2)]
        return ops

    def layer(self, i: int, p: str, m: int, seg: Segment) -> list[Op]:
        """One Gemma 4 layer (see the module docstring); before the first, the per-layer inputs."""
        low = self.low
        s, g, a, h, ab = low.spec, low.spec.gemma4, low.act, low.spec.hidden_size, low.ab
        if i == low.layers[0] and g.per_layer_input:
            low.emit(self._per_layer_inputs(m, seg), -1, seg)

        def add(x: str) -> Op:
            return norm_k.elementwise("residual_add", [a["hidden"], a[x]], a["hidden"], m=m, width=h, act_bytes=ab)

        ops = [low.norm("input_layernorm", p + "input_layernorm", "hidden", "norm", m, h)]
        ops += self._attention(i, p, m, seg)
        ops += [low.norm("post_attention_layernorm", p + "post_attention_layernorm", "attn_out", "attn_out", m, h),
                add("attn_out"),
                low.norm("pre_feedforward_layernorm", p + "pre_feedforward_layernorm", "hidden", "norm", m, h)]
        ops += low.mlp(p + "mlp.", g.layers[i].intermediate_size, m, seg)
        if s.is_moe(i):
            ops += self._moe(i, p, m, seg)
        ops += [low.norm("post_feedforward_layernorm", p + "post_feedforward_layernorm", "mlp_out", "mlp_out", m, h),
                add("mlp_out")]
        if g.per_layer_input:
            P, n = g.per_layer_input, s.num_layers
            ops.append(low.lin("per_layer_input_gate", p + "per_layer_input_gate", "hidden", "per_layer_gate", m, seg))
            gate = Op("per_layer_input", "elementwise", m, 5 * m * P)      # act(gate) * this layer's slice
            gate.read(a["per_layer_gate"], 0, m * P * ab)
            gate.read(a["per_layer_inputs"], i * P * ab, P * ab, count=m, stride=n * P * ab)
            gate.write(a["per_layer_gate"], 0, m * P * ab)
            ops += [gate, low.lin("per_layer_projection", p + "per_layer_projection", "per_layer_gate", "attn_out",
                                  m, seg),
                    low.norm("post_per_layer_input_norm", p + "post_per_layer_input_norm", "attn_out", "attn_out",
                             m, h),
                    add("attn_out")]
        scale = norm_k.elementwise("layer_scalar", [a["hidden"]], a["hidden"], m=m, width=h, act_bytes=ab)
        ops.append(scale.read_all(low.weights[p + "layer_scalar"][0]))
        return ops

    def _attention(self, i: int, p: str, m: int, seg: Segment) -> list[Op]:
        low = self.low
        s, run, a, ab, x = low.spec, low.run, low.act, low.ab, low.spec.gemma4.layers[i]
        A, H, hd = p + "self_attn.", s.num_heads, x.head_dim
        kvw = x.kv_heads * hd
        own = x.kv_layer == i
        ops = [low.lin("q_proj", A + "q_proj", "norm", "q", m, seg)]
        if own:
            ops.append(low.lin("k_proj", A + "k_proj", "norm", "k", m, seg))
            if x.v_proj:
                ops.append(low.lin("v_proj", A + "v_proj", "norm", "v", m, seg))
        ops.append(low.norm("q_norm", A + "q_norm", "q", "q", m * H, hd))
        if own:     # V normed (no gain) before K is normed in place: with attention_k_eq_v V is K's projection
            ops.append(norm_k.rmsnorm("v_norm", a["v" if x.v_proj else "k"], a["v"], None, m=m * x.kv_heads,
                                      width=hd, act_bytes=ab))
            ops.append(low.norm("k_norm", A + "k_norm", "k", "k", m * x.kv_heads, hd))
            ops.append(norm_k.rotary("rotary", [a["q"], a["k"]], [H * hd, kvw], m=m, act_bytes=ab))
            ops.append(attn.kv_append("kv_append", [(a["k"], kvw * ab), (a["v"], kvw * ab)], low.caches[i],
                                      batch=low.mb, start=seg.start, t=seg.tokens))
        else:
            ops.append(norm_k.rotary("rotary", [a["q"]], [H * hd], m=m, act_bytes=ab))
        caches = low.caches[x.kv_layer]
        kind, span = s.layer_span(i)
        ops += ATTENTION[run.attention]("attention", a["q"], a["attn"], [caches[0]], [caches[1]], act_bytes=ab,
                                        scores=a.get("scores"), attn_tile=run.attn_tile, batch=low.mb,
                                        start=seg.start, t=seg.tokens, window=span if kind == "sliding" else None,
                                        heads=H, q_row_bytes=H * hd * ab, o_row_bytes=H * hd * ab, phase=seg.phase,
                                        score_dim=hd, value_dim=hd)
        ops.append(low.lin("o_proj", A + "o_proj", "attn", "attn_out", m, seg))
        return ops

    def _moe(self, i: int, p: str, m: int, seg: Segment) -> list[Op]:
        """The MoE block beside the dense MLP (whose output is in ``mlp_out``): routed from the residual,
        the experts over the residual's own norm; their normed output is added to the MLP's."""
        low = self.low
        s, a, ab, w = low.spec, low.act, low.ab, low.weights
        h, k, E = s.hidden_size, s.num_experts_per_tok, s.num_experts
        ops = [low.norm("post_feedforward_layernorm_1", p + "post_feedforward_layernorm_1", "mlp_out", "mlp_out",
                        m, h),
               norm_k.rmsnorm("router.norm", a["hidden"], a["router_in"], None, m=m, width=h, act_bytes=ab),
               norm_k.elementwise("router.scale", [a["router_in"]], a["router_in"], m=m, width=h, act_bytes=ab,
                                  flops_per_element=2).read_all(w[p + "router.scale"][0]),
               low.lin("router.proj", p + "router.proj", "router_in", "router_logits", m, seg)]
        ops.append(moe_k.route_op("router.route", a["router_logits"], m=m, n_experts=E, k=k, act_bytes=ab)
                   .read_all(w[p + "router.per_expert_scale"][0]))
        routes = low.router.route(i, seg.step, m)
        log_routes(low.routing_log, low.logged_prefill, i, seg.step, m, routes)
        ops.append(low.norm("pre_feedforward_layernorm_2", p + "pre_feedforward_layernorm_2", "hidden", "norm", m, h))
        ops.append(moe_k.dispatch("experts.dispatch", a["norm"], a["moe_dispatch"], m=m, k=k, row_bytes=h * ab))
        counts, first = moe_k.expert_counts(routes, E), 0
        for e in np.flatnonzero(counts).tolist():
            ws = [w[f"{p}experts.{e}.{n}"] for n in ("gate_proj", "up_proj", "down_proj")]
            ops.append(moe_k.expert_mlp("experts", e, [t for t, _ in ws], [c for _, c in ws], a["moe_dispatch"],
                                        a["moe_inter"], a["moe_out"], first_row=first, rows=int(counts[e]), hidden=h,
                                        ffn=s.moe_intermediate_size, act_bytes=ab, phase=seg.phase,
                                        tile_m=low.run.tile_m))
            first += int(counts[e])
        ops += [moe_k.combine("experts.combine", a["moe_out"], a["moe_sum"], m=m, k=k, row_bytes=h * ab, hidden=h),
                low.norm("post_feedforward_layernorm_2", p + "post_feedforward_layernorm_2", "moe_sum", "moe_sum",
                         m, h),
                norm_k.elementwise("moe_add", [a["mlp_out"], a["moe_sum"]], a["mlp_out"], m=m, width=h, act_bytes=ab)]
        return ops
