"""Readers of a config's optional parts into :class:`~tierlab.traces.model.spec.ModelSpec` fields, beside the core
dimensions :mod:`tierlab.traces.model.spec` reads: DeepSeek-V3.2's sparse-attention indexer, the q/k norms' layout and
the rotary's dimensions (the recurrent mixers' fields are :mod:`tierlab.traces.model.ssm_fields`'). Each takes the family's
:class:`~tierlab.traces.model.config_reader.Reader` (which names the file and field on error)."""

from __future__ import annotations

from tierlab.traces.model.config_reader import Reader


def indexer_fields(r: Reader, q_lora_rank) -> dict:
    """DeepSeek-V3.2's lightning indexer (DeepSeek Sparse Attention): ``index_n_heads`` query heads of
    ``index_head_dim`` from the query latent, one cached key of ``index_head_dim`` per position, and
    ``index_topk``, the most KV rows a query's attention reads."""
    if not q_lora_rank:
        raise r.err("the sparse-attention indexer reads the query latent: expected a q_lora_rank", "q_lora_rank")
    dim = r.pos("index_head_dim")
    rope = r.pos("qk_rope_head_dim")
    if dim < rope:
        raise r.err(f"index_head_dim {dim} is narrower than its rotary part qk_rope_head_dim {rope}", "index_head_dim")
    return dict(index_topk=r.pos("index_topk"), index_heads=r.pos("index_n_heads"), index_head_dim=dim)


def qk_norm_layout(r: Reader, trait) -> str:
    """A family's q/k norms: ``"head"`` / ``"full"`` / ``""`` as they are, a config key (true: per head),
    or (a config key, the layout when true); ``"l2"`` is Llama 4's, per head without a gain, on the
    layers that turn rotary."""
    if trait in ("head", "full", "") or trait is False:
        return trait or ""
    if isinstance(trait, tuple):
        key, layout = trait
        return layout if r.flag(key) else ""
    return "head" if r.flag(trait) else ""


def rotary_dim(r: Reader, head_dim: int, default: float) -> int:
    """Dimensions of a head rotary turns: ``int(head_dim * partial_rotary_factor)``, the factor at the top
    level or in ``rope_parameters`` / ``rope_scaling`` (Transformers reads it from either), else the
    family's default; 0 when that is the whole head."""
    key, f = "partial_rotary_factor", r.config.get("partial_rotary_factor")
    for nest in ("rope_parameters", "rope_scaling"):
        if f is None and isinstance(r.config.get(nest), dict) and "partial_rotary_factor" in r.config[nest]:
            key, f = f"{nest}.partial_rotary_factor", r.config[nest]["partial_rotary_factor"]
    if f is None and r.config.get("rotary_pct") is not None:      # GPT-NeoX as Transformers 4 writes it
        key, f = "rotary_pct", r.config["rotary_pct"]
    if f is None and r.config.get("rotary_dim") is not None:      # MiniMax-M2: the rotated dimensions themselves
        d = r.pos("rotary_dim")
        return 0 if d >= head_dim else d
    if f is None:
        f = default
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1:
        raise r.err(f"expected a fraction in (0, 1], got {f!r}", key)
    dim = int(head_dim * f)
    return 0 if dim >= head_dim else dim
