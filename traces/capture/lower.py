"""Lower a recorded run (:class:`tierlab.traces.capture.record.Capture`) through ``kernels/`` into a trace.

Tensors: every recorded weight (``named_parameters`` and persistent buffers, under their Hugging
Face names; an experts tensor ``[expert, out, in]`` as one tensor per expert, ``NAME.E``) in the
run's weights dtype (1-D ones in :func:`tierlab.traces.model.dtypes.vector_dtype`, group-quantised matrices with
their ``.scales``); per layer a K and a V cache tensor of ``batch x positions x row`` in the KV dtype,
with the row widths the cache object received; activation buffers per row width. Ops, per recorded
event (see :mod:`tierlab.traces.capture.opmap`): a linear module -> :func:`tierlab.kernels.linear.linear`; a norm ->
:func:`tierlab.kernels.norm.rmsnorm`; the embedding -> :func:`tierlab.kernels.embedding.embedding`; an activation
followed by a product -> the gated SiLU-and-multiply, else the ungated activation; a residual add
in a decoder layer -> an element-wise add; an attention call -> rotary (when the attention module
ran rotate_half's ``neg``), the KV append and :func:`tierlab.kernels.attention.flash_attention`; a router and
experts -> :mod:`tierlab.kernels.moe` with tokens routed by :class:`tierlab.traces.workload.routing.Router`.
"""

from __future__ import annotations


import numpy as np

from tierlab.common.errors import UsageError
from tierlab.kernels import attention as attn
from tierlab.kernels import embedding as emb
from tierlab.kernels import linear as lin
from tierlab.kernels import moe as moe_k
from tierlab.kernels import norm as norm_k
from tierlab.kernels.base import Op, Ten
from collections import Counter

from tierlab.traces.capture.opmap import ELEMENTWISE_ATEN, MOVES_NOTHING, ROTARY_CLASS, is_decoder_layer, layer_of
from tierlab.traces.capture.record import Capture
from tierlab.traces.capture.tensors import CaptureTensors, numel
from tierlab.traces.model.dtypes import DTYPE_BITS, activation_storage, nbytes_of, scale_bytes
from tierlab.traces.workload.routing import Router
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.format.writer import TraceWriter


class CaptureLowering(CaptureTensors):
    def __init__(self, cap: Capture, run: RunConfig, w: TraceWriter, positions: int):
        self.cap, self.run, self.w = cap, run, w
        self.ab = DTYPE_BITS[activation_storage(run.activations)] // 8
        self.B = run.batch
        self.weights: dict[str, tuple[Ten, Ten | None]] = {}
        self.experts: dict[str, list[tuple[Ten, Ten | None]]] = {}
        self.params = 0
        self._declare_weights()
        self._declare_kv(positions)
        self._declare_states()
        self._declare_activations()
        self.routers: dict[int, dict] = {}
        self.router = None
        self.unmapped: Counter = Counter()     # (operator, module class) -> times run, of what no op maps
        self._wide: dict[tuple[int, int], Ten] = {}
        self._touched: set[int] = set()       # tensor ids some op accessed

    # ---- tensors ------------------------------------------------------------------------------
    @property
    def _top_k(self) -> int:
        return max([m.get("top_k") or 0 for m in self.cap.modules.values()] + [self.cap.info.get("top_k") or 1, 1])

    # ---- ops ----------------------------------------------------------------------------------
    def _emit(self, ops, layer: int, seg) -> None:
        for op in ops if isinstance(ops, list) else [ops]:
            oid = self.w.add_op(op.name, op.kind, layer, seg.phase, seg.step, op.tokens, op.flops, op.expert,
                                op.pim_eligible)
            for a in op.accesses:
                self.w.add_access(oid, a.tensor, a.offset, a.nbytes, a.count, a.stride, a.is_write)
                self._touched.add(a.tensor)

    def unread_weights(self) -> list[str]:
        """Weights (not per-expert ones: a short run routes to some experts only) that no op of the trace
        reads: a parameter the model uses outside a module tierlab lowers (with a matrix product the
        capture names in ``unmapped_ops``), or one it never uses in this run."""
        return [name for name, (t, _sc) in self.weights.items() if t.id not in self._touched]

    def _param(self, scope: str, short: str = "weight"):
        mod = self.cap.modules.get(scope, {})
        name = mod.get("params", {}).get(short)
        return self.weights.get(name, (None, None)) if name else (None, None)

    def segment(self, seg, events) -> None:
        ab, run = self.ab, self.run
        pending_act = None          # an activation waiting for its gated product
        rotary_scopes: dict[str, dict] = {}   # attention scope -> rotated tensor shape -> elements per token x 2
        held_kv: dict[str, object] = {}
        pending_emb = None          # the token embedding, held while a position embedding may add into it
        scanned: set[int] = set()   # state layers whose recurrence this segment has emitted
        index_op = None             # (indexer scope, layer, op): the indexer's scoring over its cached keys
        for e in events:
            if index_op is not None and not (e.scope == index_op[0] or e.scope.startswith(index_op[0] + ".")):
                self._emit(index_op[2], index_op[1], seg)      # the indexer is done: its scoring op
                index_op = None
            if e.kind == "index_append":
                rot = rotary_scopes.pop(e.scope, {})           # the indexer's own rotary of its q and k
                if rot:
                    b, t = e.shapes[0][0], e.shapes[0][1]
                    widths = [n // 2 for n in rot.values()]
                    self._emit(norm_k.rotary("rotary", [self._fit(w, b * t) for w in widths], widths, m=b * t,
                                             act_bytes=ab), layer_of(e.scope), seg)
                index_op = self._index(e, seg)
                continue
            if index_op is not None and e.kind == "aten":    # the indexer's arithmetic over its keys
                if e.name in ("aten.matmul", "aten.bmm", "aten.mm") and e.out and e.shapes:
                    index_op[2].flops += 2 * numel(e.out) * e.shapes[0][-1]
                continue
            lay = layer_of(e.scope)
            if lay in self.states and lay not in scanned and e.kind == "aten" and self._in_mixer(e, lay):
                self._emit(self._state_op(lay, seg), lay, seg)     # the mixer's arithmetic starts: its scan
                scanned.add(lay)
            if pending_emb is not None and e.kind not in ("aten", "embedding"):
                self._emit(pending_emb, -1, seg)
                pending_emb = None
            layer = layer_of(e.scope)
            short = e.scope.split(f"layers.{layer}.", 1)[-1] if layer >= 0 else e.scope.rsplit(".", 1)[-1]
            if pending_act is not None and not (e.kind == "aten" and e.name in ("aten.mul", "aten.mul_")
                                                and e.scope == pending_act[0].rsplit(".", 1)[0]):
                if e.kind != "linear":   # gate, act, up, mul: the up projection may run in between
                    self._emit(self._act(pending_act, gated=False), layer_of(pending_act[0]), seg)
                    pending_act = None
            if e.kind == "embedding" and pending_emb is not None:
                self._add_positions(pending_emb, e, seg)    # GPT-2's wpe, OPT's embed_positions
            elif e.kind == "embedding":
                m = numel(e.shapes[0])
                table, sc = self._param(e.scope)
                h = table_width = self._width_of(e.scope)
                ids = np.random.default_rng([run.seed, 7, seg.step + 1]).integers(0, self._rows_of(e.scope), m)
                row_sc = scale_bytes(1, h, run.weights, run.quant_group)
                pending_emb = emb.embedding(short, table, self._buf(table_width), ids,
                                            row_bytes=nbytes_of(h, run.weights), act_row_bytes=h * ab, scales=sc,
                                            scale_row_bytes=row_sc)
            elif e.kind == "norm":
                width = e.shapes[0][-1]
                gain = self._param(e.scope)[0]
                op = norm_k.rmsnorm(short, self._buf(width), self._buf(width), gain, m=numel(e.shapes[0]) // width,
                                    width=width, act_bytes=ab, bias=self._param(e.scope, "bias")[0])   # LayerNorm
                self._emit(op, layer, seg)
            elif e.kind == "linear":
                wt, sc = self._param(e.scope)
                bias = self._param(e.scope, "bias")[0]
                name = self.cap.modules[e.scope]["params"]["weight"]
                out_f, in_f = self._shape(name)
                if self.cap.modules[e.scope]["cls"] == "Conv1D":    # GPT-2 stores its weights in x out
                    out_f, in_f = in_f, out_f
                rows = numel(e.shapes[0]) // in_f
                self._emit(lin.linear(short, wt, self._buf(in_f, rows), self._buf(out_f, rows), m=rows,
                                      in_features=in_f, out_features=out_f, act_bytes=ab, phase=seg.phase,
                                      tile_m=run.tile_m, tile_n=run.tile_n, scales=sc, bias=bias), layer, seg)
            elif e.kind == "act":
                pending_act = (e.scope, e.shapes[0])
            elif e.kind == "aten" and pending_act is not None and e.name in ("aten.mul", "aten.mul_"):
                self._emit(self._act(pending_act, gated=True), layer, seg)
                pending_act = None
            elif e.kind == "aten" and self._rotary_product(e):
                # each rotated element is multiplied once by cos and once by sin
                # a real rotation multiplies each element by cos and by sin (two products); a complex
                # one (Llama 4) turns each pair of reals in one product
                per_token = numel(e.shapes[0]) // (self.B * seg.tokens)
                rot = rotary_scopes.setdefault(e.scope, {})
                rot[e.shapes[0]] = rot.get(e.shapes[0], 0) + (4 * per_token if "complex" in e.dtype else per_token)
            elif e.kind == "aten" and ELEMENTWISE_ATEN.get(e.name) == "add" and len(e.shapes) == 2 \
                    and e.shapes[0] == e.shapes[1] and self._is_layer_scope(e.scope):
                width = e.shapes[0][-1]
                self._emit(norm_k.elementwise("residual_add", [self._buf(width), self._buf(width)], self._buf(width),
                                              m=numel(e.shapes[0]) // width, width=width, act_bytes=ab), layer, seg)
            elif e.kind == "kv_append":
                held_kv[e.scope] = e
            elif e.kind == "attention":
                rot = rotary_scopes.pop(e.scope, {})
                self._emit(self._attention(e, seg, held_kv.pop(e.scope, None), [n // 2 for n in rot.values()]),
                           layer, seg)
            elif e.kind == "router":
                self._router(e, layer, seg, short)
            elif e.kind == "experts":
                self._emit(self._experts(e, layer, seg, short), layer, seg)
            elif e.kind == "aten" and not self._in_mixer(e, layer):     # a state mixer's arithmetic: its scan
                self._note_unmapped(e, rotary_scopes)
        if pending_act is not None:
            self._emit(self._act(pending_act, gated=False), layer_of(pending_act[0]), seg)
        if pending_emb is not None:
            self._emit(pending_emb, -1, seg)
        if index_op is not None:
            self._emit(index_op[2], index_op[1], seg)
        for lay in sorted(set(self.states) - scanned):     # a mixer that ran no operator of its own
            self._emit(self._state_op(lay, seg), lay, seg)

    def _index(self, e, seg) -> tuple:
        """The indexer's new keys appended to its cache, and its scoring op reading every cached key of each
        sequence (positions ``0 .. start + t``): the index reads, of their own tensor ``layers.i.kv.index``.
        The scoring's FLOPs are its matrix products, added as they are recorded."""
        i = e.info["layer"]
        cache = self.index_caches[i]
        b, t, width = e.shapes[0]
        ab = self.ab
        self._emit(attn.kv_append("index_append", [(self._buf(width), width * ab)], [cache], batch=b,
                                  start=seg.start, t=t), i, seg)
        op = Op("index_scores", "attention", b * t, 0)
        attn.read_positions(op, cache, 0, 0, seg.start + t, count=b)
        return e.scope, i, op

    def _note_unmapped(self, e, rotary_scopes) -> None:
        """Count an ATen operator outside a leaf that no op maps, unless it moves nothing tierlab models
        (:data:`~tierlab.traces.capture.opmap.MOVES_NOTHING`), works on integers or booleans (positions, masks),
        computes a rotary table, or is rotary's own arithmetic (rotate_half's negation and concatenation,
        the sum of the two products) in an attention module whose rotary is lowered."""
        cls = self._module_classes.get(e.scope, "")
        if e.name in MOVES_NOTHING or ROTARY_CLASS in cls or e.scope in rotary_scopes \
                or not e.dtype.startswith(("torch.float", "torch.bfloat", "torch.complex")):
            return
        if ELEMENTWISE_ATEN.get(e.name) == "add" and self._moe_block_with_shared(e.scope):
            return                 # the shared expert's output added in: the combine reads it (as by hand)
        self.unmapped[(e.name, cls)] += 1

    def _moe_block_with_shared(self, scope: str) -> bool:
        """Whether ``scope`` is an MoE block whose experts have a shared expert beside them."""
        if not hasattr(self, "_shared_blocks"):
            self._shared_blocks = {n.rsplit(".", 1)[0] for n, m in self.cap.modules.items()
                                   if m["kind"] == "experts" and self._has_shared_expert(n)}
        return scope in self._shared_blocks

    def unmapped_ops(self) -> list[dict]:
        """What ran that the lowering does not map, most frequent first: operator, module class, times."""
        return [{"op": op, "module": cls, "count": n} for (op, cls), n in self.unmapped.most_common()]

    def _add_positions(self, op: Op, e, seg) -> None:
        """A second embedding gathered right after the token embedding (a learned position table) is
        added into its output: its rows are read (the segment's positions, as many times as the module
        gathered them: once for the batch in GPT-2, whose position ids are ``[1, t]``; once per sequence
        in OPT) and one FLOP per element added, nothing written apart."""
        width = e.out[-1]
        rows = numel(e.out[:-1])
        t = seg.tokens
        row = nbytes_of(width, self.run.weights)
        table = self._param(e.scope)[0]
        first = max(0, min(seg.start, self._rows_of(e.scope) - t))
        op.accesses.insert(len(op.accesses) - 1, op.accesses[0]._replace(
            tensor=table.id, offset=first * row, nbytes=t * row, count=max(1, rows // t), stride=0))
        op.flops += op.tokens * width

    def _is_layer_scope(self, scope: str) -> bool:
        """A decoder layer itself (``model.layers.3``, GPT-2's ``transformer.h.3``), where the residual
        adds are; not a block inside it (Qwen2-MoE's ``SparseMoeBlock`` adds its shared expert's output,
        which the combine reads, as in the hand lowering)."""
        mod = self._module_classes.get(scope, "")
        return is_decoder_layer(mod) and scope.rsplit(".", 1)[-1].isdigit()

    def _has_shared_expert(self, experts_scope: str) -> bool:
        """Whether the MoE block holding ``experts_scope`` has an always-on shared expert beside it
        (``shared_expert``, ``shared_experts``, ``shared_mlp``), whose output the combine adds in."""
        parent = experts_scope.rsplit(".", 1)[0] + ".shared_"
        return any(n.startswith(parent) for n in self._module_classes)

    @property
    def _module_classes(self) -> dict:
        return self.cap.info.get("classes", {})

    def _shape(self, name: str) -> tuple[int, int]:
        for n, shape, *_ in self.cap.weights:
            if n == name:
                return shape[0], numel(shape[1:])
        raise KeyError(name)

    def _width_of(self, scope):
        return self._shape(self.cap.modules[scope]["params"]["weight"])[1]

    def _rows_of(self, scope):
        return self._shape(self.cap.modules[scope]["params"]["weight"])[0]

    def _ffn(self, scope: str, hidden: int) -> int:
        """An experts module's intermediate width: the dimension of its down projection that is not hidden."""
        down = next(n for s, n in self.cap.modules[scope]["params"].items() if "down" in s)
        shape = next(s for n, s, *_ in self.cap.weights if n == down)
        return shape[2] if shape[1] == hidden else shape[1]

    def _act(self, pending, gated: bool) -> Op:
        scope, shape = pending
        width = shape[-1]
        buf = self._buf(width)
        short = scope.split(".", 3)[-1] if layer_of(scope) >= 0 else scope
        op = norm_k.elementwise(short, [buf, buf] if gated else [buf], buf, m=numel(shape) // width, width=width,
                                act_bytes=self.ab, flops_per_element=5 if gated else 4)
        mod = self.cap.modules.get(scope, {})
        for name in [*mod.get("params", {}).values(), *mod.get("buffers", {}).values()]:   # a learned
            op.read_all(self.weights.get(name, (None,))[0])      # activation's own (Apertus' xIELU alphas, beta)
        return op

    def _rotary_product(self, e) -> bool:
        """``x * cos`` or ``x * sin`` of rotary in an attention module: a [batch, heads, tokens, d]
        tensor times a cos/sin broadcast over the heads ([batch or 1, 1, tokens or 1, d]); or a complex
        [batch, tokens, heads, d/2] tensor times complex frequencies broadcast over the heads."""
        cls = self._module_classes.get(e.scope, "")
        if e.name not in ("aten.mul", "aten.mul_") or len(e.shapes) != 2 \
                or not ("Attention" in cls or "Indexer" in cls):   # an attention, or a sparse-attention indexer
            return False
        x, c = e.shapes
        if len(x) != 4 or len(c) != 4 or c[3] != x[3] or c[0] not in (1, x[0]):
            return False
        if "complex" in e.dtype:
            return c[2] == 1 and c[1] in (1, x[1])
        return c[1] == 1 and c[2] in (1, x[2])

    def _fit(self, width: int, rows: int) -> Ten:
        """The narrowest activation buffer holding ``rows`` rows of ``width`` elements."""
        need = rows * width * self.ab
        return min((t for t in self.act.values() if t.nbytes >= need), key=lambda t: t.nbytes)

    def _attention(self, e, seg, kv, rotary: list[int]) -> list[Op]:
        (b, h, t, d), kshape, vshape = e.shapes
        if kv is None and e.info.get("uncached"):
            return [self._attention_over_activations(e, seg)]
        i = kv.info["layer"] if kv is not None else e.info["layer"]
        caches = self.caches.get(i)
        if caches is None:     # a layer attending to another layer's cache (Gemma 3n's shared KV): the latest
            # earlier layer holding K and V of this call's widths
            want = (kshape[1] * kshape[3], vshape[1] * vshape[3])
            src = [j for j, c in self.caches.items() if (i is None or j < i)
                   and self._kv_widths.get(j) == want]
            if not src:
                raise UsageError(f"{e.scope}: an attention call with no KV cache of its own or of an earlier layer "
                                 f"(layer {i})", field="capture")
            caches = self.caches[max(src)]
            i = max(src)
        ab = self.ab
        ops = []
        if rotary:
            ops.append(norm_k.rotary("rotary", [self._fit(w, b * t) for w in rotary], rotary, m=b * t, act_bytes=ab))
        if kv is not None:
            ks, vs = kv.shapes
            ops.append(attn.kv_append("kv_append", [(self._buf(ks[1] * ks[3]), ks[1] * ks[3] * ab),
                                                    (self._buf(vs[1] * vs[3]), vs[1] * vs[3] * ab)], caches,
                                      batch=b, start=seg.start, t=t))
        spans = self.cap.info.get("layers") or []
        kind, span = spans[i] if i is not None and i < len(spans) else ("full", 0)
        # the call's window, else the cache's (GPT-Neo's local layers: the window lives in a mask buffer)
        window = e.info["window"] or (span if kind == "sliding" else None)
        chunk = span if kind == "chunked" else None      # Llama 4: the chunk is in the mask, not the call
        # the queries are the segment's last t positions (Gemma 4's KV-shared layers run a prefill's last only)
        ops += attn.flash_attention("attention", self._buf(h * d), self._buf(h * vshape[3]), [caches[0]], [caches[1]],
                                    batch=b, start=seg.start + seg.tokens - t, t=t, window=window, heads=h, score_dim=d,
                                    value_dim=vshape[3], q_row_bytes=h * d * ab, o_row_bytes=h * vshape[3] * ab,
                                    act_bytes=ab, attn_tile=self.run.attn_tile, phase=seg.phase,
                                    extra_reads=tuple(self.weights[n][0] for n in e.info.get("params", ())),
                                    chunk=chunk, topk=self._topk(i))
        return ops

    def _topk(self, layer) -> int | None:
        """The most KV rows a query of ``layer`` reads: the indexer's ``index_topk`` where the layer has a
        sparse-attention indexer (DeepSeek-V3.2), else None (every key of its range)."""
        return (self.cap.info.get("index_topk") or None) if layer in self.index_caches else None

    def _attention_over_activations(self, e, seg) -> Op:
        """An attention call whose keys and values are activations, not a cache: its module keeps no cache
        layer and appended nothing (Inkling 2's attention over the outputs of earlier blocks, at each
        position). Q, K and V are read and the output written."""
        (b, h, t, d), (_, hk, s, _), (_, _, _, dv) = e.shapes
        ab = self.ab
        op = Op("attention", "attention", self.B * seg.tokens, 2 * b * h * t * s * (d + dv))
        for heads, rows, width in ((h, t, d), (hk, s, d), (hk, s, dv)):
            op.read(self._fit(heads * width, b * rows), 0, b * heads * rows * width * ab)
        op.write(self._fit(h * dv, b * t), 0, b * h * t * dv * ab)
        for n in e.info.get("params", ()):        # the module's own (Inkling 2's learned queries)
            op.read_all(self.weights[n][0])
        return op

    def _router(self, e, layer, seg, short) -> None:
        mod = self.cap.modules[e.scope]
        dims = {n: shape for n, shape, *_ in self.cap.weights}
        wname = max(mod["params"].values(), key=lambda n: numel(dims[n]))     # its matrix; the rest biases
        E, hidden = self._shape(wname)
        wt, sc = self.weights[wname]
        m = numel(e.shapes[0]) // hidden
        bias = [self.weights[n][0] for n in mod["buffers"].values() if n in self.weights]
        # the router's other parameters (a correction bias held as a parameter: Laguna), read with its weight
        bias += [self.weights[n][0] for s, n in mod["params"].items() if n != wname and s != "bias"
                 and n in self.weights]
        # a score-correction bias the MoE block holds beside its router (MiniMax-M2's mlp.e_score_correction_bias)
        parent = e.scope.rsplit(".", 1)[0] + "."
        bias += [t for n, (t, _) in self.weights.items() if n.startswith(parent) and "." not in n[len(parent):]
                 and "bias" in n[len(parent):] and t not in bias]
        self.routers[layer] = {"experts": E, "top_k": mod.get("top_k"), "bias": bias}
        self._emit(lin.linear(short, wt, self._buf(hidden), self._buf(E), m=m, in_features=hidden, out_features=E,
                              act_bytes=self.ab, phase=seg.phase, tile_m=self.run.tile_m, tile_n=self.run.tile_n,
                              scales=sc, bias=self._param(e.scope, "bias")[0]), layer, seg)

    def _experts(self, e, layer, seg, short) -> list[Op]:
        mod = self.cap.modules[e.scope]
        dims = {n: len(shape) for n, shape, *_ in self.cap.weights}
        names = {s: n for s, n in mod["params"].items() if dims[n] == 3}
        biases = [n for n in mod["params"].values() if dims[n] == 2]
        fused = [n for s, n in names.items() if "gate_up" in s]
        down = next(n for s, n in names.items() if "down" in s)
        r = self.routers.get(layer, {})
        # routed over as many experts as the router scores: those past the down projections are the identity
        # (LongCat-Flash's zero-computation experts), which read no weights
        E = max(r.get("experts") or 0, len(self.experts[down]))
        k = r.get("top_k") or self.cap.info.get("top_k")
        if not k:
            raise UsageError(f"{e.scope}: experts without a known top-k", field="num_experts_per_tok")
        hidden = e.shapes[0][-1]
        m = self.B * seg.tokens      # every token is routed (Llama 4 hands its experts a copy per expert)
        ffn = self._ffn(e.scope, hidden)
        gated = True
        if fused:
            triples = [(g, (None, None), dn) for g, dn in zip(self.experts[fused[0]], self.experts[down])]
        elif not any("gate" in s for s in names):      # Nemotron-H: up and down, a plain activation between
            up = next(n for s, n in names.items() if "up" in s)
            triples = [(u, (None, None), dn) for u, dn in zip(self.experts[up], self.experts[down])]
            gated = False
        else:
            gate = next(n for s, n in names.items() if "gate" in s)
            up = next(n for s, n in names.items() if "up" in s and "gate" not in s)
            triples = list(zip(self.experts[gate], self.experts[up], self.experts[down]))
        ab = self.ab
        r_op = moe_k.route_op("mlp.route", self._buf(E), m=m, n_experts=E, k=k, act_bytes=ab)
        for b in r.get("bias", []):
            r_op.read_all(b)
        ops = [r_op]
        k = min(k, E)
        if self.router is None or (self.router.n_experts, self.router.k) != (E, k):   # layers of other sizes
            self._routers_by_size = getattr(self, "_routers_by_size", {})
            self.router = self._routers_by_size.setdefault((E, k), Router(self.run.router, self.run.seed, E, k))
        routes = self.router.route(layer, seg.step, m)
        counts = moe_k.expert_counts(routes, E)
        disp, inter, out = self._buf(hidden), self._buf(ffn), self._buf(hidden)
        ops.append(moe_k.dispatch("mlp.dispatch", self._buf(hidden), disp, m=m, k=k, row_bytes=hidden * ab))
        first = 0
        for x in np.flatnonzero(counts).tolist():
            if x >= len(triples):           # an identity expert: its rows pass through to the combine
                first += int(counts[x])
                continue
            ws = triples[x]
            op = moe_k.expert_mlp(short, x, [t for t, _ in ws], [s for _, s in ws], disp, inter, out,
                                  first_row=first, rows=int(counts[x]), hidden=hidden, ffn=ffn, act_bytes=ab,
                                  phase=seg.phase, tile_m=self.run.tile_m, gated=gated)
            for b in biases:          # gpt-oss: a bias per expert on gate_up and on down
                bias = self.experts[b][x][0]
                op.read_all(bias)
                op.flops += int(counts[x]) * self._shape(b)[1]
            ops.append(op)
            first += int(counts[x])
        comb = moe_k.combine("mlp.combine", out, self._buf(hidden), m=m, k=k, row_bytes=hidden * ab, hidden=hidden)
        if self._has_shared_expert(e.scope):   # the shared expert's output is added in
            comb.accesses.insert(1, comb.accesses[0]._replace(tensor=self._buf(hidden).id, nbytes=m * hidden * ab))
        ops.append(comb)
        return ops
