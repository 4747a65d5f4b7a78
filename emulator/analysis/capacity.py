"""Capacity planning: the longest context (or largest batch) whose state fits a memory budget.

The state of a decode run is, in bytes:

* **weights** — every weight tensor exactly as the trace generator declares it (matrices in the
  weights dtype plus group-quantisation scales for int8/int4; 1-D gains and biases in
  :func:`traces.dtypes.vector_dtype`); tied embeddings counted once.
* **KV** — ``kv_bytes_per_token x context x batch``, where ``kv_bytes_per_token`` is
  :meth:`traces.spec.ModelSpec.kv_bytes_per_token`: what a trace of the model writes to its KV
  tensors per token of one sequence (all layers, K and V, or the MLA latent). The trace keeps every
  position (a sliding-window model is not given a ring buffer), so neither is capacity.
* **activation workspace** — the activation tensors the trace declares for a step of ``chunk``
  tokens per sequence (``chunk = 1``: a decode step; a larger ``chunk`` is the prefill of that many
  tokens at once), flash attention. It does not grow with the context.

The budget is either a size (``--memory``) or the capacity of a chip's tiers that can be homes
(``memory`` and ``scratchpad`` tiers, or those named with ``--tier``). Tensors are counted at their
own sizes: placement aligns every tensor to the trace alignment and cannot split a tensor between
tiers, so a real placement may fall short of a budget summed over several tiers by up to one tensor
per tier plus the alignment padding; :func:`capacity` reports the padding the default alignment adds.

The memory limit (what fits) is stated separately from the model's own position limit
(``max_position_embeddings``); the usable context is the smaller of the two. Units: bytes, tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from emulator.chip.hierarchy import Chip
from traces.dtypes import ACTIVATION_DTYPES, DTYPE_BITS, KV_DTYPES, WEIGHT_DTYPES, check_dtype, nbytes_of
from common.errors import CapacityError, UsageError
from traces.format import DEFAULT_ALIGNMENT
from traces.spec import ModelSpec
from traces.weightfmt import weight_tensors

HOME_MANAGED = ("memory", "scratchpad")


def weight_tensor_bytes(spec: ModelSpec, weights: str = "bf16", quant_group: int = 128) -> list[int]:
    """Bytes of every weight tensor the trace declares (each matrix, then its scales and zero points),
    in order (:func:`traces.weightfmt.weight_tensors`)."""
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
    ab = DTYPE_BITS[activations] // 8
    m = batch * chunk
    h = spec.hidden_size
    widths = [h, h]  # hidden, norm
    if spec.attention == "mla":
        q_width = spec.num_heads * (spec.qk_nope_head_dim + spec.qk_rope_head_dim)
        o_width = spec.num_heads * spec.v_head_dim
        if spec.q_lora_rank:
            widths.append(spec.q_lora_rank)
        widths.append(spec.kv_lora_rank + spec.qk_rope_head_dim)
    else:
        q_width = o_width = spec.num_heads * spec.head_dim
        widths += [spec.num_kv_heads * spec.head_dim] * 2  # k, v
    widths += [q_width, o_width, h]  # q, attn, attn_out
    dense_f = [spec.intermediate_size for i in range(spec.num_layers) if not spec.is_moe(i)]
    dense_f.append(spec.moe_intermediate_size * spec.num_shared_experts)
    f = max(dense_f)
    if f:
        widths += [f, f, f]  # mlp gate, up, act
    widths.append(h)  # mlp_out
    rows = [m] * len(widths)
    if spec.num_experts:
        k = spec.num_experts_per_tok
        widths += [spec.num_experts, h, spec.moe_intermediate_size, h]
        rows += [m, m * k, m * k, m * k]
    widths.append(spec.vocab_size)  # logits: one row per sequence
    rows.append(batch)
    return [max(1, r * w * ab) for r, w in zip(rows, widths)]


def activation_bytes(spec: ModelSpec, batch: int = 1, chunk: int = 1, activations: str = "bf16") -> int:
    return sum(activation_tensor_bytes(spec, batch, chunk, activations))


@dataclass(frozen=True)
class Budget:
    """Bytes available, and where they come from (``tiers``: name -> capacity, empty for a size)."""

    total_bytes: int
    source: str                         # "memory" or the chip's name
    tiers: dict = field(default_factory=dict)

    @classmethod
    def of_size(cls, nbytes: int) -> "Budget":
        if nbytes <= 0:
            raise UsageError(f"the memory budget must be positive, got {nbytes} B", field="--memory")
        return cls(int(nbytes), "memory")

    @classmethod
    def of_chip(cls, chip: Chip, tiers=()) -> "Budget":
        """The chip's home-capable tiers, or only those named in ``tiers``."""
        names = [t.name for t in chip.tiers]
        if tiers:
            chosen = []
            for n in tiers:
                if n not in names:
                    raise UsageError(f"chip {chip.name!r} has no tier {n!r}; expected one of {', '.join(names)}",
                                     field="--tier")
                t = chip.tiers[names.index(n)]
                if t.managed not in HOME_MANAGED:
                    raise UsageError(f"tier {n!r} of {chip.name!r} is a cache and holds no tensor of its own; "
                                     f"expected a memory or scratchpad tier", field="--tier")
                if t not in chosen:
                    chosen.append(t)
        else:
            chosen = [t for t in chip.tiers if t.managed in HOME_MANAGED]
        if not chosen:
            raise UsageError(f"chip {chip.name!r} has no memory or scratchpad tier", field="--chip")
        return cls(sum(t.capacity_bytes for t in chosen), chip.name, {t.name: t.capacity_bytes for t in chosen})


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
    kv_bytes_per_token: int            # one sequence, all layers
    activation_bytes: int
    alignment_padding_bytes: int       # what aligning each tensor to the trace default would add
    position_limit: int                # the model's max_position_embeddings
    memory_context: int                # longest context whose state fits the budget, at ``batch``
    context: int                       # the context the breakdown is for
    max_batch: int | None = None       # with a given context: the largest batch that fits

    @property
    def kv_bytes(self) -> int:
        return self.kv_bytes_per_token * self.context * self.batch

    @property
    def used_bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.activation_bytes

    @property
    def limited_by(self) -> str:
        return "positions" if self.position_limit < self.memory_context else "memory"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["budget"] = asdict(self.budget)
        d["usable_context"] = min(self.memory_context, self.position_limit)
        d["limited_by"] = self.limited_by
        d["breakdown"] = {"weights_bytes": self.weight_bytes, "kv_bytes": self.kv_bytes,
                          "activation_bytes": self.activation_bytes,
                          "free_bytes": self.budget.total_bytes - self.used_bytes,
                          "total_bytes": self.budget.total_bytes}
        return d


def _fixed(spec: ModelSpec, budget: Budget, weights: str, batch: int, chunk: int, activations: str,
           quant_group: int) -> tuple[int, int]:
    w = weight_bytes(spec, weights, quant_group)
    if w > budget.total_bytes:
        raise CapacityError(f"the weights of {spec.name} in {weights} need {w} B, more than the "
                            f"{budget.total_bytes} B budget ({budget.source})", field="--weights")
    return w, activation_bytes(spec, batch, chunk, activations)


def capacity(spec: ModelSpec, budget: Budget, *, weights: str = "bf16", kv: str = "bf16",
             activations: str = "bf16", batch: int = 1, context: int | None = None, chunk: int = 1,
             quant_group: int = 128) -> Plan:
    """Longest context at ``batch`` (always), and with ``context`` the largest batch at that context.

    Raises CapacityError when the weights alone exceed the budget, or when not even one token of KV
    (at ``batch``, or at batch 1 for a given context) fits beside the weights and workspace.
    """
    check_dtype(kv, KV_DTYPES, "kv")
    for name, v in (("--batch", batch), ("--chunk", chunk)):
        if not isinstance(v, int) or v < 1:
            raise UsageError(f"expected a positive integer, got {v!r}", field=name)
    if context is not None and (not isinstance(context, int) or context < 1):
        raise UsageError(f"expected a positive integer, got {context!r}", field="--context")
    w, act = _fixed(spec, budget, weights, batch, chunk, activations, quant_group)
    kvpt = spec.kv_bytes_per_token(kv)
    if kvpt == 0:   # a pure state-space model (Mamba-2): a fixed state per sequence, no KV to grow
        raise CapacityError(f"{spec.name} keeps no KV cache (a fixed state of {spec.state_bytes(kv)} B per sequence): "
                            "its memory does not grow with the context", field="MODEL")
    left = budget.total_bytes - w - act
    mem_ctx = max(left, 0) // (kvpt * batch)
    pad = _padding(spec, weights, kv, activations, batch, chunk, quant_group, max(mem_ctx, 1))
    common = dict(model=spec.name, budget=budget, weights=weights, kv=kv, activations=activations, chunk=chunk,
                  weight_bytes=w, kv_bytes_per_token=kvpt, alignment_padding_bytes=pad,
                  position_limit=spec.max_position_embeddings)
    if context is None:
        if mem_ctx < 1:
            raise CapacityError(f"weights ({w} B) and workspace ({act} B) of {spec.name} leave "
                                f"{max(left, 0)} B of the {budget.total_bytes} B budget, less than one token of "
                                f"KV for {batch} sequence(s) ({kvpt * batch} B)", field="--batch")
        return Plan(batch=batch, activation_bytes=act, memory_context=mem_ctx,
                    context=min(mem_ctx, spec.max_position_embeddings), **common)
    best = _largest_batch(spec, budget, w, kvpt, context, chunk, activations)
    if best < 1:
        act1 = activation_bytes(spec, 1, chunk, activations)
        raise CapacityError(f"a context of {context} tokens needs {kvpt * context} B of KV per sequence; "
                            f"weights ({w} B) and workspace ({act1} B) leave "
                            f"{max(budget.total_bytes - w - act1, 0)} B of the {budget.total_bytes} B budget",
                            field="--context")
    act_b = activation_bytes(spec, best, chunk, activations)
    return Plan(batch=best, activation_bytes=act_b,
                memory_context=(budget.total_bytes - w - act_b) // (kvpt * best),
                context=context, max_batch=best, **common)


def _largest_batch(spec, budget, w, kvpt, context, chunk, activations) -> int:
    """Largest batch b with weights + b*context*kvpt + workspace(b) <= budget (0 if none);
    the state grows with b, so a binary search is exact."""
    def fits(b):
        return w + b * context * kvpt + activation_bytes(spec, b, chunk, activations) <= budget.total_bytes

    lo, hi = 0, max(1, budget.total_bytes // max(1, context * kvpt)) + 1
    while lo + 1 < hi:  # invariant: fits(lo) (or lo == 0), not fits(hi)
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _padding(spec, weights, kv, activations, batch, chunk, quant_group, context) -> int:
    """Bytes that rounding every tensor up to the default trace alignment would add."""
    a = DEFAULT_ALIGNMENT
    sizes = weight_tensor_bytes(spec, weights, quant_group) + activation_tensor_bytes(spec, batch, chunk, activations)
    parts = 1 if spec.attention == "mla" else 2
    sizes += [batch * context * (nbytes_of(spec.kv_row_elements, kv) // parts)] * (parts * spec.num_layers)
    return sum(-(-s // a) * a - s for s in sizes)
