"""Dense MLP blocks built from linears and one element-wise op.

Gated (SwiGLU; Llama, Mistral, Qwen, GLM, DeepSeek's dense layers and shared experts):
``down(silu(gate(x)) * up(x))`` — gate and up linears, the SiLU-and-multiply, the down linear.
Ungated (GPT-2, OPT, Falcon): ``down(act(up(x)))``, 4 FLOPs per element for the activation.
"""

from __future__ import annotations

from tierlab.kernels.base import Op, Ten
from tierlab.kernels.linear import linear
from tierlab.kernels.norm import elementwise


def mlp(prefix: str, x: Ten, out: Ten, gate_buf: Ten | None, up_buf: Ten, act_buf: Ten, weights: dict, *, m: int,
        hidden: int, ffn: int, act_bytes: int, phase: str, tile_m: int, tile_n: int, gated: bool = True,
        biases: dict | None = None) -> list[Op]:
    """``weights`` maps ``gate_proj``/``up_proj``/``down_proj`` to (weight Ten, scales or None);
    ``biases`` maps the same names to bias vectors (GPT-2, OPT), read with their weights."""
    kw = dict(m=m, act_bytes=act_bytes, phase=phase, tile_m=tile_m, tile_n=tile_n)
    b = biases or {}
    ops = []
    if gated:
        w, s = weights["gate_proj"]
        ops.append(linear(prefix + "gate_proj", w, x, gate_buf, in_features=hidden, out_features=ffn, scales=s,
                          bias=b.get("gate_proj"), **kw))
    w, s = weights["up_proj"]
    ops.append(linear(prefix + "up_proj", w, x, up_buf, in_features=hidden, out_features=ffn, scales=s,
                      bias=b.get("up_proj"), **kw))
    ops.append(elementwise(prefix + "act", [gate_buf, up_buf] if gated else [up_buf], act_buf, m=m, width=ffn,
                           act_bytes=act_bytes, flops_per_element=5 if gated else 4))
    w, s = weights["down_proj"]
    ops.append(linear(prefix + "down_proj", w, act_buf, out, in_features=ffn, out_features=hidden, scales=s,
                      bias=b.get("down_proj"), **kw))
    return ops
