"""The 2026 chip presets (issue 24): the figures of shared/reference/chips-2026.md, copied here by
hand (independent of the TOML files and the unit parser), the tiers each design is meant to have,
and that every preset runs Llama-3.1-8B end to end through the CLI."""

import json

import pytest
from click.testing import CliRunner

from emulator.chip.chipfile import list_presets, load_chip

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


@pytest.mark.parametrize("name", NEW_CHIPS)
def test_runs_llama_8b(name, tmp_path, monkeypatch):
    """``tierlab run llama-3.1-8b --chip X --context 128 --generate 1`` succeeds, and a decode step
    takes at least the closed form: every weight but the embedding table (of which a step reads one
    row) read once from its home tier, at that tier's bandwidth."""
    from emulator.cli import main
    from traces.spec import load_model
    from traces.weightfmt import weight_bytes
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
    home = chip.tiers[chip.tier_index(WEIGHT_HOME.get(name, "hbm"))]
    floor = streamed / home.bandwidth_bytes_per_s
    tok = d["per_token"]
    assert floor * 0.99 <= tok["latency_s"] and tok["tokens_per_s"] > 0
    assert tok["latency_calibrated_s"] >= tok["latency_s"]
