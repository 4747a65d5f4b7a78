"""``tierlab models [--families] [--json]``: the shipped model presets and their key dimensions, or
the families tierlab reads from a config.json (:mod:`tierlab.traces.model.families`)."""

from __future__ import annotations

import json

import click

from tierlab.cli.options import json_option
from tierlab.present.format import format_number, table


def _traits(f) -> str:
    """A family's traits in a few words (what its table row says)."""
    from tierlab.traces.model.families import LAYER_PATTERNS

    out = ["LayerNorm" if f.norm == "layer" else "RMSNorm"]
    if f.norm_layout != "pre":
        out.append({"sandwich": "4 norms/layer", "parallel": "parallel attn+MLP",
                    "post": "norms after attention and MLP",
                    "block": "one block a layer"}.get(f.norm_layout, f.norm_layout))
    if f.mla:
        out.append("MLA")
    out.append(LAYER_PATTERNS[f.layers])
    if f.qk_norm:
        key = f.qk_norm[0] if isinstance(f.qk_norm, tuple) else f.qk_norm
        out.append("q/k norms" if f.qk_norm in ("head", "full") else f"q/k norms if {key}")
    if f.qkv_bias is True:
        out.append("qkv bias")
    elif f.qkv_bias:
        out.append(f"qkv bias if {f.qkv_bias if isinstance(f.qkv_bias, str) else f.qkv_bias[0]}")
    if f.sinks:
        out.append("sinks")
    if not f.mlp_gated:
        out.append("plain MLP")
    if f.learned_positions >= 0:
        out.append("learned positions")
    if f.moe:
        out.append(f"MoE ({f.moe})")
    if f.tied_default:
        out.append("tied embeddings")
    return ", ".join(out)


@click.command("models")
@click.option("--families", "families", is_flag=True, help="List the model families (architectures) instead.")
@json_option
def command(families, as_json):
    """List model presets (configs/models) with their dimensions and parameter counts."""
    from tierlab.traces.model.spec import human_count, list_presets, load_model

    specs = [load_model(n) for n in list_presets()]
    if families:
        from tierlab.traces.model.families import FAMILIES

        by = {}
        for s in specs:
            by.setdefault(s.family, []).append(s.name)
        rows = [dict(family=n, architectures=list(f.architectures), model_types=list(f.model_types),
                     traits=_traits(f), presets=by.get(n, [])) for n, f in FAMILIES.items()]
        rows.append(dict(family="chatglm", architectures=["ChatGLMModel", "ChatGLMForConditionalGeneration"],
                         model_types=["chatglm"],
                         traits="ChatGLM2/3: RMSNorm, fused qkv with bias, multi-query groups; ChatGLM-6B v1 "
                                "(inner_hidden_size): LayerNorm, multi-head, plain GELU MLP, biases",
                         presets=by.get("chatglm", [])))
        if as_json:
            click.echo(json.dumps(rows, indent=1))
            return
        click.echo(table(["family", "architectures", "traits", "presets"],
                         [[r["family"], ", ".join(r["architectures"]), r["traits"], ", ".join(r["presets"]) or "-"]
                          for r in rows], align="<<<<"))
        return
    if as_json:
        click.echo(json.dumps([s.to_dict() for s in specs], indent=1))
        return
    rows = []
    for s in specs:
        experts = f"{s.num_experts_per_tok}/{s.num_experts}" + (f"+{s.num_shared_experts}" if s.num_shared_experts else "") \
            if s.num_experts else "-"
        rows.append([s.name, s.family, human_count(s.param_count()), human_count(s.active_param_count()),
                     s.num_layers, s.hidden_size, s.num_heads,
                     "MLA" if s.attention == "mla" else s.num_kv_heads, experts,
                     s.kv_bytes_per_token("bf16"), s.max_position_embeddings, s.attention_summary(),
                     s.state_bytes("bf16") if s.ssm_inner else "-"])
    click.echo(table(["model", "family", "params", "active", "layers", "hidden", "heads", "kv heads",
                      "experts", "kv B/token bf16", "max positions", "layers' attention", "state B/seq bf16"],
                     rows, align="<<>>>>>>>>><>", cell=format_number))
