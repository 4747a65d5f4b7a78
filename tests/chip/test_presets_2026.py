"""The 2026 chip presets (issue 24): the figures of shared/reference/chips-2026.md, copied here by
hand (independent of the TOML files and the unit parser), the tiers each design is meant to have,
and that every preset runs Llama-3.1-8B end to end through the CLI."""

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from tierlab.chip.chipfile import list_presets, load_chip
from tierlab.system.systemfile import list_presets as system_presets

GB, GiB, MB, MiB, TB = 10**9, 2**30, 10**6, 2**20, 10**12
NEW_CHIPS = ("b200", "b300", "gb200", "mi300x", "mi325x", "mi355x", "tpu-v5e", "tpu-v6e", "tpu-v7",
             "trainium2", "gaudi3", "wse-3")

# name: (HBM-or-main tier name, its capacity in bytes, its bandwidth in B/s, bf16 dense FLOP/s)
FIGURES = {
    "b200": ("hbm", 180 * GB, 8e12, 2.25e15),
    "b300": ("hbm", 270 * GB, 8e12, 2.25e15),
    "gb200": ("hbm", 186 * GB, 8e12, 2.5e15),
    "mi300x": ("hbm", 192 * GB, 5.3e12, 1307e12),
    "mi325x": ("hbm", 256 * GB, 6e12, 1307e12),
    "mi355x": ("hbm", 288 * GB, 8e12, 2.5e15),
    "tpu-v5e": ("hbm", 16 * GB, 819e9, 197e12),
    "tpu-v6e": ("hbm", 32 * GB, 1638e9, 918e12),
    "tpu-v7": ("hbm", 192 * GiB, 7.3e12, 2307e12),
    "trainium2": ("hbm", 96 * GiB, 2.9e12, 667e12),
    "gaudi3": ("hbm", 128 * GB, 3.67e12, 1835e12),
    "wse-3": ("sram", 41 * GiB, 21e15, 125e15),
}


def test_every_new_preset_exists():
    assert set(NEW_CHIPS) <= set(list_presets())


@pytest.mark.parametrize("name", NEW_CHIPS)
def test_main_tier_and_bf16_peak_from_the_reference(name):
    chip = load_chip(name)
    tier, cap, bw, bf16 = FIGURES[name]
    t = chip.tiers[chip.tier_index(tier)]
    assert (t.capacity_bytes, t.bandwidth_bytes_per_s) == (cap, pytest.approx(bw))
    assert chip.compute.flop_per_s["bf16"] == pytest.approx(bf16)
    assert chip.execution.kernel_overhead_s >= 0 and chip.description


def test_the_designs_tiers():
    kinds = {n: [(t.name, t.managed) for t in load_chip(n).tiers] for n in NEW_CHIPS}
    for n in ("mi300x", "mi325x", "mi355x"):          # Infinity Cache as a cache in front of HBM
        assert kinds[n][0] == ("infinity_cache", "cache")
        assert load_chip(n).tiers[0].capacity_bytes == 256 * MB
    assert kinds["gb200"][2] == ("lpddr", "memory")   # Grace LPDDR5X over NVLink-C2C
    gb = load_chip("gb200")
    assert gb.links[1].bandwidth_bytes_per_s == 450e9
    assert gb.links[1].bandwidth_bytes_per_s * gb.links[1].achievable == pytest.approx(201e9, rel=0.01)  # measured H2D
    assert kinds["trainium2"][0] == ("sbuf", "scratchpad") and load_chip("trainium2").tiers[0].capacity_bytes == 224 * MiB
    assert kinds["gaudi3"][0] == ("sram", "cache") and load_chip("gaudi3").tiers[0].capacity_bytes == 96 * MB
    assert kinds["wse-3"] == [("sram", "scratchpad"), ("memoryx", "memory")]
    assert abs(load_chip("wse-3").tiers[1].capacity_bytes - 1.5 * TB) < 0.001 * TB
    for n in ("tpu-v5e", "tpu-v6e", "tpu-v7"):
        assert kinds[n] == [("vmem", "scratchpad"), ("hbm", "memory")]
    assert load_chip("tpu-v6e").price.usd_per_hour == 2.70
    assert load_chip("mi300x").price.usd_per_hour == 1.85
    assert "fp8" not in load_chip("tpu-v5e").compute.flop_per_s      # v5e has no fp8 [S25]


# the weights each chip runs Llama-3.1-8B in: bf16, except where 16 GB of HBM cannot hold it
WEIGHTS = {"tpu-v5e": "int8"}
# where its weights live (first fit or the chip's rules)
WEIGHT_HOME = {"wse-3": "sram"}


# every chip preset but groq-lpu, whose 220 MiB of SRAM cannot hold the model (tests/chip/test_presets.py)
RUNNABLE = [p for p in list_presets() if p != "groq-lpu"]


@pytest.mark.parametrize("name", RUNNABLE)
def test_runs_llama_8b(name, tmp_path, monkeypatch):
    """``tierlab run llama-3.1-8b --chip X --context 128 --generate 1`` succeeds, and a decode step
    takes at least the closed form: every weight but the embedding table (of which a step reads one
    row) read once from its home tier, at that tier's bandwidth (its PIM unit's, if it has one)."""
    from tierlab.cli import main
    from tierlab.traces.model.spec import load_model
    from tierlab.traces.model.weight_formats import weight_bytes
    monkeypatch.chdir(tmp_path)
    weights = WEIGHTS.get(name, "bf16")
    args = ["run", "llama-3.1-8b", "--chip", name, "--context", "128", "--generate", "1", "--json",
            "--weights", weights]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["chip"] == name
    spec = load_model("llama-3.1-8b")
    embed = spec.vocab_size * spec.hidden_size * (2 if weights == "bf16" else 1)
    streamed = weight_bytes(spec, weights) - embed
    chip = load_chip(name)
    homes = [t for t in chip.tiers if t.managed != "cache"]
    home = chip.tiers[chip.tier_index(WEIGHT_HOME.get(name, "hbm"))] if name in WEIGHT_HOME or \
        any(t.name == "hbm" for t in homes) else homes[0]
    floor = streamed / max(home.bandwidth_bytes_per_s, home.pim.internal_bandwidth_bytes_per_s if home.pim else 0)
    tok = d["per_token"]
    assert floor * 0.99 <= tok["latency_s"] and tok["tokens_per_s"] > 0
    assert tok["latency_calibrated_s"] >= tok["latency_s"]


# ---- FP4 formats (NVFP4, MXFP4), FP4 compute, FP8 KV -------------------------------------------

def test_fp4_bits_per_element_closed_forms():
    from tierlab.traces.model.dtypes import bits_per_element, block_scaled_bytes
    assert bits_per_element("nvfp4") == 4 + 8 / 16 == 4.5      # E2M1 + one E4M3 per 16
    assert bits_per_element("mxfp4") == 4 + 8 / 32 == 4.25     # E2M1 + one E8M0 per 32
    assert block_scaled_bytes(4096, 14336, "nvfp4") == (4096 * 14336 // 2, 4096 * 14336 // 16)
    assert block_scaled_bytes(4096, 14336, "mxfp4") == (4096 * 14336 // 2, 4096 * 14336 // 32)
    # a partial block at a row's end takes a whole scale; odd element counts round up to a byte
    assert block_scaled_bytes(3, 17, "nvfp4") == ((3 * 17 + 1) // 2, 3 * 2)
    assert block_scaled_bytes(3, 33, "mxfp4") == ((3 * 33 + 1) // 2, 3 * 2)


@pytest.mark.parametrize("fmt, block, scale", [("nvfp4", 16, "e4m3"), ("mxfp4", 32, "e8m0")])
def test_weight_bytes_with_scales_against_closed_forms(fmt, block, scale):
    """Llama-3.1-8B under a FP4 checkpoint format: every matrix but the embeddings and LM head at
    4 bits plus one 1-byte scale per ``block`` inputs of a row; the two kept matrices in bf16;
    vectors in bf16. Summed by hand from the model's dimensions."""
    from tierlab.traces.model.spec import load_model
    from tierlab.traces.model.weight_formats import weight_bytes, weight_tensors
    s = load_model("llama-3.1-8b")
    h, f, v, L = s.hidden_size, s.intermediate_size, s.vocab_size, s.num_layers
    kv = s.num_kv_heads * s.head_dim
    mats = [(h, h), (kv, h), (kv, h), (h, h), (f, h), (f, h), (h, f)]       # rows (out) x cols (in)
    per_layer = sum(r * c // 2 + r * (c // block) for r, c in mats) + 2 * h * 2   # two norms
    expected = L * per_layer + 2 * (v * h * 2) + h * 2                         # embed + lm_head bf16, final norm
    assert weight_bytes(s, fmt) == expected
    scales = [a for t in weight_tensors(s, fmt) for a in t.aux]
    assert {a[1] for a in scales} == {scale} and len(scales) == 7 * L


def test_native_modelopt_nvfp4_checkpoint():
    from tierlab.traces.model.spec import load_model
    from tierlab.traces.model.weight_formats import native_rule
    s = load_model("llama-3.1-8b")
    q = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    rule, vec = native_rule(SimpleNamespace(config={**(s.config or {}), "quantization_config": q}, source=None))
    shapes = {x.name: x for x in s.weight_shapes()}
    assert rule(shapes["lm_head"]) == "bf16" and vec == "bf16"
    assert {rule(x) for n, x in shapes.items() if "mlp" in n and not x.is_vector} == {"nvfp4"}


@pytest.mark.parametrize("chip, activations, expected, noted", [
    ("b200", "nvfp4", "nvfp4", False), ("b200", "mxfp4", "mxfp4", False),
    ("mi355x", "mxfp4", "mxfp4", False), ("mi355x", "nvfp4", "fp8", True),    # CDNA 4 has MX, not NVFP4
    ("h100", "nvfp4", "fp8", True), ("tpu-v5e", "mxfp4", "bf16", True),       # v5e: no fp8 either
    ("h100", "bf16", "bf16", False), ("tpu-v5e", "fp8", "bf16", False),       # unchanged rule, no note
])
def test_compute_dtype_and_fallback_note(chip, activations, expected, noted):
    from tierlab.common.errors import UsageError
    from tierlab.chip.compute import resolve_compute_dtype
    c = load_chip(chip)
    dtype, note = resolve_compute_dtype(c, activations, "bf16")
    assert dtype == expected and (note is not None) == noted
    if noted:
        assert "next supported dtype" in note and chip in note
        with pytest.raises(UsageError, match="expected one of the chip's dtypes"):
            resolve_compute_dtype(c, activations, "bf16", strict=True)
    else:
        assert resolve_compute_dtype(c, activations, "bf16", strict=True) == (expected, None)


def test_fp4_run_costs_at_the_fp4_peak_and_stores_activations_in_bf16(tmp_path, monkeypatch):
    """W4A4 NVFP4 on B200: the compute time is the trace's FLOPs over the NVFP4 peak; the activation
    tensors are bf16 (the same bytes as a bf16-activation run); on H100 the same run notes fp8."""
    from tierlab.cli import main
    monkeypatch.chdir(tmp_path)

    def run(chip, activations, keep):
        args = ["run", "llama-3.1-8b", "--chip", chip, "--context", "128", "--generate", "1", "--json",
                "--weights", "nvfp4", "--activations", activations, "--keep-trace", str(tmp_path / keep)]
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout), r.stderr

    d, err = run("b200", "nvfp4", "a.trace")
    assert err == ""
    from tierlab.traces.format.reader import open_trace
    t = open_trace(tmp_path / "a.trace")
    decode = [p == "decode" for p in t.ops.column("phase").to_pylist()]
    flops = sum(f for f, dec in zip(t.ops.column("flops").to_pylist(), decode) if dec)
    assert d["per_token"]["time_by_resource_s"]["compute"] == pytest.approx(flops / 9e15)
    kinds = t.tensors.column("kind").to_pylist()
    dts = {dt for k, dt in zip(kinds, t.tensors.column("dtype").to_pylist()) if k == "activation"}
    assert dts == {"bf16"} and t.manifest["run"]["activations"] == "nvfp4"
    _, err = run("h100", "nvfp4", "b.trace")
    assert "h100 has no FP4 compute: its arithmetic runs at fp8, the next supported dtype" in err
    bf = open_trace(tmp_path / "b.trace")
    act = lambda tr: sum(n for k, n in zip(tr.tensors.column("kind").to_pylist(),
                                           tr.tensors.column("nbytes").to_pylist()) if k == "activation")
    assert act(bf) == act(t) > 0


def test_fp8_kv_is_half_of_bf16():
    """KV bytes per token: 2 (K and V) x layers x KV heads x head dim x the dtype's bytes."""
    from tierlab.traces.model.spec import load_model
    s = load_model("llama-3.1-8b")
    per_token = 2 * s.num_layers * s.num_kv_heads * s.head_dim
    assert s.kv_bytes_per_token("fp8") == per_token and s.kv_bytes_per_token("bf16") == 2 * per_token


# ---- system presets ------------------------------------------------------------------------------

NEW_SYSTEMS = {"dgx-b200": 8, "gb200-nvl72": 8, "mi300x-8": 8, "mi355x-8": 8, "gaudi3-8": 8, "cs-3": 1,
               "tpu-v6e-256": 8, "tpu-v7-4x4x4": 8, "trn2-16": 8}
GRID_SYSTEMS = ("tpu-v6e-256", "tpu-v7-4x4x4", "trn2-16")


def test_system_presets_fabrics():
    from tierlab.system.systemfile import load_system
    nvl = load_system("gb200-nvl72")
    assert (nvl.n_chips, nvl.chips_per_node, nvl.n_nodes, nvl.scale_up.topology) == (72, 72, 1, "switch")
    assert nvl.scale_up.bandwidth_bytes_per_s == 900e9 and nvl.scale_up.in_network_reduction
    assert nvl.scale_up.bandwidth_bytes_per_s * nvl.scale_up.achievable == pytest.approx(679.61e9, rel=0.01)
    for name, link in (("mi300x-8", 896e9 / 7 / 2), ("mi355x-8", 153e9 / 2)):
        s = load_system(name)
        assert (s.scale_up.topology, s.scale_up.ports) == ("direct", 7) and not s.scale_up.in_network_reduction
        assert s.scale_up.bandwidth_bytes_per_s == pytest.approx(link)
    g = load_system("gaudi3-8").scale_up
    assert (g.topology, g.ports, g.bandwidth_bytes_per_s) == ("direct", 7, 75e9)    # 21 of 24 x 200 GbE, 3 a peer
    assert load_system("mi300x-8").price.usd_per_hour == pytest.approx(8 * 1.85)
    assert load_system("cs-3").n_chips == 1 and load_system("dgx-b200").chip.name == "b200"


@pytest.mark.parametrize("name", system_presets())
def test_system_runs_llama_8b(name, tmp_path, monkeypatch):
    """``tierlab run llama-3.1-8b --system X --tp N``: N = 8 on the GPU systems (Llama-3.1-8B's 8 KV
    heads), 1 on the one-wafer CS-3; the per-step collectives are there exactly when N > 1."""
    from tierlab.cli import main
    monkeypatch.chdir(tmp_path)
    tp = NEW_SYSTEMS.get(name, 8)
    args = ["run", "llama-3.1-8b", "--system", name, "--context", "128", "--generate", "1", "--json"]
    args += ["--tp", str(tp)] if tp > 1 else []
    args += ["--collective-algo", "torus"] if name in GRID_SYSTEMS else []
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["system"] == name and d["n_devices"] == tp and d["per_token"]["tokens_per_s"] > 0
    assert (len(d["collectives"]) > 0) == (tp > 1)
    if name in GRID_SYSTEMS:
        assert {c["algorithm"] for c in d["collectives"]} == {"torus"}


def test_collectives_curve_over_every_preset_skips_the_one_chip_system():
    """``tierlab collectives`` (every system preset) runs with cs-3 among them: a one-chip system has
    no all-reduce and is left out; asked for by name it is refused in one line."""
    from tierlab.cli import main
    from tierlab.system.systemfile import list_presets as systems
    r = CliRunner().invoke(main, ["collectives", "--json"])
    assert r.exit_code == 0, r.output
    names = {x["system"] for x in json.loads(r.stdout)["systems"]}
    assert names == set(systems()) - {"cs-3"} and {"tpu-v6e-256", "gb200-nvl72"} <= names
