"""The sharding plan: which device holds which layers, heads, MLP columns, vocabulary rows and experts.

Devices: ``dp x pp x tp``; device ``d = (dp_rank * pp + stage) * tp + tp_rank``. Per device the
lowering sees a *local* :class:`~tierlab.traces.model.spec.ModelSpec` (:meth:`Shard.local_spec`) whose dimensions
are its shard's: ``num_heads / tp`` query heads, ``num_kv_heads / tp`` KV heads (or one replicated
head when there are fewer KV heads than ranks), ``intermediate_size / tp`` MLP columns,
``vocab_size / tp`` embedding and LM-head rows, and (MoE with ``ep == 1``) ``moe_intermediate_size
/ tp`` expert columns. With ``ep > 1`` experts are whole and spread over the ``ep`` ranks of an EP
group (``E / ep`` contiguous experts each); the EP groups are consecutive runs of ``ep`` devices
among the ``dp x tp`` devices of one stage, in device order. See ``docs/trace-format.md``.

Megatron-style for every layer layout but the state-space mixers: biases of column-parallel layers
(q/k/v, gate/up, experts' gate/up) are split with their columns; biases of row-parallel layers
(o_proj, down_proj, a TP-split expert's down_proj) are held and added by tp rank 0 only, before the
all-reduce, so they are added once; norms (LayerNorm biases too) are replicated, q/k norms over all
heads (OLMoE) split with their heads (their cross-rank sum of squares is not traced); attention sinks are split with their heads; learned position
embeddings are held by tp rank 0 of stage 0 and added once, before the embedding's all-reduce.
Recurrent mixers: Mamba-2 and Gated DeltaNet split by heads and groups, Mamba (Jamba) by channels
(its x_proj row-parallel); their state with them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tierlab.common.errors import UsageError
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import ModelSpec


ROW_PARALLEL_BIASES = ("o_proj.bias", "down_proj.bias", "out_proj.bias")
# the recurrent mixers' tensors split with their channels / heads (the rest of a mixer is replicated)
MIXER_SPLIT = {"in_proj", "in_proj_qkvz", "in_proj_ba", "conv1d", "dt_bias", "A_log", "D", "out_proj", "x_proj",
               "dt_proj"}


def check_shardable(spec: ModelSpec) -> None:
    """Refuse, naming the trait, a model whose layers the sharded lowering does not split: Gemma 4's,
    Falcon-H1's parallel mixers, Nemotron-H's one-block layers."""
    if spec.gemma4:
        raise UsageError("Gemma 4's per-layer heads, KV sharing and per-layer inputs are lowered on one device "
                         "only (no tensor, pipeline, expert or data parallelism, no microbatches)", field="sharded")
    if spec.ssm_parallel:
        raise UsageError(f"{spec.family} (a Mamba-2 mixer beside the attention of each layer) is lowered on one "
                         "device only; drop --tp/--pp/--ep/--dp and --pp-microbatches", field="tp")
    if spec.norm_layout not in ("pre", "sandwich", "parallel", "parallel2", "mixer"):
        raise UsageError(f"{spec.family} (norm_layout {spec.norm_layout}) is lowered on one device only; drop "
                         "--tp/--pp/--ep/--dp and --pp-microbatches", field="tp")


def stage_layers(spec: ModelSpec, run: RunConfig) -> tuple[int, ...]:
    """Layers per stage: ``run.pp_layers`` or as even as possible, the remainder on the last stages."""
    L, pp = spec.num_layers, run.pp
    if run.pp_layers is not None:
        if sum(run.pp_layers) != L:
            raise UsageError(f"stages hold {sum(run.pp_layers)} layers; the model has {L}", field="pp_layers")
        return tuple(run.pp_layers)
    if pp > L:
        raise UsageError(f"{pp} stages for a model of {L} layers; at most one stage per layer", field="pp")
    q, r = divmod(L, pp)
    return tuple(q + (1 if s >= pp - r else 0) for s in range(pp))


def check_plan(spec: ModelSpec, run: RunConfig) -> None:
    """Refuse a parallelism the model cannot be split by (UsageError naming the option)."""
    tp, ep = run.tp, run.ep
    if spec.num_heads % tp:
        raise UsageError(f"{tp} ranks do not divide the model's {spec.num_heads} attention heads", field="tp")
    if spec.attention != "mla":
        kvh = spec.num_kv_heads
        if (kvh >= tp and kvh % tp) or (kvh < tp and tp % kvh):
            raise UsageError(f"{tp} ranks neither divide the model's {kvh} KV heads nor are a multiple of them",
                             field="tp")
    if spec.ssm_inner:
        mixer = [("Mamba inner size", spec.ssm_inner)] if spec.ssm_version == 1 else \
            [("state-space heads", spec.ssm_heads), ("state-space groups (key heads)", spec.ssm_groups)]
        for what, n in mixer:
            if n % tp:
                raise UsageError(f"{tp} ranks do not divide the model's {what} {n}", field="tp")
    dense = [spec.intermediate_size] if any(not spec.is_moe(i) for i in range(spec.num_layers)) else []
    for what, n in [("MLP intermediate size", f) for f in dense] + \
                   ([("MoE intermediate size", spec.moe_intermediate_size)] if spec.num_experts and ep == 1 else []) + \
                   [("vocabulary", spec.vocab_size)]:
        if n % tp:
            raise UsageError(f"{tp} ranks do not divide the model's {what} {n} (no padding)", field="tp")
    if ep > 1:
        E = spec.num_experts
        if not E:
            raise UsageError(f"expert parallelism needs a mixture-of-experts model; {spec.name} is dense",
                             field="ep")
        if ep > E:
            raise UsageError(f"{ep} ranks for the model's {E} experts; at most one rank per expert", field="ep")
        if E % ep:
            raise UsageError(f"{ep} ranks must divide the model's {E} experts", field="ep")
        if (tp * run.dp) % ep:
            raise UsageError(f"{ep} ranks must divide tp x dp = {tp * run.dp} (the devices of a stage)",
                             field="ep")
    stage_layers(spec, run)


@dataclass(frozen=True)
class Shard:
    """What device ``device`` holds and computes."""

    device: int
    dp_rank: int
    stage: int
    tp_rank: int
    layers: tuple[int, ...]
    experts: tuple[int, ...]       # experts of its MoE layers (all of them when ep == 1)
    ep_rank: int
    ep_group: tuple[int, ...]      # the devices of its EP group, in group order (just itself when ep == 1)
    tp_group: tuple[int, ...]      # the tp devices of its stage and replica

    @property
    def first(self) -> bool:
        return self.stage == 0


class ShardPlan:
    """The devices of ``run`` on ``spec`` (checked by :func:`check_plan`)."""

    def __init__(self, spec: ModelSpec, run: RunConfig):
        check_plan(spec, run)
        self.spec, self.run = spec, run
        self.tp, self.pp, self.ep, self.dp = run.tp, run.pp, run.ep, run.dp
        self.devices = run.devices
        self.per_stage = stage_layers(spec, run)
        starts = [sum(self.per_stage[:s]) for s in range(self.pp)]
        self.stage_range = [tuple(range(a, a + n)) for a, n in zip(starts, self.per_stage)]
        E = spec.num_experts
        self.shards = []
        for d in range(self.devices):
            rest, t = divmod(d, self.tp)
            r, s = divmod(rest, self.pp)
            j = r * self.tp + t                 # index among the stage's dp x tp devices
            g0 = j - j % self.ep
            group = tuple(self.device(jj // self.tp, s, jj % self.tp) for jj in range(g0, g0 + self.ep))
            er = j % self.ep
            experts = tuple(range(er * E // self.ep, (er + 1) * E // self.ep)) if E else ()
            self.shards.append(Shard(d, r, s, t, self.stage_range[s], experts, er, group,
                                     tuple(self.device(r, s, x) for x in range(self.tp))))

    def device(self, dp_rank: int, stage: int, tp_rank: int) -> int:
        return (dp_rank * self.pp + stage) * self.tp + tp_rank

    @property
    def last_stage(self) -> int:
        return self.pp - 1

    def local_spec(self, shard: Shard) -> ModelSpec:
        """The model as one device of ``shard`` sees it (its heads, columns, vocabulary rows)."""
        s, tp = self.spec, self.tp
        kw = dict(num_heads=s.num_heads // tp, vocab_size=s.vocab_size // tp,
                  intermediate_size=s.intermediate_size // tp if s.intermediate_size % tp == 0 else s.intermediate_size)
        if s.attention != "mla":
            kw["num_kv_heads"] = max(1, s.num_kv_heads // tp)
        if s.num_experts and self.ep == 1:
            kw["moe_intermediate_size"] = s.moe_intermediate_size // tp
        if s.ssm_inner:          # the mixer's channels, heads and groups (Mamba: channels only)
            kw["ssm_inner"] = s.ssm_inner // tp
            if s.ssm_version >= 2:
                kw.update(ssm_heads=s.ssm_heads // tp, ssm_groups=s.ssm_groups // tp)
        return replace(s, **kw)

    def row_split_bias(self, name: str, expert: int) -> bool:
        """Whether ``name`` is the bias of a row-parallel layer split over tp ranks (held by rank 0)."""
        return self.tp > 1 and name.endswith(ROW_PARALLEL_BIASES) and (expert < 0 or self.ep == 1)

    def holds(self, shard: Shard, name: str, layer: int, expert: int) -> bool:
        """Whether the device of ``shard`` holds weight ``name``."""
        if layer >= 0:
            if shard.tp_rank and self.row_split_bias(name, expert):
                return False
            return layer in shard.layers and (expert < 0 or expert in shard.experts)
        if name == "embed_positions":
            return shard.stage == 0 and shard.tp_rank == 0
        if name == "embed_tokens":
            return shard.stage == 0 or (self.spec.tie_word_embeddings and shard.stage == self.last_stage)
        return shard.stage == self.last_stage     # final norm, lm_head

    def copies(self, name: str, expert: int = -1) -> int:
        """How many devices hold an identical copy of (one shard of) weight ``name``: summing every
        device's weight bytes divided by this counts each weight once (the model's parameter bytes)."""
        s, tp = self.spec, self.tp
        n = self.dp
        if name == "embed_tokens" and s.tie_word_embeddings and self.pp > 1:
            n *= 2                               # the first and the last stage both hold it
        if expert >= 0:
            return n * tp // self.ep if self.ep > 1 else n
        if self.ep > 1 and ".mlp." in name and ("shared_experts." in name or name.endswith((".gate", ".gate.e_score_correction_bias"))) \
                and s.num_experts:
            return n * tp                        # MoE block whole on every rank with ep > 1
        base = name.rsplit(".", 1)[-1] if not name.endswith(".bias") else name.rsplit(".", 2)[-2]
        split = {"q_proj", "k_proj", "v_proj", "o_proj", "q_b_proj", "kv_b_proj", "gate_proj", "up_proj",
                 "down_proj", "embed_tokens", "lm_head"}
        if name.endswith(".gate") or name.endswith("e_score_correction_bias"):
            return n * tp                        # router, replicated over tp
        if name == "embed_positions" or self.row_split_bias(name, expert):
            return n                             # tp rank 0 only
        kv_split = ("k_proj", "v_proj", "k_norm") if s.qk_norm == "full" else ("k_proj", "v_proj")
        if s.qk_norm == "full":
            split |= {"q_norm", "k_norm"}        # over all heads: split with them
        if base in kv_split and s.attention != "mla" and s.num_kv_heads < tp:
            return n * tp // s.num_kv_heads      # one KV head per rank, shared by tp / kv_heads ranks
        if ".mamba." in name or ".linear_attn." in name:
            if base == "norm":                   # Mamba-2's gated norm over d_inner (per group) splits;
                return n if s.ssm_version == 2 else n * tp    # Gated DeltaNet's, one head wide, is replicated
            return n if base in MIXER_SPLIT else n * tp
        return n if base in split | {"sinks"} else n * tp

    def to_dict(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "ep": self.ep, "dp": self.dp, "devices": self.devices,
                "pp_layers": list(self.per_stage),
                "device_of": "(dp_rank * pp + stage) * tp + tp_rank"}
