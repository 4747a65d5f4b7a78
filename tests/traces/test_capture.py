"""``tierlab trace --capture`` against the hand-written lowering: two paths that check each other.

For every model preset the lowering reads and Transformers knows, a reduced-size variant in the
preset's own dialect (few layers, small hidden; every other field as shipped) is traced both ways
over the same run (context, prefill, decode steps, batch 2). Parameter count, weight bytes, KV
bytes, FLOPs per decode step and the weight/KV bytes each step reads and writes must be equal.
The one family where they differ by design is DeepSeek's MLA: Transformers runs it unabsorbed
(the cached latents are up-projected through kv_b_proj every step), tierlab's lowering absorbed;
there the test checks the difference equals its closed form. Skipped only where torch/transformers are absent and CI is not set; with CI=true it fails.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tierlab.common.errors import ConfigError
from tierlab.common.paths import configs_dir
from tierlab.traces.format.schema import FORMAT_VERSION
from tierlab.traces.lowering.generate import generate_trace
from tierlab.traces.format.reader import open_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.families import FAMILIES, LLAMA_KEYS, family_of
from tierlab.traces.model.spec import spec_from_config
from tierlab.traces.format.summary import summarize

RUN = dict(context=3, prompt=5, generate=2, batch=2)


def _lowerable(path: Path) -> bool:
    try:
        spec_from_config(json.loads(path.read_text()))
        return True
    except Exception:
        return False


PRESETS = sorted(p.stem for p in configs_dir("models").glob("*.json") if _lowerable(p))


def _two(types: list) -> list:
    """A per-layer list cut to 2 layers, keeping a layer of a second kind when the model has one."""
    other = next((t for t in types[1:] if t != types[0]), types[1] if len(types) > 1 else types[0])
    return [types[0], other]


# each dialect's feed-forward widths (GPT-2's n_inner, OPT's ffn_dim, Falcon's ffn_hidden_size, Llama 4's
# dense intermediate_size_mlp beside its experts' intermediate_size)
FFN_KEYS = ("intermediate_size", "intermediate_size_mlp", "ffn_dim", "n_inner", "ffn_hidden_size")
TOKEN_ID_KEYS = ("pad_token_id", "padding_idx", "bos_token_id", "eos_token_id")


def reduced(config: dict) -> dict:
    """The same model family and dialect at toy size: 2 layers (DeepSeek: 1 dense + 1 MoE; hybrids:
    one layer of each kind), hidden 64, 4 heads, GQA kept as GQA, at most 8 experts of top-2, small
    MLA ranks, a sliding window (or attention chunk) of 4 positions (shorter than the run, so it
    matters) wherever the config has one. A multimodal wrapper's ``text_config`` is reduced in
    place. Keys are the family's own (GPT-2's ``n_embd``, ``n_layer``, ``n_head``)."""
    c = dict(config)
    family = _family(c)
    if isinstance(c.get("text_config"), dict):
        c["text_config"] = _reduce({**FAMILIES[family].defaults, **c["text_config"]}, family)
        return c
    return _reduce(c, family)


def _family(config: dict) -> str:
    try:
        return family_of(config, None)[0]
    except ConfigError:
        return ""                      # GLM / ChatGLM, read apart from the family table: Llama's keys


def _reduce(config: dict, family: str) -> dict:
    c = dict(config)
    k = {**LLAMA_KEYS, **(FAMILIES[family].keys if family else {})}
    heads = c.get(k["num_heads"], 4)
    kv = c.get(k["num_kv_heads"], heads) if k.get("num_kv_heads") else heads
    if family == "falcon" and not c.get("new_decoder_architecture"):
        kv = 1 if c.get("multi_query", True) else heads
    c[k["hidden_size"]] = 64
    c["vocab_size"] = 256
    c[k["num_layers"]] = 2
    if family != "mamba2":
        c[k["num_heads"]] = 4
    if k.get("num_kv_heads") and k["num_kv_heads"] in c:
        c[k["num_kv_heads"]] = 4 if kv == heads else (1 if kv == 1 else 2)
    for key in FFN_KEYS:
        if c.get(key) is not None:
            c[key] = 128
    if c.get("head_dim") is not None:
        c["head_dim"] = 32            # Qwen3: head_dim differs from hidden / heads (64 / 4 = 16)
    for key in TOKEN_ID_KEYS:         # an id must stay inside the reduced vocabulary (padding_idx < vocab)
        v = c.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 256:
            c[key] = 0
        elif isinstance(v, list):
            c[key] = [x if x < 256 else 0 for x in v]
    if "word_embed_proj_dim" in c:    # OPT: the embedding projection follows hidden
        c["word_embed_proj_dim"] = 64
    if c.get("sliding_window") is not None:
        c["sliding_window"] = 4
    if c.get("attention_chunk_size") is not None:
        c["attention_chunk_size"] = 4
    for key in ("layer_types", "no_rope_layers", "mlp_layer_types"):
        if isinstance(c.get(key), list) and c[key]:
            c[key] = _two(c[key])
    if family == "gemma3":            # 5 sliding : 1 global -> 1 : 1
        c["sliding_window_pattern"] = 2
    if family == "gemma4":            # the global layer's own head width; per-layer inputs of 16 a layer
        over = next(iter((c.get("per_layer_config") or {}).values()), {})
        full = [i for i, t in enumerate(c.get("layer_types") or []) if t == "full_attention"]
        c["per_layer_config"] = {str(i): {**over, "head_dim": 64} for i in full}
        c.update(vocab_size_per_layer_input=256,
                 hidden_size_per_layer_input=16 if c.get("hidden_size_per_layer_input") else 0)
    if family in ("qwen3_next", "qwen3_5", "qwen3_5_moe"):   # 3 linear : 1 full -> 1 : 1, small linear heads
        c.update(full_attention_interval=2, linear_num_key_heads=2, linear_num_value_heads=4,
                 linear_key_head_dim=16, linear_value_head_dim=16)
    if family == "kimi_linear":       # layer 0 KDA, layer 1 MLA; small linear heads
        c.update(linear_num_heads=2, linear_head_dim=16)
    if family == "jamba":             # layer 0 Mamba, layer 1 attention with MoE
        c.update(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1)
        if isinstance(c.get("mamba_dt_rank"), int):
            c["mamba_dt_rank"] = 8
    if family == "nemotron_h":        # its default pattern keeps one layer of each block (M, E, *, -)
        c.pop("num_hidden_layers", None)
        c.update(mamba_num_heads=8, mamba_head_dim=16, n_groups=2, ssm_state_size=16,
                 moe_shared_expert_intermediate_size=64)
    if family == "falcon_h1":         # mamba_n_heads x mamba_d_head = mamba_d_ssm
        c.update(mamba_d_ssm=128, mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16)
    if family == "mamba2":            # num_heads x head_dim = expand x hidden; groups divide the heads
        c.update(num_heads=c.get("expand", 2) * 64 // 32, n_groups=min(c.get("n_groups", 1), 2), state_size=16,
                 time_step_rank=8)
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        if c.get(key):
            c[key] = min(c[key], 8)
    if c.get("num_experts_per_tok"):
        c["num_experts_per_tok"] = min(c["num_experts_per_tok"], 2)
    for key in ("experts_per_token", "num_experts_per_token"):
        if c.get(key):
            c[key] = min(c[key], 2)
    if "moe_intermediate_size" in c:
        c["moe_intermediate_size"] = 32
    if c.get("shared_expert_intermediate_size"):
        c["shared_expert_intermediate_size"] = 64
    if "first_k_dense_replace" in c:
        c["first_k_dense_replace"] = 1
    if c.get("n_group"):
        c.update(n_group=min(c["n_group"], 2), topk_group=1)
    if "kv_lora_rank" in c:
        c.update(kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
        if c.get("q_lora_rank"):
            c["q_lora_rank"] = 48
    return c


def _preset(name: str) -> dict:
    return json.loads((configs_dir("models") / f"{name}.json").read_text())


def _both(config: dict, tmp: Path, **run_kw) -> tuple[dict, dict, object, Counter, Counter]:
    from tierlab.traces.capture import capture_trace

    run = RunConfig(**{**RUN, **run_kw})
    spec = spec_from_config(config)
    cap = summarize(open_trace(capture_trace(config, run, tmp / "c.trace")))
    hand = summarize(open_trace(generate_trace(spec, run, tmp / "h.trace")))
    return cap, hand, spec, _decode_flops_by_kind(tmp / "c.trace"), _decode_flops_by_kind(tmp / "h.trace")


def _decode_flops_by_kind(path: Path) -> Counter:
    ops = open_trace(path).op_arrays()
    c: Counter = Counter()
    for kind, flops, phase in zip(ops["kind"], ops["flops"], ops["phase"]):
        if phase == "decode":
            c[str(kind)] += int(flops)
    return c


# families --capture refuses, in one line documented in docs/capture.md (the refusal itself is checked:
# when --capture learns one of them, its preset fails here until it is taken off this list)
CAPTURE_REFUSES: dict[str, str] = {}     # Falcon's own attention table: recorded through its sdpa class now
STATE_FAMILIES = ("jamba", "mamba2", "qwen3_next", "qwen3_5", "qwen3_5_moe", "nemotron_h", "falcon_h1",
                  "kimi_linear")   # recurrent mixers: lowered by hand op by op, by capture as
# its linears plus one state op per layer and segment (docs/capture.md): checked on what both model alike


@pytest.mark.parametrize("preset", PRESETS)
def test_capture_equals_lowering(preset, transformers, tmp_path):
    _check_both(reduced(_preset(preset)), transformers, tmp_path)


def _check_both(config: dict, transformers, tmp_path) -> None:
    if config["model_type"] not in transformers.CONFIG_MAPPING:
        pytest.skip(f"Transformers {transformers.__version__} does not know model_type {config['model_type']!r}")
    refusal = CAPTURE_REFUSES.get(_family(config))
    if refusal:
        from tierlab.traces.capture import capture_trace

        with pytest.raises(ConfigError) as err:
            capture_trace(config, RunConfig(**RUN), tmp_path / "c.trace")
        assert refusal in str(err.value) and "\n" not in str(err.value)
        pytest.skip(f"--capture refuses it: {err.value}")
    cap, hand, spec, cap_k, hand_k = _both(config, tmp_path)
    assert cap["params"] == hand["params"] == spec.param_count()
    if _family(config) in STATE_FAMILIES:
        return _check_state(cap, hand, spec)
    if _family(config) == "gemma4":
        return _check_gemma4(cap, hand, spec, cap_k, hand_k, tmp_path)
    assert cap["weight_bytes"] == hand["weight_bytes"]
    positions = RUN["context"] + RUN["prompt"] + RUN["generate"]
    # sliding and chunked layers keep a ring of window / chunk rows (Transformers' static sliding layer)
    assert cap["kv_bytes"] == hand["kv_bytes"] == spec.kv_bytes(positions) * RUN["batch"]
    if spec.sliding_window or any(k == "chunked" for k, _ in spec.layer_attention):
        assert cap["kv_bytes"] < spec.kv_bytes_per_token() * RUN["batch"] * positions
    assert cap["decode_steps"] == hand["decode_steps"] == RUN["generate"]
    # GPT-2's position ids are [1, t]: Transformers gathers each position's row once for the batch; the
    # hand lowering once per sequence (as engines with a position per sequence do; docs/capture.md)
    gap = (RUN["batch"] - 1) * 2 * spec.hidden_size if spec.family == "gpt2" else 0     # bf16 row bytes
    for c, h in zip(cap["steps"], hand["steps"]):
        assert c["bytes"]["weight"]["read"] + gap == h["bytes"]["weight"]["read"]
        assert c["bytes"]["weight"]["write"] == h["bytes"]["weight"]["write"]
        assert c["bytes"]["kv"] == h["bytes"]["kv"]
    if gap:
        for phase, positions_read in (("prefill", RUN["prompt"]), ("decode", RUN["generate"])):
            cap["bytes"][phase]["weight"]["read"] += gap * positions_read
    if spec.norm_layout in ("parallel", "parallel2"):
        # attention and MLP of the same input (Phi-2, Cohere, GPT-NeoX): Transformers adds the two blocks'
        # outputs and the residual in two sums, each a read and a write of the residual stream; the hand
        # lowering in one (a fused three-operand add, as engines run it): one row each way per token per layer
        row = spec.hidden_size * 2 * spec.num_layers * RUN["batch"]
        for phase, tokens in (("prefill", RUN["prompt"]), ("decode", RUN["generate"])):
            for way in ("read", "write"):
                hand["bytes"][phase]["activation"][way] += row * tokens
    if spec.attention != "mla":
        assert [s["flops"] for s in cap["steps"]] == [s["flops"] for s in hand["steps"]]
        assert cap["flops"] == hand["flops"]
        assert cap_k == hand_k
        assert cap["bytes"] == hand["bytes"]         # activations too: the same kernels over the same shapes
        return
    # MLA: Transformers' unabsorbed form against tierlab's absorbed one, term by term per decode step
    B, L, H = RUN["batch"], spec.num_layers, spec.num_heads
    r, nope, rope, v = spec.kv_lora_rank, spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
    keys = [RUN["context"] + RUN["prompt"] + s + 1 for s in range(RUN["generate"])]
    expand = sum(2 * B * S * r * H * (nope + v) for S in keys) * L          # kv_b_proj over every cached latent
    assert cap_k["linear"] - hand_k["linear"] == expand
    # DeepSeek-V3.2: the indexer scores every cached index key (both ways alike); attention reads the top-k
    IH, D = spec.index_heads, spec.index_head_dim
    index = sum(2 * B * S * IH * (D + 1) for S in keys) * L
    read = [min(S, spec.index_topk) if spec.index_topk else S for S in keys]
    assert cap_k["attention"] - index == sum(2 * H * B * S * (nope + rope + v) for S in read) * L
    absorb = 2 * B * H * r * (nope + v) * len(keys) * L
    assert hand_k["attention"] - index == sum(2 * H * B * S * (r + rope + r) for S in read) * L + absorb
    # only the rope dimensions turn (H x rope of the query, rope of the key; the indexer's IH x rope and
    # rope), on both paths; none in Kimi-Linear's NoPE MLA
    turns = 0 if spec.nope_full_layers else 3 * B * (H * rope + rope + (IH * rope + rope if D else 0)) * len(keys) * L
    assert cap_k["rotary"] == hand_k["rotary"] == turns
    for kind in set(cap_k) | set(hand_k):
        if kind not in ("linear", "attention"):
            assert cap_k[kind] == hand_k[kind], kind
    if D:     # the index keys' own traffic: every cached row read per step, one row appended per sequence
        for st, (c, h) in enumerate(zip(cap["steps"], hand["steps"])):
            assert c["bytes"]["kv_index"] == h["bytes"]["kv_index"] == {"read": keys[st] * B * L * D * 2,
                                                                         "write": B * L * D * 2}


# Gemma 4 weights the model reads that no op of the capture reads: each layer's output is scaled by its
# layer_scalar (an in-place aten.mul_ of the decoder layer), the router's input by router.scale and its top-k
# weights by router.per_expert_scale (products in the router's forward, outside its proj): the capture lists
# them as unread_weights and leaves the products unmapped; the hand lowering reads each once per layer and segment
GEMMA4_UNREAD = ("layer_scalar", "router.scale", "router.per_expert_scale")


def _check_gemma4(cap: dict, hand: dict, spec, cap_k: Counter, hand_k: Counter, tmp: Path) -> None:
    """Gemma 4 both ways: the same weight and KV bytes; every step (prefill and decode) reads and writes the
    same KV (the KV-shared layers over the cache of the layer they share); each decode step reads the same
    weights but for :data:`GEMMA4_UNREAD`, which the capture misses; the decode steps' linear, attention, norm
    and MoE FLOPs are equal, and the prefill's dense linear FLOPs per layer. Not compared: the other FLOPs
    and the activation bytes, of the operators the capture leaves unmapped (rotary, which Gemma 4 turns on
    q and k apart as mul/neg/cat; the layer-scalar product; the embeddings' scale and the per-layer inputs'
    sum)."""
    from tierlab.traces.model.weight_formats import weight_tensors

    run = RunConfig(**RUN)
    assert cap["weight_bytes"] == hand["weight_bytes"]
    positions = RUN["context"] + RUN["prompt"] + RUN["generate"]
    assert cap["kv_bytes"] == hand["kv_bytes"] == spec.kv_bytes(positions) * RUN["batch"]
    assert cap["bytes"]["prefill"]["kv"] == hand["bytes"]["prefill"]["kv"]
    unread = [t for t in weight_tensors(spec, run.weights, run.quant_group) if t.shape.name.endswith(GEMMA4_UNREAD)]
    manifest = open_trace(tmp / "c.trace").manifest["capture"]
    assert sorted(n.removeprefix("model.") for n in manifest["unread_weights"]) == sorted(t.shape.name for t in unread)
    assert any(u["op"] == "aten.mul_" and u["module"] == "Gemma4TextDecoderLayer" for u in manifest["unmapped_ops"])
    missed = sum(t.nbytes for t in unread)
    assert missed >= spec.num_layers * 2
    for c, h in zip(cap["steps"], hand["steps"]):
        assert c["bytes"]["weight"]["read"] + missed == h["bytes"]["weight"]["read"]
        assert c["bytes"]["weight"]["write"] == h["bytes"]["weight"]["write"] == 0
        assert c["bytes"]["kv"] == h["bytes"]["kv"]
    for kind in ("linear", "attention", "norm", "moe_router", "moe_combine", "kv_append"):
        assert cap_k[kind] == hand_k[kind], kind
    # the prefill's KV-shared layers run each sequence's last token only (Gemma4TextModel keeping the last
    # logits), both ways; the capture routes every prompt token to their experts all the same (not compared)
    assert _prefill_dense_linear_flops(tmp / "c.trace") == _prefill_dense_linear_flops(tmp / "h.trace")


def _prefill_dense_linear_flops(path: Path) -> Counter:
    ops = open_trace(path).op_arrays()
    c: Counter = Counter()
    for layer, kind, flops, phase, expert in zip(ops["layer"], ops["kind"], ops["flops"], ops["phase"], ops["expert"]):
        if phase == "prefill" and kind == "linear" and expert < 0:
            c[int(layer)] += int(flops)
    return c


def test_capture_equals_lowering_of_gemma4_kv_sharing(transformers, tmp_path):
    """Gemma 4 with the last two of four layers reading the KV of the first two (a sliding and a global
    one), keys equal to values on the global layers (fewer KV heads there, wider heads), double-wide MLPs
    on the KV-shared layers, and the MoE block beside every MLP: both paths as for the default config."""
    from tierlab.traces.capture.census import default_config

    c = reduced(default_config("gemma4_text"))
    c.update(num_hidden_layers=4, num_kv_shared_layers=2, attention_k_eq_v=True, use_double_wide_mlp=True,
             layer_types=["sliding_attention", "full_attention"] * 2, enable_moe_block=True, num_experts=8,
             top_k_experts=2, moe_intermediate_size=32,
             per_layer_config={str(i): {"head_dim": 64, "num_key_value_heads": 1} for i in (1, 3)})
    spec = spec_from_config(c)
    assert [x.kv_layer for x in spec.gemma4.layers] == [0, 1, 0, 1] and spec.num_experts == 8
    _check_both(c, transformers, tmp_path)
    from tierlab.common.errors import UsageError

    with pytest.raises(UsageError, match="one device only"):     # the sharded lowering knows one layer width
        generate_trace(spec, RunConfig(**RUN, tp=2), tmp_path / "tp.trace")


def _check_state(cap: dict, hand: dict, spec) -> None:
    """A recurrent-state model both ways: the same parameters, weight, KV and state bytes; every decode step
    reads every weight once (at batch 2 with top-2 of 8 experts the routed experts differ by nothing:
    both route with tierlab's router), reads each state once and writes it once."""
    assert cap["weight_bytes"] == hand["weight_bytes"]
    assert cap["kv_bytes"] == hand["kv_bytes"]
    state = spec.state_bytes("bf16") * RUN["batch"]
    assert state > 0 and cap["bytes"]["decode"]["state"] == hand["bytes"]["decode"]["state"] \
        == {"read": state * RUN["generate"], "write": state * RUN["generate"]}
    for c, h in zip(cap["steps"], hand["steps"]):
        assert c["bytes"]["weight"]["read"] == h["bytes"]["weight"]["read"]
        assert c["bytes"]["kv"] == h["bytes"]["kv"]


# The hand families of issue 25, from Transformers' own default config of each (no preset ships them):
# the same cross-check as the presets'.
NEW_HAND_TYPES = ["gemma", "phi", "olmo2", "olmo3", "granite", "granitemoe", "granitemoeshared", "cohere", "cohere2",
                  "starcoder2", "gpt_neox", "smollm3", "stablelm", "exaone4", "seed_oss", "ernie4_5", "phimoe", "glm",
                  "glm4", "glm4_moe_lite", "minimax_m2", "qwen3_5_text", "qwen3_5_moe_text", "nemotron_h", "falcon_h1",
                  "deepseek_v32", "kimi_linear", "gemma4_text"]


@pytest.mark.parametrize("model_type", NEW_HAND_TYPES)
def test_capture_equals_lowering_of_transformers_defaults(model_type, transformers, tmp_path):
    from tierlab.traces.capture.census import default_config

    _check_both(reduced(default_config(model_type)), transformers, tmp_path)


def test_capture_equals_lowering_of_nemotron_h_latent_moe(transformers, tmp_path):
    """Nemotron-H's latent MoE (experts between fc1 / fc2 latent projections) with MLP biases, both ways."""
    from tierlab.traces.capture.census import default_config

    _check_both(dict(reduced(default_config("nemotron_h")), moe_latent_size=16, mlp_bias=True), transformers,
                tmp_path)


def test_sparse_attention_top_k_both_ways(transformers, tmp_path):
    """DeepSeek-V3.2 with an index_topk shorter than the run's context: both paths read at most index_topk
    KV rows per decode query (and every index key), the same bytes per step."""
    from tierlab.traces.capture.census import default_config

    _check_both({**reduced(default_config("deepseek_v32")), "index_topk": 4}, transformers, tmp_path)


def test_capture_quantised_weights_and_kv(transformers, tmp_path):
    """Group-quantised int4 weights (scales counted) and an fp8 KV cache: both paths agree."""
    config = reduced(_preset("llama-3.1-8b"))
    cap, hand, spec, cap_k, hand_k = _both(config, tmp_path, weights="int4", kv="fp8", quant_group=32)
    assert cap["weight_bytes"] == hand["weight_bytes"] > spec.param_count() // 2
    assert cap["kv_bytes"] == hand["kv_bytes"]
    assert cap["bytes"] == hand["bytes"]


def test_capture_cli(transformers, tmp_path):
    """`tierlab trace MODEL --capture` writes a trace (the writer's format) that replays, and says what it recorded."""
    from click.testing import CliRunner

    from tierlab.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(reduced(_preset("qwen2-0.5b"))))
    r = CliRunner().invoke(main, ["trace", str(tmp_path), "--capture", "--prompt", "4", "--generate", "1",
                                  "-o", str(tmp_path / "q.trace"), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["model"] == tmp_path.name
    assert info["capture"]["model_type"] == "qwen2"
    assert info["capture"]["aten_ops_recorded"] > 100
    assert open_trace(tmp_path / "q.trace").manifest["version"] == FORMAT_VERSION   # the one writer's format
    r = CliRunner().invoke(main, ["replay", str(tmp_path / "q.trace"), "--chip", "h100", "--json"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.stderr


def _cli(*args):
    from click.testing import CliRunner

    from tierlab.cli import main

    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_no_hand_lowering_goes_through_capture(transformers, tmp_path):
    """`tierlab trace CONFIG.json` of a family with no hand lowering (OLMo 1) is captured by itself; the
    provenance says so and why; its traced weights hold Transformers' parameter count. A hand family's
    trace says it is the hand lowering's."""
    from tierlab.traces.capture.census import default_config, meta_param_count

    config = default_config("olmo")
    config.update(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=256)
    (tmp_path / "olmo.json").write_text(json.dumps(config))
    r = _cli("trace", tmp_path / "olmo.json", "--prompt", 3, "--generate", 1, "-o", tmp_path / "o.trace", "--json")
    assert r.exit_code == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["lowering"] == {"path": "capture", "why": "no hand lowering of OlmoForCausalLM"}
    assert info["capture"]["params"] == meta_param_count(config) > 0
    assert info["capture"]["unread_weights"] == [] and info["capture"]["unmapped_ops"] == []   # OLMo: all mapped
    assert open_trace(tmp_path / "o.trace").manifest["lowering"]["path"] == "capture"
    r = _cli("trace", "qwen2-0.5b", "--generate", 1, "-o", tmp_path / "h.trace", "--json")
    assert json.loads(r.stdout)["lowering"] == {"path": "hand", "family": "qwen2"}


def test_run_and_compare_of_no_hand_lowering_go_through_capture(transformers, tmp_path):
    """`tierlab run` and `compare` of a family with no hand lowering (OLMo 1) trace it as `tierlab trace`
    does (captured by itself, kept with --keep-trace and saying so) and replay it: the same tiers and
    per-token figures as the kept trace replayed alone; --capture of a trace is refused."""
    from tierlab.traces.capture.census import default_config

    config = default_config("olmo")
    config.update(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=256)
    (tmp_path / "olmo.json").write_text(json.dumps(config))
    run = ("--prompt", 3, "--generate", 2)
    r = _cli("run", tmp_path / "olmo.json", "--chip", "h100", *run, "--keep-trace", tmp_path / "k.trace", "--json")
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)
    m = open_trace(tmp_path / "k.trace").manifest
    assert m["lowering"] == {"path": "capture", "why": "no hand lowering of OlmoForCausalLM"}
    alone = json.loads(_cli("replay", tmp_path / "k.trace", "--chip", "h100", "--json").stdout)
    assert got["tiers"] == alone["tiers"] and got["per_token"] == alone["per_token"]
    assert got["provenance"]["trace_lowering"] == m["lowering"]
    assert got["by_kind"]["weight"] and got["tiers"][0]["bytes_read"] > 0
    r = _cli("compare", tmp_path / "olmo.json", "--chips", "h100,sn40l", *run, "--json")
    assert r.exit_code == 0, r.stderr
    rows = {row["chip"]: row for row in json.loads(r.stdout)["chips"]}
    assert rows["h100"]["replay"]["tiers"] == alone["tiers"] and set(rows) == {"h100", "sn40l"}
    r = _cli("compare", tmp_path / "k.trace", "--chips", "h100", "--capture")
    assert r.exit_code == 2 and "--capture applies when tracing a model" in r.stderr


def test_unmapped_operators_are_named(transformers, tmp_path):
    """Captured, Qwen3.5's attention output gate (a sigmoid and a product outside any module tierlab lowers)
    is named in one stderr line and in the manifest, with how many times it ran; its Gated DeltaNet layers
    keep state tensors, read and written once per decode step. (The hand lowering models the gate.)"""
    from tierlab.traces.capture.census import default_config

    config = default_config("qwen3_5_text")
    config.update(num_hidden_layers=4, layer_types=config["layer_types"][:4])
    (tmp_path / "q.json").write_text(json.dumps(config))
    r = _cli("trace", tmp_path / "q.json", "--capture", "--prompt", 2, "--generate", 1, "-o", tmp_path / "q.trace")
    assert r.exit_code == 0
    warn = [x for x in r.stderr.splitlines() if x.startswith("tierlab: warning: capture:")]
    assert len(warn) == 1 and "aten.sigmoid in Qwen3_5Attention x2" in warn[0]
    m = open_trace(tmp_path / "q.trace").manifest
    assert {"op": "aten.sigmoid", "module": "Qwen3_5Attention", "count": 2} in m["capture"]["unmapped_ops"]
    s = summarize(open_trace(tmp_path / "q.trace"))
    state = s["bytes"]["decode"]["state"]
    assert state["read"] == state["write"] > 0


def test_sparse_attention_index_reads(transformers, tmp_path):
    """DeepSeek-V3.2's indexer keeps keys of its own (index_head_dim per position, every position), traced as
    layers.i.kv.index, of their own tensor kind (kv_index): each decode step appends one row per sequence and
    its scoring reads every cached index key of every sequence, beside the MLA latent the attention reads;
    closed forms. The KV cache's bytes count both."""
    from tierlab.traces.capture import capture_trace
    from tierlab.traces.capture.census import default_config

    c = reduced(default_config("deepseek_v32"))
    run = RunConfig(**RUN)
    tr = open_trace(capture_trace(c, run, tmp_path / "d.trace"))
    tens = tr.tensors.to_pydict()
    positions = RUN["context"] + RUN["prompt"] + RUN["generate"]
    B, L, D = RUN["batch"], c["num_hidden_layers"], c["index_head_dim"]
    index = {n: b for n, k, b in zip(tens["name"], tens["kind"], tens["nbytes"]) if k == "kv_index"}
    assert index == {f"layers.{i}.kv.index": B * positions * D * 2 for i in range(L)}
    latent = (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * 2
    s = summarize(tr)
    assert s["kv_bytes"] == B * positions * L * (D * 2 + latent)
    for st, step in enumerate(s["steps"]):
        keys = RUN["context"] + RUN["prompt"] + st + 1
        assert step["bytes"]["kv"] == {"read": keys * B * L * latent, "write": B * L * latent}
        assert step["bytes"]["kv_index"] == {"read": keys * B * L * D * 2, "write": B * L * D * 2}
    # replayed, their traffic is a kind of its own, and a chip's placement rule for them homes them (SN40L's
    # beside the KV, in SRAM)
    r = _cli("replay", tmp_path / "d.trace", "--chip", "sn40l", "--json")
    out = json.loads(r.stdout)
    assert sum(t["bytes_read"] for t in out["by_kind"]["kv_index"]["tiers"].values()) > 0
    homes = {t["name"]: t["bytes_by_kind"].get("kv_index", 0) for t in out["placement"]["tiers"]}
    assert homes.pop("sram") >= sum(index.values()) and not any(homes.values())    # tensor-aligned bytes
    assert not any(o["op"] in ("aten.bmm", "aten.matmul") for o in tr.manifest["capture"]["unmapped_ops"])


def test_capture_unknown_model_type(transformers, tmp_path):
    """A model_type Transformers does not know is one line naming the field."""
    from click.testing import CliRunner

    from tierlab.cli import main

    cfg = tmp_path / "m.json"
    cfg.write_text(json.dumps({"model_type": "no-such-model", "hidden_size": 64}))
    r = CliRunner().invoke(main, ["trace", str(cfg), "--capture", "--generate", "1", "-o", str(tmp_path / "t")])
    assert r.exit_code == 2
    line = r.stderr.strip()
    assert line.startswith(f"tierlab: error: {cfg}: model_type: Transformers ") and "\n" not in line
    assert not (tmp_path / "t").exists()


# ---- families only the capture reads, against closed forms ----------------------------------------

def _capture(config: dict, tmp: Path, **run_kw) -> tuple[dict, Counter]:
    from tierlab.traces.capture import capture_trace

    path = capture_trace(config, RunConfig(**{**RUN, "context": 0, **run_kw}), tmp / "c.trace")
    return summarize(open_trace(path)), _decode_flops_by_kind(path)


def test_capture_gpt2_closed_form(transformers, tmp_path):
    """GPT-2: learned positions, LayerNorm with bias, Conv1D linears with biases, ungated GELU MLP,
    tied LM head. Parameters, KV bytes and decode FLOPs from the architecture's closed form."""
    h, H, L, V, P, B = 64, 4, 2, 256, 128, RUN["batch"]
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": h, "n_head": H, "n_layer": L,
              "vocab_size": V, "n_positions": P, "bos_token_id": 0, "eos_token_id": 0}
    s, k = _capture(config, tmp_path)
    assert s["params"] == V * h + P * h + L * (12 * h * h + 13 * h) + 2 * h
    positions = RUN["prompt"] + RUN["generate"]
    assert s["kv_bytes"] == 2 * L * 2 * h * B * positions
    steps = RUN["generate"]
    assert k["linear"] == steps * (L * (2 * B * 12 * h * h + B * (3 * h + h + 4 * h + h)) + 2 * B * h * V)
    keys = [RUN["prompt"] + st + 1 for st in range(steps)]
    assert k["attention"] == sum(L * 2 * H * B * S * 2 * (h // H) for S in keys)
    assert "rotary" not in k                       # learned positions: no rotary
    # a decode step reads every layer weight and the tied LM head (the whole token table) once, one row
    # of the token table per sequence and one row of the position table (all sequences are at the same
    # position: Transformers gathers it once for the batch)
    for step in s["steps"]:
        assert step["bytes"]["weight"]["read"] == 2 * (L * (12 * h * h + 13 * h) + 2 * h + V * h) + 2 * B * h + 2 * h


def test_capture_gpt_oss_closed_form(transformers, tmp_path):
    """gpt-oss in its own dialect: MoE top-2 of 8 with expert biases, a router bias, attention sinks,
    q/k/v/o biases, sliding (window 4) and full attention per ``layer_types``, untied head. At batch
    1 a decode step reads the active parameters once (the embedding table only at the token's row)."""
    h, H, G, d, F, E, k, L, V = 64, 4, 2, 16, 32, 8, 2, 2, 256
    config = {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "hidden_size": h,
              "num_attention_heads": H, "num_key_value_heads": G, "head_dim": d, "intermediate_size": F,
              "num_local_experts": E, "num_experts_per_tok": k, "experts_per_token": k, "num_hidden_layers": L,
              "vocab_size": V, "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"],
              "tie_word_embeddings": False, "quantization_config": {"quant_method": "mxfp4"},
              "eos_token_id": 0, "pad_token_id": 0}
    s, kinds = _capture(config, tmp_path, batch=1)
    attn = h * H * d + H * d + 2 * (h * G * d + G * d) + H * d * h + h + H          # q, k, v, o with biases; sinks
    expert = h * 2 * F + 2 * F + F * h + h                                          # gate_up, down, their biases
    layer = 2 * h + attn + E * h + E + E * expert
    assert s["params"] == 2 * V * h + L * layer + h
    active = s["params"] - V * h + h - L * (E - k) * expert
    for step in s["steps"]:
        assert step["bytes"]["weight"]["read"] == 2 * active
    positions = RUN["prompt"] + RUN["generate"]
    assert s["kv_bytes"] == 2 * 2 * G * d * (min(positions, 4) + positions)     # a ring of 4 rows, then every row
    ps = [RUN["prompt"] + st for st in range(RUN["generate"])]
    assert kinds["attention"] == sum(2 * H * (min(p + 1, 4) + p + 1) * 2 * d for p in ps)   # sliding, then full
