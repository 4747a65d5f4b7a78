"""The recurrent mixers' ops of the one-device lowering: Mamba (Jamba), Mamba-2 (Mamba2, Nemotron-H,
Falcon-H1), Gated DeltaNet (Qwen3-Next, Qwen3.5) and Kimi Delta Attention (Kimi-Linear).
:class:`RecurrentMixers` is a part :class:`tierlab.traces.lowering.device.Lowering` makes of itself (``low``): the
tensors, the layer's state tensors and the ops it builds on (``lin``, ``attention_block``, ``declare_act``) are the
lowering's, read when a block is lowered. Each block reads the layer's normed input ``norm`` and writes its output
to ``out``.
"""

from __future__ import annotations

from tierlab.kernels import norm as norm_k
from tierlab.kernels import ssm as ssm_k
from tierlab.kernels.base import Op
from tierlab.traces.workload.segments import Segment


class RecurrentMixers:
    """The ops of a layer's recurrent mixer, given the lowering ``low``."""

    def __init__(self, low):
        self.low = low

    def declare_activations(self, m: int) -> dict:
        """The mixers' scratch buffers of ``m`` rows, by ``ssm_version`` (and Falcon-H1's ``ssm_out``, the
        Mamba-2 mixer's output beside the attention's), declared in this order."""
        low, s = self.low, self.low.spec
        d, r, n, c = s.ssm_inner, s.ssm_dt_rank, s.ssm_state, s.ssm_conv_channels
        widths = {1: (("ssm_xz", 2 * d), ("ssm_x", d), ("ssm_dbc", r + 2 * n), ("ssm_dt", d), ("ssm_y", d)),
                  2: (("ssm_xz", d + c + s.ssm_heads), ("ssm_x", c), ("ssm_y", d)),
                  3: (("ssm_xz", c + d), ("ssm_ba", 2 * s.ssm_heads), ("ssm_x", c), ("ssm_y", d)),
                  4: (("ssm_xz", c), ("ssm_x", c), ("ssm_fa", n), ("ssm_g", d), ("ssm_ba", s.ssm_heads),
                       ("ssm_y", d))}[s.ssm_version]
        a = {name: low.declare_act(name, m, width) for name, width in widths}
        if s.ssm_parallel:
            a["ssm_out"] = low.declare_act("ssm_out", m, s.hidden_size)
        return a

    def _kda_block(self, i: int, p: str, m: int, seg: Segment, out: str = "attn_out") -> list[Op]:
        """Kimi Delta Attention (Kimi-Linear's linear attention): the q, k, v projections, their short
        convolution, the forget gate (f_a_proj, f_b_proj) and beta (b_proj), the gated delta-rule
        recurrence over a state of ``heads x head dim x head dim`` per sequence (read and written once per
        segment), the output gate (g_a_proj, g_b_proj), the gated norm, o_proj."""
        low = self.low
        s, a, ab, X, w = low.spec, low.act, low.ab, p + "self_attn.", low.weights
        d, c, H = s.ssm_inner, s.ssm_conv_channels, s.ssm_heads
        conv, state = low.states[i]
        ops = [low.lin(n, X + n, "norm", "ssm_xz", m, seg, y_offset=j * m * d * ab)     # [q | k | v] blocks
               for j, n in enumerate(("q_proj", "k_proj", "v_proj"))]
        ops.append(ssm_k.conv(X + "conv1d", a["ssm_xz"], a["ssm_x"], [w[X + "conv1d"][0]], conv, m=m, channels=c,
                              width=s.ssm_conv, act_bytes=ab, row_stride=c * ab))
        F = X + "forget_gate."
        ops += [low.lin("forget_gate.f_a_proj", F + "f_a_proj", "norm", "ssm_fa", m, seg),
                low.lin("forget_gate.f_b_proj", F + "f_b_proj", "ssm_fa", "ssm_g", m, seg),
                low.lin("b_proj", X + "b_proj", "norm", "ssm_ba", m, seg)]
        ops.append(ssm_k.scan(X + "delta_rule", [(a["ssm_x"], c * ab), (a["ssm_g"], d * ab), (a["ssm_ba"], H * ab)],
                              None, a["ssm_y"], [w[F + "dt_bias"][0], w[F + "A_log"][0]], state, m=m, channels=d,
                              state_size=s.ssm_state, act_bytes=ab, pim=seg.phase == "decode"))
        ops += [low.lin("g_a_proj", X + "g_a_proj", "norm", "ssm_fa", m, seg),
                low.lin("g_b_proj", X + "g_b_proj", "ssm_fa", "ssm_g", m, seg)]
        ops.append(ssm_k.gated_norm(X + "o_norm", a["ssm_y"], a["ssm_g"], w[X + "o_norm"][0], m=m, width=d,
                                    act_bytes=ab, z_stride=d * ab))
        ops.append(low.lin("o_proj", X + "o_proj", "ssm_y", out, m, seg))
        return ops

    def _delta_net_block(self, i: int, p: str, m: int, seg: Segment, out: str = "attn_out") -> list[Op]:
        """Gated DeltaNet (Qwen3-Next's linear attention): in_proj_qkvz and in_proj_ba, the causal
        convolution over q, k, v, the delta-rule recurrence over a state of ``value heads x key dim x
        value dim`` per sequence (read and written once per segment), the gated norm, out_proj."""
        low = self.low
        s, a, ab, X, w = low.spec, low.act, low.ab, p + "linear_attn.", low.weights
        d, c, H = s.ssm_inner, s.ssm_conv_channels, s.ssm_heads
        conv, state = low.states[i]
        rowb = (c + d) * ab
        ops = [low.lin("in_proj_qkvz", X + "in_proj_qkvz", "norm", "ssm_xz", m, seg),
               low.lin("in_proj_ba", X + "in_proj_ba", "norm", "ssm_ba", m, seg)]
        ops.append(ssm_k.conv(X + "conv1d", a["ssm_xz"], a["ssm_x"], [w[X + "conv1d"][0]], conv, m=m, channels=c,
                              width=s.ssm_conv, act_bytes=ab, row_stride=rowb))
        ops.append(ssm_k.scan(X + "delta_rule", [(a["ssm_x"], c * ab), (a["ssm_ba"], 2 * H * ab)], None, a["ssm_y"],
                              [w[X + "dt_bias"][0], w[X + "A_log"][0]], state, m=m, channels=d,
                              state_size=s.ssm_state, act_bytes=ab, pim=seg.phase == "decode"))
        ops.append(ssm_k.gated_norm(X + "norm", a["ssm_y"], a["ssm_xz"], w[X + "norm"][0], m=m, width=d,
                                    act_bytes=ab, z_stride=rowb, z_offset=c * ab))
        ops.append(low.lin("out_proj", X + "out_proj", "ssm_y", out, m, seg))
        return ops

    def _mamba2_block(self, i: int, p: str, m: int, seg: Segment, out: str = "attn_out") -> list[Op]:
        """A Mamba-2 mixer: in_proj rows are [z, x B C, dt]; the convolution over x B C, the scan over
        the heads' state, the gated RMSNorm of the output by z (Falcon-H1 without ``mamba_rms_norm``:
        the gate by silu(z) alone), out_proj."""
        low = self.low
        s, a, ab, X, w = low.spec, low.act, low.ab, p + "mamba.", low.weights
        d, n, c, H = s.ssm_inner, s.ssm_state, s.ssm_conv_channels, s.ssm_heads
        conv, ssm = low.states[i]
        rowb = (d + c + H) * ab
        ops = [low.lin("in_proj", X + "in_proj", "norm", "ssm_xz", m, seg)]
        ops.append(ssm_k.conv(X + "conv1d", a["ssm_xz"], a["ssm_x"], [w[X + "conv1d"][0], w.get(
            X + "conv1d.bias", (None,))[0]], conv, m=m, channels=c, width=s.ssm_conv, act_bytes=ab,
            x_offset=d * ab, row_stride=rowb))
        sc = ssm_k.scan(X + "scan", [(a["ssm_x"], c * ab)], None, a["ssm_y"],
                        [w[X + k][0] for k in ("dt_bias", "A_log", "D")], ssm, m=m, channels=d, state_size=n,
                        act_bytes=ab, pim=seg.phase == "decode")
        sc.accesses.insert(1, sc.accesses[0]._replace(tensor=a["ssm_xz"].id, offset=(d + c) * ab, nbytes=H * ab,
                                                      count=m, stride=rowb))   # dt, one per head
        ops.append(sc)
        gain = w[X + "norm"][0] if s.ssm_norm else None
        ops.append(ssm_k.gated_norm(X + ("norm" if gain else "gate"), a["ssm_y"], a["ssm_xz"], gain, m=m, width=d,
                                    act_bytes=ab, z_stride=rowb))
        ops.append(low.lin("out_proj", X + "out_proj", "ssm_y", out, m, seg))
        return ops

    def mamba_block(self, i: int, p: str, m: int, seg: Segment, out: str = "attn_out") -> list[Op]:
        """A Mamba mixer: in_proj, the causal convolution and the selective scan over the layer's
        recurrent state (read once and written once per sequence per segment), out_proj."""
        low = self.low
        s, a, ab, X = low.spec, low.act, low.ab, p + "mamba."
        if s.ssm_version == 3:
            return self._delta_net_block(i, p, m, seg, out)
        if s.ssm_version == 4:
            return self._kda_block(i, p, m, seg, out)
        if s.ssm_version == 2:
            return self._mamba2_block(i, p, m, seg, out)
        d, r, n = s.ssm_inner, s.ssm_dt_rank, s.ssm_state
        conv, ssm = low.states[i]
        w = low.weights
        ops = [low.lin("in_proj", X + "in_proj", "norm", "ssm_xz", m, seg)]
        ops.append(ssm_k.conv(X + "conv1d", a["ssm_xz"], a["ssm_x"], [w[X + "conv1d"][0], w.get(X + "conv1d.bias",
                              (None,))[0]], conv, m=m, channels=d, width=s.ssm_conv, act_bytes=ab))
        ops.append(low.lin("x_proj", X + "x_proj", "ssm_x", "ssm_dbc", m, seg))
        if s.ssm_inner_norms:
            gains = [w[X + k][0] for k in ("dt_layernorm", "b_layernorm", "c_layernorm")]
            ops.append(ssm_k.inner_norms(X + "norms", a["ssm_dbc"], gains, m=m, width=r + 2 * n, act_bytes=ab))
        ops.append(low.lin("dt_proj", X + "dt_proj", "ssm_dbc", "ssm_dt", m, seg, x_stride=(r + 2 * n) * ab))
        ops.append(ssm_k.scan(X + "scan", [(a["ssm_x"], d * ab), (a["ssm_dt"], d * ab), (a["ssm_dbc"], (r + 2 * n) * ab)], a["ssm_xz"], a["ssm_y"],
                              [w[X + "A_log"][0], w[X + "D"][0]], ssm, m=m, channels=d, state_size=n,
                              act_bytes=ab, pim=seg.phase == "decode"))
        ops.append(low.lin("out_proj", X + "out_proj", "ssm_y", out, m, seg))
        return ops

    def parallel_mixers(self, i: int, p: str, m: int, seg: Segment) -> list[Op]:
        """Falcon-H1's mixers: the Mamba-2 mixer (into ``ssm_out``) and the attention (into ``attn_out``)
        of the same normed input, both added to the residual stream in one three-operand add."""
        low = self.low
        ops = self.mamba_block(i, p, m, seg, "ssm_out") + low.attention_block(i, p, m, seg)
        a, h = low.act, low.spec.hidden_size
        ops.append(norm_k.elementwise("residual_add", [a["hidden"], a["ssm_out"], a["attn_out"]], a["hidden"], m=m,
                                      width=h, act_bytes=low.ab, flops_per_element=2))
        return ops
