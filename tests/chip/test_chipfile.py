"""Chip-file validation: a good file loads to the expected numbers; each bad case gives its exact one-line message."""

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from tierlab.chip.chipfile import chip_from_dict, chip_hash, list_presets, load_chip
from tierlab.cli import main
from tierlab.chip.hierarchy import Chip, Compute, Tier
from tierlab.common.errors import ConfigError, UsageError

F = "chips/x.toml"

GOOD = """
name = "toy"
description = "three tiers"
[compute]
flops = { bf16 = "100 TFLOP/s" }
energy = { bf16 = "0.5 pJ" }
[[tier]]
name = "sram"
capacity = "1 MiB"
block = "128 B"
ways = 4
policy = "lru"
managed = "cache"
bandwidth = "10 TB/s"
read_energy = "0.2 pJ/bit"
write_energy = "0.3 pJ/B"
[[tier]]
name = "hbm"
capacity = "1 GiB"
block = "4 KiB"
ways = 8
policy = "fifo"
managed = "memory"
bandwidth = "1 TB/s"
read_energy = "3.29 pJ/bit"
write_energy = "3.29 pJ/bit"
lend = true
[tier.pim]
internal_bandwidth = "4 TB/s"
flops = "1.2 TFLOPS"
read_energy = "0.55 pJ/bit"
energy = "1 pJ"
ops = ["linear", "attention"]
[[tier]]
name = "ddr"
capacity = "16 GiB"
block = "64 KiB"
managed = "memory"
bandwidth = "100 GB/s"
read_energy = "20 pJ/bit"
write_energy = "20 pJ/bit"
[[link]]
from = "sram"
to = "hbm"
bandwidth = "1 TB/s"
energy = "0.3 pJ/bit"
[[link]]
from = "hbm"
to = "ddr"
bandwidth = "100 Gb/s"
energy = "8 pJ/bit"
[[placement]]
tier = "ddr"
kind = "weight"
name = "*.experts.*"
layers = [1, 3]
spill = false
[sources]
S1 = "a paper"
"""


def good() -> dict:
    return tomllib.loads(GOOD)


def test_good_file_values_by_hand():
    c = chip_from_dict(good(), file=F)
    assert [t.name for t in c.tiers] == ["sram", "hbm", "ddr"]
    s, h, d = c.tiers
    assert (s.capacity_bytes, s.block_bytes, s.ways, s.n_sets) == (2**20, 128, 4, 2**20 // 128 // 4)
    assert s.read_energy_j_per_byte == pytest.approx(1.6e-12) and s.write_energy_j_per_byte == pytest.approx(0.3e-12)
    assert (h.policy, h.managed, h.lend, h.block_bytes) == ("fifo", "memory", True, 4096)
    assert h.pim.internal_bandwidth_bytes_per_s == 4e12 and h.pim.flop_per_s == pytest.approx(1.2e12)
    assert h.pim.read_energy_j_per_byte == pytest.approx(4.4e-12) and h.pim.op_kinds == ("linear", "attention")
    assert d.ways is None and d.n_ways == d.n_blocks == 16 * 2**30 // 65536
    assert c.links[1].bandwidth_bytes_per_s == 12.5e9 and c.links[1].energy_j_per_byte == pytest.approx(64e-12)
    assert (c.links[0].upper, c.links[0].lower) == ("sram", "hbm")
    assert c.compute.flop_per_s == {"bf16": 100e12} and c.compute.energy_j_per_flop["bf16"] == pytest.approx(0.5e-12)
    r = c.placement[0]
    assert (r.tier, r.kind, r.name, r.layers, r.spill) == ("ddr", "weight", "*.experts.*", (1, 3), False)
    assert c.sources == {"S1": "a paper"} and c.description == "three tiers" and c.source_file == F


def _set(d, path, value):
    """Set (or with value=DELETE remove) a nested key; path like ('tier', 1, 'block')."""
    for p in path[:-1]:
        d = d[p]
    if value is DELETE:
        del d[path[-1]]
    else:
        d[path[-1]] = value


DELETE = object()

BAD = [
    # unknown keys, with and without a did-you-mean
    ((("tier", 1, "blok"), "4 KiB"), "tier[1].blok: unknown key; did you mean 'block'?"),
    ((("nmae",), "x"), "nmae: unknown key; did you mean 'name'?"),
    ((("tier", 0, "zzz"), 1), "tier[0].zzz: unknown key; expected one of name, capacity, block, ways, policy, "
                              "managed, bandwidth, read_energy, write_energy, lend, pim"),
    ((("link", 0, "bandwith"), "1 TB/s"), "link[0].bandwith: unknown key; did you mean 'bandwidth'?"),
    ((("tier", 1, "pim", "op"), ["linear"]), "tier[1].pim.op: unknown key; did you mean 'ops'?"),
    ((("compute", "flop"), {}), "compute.flop: unknown key; did you mean 'flops'?"),
    ((("placement", 0, "layer"), [1, 2]), "placement[0].layer: unknown key; did you mean 'layers'?"),
    # missing keys
    ((("tier", 0, "capacity"), DELETE), "tier[0].capacity: missing required key"),
    ((("tier", 0, "managed"), DELETE), "tier[0].managed: missing required key"),
    ((("compute",), DELETE), "compute: missing required key"),
    ((("link", 1, "energy"), DELETE), "link[1].energy: missing required key"),
    ((("tier", 1, "pim", "ops"), DELETE), "tier[1].pim.ops: missing required key"),
    # bad units
    ((("tier", 0, "capacity"), "1 MiBs"), "tier[0].capacity: expected a size such as \"128 B\", \"50 MiB\" or "
                                          "\"64 GB\", got '1 MiBs'"),
    ((("tier", 0, "bandwidth"), "10 TB"), "tier[0].bandwidth: expected a bandwidth such as \"3.35 TB/s\", "
                                          "\"900 GB/s\" or \"100 Gb/s\", got '10 TB'"),
    ((("tier", 0, "capacity"), 1048576), "tier[0].capacity: expected a size such as \"128 B\", \"50 MiB\" or "
                                         "\"64 GB\" (a string with a unit), got 1048576"),
    ((("link", 0, "energy"), "0.3 pJ"), "link[0].energy: expected an energy per bit or byte such as "
                                        "\"3.9 pJ/bit\" or \"0.5 pJ/B\", got '0.3 pJ'"),
    ((("compute", "flops", "bf16"), "100 TFLOP"), "compute.flops.bf16: expected a rate such as \"989 TFLOP/s\" "
                                                  "or \"750 TOPS\", got '100 TFLOP'"),
    # zero / negative
    ((("tier", 0, "capacity"), "0 B"), "tier[0].capacity: must be positive, got '0 B'"),
    ((("tier", 1, "capacity"), "-1 GiB"), "tier[1].capacity: must be positive, got '-1 GiB'"),
    ((("tier", 0, "bandwidth"), "0 TB/s"), "tier[0].bandwidth: must be positive, got '0 TB/s'"),
    ((("tier", 0, "read_energy"), "-1 pJ/bit"), "tier[0].read_energy: must not be negative, got '-1 pJ/bit'"),
    # block / capacity / ways geometry
    ((("tier", 0, "block"), "96 B"), "tier[0].block: must be a power of two, got 96 B (96 B)"),
    ((("tier", 0, "capacity"), "1000 B"), "tier[0].capacity: must be a multiple of the block (128 B), got '1000 B'"),
    ((("tier", 0, "ways"), 3), "tier[0].ways: must divide the number of blocks (8192), got 3"),
    ((("tier", 0, "ways"), 0), "tier[0].ways: expected a positive integer (omit for fully associative), got 0"),
    ((("tier", 0, "ways"), True), "tier[0].ways: expected a positive integer (omit for fully associative), got True"),
    ((("tier", 1, "block"), "64 B"), "tier[1].block: must be a multiple of (so not smaller than) the nearer "
                                     "tier's block (tier[0] 'sram': 128 B), got 64 B"),
    # names, policies, management
    ((("tier", 2, "name"), "hbm"), "tier[2].name: duplicate tier name 'hbm' (also tier[1])"),
    ((("tier", 0, "policy"), "lur"), "tier[0].policy: unknown value 'lur'; did you mean 'lru'?"),
    ((("tier", 0, "policy"), "plru"), "tier[0].policy: unknown value 'plru'; did you mean 'lru'?"),
    ((("tier", 0, "managed"), "cached"), "tier[0].managed: unknown value 'cached'; did you mean 'cache'?"),
    ((("tier", 2, "managed"), "cache"), "tier[2].managed: the farthest tier must be 'memory' or 'scratchpad' "
                                        "(a cache has nowhere to fetch from), got 'cache'"),
    ((("tier", 0, "lend"), True), "tier[0].lend: only a 'memory' tier can lend capacity, got managed = 'cache'"),
    ((("tier", 1, "lend"), "yes"), "tier[1].lend: expected true or false, got 'yes'"),
    ((("tier", 0, "name"), ""), "tier[0].name: expected a non-empty string, got ''"),
    # PIM
    ((("tier", 0, "pim"), {"internal_bandwidth": "1 TB/s", "flops": "1 TFLOPS", "read_energy": "1 pJ/bit",
                           "energy": "1 pJ", "ops": ["linear"]}),
     "tier[0].pim: a PIM unit needs a 'memory' tier, got managed = 'cache'"),
    ((("tier", 1, "pim", "ops"), ["linear", "atention"]), "tier[1].pim.ops[1]: unknown op kind 'atention'; "
                                                          "did you mean 'attention'?"),
    ((("tier", 1, "pim", "ops"), []), "tier[1].pim.ops: expected a non-empty array of op kinds (linear, attention, "
                                      "norm, elementwise, rotary, embedding, kv_append, moe_router, moe_dispatch, "
                                      "moe_combine)"),
    ((("tier", 1, "pim", "ops"), ["linear", "linear"]), "tier[1].pim.ops: duplicate op kind"),
    # links
    ((("link", 1, "from"), "sram"), "link[1]: links must join adjacent tiers in order: expected 'hbm' -> 'ddr', "
                                    "got 'sram' -> 'ddr'"),
    ((("link", 0, "to"), "hmb"), "link[0].to: unknown tier 'hmb'; did you mean 'hbm'?"),
    ((("link",), DELETE), "link: expected 2 links (one per adjacent pair of tiers), got 0; missing 'sram' -> 'hbm'"),
    # compute
    ((("compute", "flops", "bf61"), "1 TFLOPS"), "compute.flops.bf61: unknown dtype; did you mean 'bf16'?"),
    ((("compute", "flops", "fp8"), "1 TFLOPS"), "compute.energy.fp8: missing: every dtype in compute.flops "
                                                "needs an energy per FLOP"),
    ((("compute", "flops"), {}), "compute.flops: expected a table of dtype = quantity, e.g. { bf16 = ... }"),
    # placement rules
    ((("placement", 0, "tier"), "sram"), "placement[0].tier: a 'cache' tier cannot be a home; expected a 'memory' "
                                         "or 'scratchpad' tier, got 'sram'"),
    ((("placement", 0, "tier"), "ddrr"), "placement[0].tier: unknown tier 'ddrr'; did you mean 'ddr'?"),
    ((("placement", 0, "layers"), [3, 1]), "placement[0].layers: expected [first, last] integers with first <= "
                                           "last, got [3, 1]"),
    ((("placement", 0, "tier"), DELETE), "placement[0].tier: missing required key"),
    # top level
    ((("tier",), []), "tier: expected at least one [[tier]]"),
    ((("tier",), {"name": "x"}), "tier: expected an array of tables ([[tier]]), got dict"),
    ((("sources",), {"S1": 3}), "sources: expected a table of TAG = \"citation\" strings"),
]


@pytest.mark.parametrize("change, message", BAD, ids=[m.split(":")[0] + "-" + str(i) for i, (_, m) in enumerate(BAD)])
def test_bad_chip_exact_message(change, message):
    d = good()
    _set(d, *change)
    with pytest.raises(ConfigError) as e:
        chip_from_dict(d, file=F)
    assert str(e.value) == f"{F}: {message}"


def test_odd_keys_are_quoted_on_one_line():
    d = good()
    d["tier"][0]["a\nb"] = 1
    with pytest.raises(ConfigError) as e:
        chip_from_dict(d, file=F)
    assert str(e.value).startswith(f'{F}: tier[0]."a\\nb": unknown key; ')


def test_extra_link_beyond_the_last_tier():
    d = good()
    d["link"].append({"from": "ddr", "to": "hbm", "bandwidth": "1 GB/s", "energy": "1 pJ/bit"})
    with pytest.raises(ConfigError) as e:
        chip_from_dict(d, file=F)
    assert str(e.value) == (f"{F}: link[2]: links must join adjacent tiers in order: expected no link (the chip has "
                            f"3 tiers, so 2 links), got 'ddr' -> 'hbm'")


def test_single_tier_needs_no_link():
    d = good()
    d["tier"] = [d["tier"][2]]
    del d["link"]
    c = chip_from_dict(d, file=F)
    assert len(c.tiers) == 1 and c.links == ()


def test_load_file_and_hash(tmp_path):
    p = tmp_path / "toy.toml"
    p.write_text(GOOD)
    c = load_chip(p)
    import hashlib
    assert chip_hash(c) == chip_hash(p) == hashlib.sha256(GOOD.encode()).hexdigest()
    p.write_text(GOOD.replace("a paper", "another paper"))
    assert chip_hash(p) != chip_hash(c)      # the hash follows the bytes
    assert chip_hash(load_chip(str(p))) == chip_hash(p)


def test_hash_of_a_chip_built_in_code_is_stable():
    t = Tier("m", 1024, 64, None, "lru", "memory", 1e9, 1e-12, 1e-12)
    a = Chip("c", (t,), (), Compute({"bf16": 1e12}, {"bf16": 1e-12}))
    b = Chip("c", (t,), (), Compute({"bf16": 1e12}, {"bf16": 1e-12}))
    assert chip_hash(a) == chip_hash(b) and len(chip_hash(a)) == 64
    assert chip_hash(a) != chip_hash(Chip("d", (t,), (), Compute({"bf16": 1e12}, {"bf16": 1e-12})))


def test_file_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(ConfigError, match=r"^.*bad\.toml: not valid TOML: "):
        load_chip(bad)
    with pytest.raises(ConfigError) as e:
        load_chip(tmp_path / "missing.toml")
    assert str(e.value) == f"{tmp_path / 'missing.toml'}: chip file not found"
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not a UTF-8 text file"):
        load_chip(binary)


def test_unknown_preset():
    with pytest.raises(UsageError) as e:
        load_chip("h10")
    assert str(e.value) == f"unknown chip preset 'h10'; did you mean 'h100'? (presets: {', '.join(list_presets())})"


def test_cli_bad_chip_file_one_line_exit_2(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text(GOOD.replace('block = "4 KiB"', 'blok = "4 KiB"'))
    r = CliRunner().invoke(main, ["chips", str(p)])
    assert r.exit_code == 2
    assert r.output.strip() == f"tierlab: error: {p}: tier[1].blok: unknown key; did you mean 'block'?"


def test_cli_lists_and_shows(tmp_path):
    r = CliRunner().invoke(main, ["chips"])
    assert r.exit_code == 0 and len(r.output.strip().splitlines()) == len(list_presets())
    p = tmp_path / "toy.toml"
    p.write_text(GOOD)
    r = CliRunner().invoke(main, ["chips", str(p), "--json"])
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    assert d["tiers"][1]["pim"]["ops"] == ["linear", "attention"] and d["links"][1]["bandwidth_bytes_per_s"] == 12.5e9
    assert d["tiers"][0]["sets"] == 2048 and d["sha256"] == chip_hash(p)
    r = CliRunner().invoke(main, ["chips", str(p)])
    assert r.exit_code == 0
    assert "sram <-> hbm" in r.output and "1.2 TFLOP/s" in r.output and "*.experts.*" in r.output


def test_cli_unknown_preset_real_process():
    exe = Path(sys.executable).parent / "tierlab"
    if not exe.exists():
        pytest.skip("tierlab console script not installed beside this python")
    r = subprocess.run([str(exe), "chips", "nope"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


# ---- fuzz: mutated chip files give a Chip or one of tierlab's errors, never anything else --------

from hypothesis import given, settings, strategies as st  # noqa: E402

from tierlab.common.errors import TierlabError  # noqa: E402

_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**40), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["0 B", "-1 KiB", "3 GB/s", "1e999 B", "7 B", "lru",
                                                           "memory", "cache", "hbm", "1 pJ", "linear"]),
                    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


def _paths(d, prefix=()):
    yield prefix
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _paths(v, prefix + (i,))


# a mutation may leave a key where it has no effect (policy on a memory tier): a warning, rightly, not a failure
@pytest.mark.filterwarnings("ignore::tierlab.chip.chipfile.NoEffectWarning")
@settings(max_examples=150, deadline=None)
@given(st.data())
def test_fuzz_mutated_chip_dicts(data):
    d = good()
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in _paths(d) if p]
        path = data.draw(st.sampled_from(paths))
        action = data.draw(st.sampled_from(["set", "delete", "add"]))
        parent = d
        for p in path[:-1]:
            parent = parent[p]
        if action == "delete":
            del parent[path[-1]]
        elif action == "set":
            parent[path[-1]] = data.draw(_VALUES)
        elif isinstance(parent, dict):
            parent[data.draw(st.text(min_size=1, max_size=6))] = data.draw(_VALUES)
    try:
        c = chip_from_dict(d, file=F)
    except TierlabError as e:
        assert str(e).startswith(F + ": ") and "\n" not in str(e)
    else:
        assert isinstance(c, Chip)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_fuzz_random_bytes_as_chip_file(tmp_path_factory, blob):
    p = tmp_path_factory.mktemp("f") / "x.toml"
    p.write_bytes(blob)
    try:
        load_chip(p)
    except TierlabError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_fuzz_mutated_preset_text(tmp_path_factory, data):
    from tierlab.common.paths import configs_dir
    name = data.draw(st.sampled_from(list_presets()))
    text = (configs_dir("chips") / f"{name}.toml").read_text()
    i = data.draw(st.integers(0, len(text) - 1))
    j = data.draw(st.integers(i, min(len(text), i + 8)))
    text = text[:i] + data.draw(st.text(max_size=6)) + text[j:]
    p = tmp_path_factory.mktemp("m") / "x.toml"
    p.write_text(text)
    try:
        c = load_chip(p)
    except TierlabError as e:
        assert "\n" not in str(e).split("not valid TOML")[0]
    else:
        assert isinstance(c, Chip)


def test_a_chip_file_loaded_again_is_read_again_when_its_bytes_change(tmp_path):
    """``load_chip`` keeps what it parsed by the file's path and bytes: the same bytes give the same
    (frozen) Chip and the same warnings, edited bytes a new Chip."""
    import warnings

    from tierlab.chip.chipfile import NoEffectWarning, read_chip_toml

    d, path, _ = read_chip_toml("h100")
    text = path.read_text()
    f = tmp_path / "c.toml"
    f.write_text(text)
    a, b = load_chip(f), load_chip(f)
    assert a is b
    f.write_text(text.replace('name = "h100"', 'name = "h100-edited"', 1))
    c = load_chip(f)
    assert c.name == "h100-edited" and a.name == "h100"
    # a warning said at the first load is said again at the next
    assert 'name = "hbm"' in text
    f.write_text(text.replace('name = "hbm"', 'name = "hbm"\npolicy = "fifo"', 1))
    for _ in range(2):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            load_chip(f)
        assert any(isinstance(w.message, NoEffectWarning) for w in said)
