"""Chip presets: every one loads, cites a source (or says "estimate") for every number, agrees with the
fact sheet's figures, and homes real models (traces from the generator) where it should."""

import re
import tomllib

import pytest

from tierlab.chip.chipfile import OP_KINDS, list_presets, load_chip
from tierlab.chip.placement import place
from tierlab.common.errors import CapacityError
from tierlab.traces.format.schema import DEFAULT_ALIGNMENT
from tierlab.common.paths import configs_dir

PRESETS = list_presets()
QUANTITY = re.compile(r'"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*[A-Za-zµ/]+"')
BARE_NUMBER = re.compile(r"^[+-]?\d[\d_.]*$")
TAG = re.compile(r"\[(S\d+)\]")


def text_of(name):
    return (configs_dir("chips") / f"{name}.toml").read_text()


def numeric_lines(text):
    """(line number, line) of every assignment holding a number, outside [sources] and [[placement]]."""
    section = ""
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("["):
            section = s
            continue
        if not s or s.startswith("#") or "=" not in s or section in ("[sources]", "[[placement]]"):
            continue
        value = s.split("=", 1)[1].split("#", 1)[0].strip()
        if QUANTITY.search(value) or BARE_NUMBER.match(value):
            yield no, line


def test_the_briefs_presets_exist():
    for name in ("sn40l", "h100", "a100", "h200", "gh200", "groq-lpu", "h100-hbm-pim", "aim-gddr6", "attacc"):
        assert name in PRESETS


@pytest.mark.parametrize("name", PRESETS)
def test_loads_and_name_matches_file(name):
    chip = load_chip(name)
    assert chip.name == name and chip.description
    assert any(t.managed in ("memory", "scratchpad") for t in chip.tiers)


@pytest.mark.parametrize("name", PRESETS)
def test_every_number_cites_a_source_or_says_estimate(name):
    text = text_of(name)
    lines = list(numeric_lines(text))
    assert len(lines) >= 7       # the scan really sees the numbers
    for no, line in lines:
        comment = line.split("#", 1)[1] if "#" in line else ""
        assert TAG.search(comment) or "estimate" in comment, f"{name}.toml:{no}: no [S#] or 'estimate': {line}"


@pytest.mark.parametrize("name", PRESETS)
def test_cited_tags_and_sources_table_agree(name):
    text = text_of(name)
    sources = tomllib.loads(text).get("sources", {})
    body = text.split("\n[sources]")[0]
    cited = set(TAG.findall(body))
    assert cited, name
    assert cited <= set(sources), f"{name}: cited but not in [sources]: {sorted(cited - set(sources))}"
    assert set(sources) <= cited, f"{name}: in [sources] but never cited: {sorted(set(sources) - cited)}"
    assert all(len(v) > 10 for v in sources.values())


@pytest.mark.parametrize("name", PRESETS)
def test_blocks_fit_the_default_trace_alignment(name):
    for t in load_chip(name).tiers:
        assert DEFAULT_ALIGNMENT % t.block_bytes == 0, (name, t.name)


GB, GiB, MiB = 10**9, 2**30, 2**20


def test_figures_from_the_fact_sheet():
    # Hand-copied from shared/reference/hardware_facts.md, independent of the TOML parser's arithmetic.
    sn = load_chip("sn40l")
    assert [(t.name, t.managed, t.capacity_bytes) for t in sn.tiers] == [
        ("sram", "scratchpad", 520 * MiB), ("hbm", "memory", 64 * GiB), ("ddr", "memory", 1536 * GiB)]
    assert sn.tiers[1].lend and sn.compute.flop_per_s["bf16"] == 638e12
    assert sn.links[0].bandwidth_bytes_per_s == 1.6e12 and sn.links[1].bandwidth_bytes_per_s == 100e9
    h100, h200, a100 = load_chip("h100"), load_chip("h200"), load_chip("a100")
    for chip, hbm, bw, l2 in ((h100, 80 * GB, 3.35e12, 50 * MiB), (h200, 141 * GB, 4.8e12, 50 * MiB),
                              (a100, 80 * GB, 2.039e12, 40 * MiB)):
        l2t, hbmt, ddrt = chip.tiers
        assert (l2t.managed, l2t.block_bytes, l2t.capacity_bytes) == ("cache", 128, l2)
        assert l2t.ways is not None and (hbmt.managed, ddrt.managed) == ("memory", "memory")
        assert hbmt.capacity_bytes == hbm and hbmt.bandwidth_bytes_per_s == bw == chip.links[0].bandwidth_bytes_per_s
    assert h100.compute.flop_per_s["bf16"] == 989.4e12 and a100.compute.flop_per_s["bf16"] == 312e12
    assert h100.links[1].bandwidth_bytes_per_s == 64e9 and a100.links[1].bandwidth_bytes_per_s == 32e9
    gh = load_chip("gh200")
    assert gh.tiers[1].capacity_bytes == 96 * GB and gh.tiers[2].capacity_bytes == 480 * GB
    assert gh.links[1].bandwidth_bytes_per_s == 450e9 and gh.links[1].energy_j_per_byte == pytest.approx(1.3e-12 * 8)
    groq = load_chip("groq-lpu")
    assert [(t.managed, t.capacity_bytes) for t in groq.tiers] == [("scratchpad", 220 * MiB)] and groq.links == ()
    # PIM: Aquabolt-XL 4x internal, 1.2 TFLOPS per cube (5 stacks); AiM 16x; AttAcc attention only.
    pim = load_chip("h100-hbm-pim").tiers[1]
    assert pim.pim.internal_bandwidth_bytes_per_s == pytest.approx(4 * pim.bandwidth_bytes_per_s)
    assert pim.pim.flop_per_s == pytest.approx(5 * 1.2e12)
    assert pim.pim.read_energy_j_per_byte == pytest.approx(0.55e-12 * 8)
    assert pim.read_energy_j_per_byte + load_chip("h100-hbm-pim").links[0].energy_j_per_byte == pytest.approx(3.59e-12 * 8)
    aim = load_chip("aim-gddr6").tiers[1]
    assert aim.pim.internal_bandwidth_bytes_per_s / aim.bandwidth_bytes_per_s == pytest.approx(16, rel=0.01)
    att = load_chip("attacc")
    assert att.tiers[2].pim.op_kinds == ("attention",)
    assert [(r.tier, r.kind) for r in att.placement] == [("pim", "kv"), ("pim", "kv_index")]


@pytest.mark.parametrize("name", PRESETS)
def test_pim_units_sit_on_memory_tiers_with_known_ops(name):
    for t in load_chip(name).tiers:
        if t.pim is not None:
            assert t.managed == "memory" and set(t.pim.op_kinds) <= set(OP_KINDS)
            assert t.pim.internal_bandwidth_bytes_per_s > t.bandwidth_bytes_per_s
            assert t.pim.read_energy_j_per_byte < t.read_energy_j_per_byte


# ---- real models, through the trace generator ----------------------------------------------------

@pytest.fixture(scope="module")
def trace_of(tmp_path_factory):
    lower = pytest.importorskip("tierlab.traces.lowering.generate")
    from tierlab.traces.format.reader import open_trace
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model

    cache = {}

    def get(model, **run):
        key = (model, tuple(sorted(run.items())))
        if key not in cache:
            out = tmp_path_factory.mktemp("t") / f"{model}.trace"
            cache[key] = open_trace(lower.generate_trace(load_model(model), RunConfig(**run), out))
        return cache[key]
    return get


# Chips whose memory cannot hold Llama-3.1-8B's 16 GB of bf16 weights: groq-lpu (220 MiB of SRAM),
# tpu-v5e (16 GB of HBM, less than the weights with the KV and activations).
TOO_SMALL_FOR_8B_BF16 = ("groq-lpu", "tpu-v5e")


@pytest.mark.parametrize("name", [p for p in PRESETS if p not in TOO_SMALL_FOR_8B_BF16])
def test_llama_8b_bf16_places(name, trace_of):
    t = trace_of("llama-3.1-8b", context=8192, generate=1)
    p = place(load_chip(name), t.tensors, align_bytes=t.manifest["run"]["alignment"])
    total = sum(t.tensors.column("nbytes").to_pylist())
    assert p.bytes_by_tier.sum() >= total and (p.home >= 0).all()
    assert (p.bytes_by_tier <= p.capacity_bytes).all()


def test_groq_single_chip_cannot_hold_llama_8b(trace_of):
    t = trace_of("llama-3.1-8b", context=1024, generate=1)
    with pytest.raises(CapacityError, match=r"fits in no home tier; free: sram "):
        place(load_chip("groq-lpu"), t.tensors)


def test_tpu_v5e_holds_llama_8b_in_int8_not_bf16(trace_of):
    chip = load_chip("tpu-v5e")
    t = trace_of("llama-3.1-8b", context=1024, generate=1)
    with pytest.raises(CapacityError, match=r"pinned to 'hbm'"):
        place(chip, t.tensors, align_bytes=t.manifest["run"]["alignment"])
    q = trace_of("llama-3.1-8b", context=1024, generate=1, weights="int8")
    p = place(chip, q.tensors, align_bytes=q.manifest["run"]["alignment"])
    assert p.bytes_by_tier[1] < 16 * GB and set(p.bytes_by_tier_kind["vmem"]) <= {"activation"}


def test_sn40l_homes_kv_in_sram_weights_in_hbm_experts_in_ddr(trace_of):
    sn = load_chip("sn40l")
    t = trace_of("llama-3.1-8b", context=1024, generate=1)
    p = place(sn, t.tensors, align_bytes=65536)
    kinds = t.tensors.column("kind").to_pylist()
    homes = {k: {int(h) for h, kk in zip(p.home, kinds) if kk == k} for k in set(kinds)}
    assert homes == {"kv": {0}, "activation": {0}, "weight": {1}}
    assert p.lent_bytes[1] > 0 and p.lent_bytes[1] % (64 * 1024 * 16) == 0
    assert p.lent_bytes[1] <= p.capacity_bytes[1] - p.bytes_by_tier[1]
    # MoE: routed experts homed in DDR, everything else weight-wise in HBM, which lends the rest.
    q = trace_of("qwen3-30b-a3b", context=1024, generate=1)
    p = place(sn, q.tensors, align_bytes=65536)
    names = q.tensors.column("name").to_pylist()
    for tid, n in enumerate(names):
        if ".experts." in n:
            assert p.home[tid] == 2
    assert p.bytes_by_tier[2] > 50 * GB and p.lent_bytes[1] > 50 * GB
    # KV larger than the SRAM spills to HBM (batch 8 x 8192 tokens x 128 KiB = 8 GiB of KV).
    big = trace_of("llama-3.1-8b", context=8192, generate=1, batch=8)
    p = place(sn, big.tensors, align_bytes=65536)
    assert p.bytes_by_tier_kind["hbm"].get("kv", 0) > 7 * GiB


def test_gpu_spills_a_model_larger_than_hbm_to_host(trace_of):
    t = trace_of("mixtral-8x7b", context=1024, generate=1)      # ~93 GB of bf16 weights
    p = place(load_chip("h100"), t.tensors, align_bytes=65536)
    assert p.bytes_by_tier[0] == 0 and p.bytes_by_tier[2] > 10 * GB and p.bytes_by_tier[1] > 70 * GB


def test_attacc_homes_kv_in_the_pim_device(trace_of):
    t = trace_of("llama-3.1-8b", context=1024, generate=1)
    p = place(load_chip("attacc"), t.tensors, align_bytes=65536)
    assert set(p.bytes_by_tier_kind["pim"]) == {"kv"} and "kv" not in p.bytes_by_tier_kind["hbm"]


def test_op_kinds_of_generated_traces_are_known_to_the_pim_schema(trace_of):
    for model in ("llama-3.1-8b", "qwen3-30b-a3b"):
        kinds = set(trace_of(model, context=1024, generate=1).ops.column("kind").to_pylist())
        assert kinds <= set(OP_KINDS), kinds - set(OP_KINDS)
