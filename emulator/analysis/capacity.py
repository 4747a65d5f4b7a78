"""Capacity planning: the longest context (or largest batch) whose state fits a memory budget.

The state of a decode run is, in bytes:

* **weights** — every weight tensor exactly as the trace generator declares it (matrices in the
  weights dtype plus group-quantisation scales for int8/int4; 1-D gains and biases in
  :func:`tierlab.traces.model.dtypes.vector_dtype`); tied embeddings counted once.
* **KV** — ``batch x kv_bytes(context)``, where :meth:`tierlab.traces.model.spec.ModelSpec.kv_bytes` is the
  closed form the trace's KV tensors are sized by: full-attention layers keep every position,
  sliding-window and chunked layers a ring of at most their window / chunk rows, Mamba and Gated
  DeltaNet layers none. ``kv_bytes_per_token`` (:meth:`~tierlab.traces.model.spec.ModelSpec.kv_bytes_per_token`)
  is its growth while the context is within every window.
* **state** — ``batch x state_bytes()``: the fixed recurrent state of the Mamba / Gated DeltaNet
  layers (kind ``state`` in a trace), the same at any context.
* **activation workspace** — the activation tensors the trace declares for a step of ``chunk``
  tokens per sequence (``chunk = 1``: a decode step; a larger ``chunk`` is the prefill of that many
  tokens at once), flash attention. It does not grow with the context.

The budget is either a size (``--memory``) or the capacity of a chip's tiers that can be homes
(``memory`` and ``scratchpad`` tiers, or those named with ``--tier``). Tensors are counted at their
own sizes: placement aligns every tensor to the trace alignment and cannot split a tensor between
tiers, so a real placement may fall short of a budget summed over several tiers by up to one tensor
per tier plus the alignment padding; :func:`capacity` reports the padding the default alignment adds.

The memory limit (what fits) is stated separately from the model's own position limit
(``max_position_embeddings``); the usable context is the smaller of the two. A model none of whose
layers keeps every position (all windowed, chunked or recurrent: Gemma-3-style all-local configs,
Mamba-2) stops growing once the context passes its largest window: if that fits, memory sets no
context limit (``memory_context`` is None, ``memory_bounds_context`` False; in ``to_dict``, the
``--json``, ``memory_context`` stays an integer, the model's position limit, all of which fits). Units: bytes, tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tierlab.chip.hierarchy import Chip
from tierlab.traces.model.dtypes import ACTIVATION_DTYPES, DTYPE_BITS, KV_DTYPES, WEIGHT_DTYPES, activation_storage, check_dtype, nbytes_of
from tierlab.common.errors import CapacityError, UsageError
from tierlab.traces.format.schema import DEFAULT_ALIGNMENT
from tierlab.traces.model.spec import ModelSpec
from tierlab.traces.model.weight_formats import weight_tensors

HOME_MANAGED = ("memory", "scratchpad")


def weight_tensor_bytes(spec: ModelSpec, weights: str = "bf16", quant_group: int = 128) -> list[int]:
    """Bytes of every weight tensor the trace declares (each matrix, then its scales and zero points),
    in order (:func:`tierlab.traces.model.weight_formats.weight_tensors`)."""
    check_dtype(weights, WEIGHT_DTYPES, "weights")
    out = []
    for t in weight_tensors(spec, weights, quant_group):
        out.append(t.nbytes)
        out += [nb for _, _, nb in t.aux]
    return out


def weight_bytes(spec: ModelSpec, weights: str = "bf16", quant_group: int = 128) -> int:
    """Total weight bytes (matrices + scales + vectors) in the weights dtype."""
    return sum(weight_tensor_bytes(spec, weights, quant_group))


def activation_tensor_bytes(spec: ModelSpec, batch: int = 1, chunk: int = 1, activations: str = "bf16") -> list[int]:
    """Bytes of each activation tensor of a step of ``chunk`` tokens for each of ``batch`` sequences
    (flash attention), as the trace generator sizes them."""
    check_dtype(activations, ACTIVATION_DTYPES, "activations")
    ab = DTYPE_BITS[activation_storage(activations)] // 8   # FP4 activations are kept in bf16 (tierlab.traces.model.dtypes)
    m = batch * chunk
    h = spec.hidden_size
    widths = [h, h]  # hidden, norm
    if spec.norm_layout == "parallel2":
        widths.append(h)  # norm_mlp (Falcon's second LayerNorm)
    if spec.ssm_inner and any(spec.keeps_state(i) for i in range(spec.num_layers)):
        d, r, n, c = spec.ssm_inner, spec.ssm_dt_rank, spec.ssm_state, spec.ssm_conv_channels
        widths += {1: [2 * d, d, r + 2 * n, d, d], 2: [d + c + spec.ssm_heads, c, d],
                   3: [c + d, 2 * spec.ssm_heads, c, d], 4: [c, c, n, d, spec.ssm_heads, d]}[spec.ssm_version]
        if spec.ssm_parallel:
            widths.append(h)  # ssm_out (Falcon-H1's Mamba-2 output beside the attention's)
    if spec.attention == "mla":
        q_width = spec.num_heads * (spec.qk_nope_head_dim + spec.qk_rope_head_dim)
        o_width = spec.num_heads * spec.v_head_dim
        if spec.q_lora_rank:
            widths.append(spec.q_lora_rank)
        widths.append(spec.kv_lora_rank + spec.qk_rope_head_dim)
        if spec.index_head_dim:     # DeepSeek-V3.2's indexer: its queries, its key, its per-head weights
            widths += [spec.index_heads * spec.index_head_dim, spec.index_head_dim, spec.index_heads]
    else:
        q_width = o_width = spec.num_heads * spec.head_dim
        widths += [spec.num_kv_heads * spec.head_dim] * 2  # k, v
    widths += [2 * q_width if spec.attn_output_gate else q_width, o_width, h]  # q (+ gate), attn, attn_out
    dense_f = [spec.intermediate_size for i in range(spec.num_layers) if not spec.is_moe(i)]
    dense_f.append(spec.moe_intermediate_size * spec.num_shared_experts)
    f = max(dense_f)
    if f:
        widths += [f, f, f]  # mlp gate, up, act
    widths.append(h)  # mlp_out
    rows = [m] * len(widths)
    if spec.num_experts:
        k = spec.num_experts_per_tok
        lw = spec.moe_latent_size or h
        widths += [spec.num_experts, lw, spec.moe_intermediate_size, lw]
        rows += [m, m * k, m * k, m * k]
        if spec.moe_latent_size:
            widths += [lw, h]  # moe_latent, moe_up (Nemotron-H's latent MoE)
            rows += [m, m]
    widths.append(spec.vocab_size)  # logits: one row per sequence
    rows.append(batch)
    return [max(1, r * w * ab) for r, w in zip(rows, widths)]


def activation_bytes(spec: ModelSpec, batch: int = 1, chunk: int = 1, activations: str = "bf16") -> int:
    return sum(activation_tensor_bytes(spec, batch, chunk, activations))


@dataclass(frozen=True)
class Budget:
    """Bytes available, and where they come from (``tiers``: name -> capacity, empty for a size)."""

    total_bytes: int                    # what weights, KV, state and activations may use
    source: str                         # "memory" or the chip's name
    tiers: dict = field(default_factory=dict)
    reserve_bytes: int = 0              # kept by the runtime (CUDA context, workspace, fragmentation)

    @staticmethod
    def _less_reserve(nbytes: int, reserve: int, source: str) -> int:
        if reserve < 0:
            raise UsageError(f"the reserve must not be negative, got {reserve} B", field="reserve")
        if reserve >= nbytes:
            raise CapacityError(f"the runtime's reserve ({reserve} B) leaves nothing of the {nbytes} B budget "
                                f"({source})", field="reserve")
        return int(nbytes - reserve)

    @classmethod
    def of_size(cls, nbytes: int, reserve: int = 0) -> "Budget":
        """A size, less a runtime's ``reserve`` bytes."""
        if nbytes <= 0:
            raise UsageError(f"the memory budget must be positive, got {nbytes} B", field="memory")
        return cls(cls._less_reserve(int(nbytes), int(reserve), "memory"), "memory", reserve_bytes=int(reserve))

    @classmethod
    def of_chip(cls, chip: Chip, tiers=(), reserve: int | None = None) -> "Budget":
        """The chip's home-capable tiers, or only those named in ``tiers``, less the runtime's reserve:
        ``reserve`` bytes where given, else the chip's ``[reserve]`` (nothing without one)."""
        names = [t.name for t in chip.tiers]
        if tiers:
            chosen = []
            for n in tiers:
                if n not in names:
                    raise UsageError(f"chip {chip.name!r} has no tier {n!r}; expected one of {', '.join(names)}",
                                     field="tier")
                t = chip.tiers[names.index(n)]
                if t.managed not in HOME_MANAGED:
                    raise UsageError(f"tier {n!r} of {chip.name!r} is a cache and holds no tensor of its own; "
                                     f"expected a memory or scratchpad tier", field="tier")
                if t not in chosen:
                    chosen.append(t)
        else:
            chosen = [t for t in chip.tiers if t.managed in HOME_MANAGED]
        if not chosen:
            raise UsageError(f"chip {chip.name!r} has no memory or scratchpad tier", field="chip")
        raw = int(sum(t.capacity_bytes for t in chosen))
        if reserve is None:
            reserve = chip.reserve.bytes_of(raw) if chip.reserve is not None else 0
        return cls(cls._less_reserve(raw, int(reserve), chip.name), chip.name,
                   {t.name: t.capacity_bytes for t in chosen}, reserve_bytes=int(reserve))


@dataclass(frozen=True)
class Plan:
    """A capacity answer. Sizes in bytes, lengths in tokens per sequence."""

    model: str
    budget: Budget
    weights: str
    kv: str
    activations: str
    batch: int
    chunk: int
    weight_bytes: int
    kv_bytes_per_token: int            # one sequence, all layers, while within every window
    activation_bytes: int
    alignment_padding_bytes: int       # what aligning each tensor to the trace default would add
    position_limit: int                # the model's max_position_embeddings
    memory_context: int | None         # longest context whose state fits the budget, at ``batch``;
    #                                    None: the KV stops growing (no full-attention layer) and fits
    context: int                       # the context the breakdown is for
    max_batch: int | None = None       # with a given context: the largest batch that fits
    kv_bytes_per_sequence: int = 0     # ModelSpec.kv_bytes(context): one sequence at ``context``
    state_bytes_per_sequence: int = 0  # fixed recurrent state of one sequence (Mamba, Gated DeltaNet)
    kv_growth_ends_at: int | None = None   # positions past which the KV stops growing (None: it never does)
    full_attention_layers: int = 0     # layers whose KV grows with every position
    windowed_layers: int = 0           # sliding-window and chunked layers (a ring of window rows)

    @property
    def kv_bytes(self) -> int:
        return self.kv_bytes_per_sequence * self.batch

    @property
    def state_bytes(self) -> int:
        return self.state_bytes_per_sequence * self.batch

    @property
    def used_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.state_bytes + self.activation_bytes

    @property
    def memory_bounds_context(self) -> bool:
        return self.memory_context is not None

    @property
    def limited_by(self) -> str:
        if self.memory_context is None or self.position_limit < self.memory_context:
            return "positions"
        return "memory"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["budget"] = asdict(self.budget)
        d["usable_context"] = self.position_limit if self.memory_context is None else \
            min(self.memory_context, self.position_limit)
        d["limited_by"] = self.limited_by
        d["memory_bounds_context"] = self.memory_bounds_context
        if self.memory_context is None:     # --json keeps an integer: every position up to the limit fits
            d["memory_context"] = self.position_limit
        d["breakdown"] = {"weights_bytes": self.weight_bytes, "kv_bytes": self.kv_bytes,
                          "state_bytes": self.state_bytes, "activation_bytes": self.activation_bytes,
                          "reserve_bytes": self.budget.reserve_bytes,
                          "free_bytes": self.budget.total_bytes - self.used_bytes,
                          "total_bytes": self.budget.total_bytes + self.budget.reserve_bytes}
        return d


def _fixed(spec: ModelSpec, budget: Budget, weights: str, batch: int, chunk: int, activations: str,
           quant_group: int) -> tuple[int, int]:
    w = weight_bytes(spec, weights, quant_group)
    if w > budget.total_bytes:
        raise CapacityError(f"the weights of {spec.name} in {weights} need {w} B, more than the "
                            f"{budget.total_bytes} B budget ({budget.source})", field="weights")
    return w, activation_bytes(spec, batch, chunk, activations)


def kv_growth_end(spec: ModelSpec) -> int | None:
    """Positions after which one sequence's KV stops growing: the largest window or chunk when no
    layer keeps every position (0 with no attention layer at all); None when some layer does."""
    spans = [spec.layer_span(i) for i in spec.attention_layers]
    if any(kind == "full" for kind, _ in spans):
        return None
    return max((span for _, span in spans), default=0)


def longest_context(spec: ModelSpec, room: int, batch: int, kv: str) -> int | None:
    """Largest P with ``batch x kv_bytes(P) <= room`` (0 if not even P = 1 fits; None if every P
    does, the KV having stopped growing). ``kv_bytes`` is non-decreasing in P: a binary search is exact."""
    def fits(n):
        return batch * spec.kv_bytes(n, kv) <= room

    end = kv_growth_end(spec)
    if end is not None:
        return None if fits(max(end, 1)) else _last_true(fits, 0, end)
    full = sum(1 for i in spec.attention_layers if spec.layer_kind(i) == "full")
    per = batch * (full * nbytes_of(spec.kv_row_elements, kv)          # bytes every position adds at least
                   + len(spec.attention_layers) * spec.index_row_bytes(kv))
    return _last_true(fits, 0, room // per + 1)


def _last_true(fits, lo: int, hi: int) -> int:
    """Largest n in [lo, hi) with fits(n) (lo when none past lo), for fits monotone decreasing; not fits(hi)."""
    while lo + 1 < hi:  # invariant: fits(lo) (or lo is the floor), not fits(hi)
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def capacity(spec: ModelSpec, budget: Budget, *, weights: str = "bf16", kv: str = "bf16",
             activations: str = "bf16", batch: int = 1, context: int | None = None, chunk: int = 1,
             quant_group: int = 128) -> Plan:
    """Longest context at ``batch`` (always), and with ``context`` the largest batch at that context.

    The state a sequence holds is ``kv_bytes(P) + state_bytes()`` (:class:`tierlab.traces.model.spec.ModelSpec`):
    windowed layers stop growing at their window, recurrent layers hold a fixed state. Raises
    CapacityError when the weights alone exceed the budget, or when not even one token (at
    ``batch``, or at batch 1 for a given context) fits beside the weights and workspace.
    """
    check_dtype(kv, KV_DTYPES, "kv")
    for name, v in (("batch", batch), ("chunk", chunk)):
        if not isinstance(v, int) or v < 1:
            raise UsageError(f"expected a positive integer, got {v!r}", field=name)
    if context is not None and (not isinstance(context, int) or context < 1):
        raise UsageError(f"expected a positive integer, got {context!r}", field="context")
    w, act = _fixed(spec, budget, weights, batch, chunk, activations, quant_group)
    kvpt = spec.kv_bytes_per_token(kv)
    state = spec.state_bytes(kv) if spec.ssm_inner else 0
    end = kv_growth_end(spec)
    common = dict(model=spec.name, budget=budget, weights=weights, kv=kv, activations=activations, chunk=chunk,
                  weight_bytes=w, kv_bytes_per_token=kvpt, position_limit=spec.max_position_embeddings,
                  state_bytes_per_sequence=state, kv_growth_ends_at=end,
                  full_attention_layers=sum(1 for i in spec.attention_layers if spec.layer_kind(i) == "full"),
                  windowed_layers=sum(1 for i in spec.attention_layers if spec.layer_kind(i) != "full"))
    left = budget.total_bytes - w - act
    if context is None:
        room = left - batch * state
        mem_ctx = longest_context(spec, room, batch, kv) if room >= 0 else 0
        if mem_ctx is not None and mem_ctx < 1:
            raise CapacityError(f"weights ({w} B) and workspace ({act} B) of {spec.name} leave "
                                f"{max(left, 0)} B of the {budget.total_bytes} B budget, less than one token "
                                f"for {batch} sequence(s) ({batch * (spec.kv_bytes(1, kv) + state)} B of KV "
                                f"and state)", field="batch")
        ctx = spec.max_position_embeddings if mem_ctx is None else min(mem_ctx, spec.max_position_embeddings)
        return Plan(batch=batch, activation_bytes=act, memory_context=mem_ctx, context=ctx,
                    kv_bytes_per_sequence=spec.kv_bytes(ctx, kv),
                    alignment_padding_bytes=_padding(spec, weights, kv, activations, batch, chunk, quant_group,
                                                     max(ctx, 1)), **common)
    seq = spec.kv_bytes(context, kv) + state
    best = _largest_batch(spec, budget, w, seq, chunk, activations)
    if best < 1:
        act1 = activation_bytes(spec, 1, chunk, activations)
        raise CapacityError(f"a context of {context} tokens needs {seq} B of KV and state per sequence; "
                            f"weights ({w} B) and workspace ({act1} B) leave "
                            f"{max(budget.total_bytes - w - act1, 0)} B of the {budget.total_bytes} B budget",
                            field="context")
    act_b = activation_bytes(spec, best, chunk, activations)
    return Plan(batch=best, activation_bytes=act_b,
                memory_context=longest_context(spec, budget.total_bytes - w - act_b - best * state, best, kv),
                context=context, max_batch=best, kv_bytes_per_sequence=spec.kv_bytes(context, kv),
                alignment_padding_bytes=_padding(spec, weights, kv, activations, best, chunk, quant_group, context),
                **common)


def _largest_batch(spec, budget, w, seq, chunk, activations) -> int:
    """Largest batch b with weights + b x seq + workspace(b) <= budget (0 if none), ``seq`` the KV
    and state bytes of one sequence; the state grows with b, so a binary search is exact."""
    def fits(b):
        return w + b * seq + activation_bytes(spec, b, chunk, activations) <= budget.total_bytes

    return _last_true(fits, 0, max(1, budget.total_bytes // max(1, seq)) + 1)


def _padding(spec, weights, kv, activations, batch, chunk, quant_group, context) -> int:
    """Bytes that rounding every tensor up to the default trace alignment would add."""
    a = DEFAULT_ALIGNMENT
    sizes = weight_tensor_bytes(spec, weights, quant_group) + activation_tensor_bytes(spec, batch, chunk, activations)
    parts = 1 if spec.attention == "mla" else 2
    row = nbytes_of(spec.kv_row_elements, kv) // parts
    for i in range(spec.num_layers):
        if spec.keeps_state(i):
            sizes += [batch * nbytes_of(e, kv) for e in spec.state_elements()]
        if spec.attends(i):
            sizes += [batch * spec.kv_rows(i, context) * row] * parts
            if spec.index_head_dim:      # a sparse-attention indexer's keys (kind kv_index), every position
                sizes.append(batch * context * spec.index_row_bytes(kv))
    return sum(-(-s // a) * a - s for s in sizes)
