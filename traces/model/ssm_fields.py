"""The recurrent mixers' fields of a model spec, read from each dialect's config keys.

Mamba (Jamba: ``mamba_*``), Mamba-2 (``Mamba2ForCausalLM``; Nemotron-H's and Falcon-H1's own
spellings of it, :data:`SSM_READERS`), Gated DeltaNet (Qwen3-Next's ``linear_*``) and Kimi Delta
Attention (Kimi-Linear's ``linear_*`` / ``linear_attn_config``). Each reader takes
a :class:`tierlab.traces.model.config_reader.Reader` of the text model's config and returns :class:`tierlab.traces.model.spec.ModelSpec`
fields; the per-layer pattern of which layers run them is :mod:`tierlab.traces.model.layer_patterns`'.
"""

from __future__ import annotations

from tierlab.traces.model.config_reader import Reader


def mamba_fields(r: Reader, h: int) -> dict:
    """Jamba's Mamba mixer: ``mamba_expand x hidden`` channels, a dt rank (``"auto"``: hidden / 16)."""
    dt = r.config.get("mamba_dt_rank", "auto")
    return dict(ssm_inner=r.pos("mamba_expand") * h, ssm_state=r.pos("mamba_d_state"), ssm_conv=r.pos("mamba_d_conv"),
                ssm_dt_rank=-(-h // 16) if dt == "auto" else r.pos("mamba_dt_rank"),
                ssm_conv_bias=r.flag("mamba_conv_bias", True), ssm_proj_bias=r.flag("mamba_proj_bias"),
                ssm_inner_norms=True, ssm_version=1)


def delta_net_fields(r: Reader) -> dict:
    """Qwen3-Next's Gated DeltaNet: value heads of ``linear_value_head_dim``, key heads (groups) of
    ``linear_key_head_dim`` (the state's other side), a causal convolution over q, k, v."""
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


def _mamba2(r: Reader, d: int, heads: int, head_dim: int, groups: int, heads_key: str, groups_key: str) -> dict:
    if heads * head_dim != d:
        raise r.err(f"{heads} heads x head_dim {head_dim} is not the mixer's {d} channels", heads_key)
    if heads % groups:
        raise r.err(f"{groups} groups do not divide the {heads} heads", groups_key)
    return dict(ssm_version=2, ssm_inner=d, ssm_heads=heads, ssm_groups=groups)


def mamba2_fields(r: Reader, h: int) -> dict:
    """``Mamba2ForCausalLM``: ``expand x hidden`` channels in ``num_heads`` heads of ``head_dim``."""
    d = r.pos("expand", 2) * h
    return dict(_mamba2(r, d, r.pos("num_heads"), r.pos("head_dim"), r.pos("n_groups", 1), "num_heads", "n_groups"),
                ssm_state=r.pos("state_size"), ssm_conv=r.pos("conv_kernel", 4),
                ssm_conv_bias=r.flag("use_conv_bias", True), ssm_proj_bias=r.flag("use_bias", False))


def _either(r: Reader, old: str, new: str, read, default):
    """``old`` (the spelling NemotronHConfig still takes and prefers) where given, else ``new``."""
    return read(old, default) if r.config.get(old) is not None else read(new, default)


def nemotron_h_fields(r: Reader, h: int) -> dict:
    """Nemotron-H's Mamba-2 mixer: ``mamba_num_heads x mamba_head_dim`` channels (not ``expand``), the
    gated norm over groups of them; in_proj's and out_proj's biases are ``use_bias``'s."""
    heads, hd = r.pos("mamba_num_heads"), r.pos("mamba_head_dim")
    groups = _either(r, "mamba_n_groups", "n_groups", r.pos, 8)
    return dict(_mamba2(r, heads * hd, heads, hd, groups, "mamba_num_heads", "n_groups"),
                ssm_state=r.pos("ssm_state_size"), ssm_conv=_either(r, "mamba_d_conv", "conv_kernel", r.pos, 4),
                ssm_conv_bias=_either(r, "mamba_conv_bias", "use_conv_bias", r.flag, True),
                ssm_proj_bias=r.flag("use_bias"))


def falcon_h1_fields(r: Reader, h: int) -> dict:
    """Falcon-H1's Mamba-2 mixer beside the attention of every layer: ``mamba_d_ssm`` channels (else
    ``mamba_expand x hidden``) in ``mamba_n_heads`` heads (``mamba_d_head``, ``"auto"``: their share);
    in_proj's bias ``mamba_proj_bias``, out_proj's ``projectors_bias``; the gated RMSNorm only with
    ``mamba_rms_norm`` (else the scan's output is gated by silu(z) alone)."""
    d = r.pos("mamba_d_ssm", None) or r.pos("mamba_expand", 2) * h
    heads = r.pos("mamba_n_heads")
    hd = d // heads if r.config.get("mamba_d_head", "auto") == "auto" else r.pos("mamba_d_head")
    return dict(_mamba2(r, d, heads, hd, r.pos("mamba_n_groups", 1), "mamba_n_heads", "mamba_n_groups"),
                ssm_state=r.pos("mamba_d_state"), ssm_conv=r.pos("mamba_d_conv", 4),
                ssm_conv_bias=r.flag("mamba_conv_bias", True), ssm_proj_bias=r.flag("mamba_proj_bias"),
                ssm_out_bias=r.flag("projectors_bias"), ssm_norm=r.flag("mamba_rms_norm"), ssm_parallel=True)


SSM_READERS = {"nemotron_h": nemotron_h_fields, "falcon_h1": falcon_h1_fields}
