"""Readers of a config's optional parts into :class:`~traces.spec.ModelSpec` fields, beside the core
dimensions :mod:`traces.spec` reads: the token mixers beyond plain attention (Gated DeltaNet of Qwen3-Next
and Qwen3.5, Kimi Delta Attention of Kimi-Linear, Jamba's Mamba, DeepSeek-V3.2's sparse-attention
indexer), the q/k norms' layout and the rotary's dimensions. Each takes the family's
:class:`~traces.families.Reader` (which names the file and field on error)."""

from __future__ import annotations

from traces.families import Reader


def delta_net_fields(r: Reader) -> dict:
    """Gated DeltaNet (Qwen3-Next's ``linear_attention`` layers): value heads of ``linear_value_head_dim``,
    key heads (groups) of ``linear_key_head_dim``, a short convolution over q, k, v; gated attention on
    the other layers (q_proj also gives the output gate)."""
    hk, hv = r.pos("linear_num_key_heads"), r.pos("linear_num_value_heads")
    dk, dv = r.pos("linear_key_head_dim"), r.pos("linear_value_head_dim")
    if hv % hk:
        raise r.err(f"{hk} key heads do not divide the {hv} value heads", "linear_num_key_heads")
    return dict(ssm_version=3, ssm_inner=hv * dv, ssm_state=dk, ssm_groups=hk, ssm_heads=hv,
                ssm_conv=r.pos("linear_conv_kernel_dim"), attn_output_gate=True)


def kda_fields(r: Reader) -> dict:
    """Kimi Delta Attention (Kimi-Linear's ``linear_attention`` layers): ``linear_num_heads`` heads of
    ``linear_head_dim`` for q, k and v alike, a short convolution of ``linear_conv_kernel_dim`` over them,
    a per-channel forget gate; the recurrent state is heads x head_dim x head_dim per sequence. The
    checkpoint's config may nest them in ``linear_attn_config`` (``num_heads``, ``head_dim``,
    ``short_conv_kernel_size``), as Transformers reads it."""
    nest = r.config.get("linear_attn_config")
    if isinstance(nest, dict):
        sub = Reader(nest, r.file, r.prefix + "linear_attn_config.")
        heads, dim = sub.pos("num_heads", None), sub.pos("head_dim", None)
        conv = sub.pos("short_conv_kernel_size", None)
    else:
        heads = dim = conv = None
    heads = heads or r.pos("linear_num_heads")
    dim = dim or r.pos("linear_head_dim")
    conv = conv or r.pos("linear_conv_kernel_dim")
    return dict(ssm_version=4, ssm_inner=heads * dim, ssm_state=dim, ssm_groups=heads, ssm_heads=heads,
                ssm_conv=conv)


def mamba_fields(r: Reader, hidden: int) -> dict:
    """Jamba's Mamba mixers: ``mamba_expand`` x hidden channels, ``mamba_d_state``, ``mamba_d_conv``, the
    time-step rank (``"auto"``: ceil(hidden / 16)) and the inner norms of dt, B and C."""
    dt = r.config.get("mamba_dt_rank", "auto")
    return dict(ssm_inner=r.pos("mamba_expand") * hidden, ssm_state=r.pos("mamba_d_state"),
                ssm_conv=r.pos("mamba_d_conv"), ssm_dt_rank=-(-hidden // 16) if dt == "auto" else r.pos("mamba_dt_rank"),
                ssm_conv_bias=r.flag("mamba_conv_bias", True), ssm_proj_bias=r.flag("mamba_proj_bias"),
                ssm_inner_norms=True, ssm_version=1)


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
    or (a config key, the layout when true)."""
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
