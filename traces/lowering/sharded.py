"""The sharded lowering: a run over ``dp x pp x tp`` devices as one trace (format v2).

Every device is lowered by a :class:`_DeviceLowering` — the one-device lowering of
:mod:`tierlab.traces.lowering.generate` over the device's *local* model (:meth:`tierlab.traces.workload.shard.ShardPlan.local_spec`:
its heads, MLP columns, vocabulary rows, layers and experts) — written as a generator that emits
its compute ops and *yields* at every point where it joins other devices (a :class:`Sync`). The
driver runs the devices of a pipeline stage in lockstep: at each yield it declares the collective
(one per group of devices), writes one collective op per rank (reading its input buffer, writing
its output buffer, in that device's memory) and resumes them. So each device's ops are in its
execution order; ops of different devices interleave at collectives.

Per segment (a prefill, or one decode step) and microbatch ``k`` (``batch / pp_microbatches``
sequences each, in order), stage 0 .. pp-1 in turn; between consecutive stages a ``send_recv`` of
the microbatch's activations (tokens x hidden x activation bytes) from the last op of stage s (per
tp rank) to the first op of stage s+1 (the same tp rank). See ``docs/trace-format.md`` for the
collectives of tensor and expert parallelism.

Data-parallel replica r draws its token ids from ``(seed, 7, step + 1, r)`` (replica 0: the
one-device stream ``(seed, 7, step + 1)``) and routes with the router seeded ``seed + r * 2**32``,
so replicas serve different tokens, as real ones do; replica 0 is the one-device run's.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tierlab.common.errors import UsageError
from tierlab.kernels import embedding as emb
from tierlab.kernels import moe as moe_k
from tierlab.kernels import norm as norm_k
from tierlab.kernels.base import Op, Ten
from tierlab.traces.model.dtypes import nbytes_of
from tierlab.traces.lowering.device import Lowering
from tierlab.traces.workload.routing import Router
from tierlab.traces.workload.segments import COPY_ACTIONS, Segment, conversation_table
from tierlab.traces.workload.shard import Shard, ShardPlan, check_shardable
from tierlab.traces.format.writer import TraceWriter

REPLICA_SEED_STRIDE = 1 << 32


class Sync(NamedTuple):
    """A device joining a collective: ``reads``/``writes`` are ``(Ten, offset, nbytes)`` of its own
    buffers. ``send`` (all_to_all): bytes this rank sends each member of ``group``; ``recv``: the
    buffer the driver fills with what the others send. ``role`` of a send_recv: send or recv."""

    kind: str
    name: str
    group: tuple
    layer: int
    size: int = 0
    reads: tuple = ()
    writes: tuple | None = ()
    send: tuple | None = None
    recv: Ten | None = None
    info: object = None
    role: str = ""


class _SliceRouter:
    """Routes the whole replica batch of a (layer, step) once; hands out the rows of a microbatch."""

    def __init__(self, router: Router, rows: int):
        self.router, self.rows, self.row0 = router, rows, 0
        self._cache: dict = {}

    def route(self, layer: int, step: int, n: int) -> np.ndarray:
        key = (layer, step, self.rows)
        if key not in self._cache:
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[key] = self.router.route(layer, step, self.rows)
        return self._cache[key][self.row0:self.row0 + n]


class _DeviceLowering(Lowering):
    def __init__(self, spec, run, w, segments, plan: ShardPlan, shard: Shard, *, serving=None):
        self.plan, self.shard, self.full = plan, shard, spec
        super().__init__(plan.local_spec(shard), run, w, segments, serving=serving)
        s, ab = self.spec, self.ab
        if s.num_experts and plan.ep > 1 and any(s.is_moe(i) for i in self.layers):
            rows = plan.ep * self.max_m * min(s.num_experts_per_tok, len(shard.experts))
            self.act["moe_recv"] = self.declare_act("moe_recv", rows, s.hidden_size)
            self.act["moe_recv_inter"] = self.declare_act("moe_recv_inter", rows, s.moe_intermediate_size)
            self.act["moe_recv_out"] = self.declare_act("moe_recv_out", rows, s.hidden_size)
        if plan.tp > 1 and shard.stage == plan.last_stage:
            self.act["logits_all"] = self.declare_act("logits_all", self.logit_rows, self.full.vocab_size)
        if run.collective_buffers == "staged" and plan.devices > 1:
            self.act["stage"] = self.declare_act("collective_stage", max(t.nbytes for t in self.act.values()) // ab, 1)
        if self.router is not None:
            r = shard.dp_rank
            self.router = _SliceRouter(Router(run.router, run.seed + r * REPLICA_SEED_STRIDE, spec.num_experts,
                                              spec.num_experts_per_tok), 0)
        self._kv_stride = {c.ten.id: c.seq_stride for layer in self.caches.values() for c in layer}
        self._kv_stride.update({c.ten.id: c.seq_stride for c in self.index_caches.values()})   # index keys too
        # recurrent state: a microbatch reads and writes its own sequences' (the kernels touch it whole)
        self._state_seq = {t.id: t.nbytes // self.B for pair in self.states.values() for t in pair}
        self.kv_shift = 0          # sequences before the current microbatch

    def _init_shard(self) -> None:
        self.device = self.shard.device
        self.B = self.run.batch
        self.mb = self.run.batch // self.run.pp_microbatches
        self.layers = self.shard.layers

    def _weight_shapes(self):
        return [w for w in self.spec.weight_shapes() if self.plan.holds(self.shard, w.name, w.layer, w.expert)]

    def _declare_weights(self) -> None:
        """The weights this device holds; a row-parallel bias held by tp rank 0 only is ``(None, None)``
        on the other ranks, so their ops add no bias (it is added once, before the all-reduce)."""
        super()._declare_weights()
        for w in self.spec.weight_shapes():
            if w.layer in self.layers and w.name not in self.weights and self.plan.row_split_bias(w.name, w.expert):
                self.weights[w.name] = (None, None)

    def _moe_block(self, i: int, p: str, m: int, seg: Segment) -> list[Op]:
        ops = super()._moe_block(i, p, m, seg)
        if self.spec.expert_bias and self.plan.row_split_bias(".down_proj.bias", 0) and self.shard.tp_rank:
            for op in ops:           # no down_proj bias on this rank: none of its adds either
                if op.name == "mlp.experts":
                    op.flops -= op.tokens * self.spec.hidden_size
        return ops

    def emit(self, ops, layer: int, seg: Segment, collective: int = -1) -> None:
        if self.serving is not None:
            return self.serving.emit(ops, layer, collective)
        w = self.w
        for op in ops if isinstance(ops, list) else [ops]:
            oid = w.add_op(op.name, op.kind, layer, seg.phase, seg.step, op.tokens, op.flops, op.expert,
                           op.pim_eligible, device=self.device, collective=collective)
            for a in op.accesses:
                off = a.offset
                nb = a.nbytes
                if self.kv_shift and a.tensor in self._kv_stride:
                    off += self.kv_shift * self._kv_stride[a.tensor]
                elif a.tensor in self._state_seq and nb == self._state_seq[a.tensor] * self.B:
                    off, nb = self.kv_shift * self._state_seq[a.tensor], self.mb * self._state_seq[a.tensor]
                w.add_access(oid, a.tensor, off, nb, a.count, a.stride, a.is_write)

    def collective_op(self, sy: Sync, cid: int, writes, seg: Segment, tokens: int) -> None:
        """This device's op of collective ``cid`` (with staging copies if the run stages buffers)."""
        stage = self.act.get("stage")
        op = Op(sy.name, sy.kind, tokens, 0)
        if stage is None:
            for t, off, n in sy.reads:
                op.read(t, off, n)
            for t, off, n in writes:
                op.write(t, off, n)
            return self.emit(op, sy.layer, seg, cid)
        n_in, n_out = sum(n for _, _, n in sy.reads), sum(n for _, _, n in writes)
        if n_in:
            cp = Op(sy.name + ".stage_in", "copy", tokens, 0)
            pos = 0
            for t, off, n in sy.reads:
                cp.read(t, off, n).write(stage, pos, n)
                pos += n
            self.emit(cp, sy.layer, seg)
        op.read(stage, 0, n_in).write(stage, 0, n_out)
        self.emit(op, sy.layer, seg, cid)
        if n_out:
            cp = Op(sy.name + ".stage_out", "copy", tokens, 0)
            pos = 0
            for t, off, n in writes:
                cp.read(stage, pos, n).write(t, off, n)
                pos += n
            self.emit(cp, sy.layer, seg)

    # ---- one microbatch of one segment on this device (a generator of Syncs) ---------------------
    def token_ids(self, seg: Segment) -> np.ndarray:
        r = self.shard.dp_rank
        key = [self.run.seed, 7, seg.step + 1] + ([r] if r else [])
        return np.random.default_rng(key).integers(0, self.full.vocab_size, self.run.batch * seg.tokens)

    def _tp_sync(self, kind: str, name: str, buf: str, layer: int, nbytes: int, read_off: int = 0,
                 read_bytes: int | None = None):
        if self.plan.tp == 1:
            return None
        t = self.act[buf]
        rb = nbytes if read_bytes is None else read_bytes
        return Sync(kind, name, self.shard.tp_group, layer, nbytes, ((t, read_off, rb),), ((t, 0, nbytes),))

    def microbatch(self, seg: Segment, k: int):
        if self.serving is not None:      # a serving step: its T tokens as one segment
            seg = self.serving.kernel_seg
        s, plan, sh = self.spec, self.plan, self.shard
        m, h, ab = self.mb * seg.tokens, s.hidden_size, self.ab
        self.kv_shift = k * self.mb
        if self.router is not None:
            self.router.rows, self.router.row0 = self.B * seg.tokens, k * m
        if sh.stage == 0:
            ids = self.token_ids(seg)[k * m:(k + 1) * m]
            lo = sh.tp_rank * s.vocab_size
            mine = ids[(ids >= lo) & (ids < lo + s.vocab_size)] - lo
            table, tsc = self.weights["embed_tokens"]
            op = emb.embedding("embed_tokens", table, self.act["hidden"], mine, row_bytes=self.embed_row_bytes,
                               act_row_bytes=h * ab, scales=tsc, scale_row_bytes=self.embed_scale_row_bytes)
            if len(mine):
                op.accesses.pop()
            if s.learned_positions and sh.tp_rank == 0:   # the segment's position rows, added once
                pos = self.weights["embed_positions"][0]
                row = nbytes_of(h, self.wdtype["embed_positions"])
                first = seg.start + s.learned_positions - s.max_position_embeddings   # OPT's offset of 2
                op.read(pos, first * row, seg.tokens * row, count=self.mb, stride=0)
                op.flops += m * h
            op.tokens = m
            op.write(self.act["hidden"], 0, m * h * ab)   # rows of other ranks' vocabulary: zeros
            self.emit(op, -1, seg)
            sy = self._tp_sync("all_reduce", "embed_tokens.all_reduce", "hidden", -1, m * h * ab)
            if sy:
                yield sy
        else:
            yield Sync("send_recv", "pp.recv", (), sh.layers[0], m * h * ab, (), ((self.act["hidden"], 0, m * h * ab),),
                       role="recv")
        for i in self.layers:
            yield from self._layer_tp(i, f"layers.{i}.", m, seg)
        if sh.stage < plan.last_stage:
            yield Sync("send_recv", "pp.send", (sh.device, plan.device(sh.dp_rank, sh.stage + 1, sh.tp_rank)),
                       sh.layers[-1], m * h * ab, ((self.act["hidden"], 0, m * h * ab),), (), role="send")
            return
        t = seg.tokens
        ops = [self.norm("norm", "norm", "hidden", "norm", m, h)]
        head = "embed_tokens" if s.tie_word_embeddings else "lm_head"
        last = {} if self.serving else dict(x_offset=(t - 1) * h * ab, x_stride=t * h * ab if t > 1 else 0)
        ops.append(self.lin("lm_head", head, "norm", "logits", self.logit_rows, seg, **last))
        self.emit(ops, -1, seg)
        if plan.tp > 1:
            V, n = self.full.vocab_size, self.logit_rows
            yield Sync("all_gather", "lm_head.all_gather", sh.tp_group, -1, n * V * ab,
                       ((self.act["logits"], 0, n * s.vocab_size * ab),), ((self.act["logits_all"], 0, n * V * ab),))

    def _layer_tp(self, i: int, p: str, m: int, seg: Segment):
        """One decoder layer in the model's norm layout, joining the tp ranks after o_proj and after
        the MLP / MoE block (an all-reduce each; EP: the all-to-alls and an all-gather)."""
        s, a, h, ab, plan = self.spec, self.act, self.spec.hidden_size, self.ab, self.plan

        def add(*xs: str) -> Op:
            return norm_k.elementwise("residual_add", [a["hidden"]] + [a[x] for x in xs], a["hidden"], m=m, width=h,
                                      act_bytes=ab, flops_per_element=len(xs))   # a sum per operand added

        ops = [self.norm("input_layernorm", p + "input_layernorm", "hidden", "norm", m, h)]
        if s.keeps_state(i):
            mix = self.recurrent.mamba_block(i, p, m, seg)
            if s.ssm_version == 1 and plan.tp > 1:    # Mamba: x_proj is row-parallel (d_inner split)
                j = [op.name for op in mix].index("x_proj") + 1
                self.emit(ops + mix[:j], i, seg)
                yield self._tp_sync("all_reduce", "mamba.x_proj.all_reduce", "ssm_dbc", i,
                                    m * (s.ssm_dt_rank + 2 * s.ssm_state) * ab)
                ops, mix = [], mix[j:]
            ops += mix
        else:
            ops += self.attention_block(i, p, m, seg)
        self.emit(ops, i, seg)
        sy = self._tp_sync("all_reduce", "mixer.all_reduce" if s.keeps_state(i) else "self_attn.all_reduce",
                           "attn_out", i, m * h * ab)
        if sy:
            yield sy
        if s.norm_layout == "mixer":                       # Mamba-2: a layer is its mixer alone
            self.emit(add("attn_out"), i, seg)
            return
        x = "norm"
        if s.norm_layout in ("parallel", "parallel2"):     # Falcon: attention and MLP of the same input
            ops = []
            if s.norm_layout == "parallel2":
                ops.append(self.norm("ln_mlp", p + "ln_mlp", "hidden", "norm_mlp", m, h))
                x = "norm_mlp"
        elif s.norm_layout == "sandwich":                  # Gemma: norms after each block too
            ops = [self.norm("post_attention_layernorm", p + "post_attention_layernorm", "attn_out", "attn_out", m, h),
                   add("attn_out"),
                   self.norm("pre_feedforward_layernorm", p + "pre_feedforward_layernorm", "hidden", "norm", m, h)]
        else:
            ops = [add("attn_out"),
                   self.norm("post_attention_layernorm", p + "post_attention_layernorm", "hidden", "norm", m, h)]
        if s.is_moe(i) and plan.ep > 1:
            self.emit(ops, i, seg)
            yield from self._moe_ep(i, p, m, seg)
        else:
            ops += self._moe_block(i, p, m, seg) if s.is_moe(i) else self.mlp(p + "mlp.", s.intermediate_size, m,
                                                                              seg, x=x)
            self.emit(ops, i, seg)
            sy = self._tp_sync("all_reduce", "mlp.all_reduce", "mlp_out", i, m * h * ab)
            if sy:
                yield sy
        ops = []
        if s.norm_layout == "sandwich":
            ops.append(self.norm("post_feedforward_layernorm", p + "post_feedforward_layernorm", "mlp_out", "mlp_out",
                                 m, h))
        ops.append(add("attn_out", "mlp_out") if s.norm_layout in ("parallel", "parallel2") else add("mlp_out"))
        self.emit(ops, i, seg)

    def _moe_ep(self, i: int, p: str, m: int, seg: Segment):
        """Expert parallelism: this rank's share of the tokens is routed, dispatched to the ranks
        holding the chosen experts (all_to_all), run there, and combined back (the transpose)."""
        s, a, ab, sh, plan = self.spec, self.act, self.ab, self.shard, self.plan
        h, k, E = s.hidden_size, s.num_experts_per_tok, s.num_experts
        M, row = p + "mlp.", h * ab
        bounds = [len(x) for x in np.array_split(np.arange(m), plan.tp)]
        lo = sum(bounds[:sh.tp_rank])
        mr = bounds[sh.tp_rank]
        routes = self.router.route(i, seg.step, m)[lo:lo + mr]
        counts = moe_k.expert_counts(routes, E) if mr else np.zeros(E, np.int64)
        if mr:
            ops = [self.lin("mlp.gate", M + "gate", "norm", "router_logits", mr, seg, x_offset=lo * row)]
            r = moe_k.route_op("mlp.route", a["router_logits"], m=mr, n_experts=E, k=k, act_bytes=ab)
            if s.router_bias:
                r.read_all(self.weights[M + "gate.e_score_correction_bias"][0])
            ops.append(r)
            if s.num_shared_experts:
                sh_ops = self.mlp(M + "shared_experts.", s.moe_intermediate_size * s.num_shared_experts, mr, seg,
                                  name="mlp.shared_experts.")
                ops += _shift(sh_ops, {a["norm"].id: lo * row, a["mlp_out"].id: lo * row})
                if s.shared_expert_gate:   # Qwen2-MoE: a sigmoid gate (one output) on the shared expert
                    ops.append(self.lin("mlp.shared_expert_gate", M + "shared_expert_gate", "norm", "router_logits",
                                        mr, seg, x_offset=lo * row))
            d = moe_k.dispatch("mlp.dispatch", a["norm"], a["moe_dispatch"], m=mr, k=k, row_bytes=row)
            ops += _shift([d], {a["norm"].id: lo * row})
            self.emit(ops, i, seg)
        members = [plan.shards[d] for d in sh.ep_group]
        send = tuple(int(counts[list(x.experts)].sum()) * row for x in members)
        infos = yield Sync("all_to_all", "mlp.dispatch.all_to_all", sh.ep_group, i, 0,
                           ((a["moe_dispatch"], 0, mr * k * row),), None, send, a["moe_recv"], counts)
        mine = list(sh.experts)
        from_each = [int(np.asarray(c)[mine].sum()) for c in infos]
        per_expert = np.sum([np.asarray(c)[mine] for c in infos], axis=0)
        first, ops = 0, []
        for j, e in enumerate(mine):
            rows = int(per_expert[j])
            if not rows:
                continue
            x = f"{M}experts.{e}."
            ws = [self.weights[x + n] for n in ("gate_proj", "up_proj", "down_proj")]
            bs = [self.weights[x + n + ".bias"][0] for n in ("gate_proj", "up_proj", "down_proj")] \
                if s.expert_bias else None
            ops.append(moe_k.expert_mlp("mlp.experts", e, [t for t, _ in ws], [c for _, c in ws], a["moe_recv"],
                                        a["moe_recv_inter"], a["moe_recv_out"], first_row=first, rows=rows, hidden=h,
                                        ffn=s.moe_intermediate_size, act_bytes=ab, phase=seg.phase,
                                        tile_m=self.run.tile_m, biases=bs))
            first += rows
        self.emit(ops, i, seg)
        yield Sync("all_to_all", "mlp.combine.all_to_all", sh.ep_group, i, 0, ((a["moe_recv_out"], 0, first * row),),
                   ((a["moe_out"], 0, mr * k * row),), tuple(n * row for n in from_each))
        if mr:
            comb = moe_k.combine("mlp.combine", a["moe_out"], a["mlp_out"], m=mr, k=k, row_bytes=row, hidden=h)
            if s.num_shared_experts:
                comb.accesses.insert(1, comb.accesses[0]._replace(tensor=a["mlp_out"].id, nbytes=mr * row))
            self.emit(_shift([comb], {a["mlp_out"].id: lo * row}), i, seg)
        sy = self._tp_sync("all_gather", "mlp.all_gather", "mlp_out", i, m * row, lo * row, mr * row)
        if sy:
            yield sy


DeviceLowering = _DeviceLowering      # the public name of one device's lowering (to make it elsewhere)


def _shift(ops: list[Op], by: dict[int, int]) -> list[Op]:
    """Move the accesses of the given tensors by the given bytes (a rank's rows of a shared buffer)."""
    for op in ops:
        op.accesses = [x._replace(offset=x.offset + by.get(x.tensor, 0)) for x in op.accesses]
    return ops


def lower_parallel(spec, run, segments: list[Segment], out_dir, *, force: bool = False, progress=None,
                   record_routing: bool = False, device_lowering=None):
    """Write the sharded trace of ``segments`` (see the module docstring). ``device_lowering``: the
    callable making each device's lowering (``DeviceLowering``; :mod:`tierlab.traces.lowering.serving_step` gives it
    a serving step's part)."""
    check_shardable(spec)
    plan = ShardPlan(spec, run)
    if record_routing:
        raise UsageError("--record-routing records one device's routing; not with --tp/--pp/--ep/--dp",
                         field="record_routing")
    extra = {"spec": spec.to_dict(), "segments": [s.to_dict() for s in segments], "shard": plan.to_dict(),
             "lowering": {"path": "hand", "family": spec.family}}
    with TraceWriter(out_dir, model=spec.config or None, run=run, force=force, alignment=run.alignment,
                     extra=extra, devices=plan.devices) as w:
        make = device_lowering or _DeviceLowering
        lows = [make(spec, run, w, segments, plan, sh) for sh in plan.shards]
        op_ranges = []
        for n, seg in enumerate(segments):
            first = w.n_ops
            if seg.action in COPY_ACTIONS:
                for low in lows:
                    low.kv_shift = 0
                    low.kv_offload.copy(seg)
            elif seg.action == "compute":
                for k in range(run.pp_microbatches):
                    pending: dict[int, int] = {}
                    for st in range(plan.pp):
                        _lockstep(w, [x for x in lows if x.shard.stage == st], seg, k, pending)
            else:
                raise UsageError(f"unknown segment action {seg.action!r}", field="segments")
            op_ranges.append((first, w.n_ops))
            if progress is not None:
                progress(n + 1, len(segments))
        if run.turns:
            w.run["conversation"] = conversation_table(run, segments, op_ranges)
    return out_dir


def _lockstep(w: TraceWriter, lows: list[_DeviceLowering], seg: Segment, k: int, pending: dict) -> None:
    """Run the devices of one stage through microbatch ``k`` of ``seg``, joining them at collectives."""
    gens = {low.device: (low, low.microbatch(seg, k)) for low in lows}
    replies: dict[int, object] = {d: None for d in gens}
    started: set[int] = set()
    m = lows[0].mb * seg.tokens
    while gens:
        syncs = []
        for d, (low, gen) in list(gens.items()):
            try:
                sy = gen.send(replies[d]) if d in started else next(gen)
                started.add(d)
            except StopIteration:
                del gens[d]
                continue
            syncs.append((low, sy))
        groups: dict[tuple, list] = {}
        for low, sy in syncs:
            if sy.kind == "send_recv":
                if sy.role == "send":
                    cid = w.add_collective("send_recv", sy.group, sy.size, seg.phase, seg.step, sy.layer)
                    pending[sy.group[1]] = cid
                else:
                    cid = pending.pop(low.device)
                low.collective_op(sy, cid, sy.writes, seg, m)
                replies[low.device] = None
                continue
            groups.setdefault(sy.group, []).append((low, sy))
        for group, members in groups.items():
            if len(members) != len(group):
                raise RuntimeError(f"collective {members[0][1].name}: {len(members)} of {len(group)} ranks arrived")
            members.sort(key=lambda x: group.index(x[0].device))
            sy0 = members[0][1]
            send = None
            size = sy0.size
            if sy0.kind == "all_to_all":
                send = [list(sy.send) for _, sy in members]
                size = max(sum(r) for r in send)
            cid = w.add_collective(sy0.kind, group, size, seg.phase, seg.step, sy0.layer, send_bytes=send)
            infos = [sy.info for _, sy in members]
            for j, (low, sy) in enumerate(members):
                writes = sy.writes
                if writes is None:       # dispatch: what the others send this rank
                    writes = ((sy.recv, 0, sum(r[j] for r in send)),)
                low.collective_op(sy, cid, writes, seg, m)
                replies[low.device] = infos
