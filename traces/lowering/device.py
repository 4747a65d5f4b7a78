"""The one-device lowering: :class:`Lowering` declares a model's tensors and writes the ops of each
segment (the execution order and tensors are described in :mod:`tierlab.traces.lowering.generate`).

It is built by composition: it makes its parts, each given the lowering itself (``low``), and calls them where
a layer needs them: the recurrent mixers (:mod:`tierlab.traces.lowering.recurrent`), DeepSeek-V3.2's indexer
(:mod:`tierlab.traces.lowering.indexer`), the KV copies between turns (:mod:`tierlab.traces.lowering.kv_offload`)
and, for a spec with a Gemma 4 layout, Gemma 4's layer in place of the generic one
(:mod:`tierlab.traces.lowering.gemma4_layer`). The parts read the lowering's tensors and build on its public ops
(``lin``, ``norm``, ``mlp``, ``embed``, ``attention_block``, ``emit``, ``declare_act``). A serving step's part
(:class:`tierlab.traces.lowering.serving_step.ServingStep`, made by the ``serving`` callable) declares the KV,
rewrites each attention block's KV append and attention, and writes the ops. The sharded lowering
(:mod:`tierlab.traces.lowering.sharded`) runs one per device over the device's local model.
"""

from __future__ import annotations

import numpy as np

from tierlab.kernels.attention import ATTENTION
from tierlab.kernels import attention as attn
from tierlab.kernels import embedding as emb
from tierlab.kernels import linear as lin
from tierlab.kernels import mlp as mlp_k
from tierlab.kernels import moe as moe_k
from tierlab.kernels import norm as norm_k
from tierlab.kernels.base import Op, Ten
from tierlab.traces.model.dtypes import DTYPE_BITS, activation_storage, nbytes_of, scale_bytes
from tierlab.traces.model.weight_formats import weight_tensors
from tierlab.common.errors import UsageError
from tierlab.traces.lowering.gemma4_layer import Gemma4Layer
from tierlab.traces.lowering.indexer import SparseIndexer
from tierlab.traces.lowering.kv_offload import KVOffload
from tierlab.traces.lowering.recurrent import RecurrentMixers
from tierlab.traces.workload.routing import Router, log_routes
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.workload.segments import COPY_ACTIONS, Segment
from tierlab.traces.model.spec import ModelSpec, WeightShape
from tierlab.traces.format.writer import TraceWriter


class Lowering:
    """One device's lowering of ``segments`` into ``w``. ``serving``: a callable making a serving step's part
    given the lowering (:class:`tierlab.traces.lowering.serving_step.ServingStep`), or None for a run's segments."""

    def __init__(self, spec: ModelSpec, run: RunConfig, w: TraceWriter, segments: list[Segment], *, serving=None):
        self.spec, self.run, self.w = spec, run, w
        self.recurrent, self.indexer = RecurrentMixers(self), SparseIndexer(self)
        self.gemma4 = Gemma4Layer(self) if spec.gemma4 else None      # the family's layer, else the generic one
        self.serving = serving(self) if serving is not None else None
        self._init_shard()
        if self.serving is not None:      # the step's sequences in the KV cache; its T tokens T rows of an op
            self.B, self.mb = self.serving.step.sequences, 1
        # rows of logits: each sequence's last token's (a serving step: the sampling sequences', as if gathered)
        self.logit_rows = max(1, self.serving.step.sample) if self.serving is not None else self.mb
        self.ab = DTYPE_BITS[activation_storage(run.activations)] // 8
        compute = [s for s in segments if s.action == "compute"]
        self.max_m = self.mb * max(s.tokens for s in compute)
        self.router = Router(run.router, run.seed, spec.num_experts, spec.num_experts_per_tok) \
            if spec.num_experts else None
        self.weights: dict[str, tuple[Ten, Ten | None]] = {}
        self.routing_log = None
        self.logged_prefill: dict[int, int] = {}   # layer -> prefill tokens already in the routing log
        # KV positions per sequence: enough for every segment (a multi-turn plan may go further than run)
        self.positions = max(max(s.start + s.tokens for s in segments), run.max_positions)
        self._declare_weights()
        if self.serving is not None:
            self.serving.declare_kv()
        else:
            self._declare_kv()
        self._declare_activations(compute)
        self.kv_offload = KVOffload(self)      # the KV's twins and the copies between conversation turns
        if any(s.action in COPY_ACTIONS for s in segments):
            self.kv_offload.declare()

    def _init_shard(self) -> None:
        """One device holding the whole model (a sharded lowering overrides this)."""
        self.device = 0
        self.B = self.mb = self.run.batch          # sequences in the KV cache / per op (a microbatch)
        self.layers = range(self.spec.num_layers)

    def _weight_shapes(self):
        return self.spec.weight_shapes()

    # ---- tensors ------------------------------------------------------------------------------
    def _declare_weights(self) -> None:
        """Each weight tensor (:func:`tierlab.traces.model.weight_formats.weight_tensors`) and, after it, its scale and
        zero-point tensors; ``weights[name]`` = (tensor, None | its one aux tensor | a tuple of them)."""
        run, dev = self.run, self.device
        self.wdtype: dict[str, str] = {}
        for t in weight_tensors(self.spec, run.weights, run.quant_group, shapes=self._weight_shapes()):
            s = t.shape
            ten = Ten(self.w.add_tensor(s.name, "weight", t.nbytes, t.dtype, s.layer, s.expert, device=dev), t.nbytes)
            aux = tuple(Ten(self.w.add_tensor(s.name + suffix, "weight", nb, d, s.layer, s.expert, device=dev), nb)
                        for suffix, d, nb in t.aux)
            self.weights[s.name] = (ten, aux[0] if len(aux) == 1 else (aux or None))
            self.wdtype[s.name] = t.dtype
        embed = WeightShape("embed_tokens", -1, -1, self.spec.vocab_size, self.spec.hidden_size)   # a sharded
        # device may not hold it; its dtype all the same
        d = weight_tensors(self.spec, run.weights, run.quant_group, shapes=[embed])[0].dtype
        self.embed_row_bytes = nbytes_of(self.spec.hidden_size, d)
        self.embed_scale_row_bytes = scale_bytes(1, self.spec.hidden_size, d, run.quant_group)

    def _declare_kv(self) -> None:
        """KV caches of the attention layers (a ring of at most window / chunk rows on sliding and
        chunked layers; none on a layer reading another's, Gemma 4's KV-shared) and the recurrent state of
        the Mamba layers (kind ``state``)."""
        spec, run = self.spec, self.run
        self.caches: dict[int, list[attn.Cache]] = {}
        self.states: dict[int, tuple[Ten, Ten]] = {}
        self.index_caches: dict[int, attn.Cache] = {}
        for i in self.layers:
            if spec.keeps_state(i):
                conv, ssm = (nbytes_of(e, run.kv) for e in spec.state_elements())
                self.states[i] = tuple(Ten(self.w.add_tensor(f"layers.{i}.state.{p}", "state", self.B * n, run.kv, i,
                                                             device=self.device), self.B * n)
                                       for p, n in (("conv", conv), ("ssm", ssm)))
            if not spec.attends(i) or not spec.layer_kv_row(i):
                continue
            parts = ["latent"] if spec.attention == "mla" else ["k", "v"]
            row = nbytes_of(spec.layer_kv_row(i), run.kv) // len(parts)
            rows = spec.kv_rows(i, self.positions)
            stride = rows * row
            layer = []
            for p in parts:
                nb = self.B * stride
                layer.append(attn.Cache(Ten(self.w.add_tensor(f"layers.{i}.kv.{p}", "kv", nb, run.kv, i,
                                                              device=self.device), nb), row, stride,
                                        rows if rows < self.positions else 0))
            self.caches[i] = layer
            if spec.index_head_dim:      # the sparse-attention indexer's keys, every position (kind kv_index)
                row = spec.index_row_bytes(run.kv)
                nb = self.B * self.positions * row
                self.index_caches[i] = attn.Cache(Ten(self.w.add_tensor(f"layers.{i}.kv.index", "kv_index", nb, run.kv,
                                                                         i, device=self.device), nb),
                                                  row, self.positions * row, 0)

    def declare_act(self, name: str, rows: int, width: int) -> Ten:
        """The scratch buffer ``act.<name>`` of ``rows x width`` elements, or of ``act_least[name]`` if more
        (buffer -> elements: Gemma 4's widest layer)."""
        nb = max(1, max(rows * width, self.act_least.get(name, 0)) * self.ab)
        return Ten(self.w.add_tensor(f"act.{name}", "activation", nb, activation_storage(self.run.activations),
                                     device=self.device), nb)

    def _declare_activations(self, segments: list[Segment]) -> None:
        s, m, B = self.spec, self.max_m, self.mb
        h = s.hidden_size
        self.act_least = self.gemma4.least_elements(segments) if self.gemma4 is not None else {}
        a = {}
        a["hidden"] = self.declare_act("hidden", m, h)
        a["norm"] = self.declare_act("norm", m, h)
        if s.norm_layout == "parallel2":
            a["norm_mlp"] = self.declare_act("norm_mlp", m, h)
        if any(s.keeps_state(i) for i in self.layers):
            a.update(self.recurrent.declare_activations(m))
        if s.attention == "mla":
            self.q_width = s.num_heads * (s.qk_nope_head_dim + s.qk_rope_head_dim)
            self.o_width = s.num_heads * s.v_head_dim
            if s.q_lora_rank:
                a["q_latent"] = self.declare_act("q_latent", m, s.q_lora_rank)
            a["kv_latent"] = self.declare_act("kv_latent", m, s.kv_lora_rank + s.qk_rope_head_dim)
            if s.index_head_dim:
                a.update(self.indexer.declare_activations(m))
        else:
            self.q_width = self.o_width = s.num_heads * s.head_dim
            a["k"] = self.declare_act("k", m, s.num_kv_heads * s.head_dim)
            a["v"] = self.declare_act("v", m, s.num_kv_heads * s.head_dim)
        a["q"] = self.declare_act("q", m, 2 * self.q_width if s.attn_output_gate else self.q_width)
        a["attn"] = self.declare_act("attn", m, self.o_width)
        a["attn_out"] = self.declare_act("attn_out", m, h)
        dense_f = [s.intermediate_size for i in self.layers if not s.is_moe(i)]
        dense_f.append(s.moe_intermediate_size * s.num_shared_experts)
        f = max(dense_f)
        if f:
            for n in ("mlp_gate", "mlp_up", "mlp_act"):
                a[n] = self.declare_act(n, m, f)
        a["mlp_out"] = self.declare_act("mlp_out", m, h)
        if s.num_experts:
            k = s.num_experts_per_tok
            a["router_logits"] = self.declare_act("router_logits", m, s.num_experts)
            lw = s.moe_latent_size or h
            a["moe_dispatch"] = self.declare_act("moe_dispatch", m * k, lw)
            a["moe_inter"] = self.declare_act("moe_inter", m * k, s.moe_intermediate_size)
            a["moe_out"] = self.declare_act("moe_out", m * k, lw)
            if s.moe_latent_size:     # Nemotron-H's latent MoE: the tokens in and the experts' sum out
                a["moe_latent"] = self.declare_act("moe_latent", m, lw)
                a["moe_up"] = self.declare_act("moe_up", m, h)
        a["logits"] = self.declare_act("logits", self.logit_rows, s.vocab_size)
        if self.run.attention == "naive":
            rect = 0
            spans = {s.layer_span(i) for i in self.layers if s.attends(i)}
            for seg, (kind, span) in ((g, x) for g in segments for x in spans):
                lo = attn.key_range(seg.start, span if kind == "sliding" else None,
                                    span if kind == "chunked" else None)[0]
                keys = seg.start + seg.tokens - lo
                rect = max(rect, (B if seg.tokens == 1 else 1) * s.num_heads * seg.tokens * keys)
            a["scores"] = self.declare_act("scores", rect, 1)
        self.act = a
        if self.gemma4 is not None:
            self.gemma4.declare_activations()

    # ---- ops ----------------------------------------------------------------------------------
    def emit(self, ops: list[Op] | Op, layer: int, seg: Segment) -> None:
        """Write ``ops`` (of ``layer``, -1: none) of ``seg`` and their accesses to the trace."""
        if self.serving is not None:
            return self.serving.emit(ops, layer)
        w = self.w
        for op in ops if isinstance(ops, list) else [ops]:
            oid = w.add_op(op.name, op.kind, layer, seg.phase, seg.step, op.tokens, op.flops, op.expert,
                           op.pim_eligible)
            for a in op.accesses:
                w.add_access(oid, a.tensor, a.offset, a.nbytes, a.count, a.stride, a.is_write)

    def lin(self, name: str, wname: str, x: str, y: str, m: int, seg: Segment, **kw) -> Op:
        wt, sc = self.weights[wname]
        bias = self.weights.get(wname + ".bias", (None,))[0]
        rows, cols = self._shape[wname]
        return lin.linear(name, wt, self.act[x], self.act[y], m=m, in_features=cols, out_features=rows,
                          act_bytes=self.ab, phase=seg.phase, tile_m=self.run.tile_m, tile_n=self.run.tile_n,
                          scales=sc, bias=bias, **kw)

    def _fused_lin(self, name: str, wnames: list[str], x: str, ys: list[str], m: int, seg: Segment) -> Op:
        """Projections a checkpoint stores side by side (``spec.fused``), as one GEMM reading ``x`` once."""
        parts = []
        for wname, y in zip(wnames, ys):
            wt, sc = self.weights[wname]
            parts.append((wt, sc, self.weights.get(wname + ".bias", (None,))[0], self.act[y], self._shape[wname][0]))
        return lin.fused_linear(name, parts, self.act[x], m=m, in_features=self._shape[wnames[0]][1],
                                act_bytes=self.ab, phase=seg.phase, tile_m=self.run.tile_m, tile_n=self.run.tile_n)

    @property
    def _shape(self) -> dict[str, tuple[int, int]]:
        if not hasattr(self, "_shapes"):
            self._shapes = {s.name: (s.rows, s.cols) for s in self.spec.weight_shapes()}
        return self._shapes

    def norm(self, name: str, gain: str, x: str, y: str, m: int, width: int, **kw) -> Op:
        """RMSNorm, or LayerNorm when the model's norms carry a bias (``<gain>.bias``)."""
        bias = self.weights.get(gain + ".bias", (None,))[0]
        return norm_k.rmsnorm(name, self.act[x], self.act[y], self.weights[gain][0], m=m, width=width,
                              act_bytes=self.ab, bias=bias, **kw)

    def segment(self, seg: Segment) -> None:
        if seg.action in COPY_ACTIONS:
            return self.kv_offload.copy(seg)
        if seg.action != "compute":
            raise UsageError(f"unknown segment action {seg.action!r}", field="segments")
        if self.serving is not None:      # a serving step: its T tokens as one segment
            seg = self.serving.kernel_seg
        if self.gemma4 is not None and self.gemma4.slices(seg):
            return self.gemma4.segment(seg)
        s, B, h, t = self.spec, self.run.batch, self.spec.hidden_size, seg.tokens
        m = B * t
        self.emit(self.embed(seg), -1, seg)
        for i in range(s.num_layers):
            self.emit(self._layer(i, f"layers.{i}.", m, seg), i, seg)
        ops = [self.norm("norm", "norm", "hidden", "norm", m, h)]
        head = "embed_tokens" if s.tie_word_embeddings else "lm_head"
        last = {} if self.serving else dict(x_offset=(t - 1) * h * self.ab, x_stride=t * h * self.ab if t > 1 else 0)
        ops.append(self.lin("lm_head", head, "norm", "logits", self.logit_rows, seg, **last))
        self.emit(ops, -1, seg)

    def token_ids(self, seg: Segment) -> np.ndarray:
        """The segment's ``batch x tokens`` token ids (seeded by the run's seed and the step)."""
        key = [self.run.seed, 7, seg.step + 1]
        return np.random.default_rng(key).integers(0, self.spec.vocab_size, self.run.batch * seg.tokens)

    def embed(self, seg: Segment) -> Op:
        """The embedding gather of the segment's tokens, and the position rows where the model learns them."""
        s, B, h = self.spec, self.run.batch, self.spec.hidden_size
        table, tsc = self.weights["embed_tokens"]
        op = emb.embedding("embed_tokens", table, self.act["hidden"], self.token_ids(seg),
                           row_bytes=self.embed_row_bytes, act_row_bytes=h * self.ab, scales=tsc,
                           scale_row_bytes=self.embed_scale_row_bytes)
        if s.learned_positions:   # the position rows of the segment, once per sequence, added in
            row = nbytes_of(h, self.wdtype["embed_positions"])
            first = seg.start + s.learned_positions - s.max_position_embeddings   # OPT's offset of 2
            op.accesses.insert(len(op.accesses) - 1, op.accesses[0]._replace(
                tensor=self.weights["embed_positions"][0].id, offset=first * row, nbytes=seg.tokens * row,
                count=B, stride=0))
            op.flops += B * seg.tokens * h
        return op

    def _layer(self, i: int, p: str, m: int, seg: Segment) -> list[Op]:
        """One decoder layer: its norms in the model's layout, the mixer (attention or Mamba), the MLP
        or MoE block, and the residual adds (a spec with a Gemma 4 layout: Gemma 4's layer)."""
        if self.gemma4 is not None:
            return self.gemma4.layer(i, p, m, seg)
        s, a, h, ab = self.spec, self.act, self.spec.hidden_size, self.ab

        def add(x: str) -> Op:
            return norm_k.elementwise("residual_add", [a["hidden"], a[x]], a["hidden"], m=m, width=h, act_bytes=ab)

        if s.norm_layout == "post":
            return self._post_norm_layer(i, p, m, seg, add)
        ops = [self.norm("input_layernorm", p + "input_layernorm", "hidden", "norm", m, h)]
        if s.norm_layout == "block" and not s.attends(i) and not s.keeps_state(i):   # Nemotron-H's MLP / MoE
            ops += self._moe_block(i, p, m, seg) if s.is_moe(i) else self.mlp(p + "mlp.", s.intermediate_size, m, seg)
            ops.append(add("mlp_out"))
            return ops
        if s.ssm_parallel:                                  # Falcon-H1: Mamba-2 || attention, added in
            ops += self.recurrent.parallel_mixers(i, p, m, seg)
        else:
            ops += self.recurrent.mamba_block(i, p, m, seg) if s.keeps_state(i) else self.attention_block(i, p, m, seg)
        if s.norm_layout in ("mixer", "block"):             # Mamba-2, Nemotron-H: a layer is its mixer alone
            ops.append(add("attn_out"))
            return ops
        if s.norm_layout in ("parallel", "parallel2"):     # Falcon: attention and MLP of the same input
            x = "norm"
            if s.norm_layout == "parallel2":
                ops.append(self.norm("ln_mlp", p + "ln_mlp", "hidden", "norm_mlp", m, h))
                x = "norm_mlp"
            ops += self.mlp(p + "mlp.", s.intermediate_size, m, seg, x=x)
            ops.append(norm_k.elementwise("residual_add", [a["hidden"], a["attn_out"], a["mlp_out"]], a["hidden"],
                                          m=m, width=h, act_bytes=ab, flops_per_element=2))   # two sums
            return ops
        if s.norm_layout == "sandwich":                     # Gemma: norms after each block too
            ops.append(self.norm("post_attention_layernorm", p + "post_attention_layernorm", "attn_out", "attn_out",
                                 m, h))
            ops.append(add("attn_out"))
            ops.append(self.norm("pre_feedforward_layernorm", p + "pre_feedforward_layernorm", "hidden", "norm", m, h))
        else:
            ops += [] if s.ssm_parallel else [add("attn_out")]
            ops.append(self.norm("post_attention_layernorm", p + "post_attention_layernorm", "hidden", "norm", m, h))
        ops += self._moe_block(i, p, m, seg) if s.is_moe(i) else self.mlp(p + "mlp.", s.intermediate_size, m, seg)
        if s.norm_layout == "sandwich":
            ops.append(self.norm("post_feedforward_layernorm", p + "post_feedforward_layernorm", "mlp_out", "mlp_out",
                                 m, h))
        ops.append(add("mlp_out"))
        return ops

    def _post_norm_layer(self, i: int, p: str, m: int, seg: Segment, add) -> list[Op]:
        """OLMo 2's layer (EXAONE 4's): the blocks read the residual stream itself; each block's output is
        normed (in place) before its residual add. The blocks' input buffer is the residual (``hidden``)."""
        s, h, act = self.spec, self.spec.hidden_size, self.act
        self.act = {**act, "norm": act["hidden"]}
        try:
            ops = self.attention_block(i, p, m, seg)
            ops.append(self.norm("post_attention_layernorm", p + "post_attention_layernorm", "attn_out", "attn_out",
                                 m, h))
            ops.append(add("attn_out"))
            ops += self._moe_block(i, p, m, seg) if s.is_moe(i) else self.mlp(p + "mlp.", s.intermediate_size, m, seg)
            ops.append(self.norm("post_feedforward_layernorm", p + "post_feedforward_layernorm", "mlp_out",
                                 "mlp_out", m, h))
            ops.append(add("mlp_out"))
        finally:
            self.act = act
        return ops

    def mlp(self, prefix: str, ffn: int, m: int, seg: Segment, name: str = "mlp.", x: str = "norm") -> list[Op]:
        a = self.act
        names = ("gate_proj", "up_proj", "down_proj") if self.spec.mlp_gated else ("up_proj", "down_proj")
        weights = {k: self.weights[prefix + k] for k in names}
        biases = {k: self.weights[prefix + k + ".bias"][0] for k in names if prefix + k + ".bias" in self.weights}
        ops = mlp_k.mlp(name, a[x], a["mlp_out"], a.get("mlp_gate"), a["mlp_up"], a["mlp_act"], weights, m=m,
                        hidden=self.spec.hidden_size, ffn=ffn, act_bytes=self.ab, phase=seg.phase,
                        tile_m=self.run.tile_m, tile_n=self.run.tile_n, gated=self.spec.mlp_gated, biases=biases)
        if "gate_up" in self.spec.fused and self.spec.mlp_gated:
            # Phi-3's gate_up_proj: gate and up as one GEMM (the ops were gate, up, act, down)
            ops[:2] = [self._fused_lin(name + "gate_up_proj", [prefix + "gate_proj", prefix + "up_proj"], x,
                                       ["mlp_gate", "mlp_up"], m, seg)]
        return ops

    def attention_block(self, i: int, p: str, m: int, seg: Segment) -> list[Op]:
        s, run, a, ab = self.spec, self.run, self.act, self.ab
        A = p + "self_attn."
        ops: list[Op] = []
        caches = self.caches[i]
        if s.attention == "mla":
            if s.q_lora_rank:
                ops.append(self.lin("q_a_proj", A + "q_a_proj", "norm", "q_latent", m, seg))
                ops.append(self.norm("q_a_layernorm", A + "q_a_layernorm", "q_latent", "q_latent", m, s.q_lora_rank))
                ops.append(self.lin("q_b_proj", A + "q_b_proj", "q_latent", "q", m, seg))
            else:
                ops.append(self.lin("q_proj", A + "q_proj", "norm", "q", m, seg))
            lat_w = s.kv_lora_rank + s.qk_rope_head_dim
            ops.append(self.lin("kv_a_proj_with_mqa", A + "kv_a_proj_with_mqa", "norm", "kv_latent", m, seg))
            ops.append(self.norm("kv_a_layernorm", A + "kv_a_layernorm", "kv_latent", "kv_latent", m, s.kv_lora_rank,
                                 row_stride=lat_w * ab))
            if s.index_head_dim:
                ops += self.indexer.ops(i, A + "indexer.", m, seg)
            # only the rope dimensions turn: rope of each query head, and the shared rope key (Kimi-Linear's
            # MLA turns none: its full layers are NoPE)
            if not (s.nope_full_layers and s.layer_kind(i) == "full"):
                ops.append(norm_k.rotary("rotary", [a["q"], a["kv_latent"]], [s.num_heads * s.qk_rope_head_dim,
                                         s.qk_rope_head_dim], m=m, act_bytes=ab))
            ops.append(attn.kv_append("kv_append", [(a["kv_latent"], lat_w * ab)], caches, batch=self.mb,
                                      start=seg.start, t=seg.tokens))
            kvb, kvb_sc = self.weights[A + "kv_b_proj"]
            extra = tuple(x for x in (kvb, kvb_sc) if x is not None)
            dims = dict(score_dim=s.kv_lora_rank + s.qk_rope_head_dim, value_dim=s.kv_lora_rank)
            absorb = 2 * m * s.num_heads * s.kv_lora_rank * (s.qk_nope_head_dim + s.v_head_dim)
        else:
            kvw = s.num_kv_heads * s.head_dim
            if "qkv" in s.fused:
                ops.append(self._fused_lin("qkv_proj", [A + "q_proj", A + "k_proj", A + "v_proj"], "norm",
                                           ["q", "k", "v"], m, seg))
            else:
                ops.append(self.lin("q_proj", A + "q_proj", "norm", "q", m, seg))
                ops.append(self.lin("k_proj", A + "k_proj", "norm", "k", m, seg))
                ops.append(self.lin("v_proj", A + "v_proj", "norm", "v", m, seg))
            rope = not s.learned_positions and not (s.nope_full_layers and s.layer_kind(i) == "full") \
                and i not in s.nope_layers
            if s.qk_norm == "head":
                ops.append(self.norm("q_norm", A + "q_norm", "q", "q", m * s.num_heads, s.head_dim))
                ops.append(self.norm("k_norm", A + "k_norm", "k", "k", m * s.num_kv_heads, s.head_dim))
            elif s.qk_norm == "full":         # OLMoE: over all heads of the token
                ops.append(self.norm("q_norm", A + "q_norm", "q", "q", m, self.q_width))
                ops.append(self.norm("k_norm", A + "k_norm", "k", "k", m, kvw))
            elif s.qk_norm == "l2" and rope:  # Llama 4: an RMS norm without a gain, per head, where rotary turns
                for name, x, heads in (("q_norm", "q", s.num_heads), ("k_norm", "k", s.num_kv_heads)):
                    ops.append(norm_k.rmsnorm(name, a[x], a[x], None, m=m * heads, width=s.head_dim, act_bytes=ab))
            if rope:
                rd = s.rotary_dim or s.head_dim        # partial rotary: the first rotary_dim of each head turn
                ops.append(norm_k.rotary("rotary", [a["q"], a["k"]], [s.num_heads * rd, s.num_kv_heads * rd], m=m,
                                         act_bytes=ab))
            ops.append(attn.kv_append("kv_append", [(a["k"], kvw * ab), (a["v"], kvw * ab)], caches,
                                      batch=self.mb, start=seg.start, t=seg.tokens))
            extra = (self.weights[A + "sinks"][0],) if s.sinks else ()
            dims = dict(score_dim=s.head_dim, value_dim=s.head_dim)
            absorb = 0
        kind, span = s.layer_span(i)
        common = dict(batch=self.mb, start=seg.start, t=seg.tokens, window=span if kind == "sliding" else None,
                      chunk=span if kind == "chunked" else None, heads=s.num_heads,
                      q_row_bytes=self.q_width * ab, o_row_bytes=self.o_width * ab, phase=seg.phase,
                      extra_reads=extra, topk=s.index_topk or None, **dims)
        keys, values = (caches, caches) if s.attention == "mla" else ([caches[0]], [caches[1]])
        att = ATTENTION[run.attention]("attention", a["q"], a["attn"], keys, values, act_bytes=ab,
                                       scores=a.get("scores"), attn_tile=run.attn_tile, **common)
        att[0].flops += absorb
        ops += att
        if s.attn_output_gate:      # Qwen3-Next: attention output times sigmoid(gate), the gate from q_proj
            ops.append(norm_k.elementwise("attn_gate", [a["attn"], a["q"]], a["attn"], m=m, width=self.o_width,
                                          act_bytes=ab, flops_per_element=5))
        ops.append(self.lin("o_proj", A + "o_proj", "attn", "attn_out", m, seg))
        return ops if self.serving is None else self.serving.attention(i, ops)

    def _moe_block(self, i: int, p: str, m: int, seg: Segment) -> list[Op]:
        s, a, ab = self.spec, self.act, self.ab
        h, k, E = s.hidden_size, s.num_experts_per_tok, s.num_experts
        M = p + "mlp."
        ops = [self.lin("mlp.gate", M + "gate", "norm", "router_logits", m, seg)]
        r = moe_k.route_op("mlp.route", a["router_logits"], m=m, n_experts=E, k=k, act_bytes=ab)
        if s.router_bias:
            r.read_all(self.weights[M + "gate.e_score_correction_bias"][0])
        ops.append(r)
        routes = self.router.route(i, seg.step, m)
        log_routes(self.routing_log, self.logged_prefill, i, seg.step, m, routes)
        counts = moe_k.expert_counts(routes, E)
        if s.num_shared_experts:
            ops += self.mlp(M + "shared_experts.", s.moe_intermediate_size * s.num_shared_experts, m, seg,
                            name="mlp.shared_experts.")
            if s.shared_expert_gate:   # Qwen2-MoE: a sigmoid gate (one output) on the shared expert
                ops.append(self.lin("mlp.shared_expert_gate", M + "shared_expert_gate", "norm", "router_logits",
                                    m, seg))
        lw, x_in = s.moe_latent_size or h, "norm"
        if s.moe_latent_size:        # the experts run in the latent width: fc1 projects the tokens down
            ops.append(self.lin("mlp.fc1_latent_proj", M + "fc1_latent_proj", "norm", "moe_latent", m, seg))
            x_in = "moe_latent"
        ops.append(moe_k.dispatch("mlp.dispatch", a[x_in], a["moe_dispatch"], m=m, k=k, row_bytes=lw * ab))
        first = 0
        for e in np.flatnonzero(counts).tolist():
            x = f"{M}experts.{e}."
            names = ("gate_proj", "up_proj", "down_proj") if s.mlp_gated else ("up_proj", "down_proj")
            ws = [self.weights[x + n] for n in names]
            bs = [self.weights[x + n + ".bias"][0] for n in names] if s.expert_bias else None
            if not s.mlp_gated:      # Nemotron-H's ReLU² experts: [up, None, down]
                ws.insert(1, (None, None))
                bs = bs and bs[:1] + [None] + bs[1:]
            ops.append(moe_k.expert_mlp("mlp.experts", e, [t for t, _ in ws], [c for _, c in ws], a["moe_dispatch"],
                                        a["moe_inter"], a["moe_out"], first_row=first, rows=int(counts[e]), hidden=lw,
                                        ffn=s.moe_intermediate_size, act_bytes=ab, phase=seg.phase,
                                        tile_m=self.run.tile_m, biases=bs, gated=s.mlp_gated))
            first += int(counts[e])
        if s.moe_latent_size:        # the experts' sum in the latent width, fc2 back up, the shared MLP's added
            ops.append(moe_k.combine("mlp.combine", a["moe_out"], a["moe_latent"], m=m, k=k, row_bytes=lw * ab,
                                     hidden=lw))
            up = "moe_up" if s.num_shared_experts else "mlp_out"
            ops.append(self.lin("mlp.fc2_latent_proj", M + "fc2_latent_proj", "moe_latent", up, m, seg))
            if s.num_shared_experts:
                ops.append(norm_k.elementwise("mlp.shared_add", [a["mlp_out"], a["moe_up"]], a["mlp_out"], m=m,
                                              width=h, act_bytes=ab))
            return ops
        comb = moe_k.combine("mlp.combine", a["moe_out"], a["mlp_out"], m=m, k=k, row_bytes=h * ab, hidden=h)
        if s.num_shared_experts:   # the shared experts' output, already in mlp_out, is added in
            comb.accesses.insert(1, comb.accesses[0]._replace(tensor=a["mlp_out"].id, nbytes=m * h * ab))
        ops.append(comb)
        return ops
