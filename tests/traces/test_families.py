"""Families read from their own config.json: parameter counts against closed forms written out here
and against the published totals; KV (sliding windows, chunks, sinks, MLA) and Mamba state bytes per
sequence against closed forms; at batch 1 the weight bytes a decode step reads against the active
parameters x bytes per element + scales, for the checkpoint formats too."""

from __future__ import annotations

import copy
import json

import pytest

from tierlab.common.errors import ConfigError, UsageError
from tierlab.common.paths import configs_dir
from test_lower import Tally, trace_of
from test_spec import PUBLISHED as PUBLISHED_SPEC
from tierlab.traces.model.spec import list_presets, load_model, spec_from_config
from tierlab.traces.model.weight_formats import weight_bytes


def attn(h, nh, kvh, hd, qkv_bias=False, o_bias=False, qk=0, sinks=False):
    n = h * nh * hd + 2 * h * kvh * hd + nh * hd * h
    return n + (nh * hd + 2 * kvh * hd if qkv_bias else 0) + (h if o_bias else 0) + qk + (nh if sinks else 0)


def mlp(h, f, gated=True, bias=False):
    return (3 if gated else 2) * h * f + ((2 * f if gated else f) + h if bias else 0)


def closed_form(name: str) -> int:
    """Parameters from the published configs, written out independently of tierlab.traces.model.spec."""
    if name == "qwen3-8b":
        return 36 * (attn(4096, 32, 8, 128, qk=256) + mlp(4096, 12288) + 2 * 4096) + 2 * 151936 * 4096 + 4096
    if name == "gemma-2-9b":     # four norms per layer, tied embeddings, head_dim 256 != 3584 / 16
        return 42 * (attn(3584, 16, 8, 256) + mlp(3584, 14336) + 4 * 3584) + 256000 * 3584 + 3584
    if name == "gemma-2-2b":
        return 26 * (attn(2304, 8, 4, 256) + mlp(2304, 9216) + 4 * 2304) + 256000 * 2304 + 2304
    if name == "gemma-3-1b":     # + q/k norms of head_dim
        return 26 * (attn(1152, 4, 1, 256, qk=512) + mlp(1152, 6912) + 4 * 1152) + 262144 * 1152 + 1152
    if name == "gemma-3-4b":     # text_config of the multimodal wrapper, Gemma3TextConfig's defaults for the rest
        return 34 * (attn(2560, 8, 4, 256, qk=512) + mlp(2560, 10240) + 4 * 2560) + 262208 * 2560 + 2560
    if name == "phi-3-mini-4k":  # fused qkv_proj / gate_up_proj: the same elements as separate
        return 32 * (attn(3072, 32, 32, 96) + mlp(3072, 8192) + 2 * 3072) + 2 * 32064 * 3072 + 3072
    if name == "phi-4":
        return 40 * (attn(5120, 40, 10, 128) + mlp(5120, 17920) + 2 * 5120) + 2 * 100352 * 5120 + 5120
    if name in ("gpt-oss-20b", "gpt-oss-120b"):
        L, E, h, f = (24, 32, 2880, 2880) if name == "gpt-oss-20b" else (36, 128, 2880, 2880)
        expert = 3 * h * f + 2 * f + h                # gate_up (with its bias) and down (with its bias)
        return L * (attn(h, 64, 8, 64, qkv_bias=True, o_bias=True, sinks=True) + E * h + E + E * expert + 2 * h) \
            + 2 * 201088 * h + h
    if name == "gpt2":           # LayerNorm with bias, biases everywhere, plain MLP, learned positions, tied
        h = 768
        return 12 * (attn(h, 12, 12, 64, True, True) + mlp(h, 4 * h, False, True) + 4 * h) + 50257 * h \
            + 1024 * h + 2 * h
    if name == "opt-125m":       # learned positions with OPT's offset of 2 rows
        h = 768
        return 12 * (attn(h, 12, 12, 64, True, True) + mlp(h, 3072, False, True) + 4 * h) + 50272 * h \
            + 2050 * h + 2 * h
    if name == "falcon-7b":      # multi-query, parallel attention (one LayerNorm), plain MLP, no biases, tied
        h = 4544
        return 32 * (attn(h, 71, 1, 64) + mlp(h, 4 * h, False) + 2 * h) + 65024 * h + 2 * h
    if name == "mistral-nemo-12b":   # head_dim 128 != 5120 / 32
        return 40 * (attn(5120, 32, 8, 128) + mlp(5120, 14336) + 2 * 5120) + 2 * 131072 * 5120 + 5120
    if name == "mistral-small-24b":
        return 40 * (attn(5120, 32, 8, 128) + mlp(5120, 32768) + 2 * 5120) + 2 * 131072 * 5120 + 5120
    if name in ("deepseek-v2-lite", "deepseek-v2"):
        lite = name == "deepseek-v2-lite"
        h, nh, L, E, fe, fd = (2048, 16, 27, 64, 1408, 10944) if lite else (5120, 128, 60, 160, 1536, 12288)
        q = h * nh * 192 if lite else h * 1536 + 1536 + 1536 * nh * 192
        mla = q + h * (512 + 64) + 512 + 512 * nh * (128 + 128) + nh * 128 * h
        moe = E * h + E * 3 * h * fe + 3 * h * 2 * fe              # router, experts, 2 shared experts
        return (mla + 3 * h * fd + 2 * h) + (L - 1) * (mla + moe + 2 * h) + 2 * 102400 * h + h
    if name == "olmoe-1b-7b":    # q/k norms over all heads (2048 each)
        h = 2048
        return 16 * (attn(h, 16, 16, 128, qk=2 * h) + 64 * h + 64 * 3 * h * 1024 + 2 * h) + 2 * 50304 * h + h
    if name == "glm-4.5-air":    # q/k/v biases, 1 dense layer, router with correction bias, 1 shared expert
        h = 4096
        a = attn(h, 96, 8, 128, qkv_bias=True)
        moe = 128 * h + 128 + 128 * 3 * h * 1408 + 3 * h * 1408
        return (a + 3 * h * 10944 + 2 * h) + 45 * (a + moe + 2 * h) + 2 * 151552 * h + h
    if name == "glm-4.5":        # + q/k norms of head_dim, 3 dense layers, 160 experts
        h = 5120
        a = attn(h, 96, 8, 128, qkv_bias=True, qk=256)
        moe = 160 * h + 160 + 160 * 3 * h * 1536 + 3 * h * 1536
        return 3 * (a + 3 * h * 12288 + 2 * h) + 89 * (a + moe + 2 * h) + 2 * 151552 * h + h
    if name == "qwen1.5-moe-a2.7b":   # shared expert of 5632 with a one-output sigmoid gate
        h = 2048
        moe = 60 * h + 60 * 3 * h * 1408 + 3 * h * 5632 + h
        return 24 * (attn(h, 16, 16, 128, qkv_bias=True) + moe + 2 * h) + 2 * 151936 * h + h
    if name == "llama-4-scout-17b-16e":   # text model: every layer MoE (16 experts, top 1) + a shared expert
        h = 5120
        return 48 * (attn(h, 40, 8, 128) + 16 * h + 17 * 3 * h * 8192 + 2 * h) + 2 * 202048 * h + h
    if name == "qwen3-next-80b-a3b":   # 36 Gated DeltaNet layers, 12 gated-attention layers (q_proj x 2)
        h, hk, hv, dk, dv, k = 2048, 16, 32, 128, 128, 4
        c, d = 2 * hk * dk + hv * dv, hv * dv
        delta = h * (c + d) + h * 2 * hv + c * k + 2 * hv + dv + d * h
        gated = h * 2 * 16 * 256 + 2 * h * 2 * 256 + 16 * 256 * h + 2 * 256
        moe = 512 * h + 512 * 3 * h * 512 + 3 * h * 512 + h          # router, experts, shared expert and its gate
        return 36 * delta + 12 * gated + 48 * (moe + 2 * h) + 2 * 151936 * h + h
    if name == "mamba-codestral-7b":   # Mamba-2: in_proj to [z, x, B, C, dt], conv over x B C, no MLP
        h, d, g, n, H, k = 4096, 8192, 8, 128, 128, 4
        c = d + 2 * g * n
        mixer = h * (d + c + H) + c * k + c + 3 * H + d + d * h
        return 64 * (mixer + h) + 2 * 32768 * h + h
    if name == "jamba-v0.1":     # attention on 4 of 32 layers, Mamba on the rest; MoE on odd layers
        h, d, n, r, k = 4096, 8192, 16, 256, 4
        mamba = 2 * d * h + d * k + d + (r + 2 * n) * d + d * r + d + d * n + d + r + 2 * n + h * d
        return 4 * attn(h, 32, 8, 128) + 28 * mamba + 16 * mlp(h, 14336) + 16 * (16 * h + 16 * mlp(h, 14336)) \
            + 32 * 2 * h + 2 * 65536 * h + h
    if name == "chatglm-6b":     # ChatGLM-6B v1: MHA, LayerNorms with bias, plain GELU MLP of 16384, biases, untied
        h = 4096
        return 28 * (attn(h, 32, 32, 128, True, True) + mlp(h, 16384, False, True) + 4 * h) + 2 * 130528 * h + 2 * h
    raise KeyError(name)


# Published totals. Exact where the publisher gives the count, else to the digits published.
PUBLISHED = {   # name: (total, 0 = exact, else the relative tolerance of the published rounding), source
    "qwen3-8b": (8.2e9, 0.01),              # Qwen3-8B model card: "Number of Parameters: 8.2B"
    "gemma-2-9b": (9_241_705_984, 0),       # huggingface.co/google/gemma-2-9b safetensors: 9,241,705,984 params
    "gemma-2-2b": (2_614_341_888, 0),       # huggingface.co/google/gemma-2-2b safetensors: 2,614,341,888 params
    "gemma-3-1b": (999_885_952, 0),         # huggingface.co/google/gemma-3-1b-pt safetensors: 999,885,952 params
    "gemma-3-4b": (3_209e6 + 262208 * 2560 + 2560, 0.0005),   # Gemma 3 report (arXiv 2503.19786) table 1:
    #                                       3,209M non-embedding parameters (+ its 262,208 x 2,560 embedding; vision 417M not modelled)
    "phi-3-mini-4k": (3.8e9, 0.01),         # Phi-3 technical report (arXiv 2404.14219): "3.8 billion parameter"
    "phi-4": (14.7e9, 0.005),               # Phi-4 technical report (arXiv 2412.08905): "14-billion" (HF card: 14.7B)
    "gpt-oss-20b": (20.91e9, 0.0005),       # gpt-oss model card (arXiv 2508.10925) table 1: 20.91B total
    "gpt-oss-120b": (116.83e9, 0.0001),     # ibid.: 116.83B total
    "gpt2": (124_439_808, 0),               # huggingface.co/openai-community/gpt2 safetensors: 124,439,808 params
    "opt-125m": (125_239_296, 0),           # huggingface.co/facebook/opt-125m: 125,239,296 params (125M)
    "falcon-7b": (6_921_720_704, 0),        # huggingface.co/tiiuae/falcon-7b safetensors: 6,921,720,704 params
    "mistral-nemo-12b": (12.2e9, 0.005),    # huggingface.co/mistralai/Mistral-Nemo-Base-2407: 12.2B params
    "mistral-small-24b": (23.6e9, 0.005),   # huggingface.co/mistralai/Mistral-Small-24B-Base-2501: 23.6B params
    "deepseek-v2-lite": (15.7e9, 0.005),    # DeepSeek-V2 paper (arXiv 2405.04434) app. B: 15.7B total
    "deepseek-v2": (236e9, 0.005),          # ibid.: 236B total
    "olmoe-1b-7b": (6.92e9, 0.001),         # OLMoE paper (arXiv 2409.02060): 6.9B total (HF: 6.92B)
    "glm-4.5-air": (106e9, 0.01),           # GLM-4.5 report (arXiv 2508.06471): 106B total
    "glm-4.5": (355e9, 0.01),               # ibid.: 355B total (with its MTP layer, not modelled: 352.8B here)
    "qwen1.5-moe-a2.7b": (14.3e9, 0.005),   # Qwen1.5-MoE blog (qwenlm.github.io): 14.3B total
    "llama-4-scout-17b-16e": (109e9, 0.02),  # Meta Llama 4 card: 109B total incl. the vision encoder (not modelled)
    "jamba-v0.1": (51.6e9, 0.001),          # huggingface.co/ai21labs/Jamba-v0.1: 51.6B params ("52B")
    "mamba-codestral-7b": (7.29e9, 0.001),
    # THUDM/chatglm-6b README: "62 亿参数" (6.2B), the embedding counted once: the untied lm_head (130,528 x 4,096,
    # in modeling_chatglm.py and in the checkpoint) comes on top
    "chatglm-6b": (6.2e9 + 130528 * 4096, 0.005),
    "qwen3-next-80b-a3b": (80e9, 0.01),     # huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct: "80B in total"  # huggingface.co/mistralai/Mamba-Codestral-7B-v0.1: 7.29B params
}
# Published active parameters (per token), and which embedding tables the publisher leaves out.
ACTIVE = {
    "gpt-oss-20b": (3.61e9, 0.002, "embed"),     # model card table 1: 3.61B active (the unembedding counted)
    "gpt-oss-120b": (5.13e9, 0.002, "embed"),    # ibid.: 5.13B
    "deepseek-v2-lite": (2.4e9, 0.03, "embed"),  # DeepSeek-V2 paper: 2.4B activated
    "deepseek-v2": (21e9, 0.01, "embed"),        # ibid.: 21B activated
    "olmoe-1b-7b": (1.28e9, 0.002, ""),          # OLMoE paper: 1.3B active (HF card 1.28B)
    "glm-4.5-air": (12e9, 0.02, "both"),         # GLM-4.5 report: 12B active (without embeddings)
    "glm-4.5": (32e9, 0.02, "both"),             # ibid.: 32B active
    "qwen1.5-moe-a2.7b": (2.7e9, 0.005, ""),     # Qwen1.5-MoE blog: 2.7B activated
    "llama-4-scout-17b-16e": (17e9, 0.015, ""),  # Meta Llama 4 card: 17B active
    "jamba-v0.1": (12e9, 0.01, ""),              # Jamba card: 12B active
    "qwen3-next-80b-a3b": (3e9, 0.1, "both"),     # Qwen3-Next card: "3B activated" (one digit: 3.25B here)
}


def test_every_preset_has_a_closed_form():
    assert set(list_presets()) - {"gpt-4-class-moe"} == set(PUBLISHED) | set(PUBLISHED_SPEC)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_param_count_equals_closed_form_and_published(name):
    spec = load_model(name)
    assert spec.param_count() == closed_form(name)
    total, tol = PUBLISHED[name]
    if tol == 0:
        assert spec.param_count() == total
    else:
        assert abs(spec.param_count() - total) <= tol * total


@pytest.mark.parametrize("name", sorted(ACTIVE))
def test_active_params_match_published(name):
    spec = load_model(name)
    want, tol, leave_out = ACTIVE[name]
    emb = spec.vocab_size * spec.hidden_size
    n = spec.active_param_count() - {"embed": emb, "both": 2 * emb, "": 0}[leave_out]
    assert abs(n - want) <= tol * want


@pytest.mark.parametrize("name,positions,expected", [
    # gpt-oss-20b: 12 sliding layers keep at most 128 rows, 12 full ones every position; 8 kv heads x 64
    ("gpt-oss-20b", 100, 24 * 100 * 2 * 8 * 64 * 2),
    ("gpt-oss-20b", 32768, (12 * 128 + 12 * 32768) * 2 * 8 * 64 * 2),
    # gemma-2-9b: even layers slide (4096), odd ones are global
    ("gemma-2-9b", 8192, (21 * 4096 + 21 * 8192) * 2 * 8 * 256 * 2),
    # gemma-3-1b: 5 of every 6 layers slide (512): layers 5, 11, 17, 23 are global
    ("gemma-3-1b", 32768, (22 * 512 + 4 * 32768) * 2 * 1 * 256 * 2),
    # gemma-3-4b (text_config): 29 sliding (1024) layers, 5 global; 4 KV heads of 256
    ("gemma-3-4b", 4096, (29 * 1024 + 5 * 4096) * 2 * 4 * 256 * 2),
    # Llama 4 Scout: chunked attention (8192) on 3 of 4 layers, global on every 4th
    ("llama-4-scout-17b-16e", 100_000, (36 * 8192 + 12 * 100_000) * 2 * 8 * 128 * 2),
    # Phi-3-mini: every layer slides over 2047
    ("phi-3-mini-4k", 4096, 32 * 2047 * 2 * 32 * 96 * 2),
    # MLA: latent 512 + rope key 64 per layer
    ("deepseek-v2-lite", 1000, 27 * 1000 * (512 + 64) * 2),
    # multi-query Falcon: one KV head of 64
    ("falcon-7b", 2048, 32 * 2048 * 2 * 64 * 2),
    # Qwen3-Next: KV on its 12 full-attention layers only (2 KV heads of 256)
    ("qwen3-next-80b-a3b", 4096, 12 * 4096 * 2 * 2 * 256 * 2),
    # Jamba: KV on its 4 attention layers only
    ("jamba-v0.1", 5000, 4 * 5000 * 2 * 8 * 128 * 2),
])
def test_kv_bytes_per_sequence_closed_form(name, positions, expected):
    assert load_model(name).kv_bytes(positions, "bf16") == expected


def test_mamba2_state_per_sequence_closed_form(tmp_path):
    s = load_model("mamba-codestral-7b")
    # 64 layers x (conv over x, B, C: (8192 + 2 x 8 x 128) x 4 + SSM state 128 heads x 64 x 128) x 2 bytes
    assert s.state_bytes("bf16") == 64 * ((8192 + 2 * 8 * 128) * 4 + 128 * 64 * 128) * 2
    assert s.kv_bytes(10**6, "bf16") == 0
    cfg = shrunk("mamba-codestral-7b", hidden_size=64, num_heads=8, head_dim=16, n_groups=2, state_size=8,
                 num_hidden_layers=3, vocab_size=100)
    tiny = spec_from_config(cfg, name="tiny-mamba2")
    t = Tally(trace_of(tmp_path, tiny, context=50, generate=2, batch=2))
    per_seq = 3 * ((128 + 2 * 2 * 8) * 4 + 128 * 8) * 2
    for step in range(2):
        assert t.kind_bytes("decode", step, "state") == t.kind_bytes("decode", step, "state", write=True) == 2 * per_seq
        assert t.kind_bytes("decode", step, "weight") == (tiny.param_count() - 100 * 64 + 2 * 64) * 2   # 2 rows


def test_qwen3_next_delta_net_state(tmp_path):
    s = load_model("qwen3-next-80b-a3b")
    # 36 linear layers x (conv over q, k, v: (2 x 16 x 128 + 32 x 128) x 4 + 32 value heads x 128 x 128) x 2 B
    assert s.state_bytes("bf16") == 36 * ((2 * 16 * 128 + 32 * 128) * 4 + 32 * 128 * 128) * 2
    cfg = shrunk("qwen3-next-80b-a3b", hidden_size=64, intermediate_size=64, moe_intermediate_size=16,
                 shared_expert_intermediate_size=16, num_experts=8, num_experts_per_tok=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                 linear_key_head_dim=8, linear_value_head_dim=8, num_hidden_layers=4, vocab_size=100)
    tiny = spec_from_config(cfg, name="tiny-qwen3-next")
    t = Tally(trace_of(tmp_path, tiny, context=20, generate=2))
    per_seq = 3 * ((2 * 2 * 8 + 4 * 8) * 4 + 4 * 8 * 8) * 2
    for step in range(2):
        assert t.kind_bytes("decode", step, "state") == t.kind_bytes("decode", step, "state", write=True) == per_seq
        assert t.kind_bytes("decode", step, "kv") == (20 + step + 1) * 2 * 2 * 16 * 2   # the one full layer


def test_jamba_state_is_fixed_per_sequence():
    s = load_model("jamba-v0.1")
    # 28 Mamba layers x (conv window 8192 x 4 + SSM state 8192 x 16) x 2 bytes
    assert s.state_bytes("bf16") == 28 * (8192 * 4 + 8192 * 16) * 2
    assert s.kv_bytes(10, "bf16") + s.state_bytes("bf16") < s.kv_bytes(10**5, "bf16")


# ---- traced runs on small configs in each family's dialect --------------------------------------

def shrunk(name, **over):
    """A preset's config with small dimensions (same dialect and layer pattern)."""
    cfg = json.loads((configs_dir("models") / f"{name}.json").read_text())
    target = cfg.get("text_config", cfg)
    target.update(over)
    return cfg


GPT_OSS_TINY = dict(hidden_size=64, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    num_hidden_layers=4, num_local_experts=8, vocab_size=256, sliding_window=8,
                    layer_types=["sliding_attention", "full_attention"] * 2)


def test_gpt_oss_decode_reads_window_and_full_kv(tmp_path):
    spec = spec_from_config(shrunk("gpt-oss-20b", **GPT_OSS_TINY), name="tiny-gpt-oss")
    t = Tally(trace_of(tmp_path, spec, context=20, generate=3, batch=2))
    row = 2 * 2 * 16 * 2                             # K and V of 2 heads x 16, bf16
    for s in range(3):
        seen = 20 + s + 1
        assert t.kind_bytes("decode", s, "kv") == 2 * (2 * min(seen, 8) + 2 * seen) * row
        assert t.kind_bytes("decode", s, "kv", write=True) == 2 * 4 * row
    # the cache of a sliding layer is a ring of 8 rows; of a full layer, every position
    assert t.nbytes["layers.0.kv.k"] == 2 * 8 * row // 2 and t.nbytes["layers.1.kv.k"] == 2 * 23 * row // 2


def _decode_weight_bytes(tmp_path, spec, weights):
    t = Tally(trace_of(tmp_path, spec, context=4, generate=1, weights=weights))
    return t.kind_bytes("decode", 0, "weight")


def test_gpt_oss_native_mxfp4_weight_bytes_per_decode_step(tmp_path):
    """Batch 1: the k routed experts in MXFP4 (half a byte per element + one byte per 32), everything
    else in bf16; the embedding is read at one row."""
    spec = spec_from_config(shrunk("gpt-oss-20b", **GPT_OSS_TINY), name="tiny-gpt-oss")
    h, f, k, L, V = 64, 32, 4, 4, 256
    expert_matrix = 3 * h * f                      # gate, up, down elements of one expert
    expert_bias = 2 * f + h
    dense = spec.active_param_count() - L * k * (expert_matrix + expert_bias) - V * h + h
    want = dense * 2 + L * k * (expert_matrix // 2 + expert_matrix // 32 + expert_bias * 2)
    assert _decode_weight_bytes(tmp_path, spec, "native") == want
    assert _decode_weight_bytes(tmp_path, spec, "bf16") == (spec.active_param_count() - V * h + h) * 2


def _tiny_dense():
    return spec_from_config(shrunk("qwen3-8b", hidden_size=256, intermediate_size=384, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=64, num_hidden_layers=2, vocab_size=512),
                            name="tiny-qwen3")


@pytest.mark.parametrize("fmt", ["fp8-block", "int4-g128", "mxfp4"])
def test_checkpoint_formats_read_scales_with_their_weights(tmp_path, fmt):
    spec = _tiny_dense()
    h, V = 256, 512
    mats = [w for w in spec.weight_shapes() if not w.is_vector and w.name not in ("embed_tokens", "lm_head")]
    vec = sum(w.elements for w in spec.weight_shapes() if w.is_vector)
    el = sum(w.rows * w.cols for w in mats)
    if fmt == "fp8-block":      # 1 byte + an fp32 scale per 128 x 128 block
        q = el + sum(-(-w.rows // 128) * -(-w.cols // 128) * 4 for w in mats)
    elif fmt == "int4-g128":    # half a byte + per row and 128 inputs an fp16 scale and a 4-bit zero
        q = el // 2 + sum(w.rows * (w.cols // 128) * 2 + w.rows * (w.cols // 128) // 2 for w in mats)
    else:                       # half a byte + an 8-bit scale per 32
        q = el // 2 + el // 32
    want = q + (vec + h + V * h) * 2                 # norms, the embedding's row and the bf16 LM head
    assert _decode_weight_bytes(tmp_path, spec, fmt) == want


def test_jamba_state_read_and_written_once_per_decode_step(tmp_path):
    cfg = shrunk("jamba-v0.1", hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                 num_hidden_layers=8, attn_layer_period=4, attn_layer_offset=2, num_experts=4, mamba_d_state=8,
                 mamba_dt_rank=8, vocab_size=128)
    spec = spec_from_config(cfg, name="tiny-jamba")
    t = Tally(trace_of(tmp_path, spec, context=30, generate=2, batch=3))
    per_seq = 6 * (128 * 4 + 128 * 8) * 2           # 6 Mamba layers, d_inner 128
    for s in range(2):
        assert t.kind_bytes("decode", s, "state") == 3 * per_seq
        assert t.kind_bytes("decode", s, "state", write=True) == 3 * per_seq
        assert t.kind_bytes("decode", s, "kv") == 3 * 2 * (30 + s + 1) * 2 * 2 * 16 * 2


def test_llama4_chunked_decode_reads_the_chunk(tmp_path):
    cfg = shrunk("llama-4-scout-17b-16e", hidden_size=64, intermediate_size=32, intermediate_size_mlp=64,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=4, num_local_experts=4,
                 vocab_size=128, attention_chunk_size=8, no_rope_layers=[1, 1, 1, 0])
    spec = spec_from_config(cfg, name="tiny-llama4")
    t = Tally(trace_of(tmp_path, spec, context=13, generate=4))
    row = 2 * 2 * 16 * 2
    for s in range(4):
        p = 13 + s                                   # the new token's position
        assert t.kind_bytes("decode", s, "kv") == (3 * (p % 8 + 1) + (p + 1)) * row


@pytest.mark.parametrize("name", ["gpt2", "opt-125m", "falcon-7b", "gemma-2-2b", "olmoe-1b-7b"])
def test_classic_families_trace_every_weight_once_per_decode_step(tmp_path, name):
    small = {"gpt2": dict(n_embd=64, n_head=4, n_layer=2, vocab_size=100, n_positions=64),
             "opt-125m": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, ffn_dim=96, vocab_size=100,
                              word_embed_proj_dim=64, max_position_embeddings=64),
             "falcon-7b": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=100),
             "gemma-2-2b": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                                head_dim=32, num_hidden_layers=2, vocab_size=100, sliding_window=8),
             "olmoe-1b-7b": dict(hidden_size=64, intermediate_size=32, num_attention_heads=4, num_key_value_heads=4,
                                 num_hidden_layers=2, num_experts=8, num_experts_per_tok=2, vocab_size=100)}[name]
    spec = spec_from_config(shrunk(name, **small), name="tiny")
    V, h = spec.vocab_size, spec.hidden_size
    pos = h if spec.learned_positions else 0         # one row of the position table
    table = V * h + spec.learned_positions * h
    head = V * h if spec.tie_word_embeddings else 0  # a tied LM head reads the whole table
    want = (spec.active_param_count() - table + h + pos + head) * 2
    assert _decode_weight_bytes(tmp_path, spec, "bf16") == want


def test_nested_text_config_and_unknown_fields():
    s = load_model("llama-4-scout-17b-16e")
    assert s.family == "llama4" and s.num_shared_experts == 1 and s.intermediate_size == 16384
    cfg = shrunk("llama-4-scout-17b-16e", no_rope_layers=[1, 2] * 24)
    with pytest.raises(ConfigError, match="unknown entry 2") as e:
        spec_from_config(cfg)
    assert e.value.field == "text_config.no_rope_layers"
    cfg = shrunk("falcon-7b", alibi=True)
    with pytest.raises(ConfigError, match="alibi = True is not modelled") as e:
        spec_from_config(cfg)
    assert e.value.field == "alibi"
    cfg = shrunk("gpt-oss-20b")
    cfg["layer_types"][3] = "linear_attention"
    with pytest.raises(ConfigError, match="unknown entry 'linear_attention'"):
        spec_from_config(cfg)
    cfg = copy.deepcopy(shrunk("gpt-oss-20b"))
    cfg["quantization_config"]["quant_method"] = "bitsandbytes"
    with pytest.raises(ConfigError, match="quant_method 'bitsandbytes' is not modelled"):
        weight_bytes(spec_from_config(cfg), "native")


def test_sharding_refuses_what_it_does_not_split(tmp_path):
    spec = spec_from_config(shrunk("mamba-codestral-7b", **SMALL["mamba-codestral-7b"]), name="tiny-mamba2")
    with pytest.raises(UsageError, match="4 ranks do not divide the model's state-space groups"):
        trace_of(tmp_path, spec, generate=1, tp=4)


def test_gpt_oss_preset_defaults_to_its_released_mxfp4_experts():
    from tierlab.traces.model.weight_formats import default_weights, weight_tensors

    g = load_model("gpt-oss-20b")
    assert default_weights(g) == "native" and default_weights(load_model("deepseek-v3")) == "bf16"
    fmt = {t.dtype for t in weight_tensors(g, "native") if t.shape.expert >= 0 and not t.shape.is_vector}
    rest = {t.dtype for t in weight_tensors(g, "native") if t.shape.expert < 0}
    assert fmt == {"mxfp4"} and rest == {"bf16"}
    # experts: 4.25 bits per element; 24 layers x 32 experts x 3 x 2880^2 elements
    experts = 24 * 32 * 3 * 2880 * 2880
    assert weight_bytes(g, "native") == (g.param_count() - experts) * 2 + experts // 2 + experts // 32


# ---- rings, chunks and the attention kernels ----------------------------------------------------

def test_ring_spans_against_a_position_by_position_map():
    from tierlab.kernels.attention import Cache, cache_spans
    from tierlab.kernels.base import Ten

    for ring in (1, 3, 8):
        c = Cache(Ten(0, 0), 1, ring, ring)
        for lo in range(0, 20):
            for hi in range(lo, lo + 12):
                spans = cache_spans(c, lo, hi)
                rows = [r for a, n in spans for r in range(a, a + n)]
                kept = list(range(max(lo, hi - ring), hi))         # the last `ring` positions of the range
                assert rows == [p % ring for p in kept] and len(spans) <= 2


def test_causal_pairs_with_windows_and_chunks_brute_force():
    from tierlab.kernels.attention import causal_pairs, key_range

    for start in range(0, 30, 7):
        for t in (1, 5, 17):
            for window, chunk in ((None, None), (4, None), (None, 6)):
                brute = sum(hi - lo for lo, hi in (key_range(p, window, chunk) for p in range(start, start + t)))
                assert causal_pairs(start, t, window, chunk) == brute


@pytest.mark.parametrize("attention", ["flash", "naive"])
def test_windowed_rings_multi_turn_offload_and_kernels_stay_in_bounds(tmp_path, attention):
    """Conversations with KV offload over sliding rings: every access inside its tensor (the reader
    checks each), and decode KV reads equal the closed form for both attention kernels."""
    from tierlab.traces.format.reader import open_trace

    spec = spec_from_config(shrunk("gpt-oss-20b", **GPT_OSS_TINY), name="tiny-gpt-oss")
    t = trace_of(tmp_path, spec, turns=((9, 3), (5, 2)), kv_offload=True, attention=attention, attn_tile=4)
    tally = Tally(t)                                 # reads every access (bounds checked by the reader)
    assert open_trace(t.path).manifest["tables"]["accesses"] > 0
    row = 2 * 2 * 16 * 2
    # turn 1's decode steps (numbered 3, 4) follow 9 + 3 + 5 positions
    for s, seen in ((3, 18), (4, 19)):
        want = (2 * min(seen, 8) + 2 * seen) * row
        assert tally.kind_bytes("decode", s, "kv") == want       # naive: K in the scores op, V in the pv op


def test_llama4_global_layers_have_no_rotary(tmp_path):
    cfg = shrunk("llama-4-scout-17b-16e", hidden_size=64, intermediate_size=32, intermediate_size_mlp=64,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=4, num_local_experts=4,
                 vocab_size=128, attention_chunk_size=8, no_rope_layers=[1, 1, 1, 0])
    t = trace_of(tmp_path, spec_from_config(cfg, name="tiny-llama4"), generate=1)
    ops = t.op_arrays()
    layers = {int(layer) for name, layer in zip(ops["name"], ops["layer"]) if name == "rotary"}
    assert layers == {0, 1, 2}


def test_llama4_qk_norm_is_a_gainless_norm_per_head_where_rotary_turns(tmp_path):
    """Llama 4's use_qk_norm: q and k normalised per head, without a gain, on the layers that turn
    rotary (Transformers' Llama4TextL2Norm / WeightlessRMSNorm): 4 FLOPs an element, each row read
    and written once, no parameter; off, none of it."""
    kw = dict(hidden_size=64, intermediate_size=32, intermediate_size_mlp=64, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, num_hidden_layers=4, num_local_experts=4, vocab_size=128,
              attention_chunk_size=8, no_rope_layers=[1, 0, 1, 1])
    on = spec_from_config(shrunk("llama-4-scout-17b-16e", use_qk_norm=True, **kw), name="tiny-llama4")
    off = spec_from_config(shrunk("llama-4-scout-17b-16e", use_qk_norm=False, **kw), name="tiny-llama4")
    assert on.param_count() == off.param_count()
    batch, prompt = 2, 5
    ops = trace_of(tmp_path, on, generate=1, batch=batch, prompt=prompt).op_arrays()
    norms = [(int(layer), str(phase), int(flops)) for name, layer, phase, flops
             in zip(ops["name"], ops["layer"], ops["phase"], ops["flops"]) if name in ("q_norm", "k_norm")]
    assert {layer for layer, _, _ in norms} == {0, 2, 3}              # layer 1 turns no rotary
    for phase, tokens in (("prefill", batch * prompt), ("decode", batch)):
        per_layer = sum(f for layer, ph, f in norms if ph == phase and layer == 0)
        assert per_layer == 4 * tokens * (4 + 2) * 16
    (tmp_path / "on").mkdir(), (tmp_path / "off").mkdir()
    tally = Tally(trace_of(tmp_path / "on", on, generate=1, batch=batch, prompt=prompt))
    tally_off = Tally(trace_of(tmp_path / "off", off, generate=1, batch=batch, prompt=prompt))
    step = max(s for p, s, _, _ in tally.bytes if p == "decode")
    for write in (False, True):
        extra = (tally.kind_bytes("decode", step, "activation", write)
                 - tally_off.kind_bytes("decode", step, "activation", write))
        assert extra == 3 * batch * (4 + 2) * 16 * 2                  # 3 layers' q and k rows, bf16
    assert tally.kind_bytes("decode", step, "weight") == tally_off.kind_bytes("decode", step, "weight")


def test_an_unknown_wrapper_is_read_by_its_language_models_family():
    """Mistral-Small-3.1's Mistral3ForConditionalGeneration: the text model is a Mistral."""
    text = json.loads((configs_dir("models") / "mistral-small-24b.json").read_text())
    cfg = {"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
           "text_config": {**text, "architectures": None}, "vision_config": {"model_type": "pixtral"}}
    s = spec_from_config(cfg)
    assert s.family == "mistral" and s.param_count() == load_model("mistral-small-24b").param_count()


SMALL = {
    "gpt-oss-20b": GPT_OSS_TINY,
    "gpt2": dict(n_embd=64, n_head=4, n_layer=2, vocab_size=100, n_positions=64),
    "falcon-7b": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=100),
    "gemma-3-4b": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                       num_hidden_layers=6, vocab_size=100, sliding_window=8),
    "jamba-v0.1": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                       num_hidden_layers=8, attn_layer_period=4, attn_layer_offset=2, num_experts=4, mamba_d_state=8,
                       mamba_dt_rank=8, vocab_size=128),
    "mamba-codestral-7b": dict(hidden_size=64, num_heads=8, head_dim=16, n_groups=2, state_size=8, num_hidden_layers=3,
                               vocab_size=100),
    "deepseek-v2-lite": dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, n_routed_experts=8,
                             num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, qk_nope_head_dim=16,
                             qk_rope_head_dim=8, v_head_dim=16, num_hidden_layers=3, vocab_size=100),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_traced_weight_tensors_hold_the_parameter_count(tmp_path, name):
    """The lowering declares every weight once, in bf16 (vectors too), nothing else of kind weight:
    the trace's weight bytes are twice the closed-form-checked parameter count."""
    spec = spec_from_config(shrunk(name, **SMALL[name]), name="tiny")
    t = Tally(trace_of(tmp_path, spec, generate=1))
    held = sum(n for name_, n in t.nbytes.items() if t.kind[t.names.index(name_)] == "weight")
    assert held == 2 * spec.param_count()


def test_core_dimensions_left_to_defaults_are_named_in_the_provenance(tmp_path):
    """A config without num_hidden_layers runs on Transformers' default (32 for Llama): the replay's
    provenance names it, and a preset that gives every core dimension names none."""
    import json as _json

    import tierlab
    from tierlab.traces.model.families import defaulted_core_keys

    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256}
    assert defaulted_core_keys(cfg) == ["num_hidden_layers"]
    assert defaulted_core_keys({**cfg, "num_hidden_layers": 2}) == []
    assert defaulted_core_keys({"architectures": ["NoSuchForCausalLM"]}) == []
    path = tmp_path / "config.json"
    path.write_text(_json.dumps({**cfg, "num_hidden_layers": 2}))
    r = tierlab.run(path, chip="h100", generate=1)
    assert r.to_dict()["provenance"]["model_defaults"] == []
    gemma = tierlab.run("gemma-3-4b", chip="h100", generate=1)       # a wrapper whose text_config gives few keys
    assert "num_attention_heads" in gemma.to_dict()["provenance"]["model_defaults"]
