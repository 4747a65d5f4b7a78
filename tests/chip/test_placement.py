"""Placement against hand arithmetic: first fit, rules and their precedence, spill, capacity errors, lent bytes."""

import fnmatch
import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from tierlab.chip.chipfile import chip_from_dict
from tierlab.chip.hierarchy import PlacementRule
from tierlab.chip.placement import place
from tierlab.common.errors import CapacityError, ConfigError


def tier(name, capacity, block="64 B", managed="memory", **kw):
    d = {"name": name, "capacity": capacity, "block": block, "managed": managed,
         "bandwidth": "1 TB/s", "read_energy": "1 pJ/bit", "write_energy": "1 pJ/bit"}
    d.update(kw)
    return d


def chip(*tiers, rules=()):
    links = [{"from": a["name"], "to": b["name"], "bandwidth": "1 GB/s", "energy": "1 pJ/bit"}
             for a, b in zip(tiers, tiers[1:])]
    return chip_from_dict({"name": "toy", "compute": {"flops": {"bf16": "1 TFLOPS"}, "energy": {"bf16": "1 pJ"}},
                           "tier": list(tiers), "link": links, "placement": list(rules)}, file="toy.toml")


def tensors(sizes, kinds=None, names=None, layers=None, ids=None, dictionary=False):
    n = len(sizes)
    kinds = kinds or ["weight"] * n
    names = names or [f"t{i}" for i in range(n)]
    layers = layers or [-1] * n
    ids = ids if ids is not None else list(range(n))
    kind_arr = pa.array(kinds).dictionary_encode() if dictionary else pa.array(kinds)
    name_arr = pa.array(names).dictionary_encode() if dictionary else pa.array(names)
    return pa.table({"tensor_id": pa.array(ids, pa.uint32()), "name": name_arr, "kind": kind_arr,
                     "layer": pa.array(layers, pa.int32()), "expert": pa.array([-1] * n, pa.int32()),
                     "dtype": pa.array(["bf16"] * n), "address": pa.array([0] * n, pa.uint64()),
                     "nbytes": pa.array(sizes, pa.uint64())})


TWO = (tier("sram", "1 KiB", managed="scratchpad"), tier("hbm", "4 KiB"))


def test_first_fit_in_tier_order_and_tensor_order():
    # sram 1024: 600 -> sram (424 free); 300 -> sram (124); 200 -> hbm; 100 -> sram (24); 50 -> hbm
    p = place(chip(*TWO), tensors([600, 300, 200, 100, 50]))
    assert p.home.tolist() == [0, 0, 1, 0, 1] and p.home.dtype == np.int32
    assert p.bytes_by_tier.tolist() == [1000, 250]
    assert p.free_bytes.tolist() == [24, 4096 - 250]
    assert p.tensors_by_tier.tolist() == [3, 2]
    assert p.lent_bytes.tolist() == [0, 0]


def test_rows_out_of_id_order_and_dictionary_strings():
    # rows listed in reverse; placement still goes by tensor_id: ids 0..4 sizes [600, 300, 200, 100, 50]
    t = tensors([50, 100, 200, 300, 600], ids=[4, 3, 2, 1, 0], dictionary=True)
    assert place(chip(*TWO), t).home.tolist() == [0, 0, 1, 0, 1]


def test_cache_tier_is_never_a_home():
    c = chip(tier("l2", "64 KiB", managed="cache", ways=4), tier("hbm", "4 KiB"))
    p = place(c, tensors([100, 200]))
    assert p.home.tolist() == [1, 1] and p.bytes_by_tier.tolist() == [0, 300]


def test_rules_pin_before_first_fit():
    # Without pinning first, weight t0 (800) would fill the SRAM and the KV t1 (500) could not go there.
    rules = [{"tier": "sram", "kind": "kv"}]
    p = place(chip(*TWO, rules=rules), tensors([800, 500, 100], kinds=["weight", "kv", "weight"]))
    assert p.home.tolist() == [1, 0, 0]          # kv pinned (500), then 800 -> hbm, 100 -> sram (624 free)
    assert p.pinned == 1
    assert p.bytes_by_tier_kind == {"sram": {"kv": 500, "weight": 100}, "hbm": {"weight": 800}}


def test_rule_conditions_name_glob_and_layers():
    rules = [{"tier": "hbm", "kind": "weight", "name": "*.experts.*", "layers": [2, 3]}]
    names = ["layers.1.mlp.experts.0.up", "layers.2.mlp.experts.0.up", "layers.3.mlp.shared_experts.up",
             "layers.3.mlp.experts.7.up", "layers.4.mlp.experts.1.up"]
    p = place(chip(*TWO, rules=rules), tensors([10] * 5, names=names, layers=[1, 2, 3, 3, 4]))
    assert p.home.tolist() == [0, 1, 0, 1, 0]


def test_extra_rules_take_precedence_over_chip_rules():
    rules = [{"tier": "sram", "kind": "kv"}]
    t = tensors([100, 100], kinds=["kv", "kv"])
    assert place(chip(*TWO, rules=rules), t).home.tolist() == [0, 0]
    extra = [PlacementRule(tier="hbm", kind="kv", layers=(0, 0))]
    t = tensors([100, 100], kinds=["kv", "kv"], layers=[0, 1])
    assert place(chip(*TWO, rules=rules), t, extra).home.tolist() == [1, 0]


def test_rule_tier_full_is_a_capacity_error_with_sizes():
    rules = [{"tier": "sram", "kind": "kv"}]
    with pytest.raises(CapacityError) as e:
        place(chip(*TWO, rules=rules), tensors([1000, 100], kinds=["kv", "kv"], names=["kv.0", "kv.1"]))
    assert str(e.value) == ("placement: tensor 'kv.1' (kv, 100 B) is pinned to 'sram' by a rule, but only 24 B "
                            "of 1 KiB is free")


def test_spill_goes_farther():
    three = TWO + (tier("ddr", "64 KiB"),)
    rules = [{"tier": "sram", "kind": "kv", "spill": True}, {"tier": "hbm", "kind": "weight", "spill": True}]
    # kv 1000 -> sram; kv 100 spills -> hbm (first fit beyond sram); weight 4000 -> hbm full (3996 free)
    # -> spills to ddr; weight 50 -> hbm
    p = place(chip(*three, rules=rules), tensors([1000, 100, 4000, 50], kinds=["kv", "kv", "weight", "weight"]))
    assert p.home.tolist() == [0, 1, 2, 1]
    assert p.bytes_by_tier.tolist() == [1000, 150, 4000]
    assert p.pinned == 2


def test_fits_nowhere_is_a_capacity_error_with_sizes():
    with pytest.raises(CapacityError) as e:
        place(chip(*TWO), tensors([1000, 4000, 200], names=["a", "b", "big"]))
    assert str(e.value) == ("placement: tensor 'big' (weight, 200 B) fits in no home tier; free: sram 24 B, hbm 96 B")


def test_lent_bytes_whole_sets_of_a_lending_memory_tier():
    c = chip(tier("sram", "1 KiB", managed="scratchpad"), tier("hbm", "4 KiB", ways=2, lend=True),
             tier("ddr", "64 KiB"))
    p = place(c, tensors([1000, 1000]))          # 1000 -> sram, 1000 -> hbm: 3096 free, sets of 128 B -> 3072
    assert p.lent_bytes.tolist() == [0, 3072, 0]
    c = chip(tier("hbm", "4 KiB", lend=True), tier("ddr", "64 KiB"))   # fully associative: whole blocks of 64
    assert place(c, tensors([1000])).lent_bytes.tolist() == [(4096 - 1000) // 64 * 64, 0]


def test_alignment_rounds_sizes_up():
    p = place(chip(*TWO), tensors([1, 1, 1]), align_bytes=512)   # each occupies 512: 2 in sram, 1 in hbm
    assert p.home.tolist() == [0, 0, 1] and p.bytes_by_tier.tolist() == [1024, 512]


def test_bad_tensor_ids_and_columns():
    with pytest.raises(ConfigError, match="tensor ids must be 0..n-1, each once"):
        place(chip(*TWO), tensors([1, 1], ids=[0, 2]))
    with pytest.raises(ConfigError, match="missing column 'nbytes'"):
        place(chip(*TWO), tensors([1]).drop_columns(["nbytes"]))
    with pytest.raises(ConfigError, match="a 'cache' tier cannot be a home"):
        c = chip(tier("l2", "64 KiB", managed="cache"), tier("hbm", "4 KiB"))
        place(c, tensors([1]), [PlacementRule(tier="l2")])


def test_summary_is_json_and_consistent():
    p = place(chip(*TWO, rules=[{"tier": "sram", "kind": "kv"}]), tensors([600, 300, 200], kinds=["kv", "weight", "weight"]))
    s = json.loads(json.dumps(p.summary()))
    for t, placed in zip(s["tiers"], p.bytes_by_tier.tolist()):
        assert sum(t["bytes_by_kind"].values()) == t["placed_bytes"] == placed
        assert t["free_bytes"] == t["capacity_bytes"] - placed
    text = p.format()
    assert text.splitlines()[0].split()[:2] == ["tier", "capacity"] and "kv 600 B" in text


def test_empty_table():
    p = place(chip(*TWO), tensors([]))
    assert p.home.tolist() == [] and p.bytes_by_tier.tolist() == [0, 0]


# A plain reference of the documented semantics, sharing no code with tierlab.chip.placement.
def reference(caps, home_ok, rules, sizes, kinds, names, layers):
    used = [0] * len(caps)
    home = [None] * len(sizes)

    def first(tid, tiers):
        for t in tiers:
            if used[t] + sizes[tid] <= caps[t]:
                used[t] += sizes[tid]
                home[tid] = t
                return True
        return False

    rest = []
    for tid in range(len(sizes)):
        for (t, kind, glob, lay, spill) in rules:
            if (kind is None or kind == kinds[tid]) and (glob is None or fnmatch.fnmatchcase(names[tid], glob)) \
                    and (lay is None or lay[0] <= layers[tid] <= lay[1]):
                if used[t] + sizes[tid] <= caps[t]:
                    used[t] += sizes[tid]
                    home[tid] = t
                elif not (spill and first(tid, [h for h in range(len(caps)) if home_ok[h] and h > t])):
                    return None
                break
        else:
            rest.append(tid)
    for tid in rest:
        if not first(tid, [h for h in range(len(caps)) if home_ok[h]]):
            return None
    return home, used


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_matches_plain_reference(data):
    managed = data.draw(st.lists(st.sampled_from(["cache", "memory", "scratchpad"]), min_size=1, max_size=4))
    managed[-1] = data.draw(st.sampled_from(["memory", "scratchpad"]))
    caps_blocks = data.draw(st.lists(st.integers(1, 40), min_size=len(managed), max_size=len(managed)))
    tiers = [tier(f"t{i}", f"{c * 64} B", managed=m) for i, (c, m) in enumerate(zip(caps_blocks, managed))]
    homes = [i for i, m in enumerate(managed) if m != "cache"]
    n = data.draw(st.integers(0, 12))
    sizes = data.draw(st.lists(st.integers(1, 900), min_size=n, max_size=n))
    kinds = data.draw(st.lists(st.sampled_from(["weight", "kv", "activation"]), min_size=n, max_size=n))
    layers = data.draw(st.lists(st.integers(-1, 3), min_size=n, max_size=n))
    names = [f"layers.{l}.{k}.{i}" for i, (l, k) in enumerate(zip(layers, kinds))]
    raw_rules = data.draw(st.lists(st.tuples(st.sampled_from(homes), st.sampled_from([None, "weight", "kv"]),
                                             st.sampled_from([None, "layers.1.*", "*.kv.*"]),
                                             st.sampled_from([None, (0, 1), (2, 3)]), st.booleans()), max_size=3))
    rules = []
    for t, k, g, lay, spill in raw_rules:
        r = {"tier": f"t{t}", "spill": spill}
        if k:
            r["kind"] = k
        if g:
            r["name"] = g
        if lay:
            r["layers"] = list(lay)
        rules.append(r)
    c = chip(*tiers, rules=rules)
    caps = [b * 64 for b in caps_blocks]
    ref = reference(caps, [m != "cache" for m in managed], raw_rules, sizes, kinds, names, layers)
    t = tensors(sizes, kinds=kinds, names=names, layers=layers)
    if ref is None:
        with pytest.raises(CapacityError):
            place(c, t)
        return
    p = place(c, t)
    assert p.home.tolist() == ref[0]
    assert p.bytes_by_tier.tolist() == ref[1]
    assert sum(ref[1]) == sum(sizes) and all(u <= cap for u, cap in zip(ref[1], caps))


def test_parse_rule_forms():
    from tierlab.chip.placement import parse_rule
    assert parse_rule("sram") == PlacementRule(tier="sram")
    assert parse_rule("sram:kind=kv,spill") == PlacementRule(tier="sram", kind="kv", spill=True)
    assert parse_rule("ddr:kind=weight,name=*.experts.*,layers=2-5") == PlacementRule(
        tier="ddr", kind="weight", name="*.experts.*", layers=(2, 5))
    assert parse_rule("hbm:layers=3").layers == (3, 3)
    from tierlab.common.errors import UsageError
    for bad, msg in [(":kind=kv", "expected TIER[:kind=K,name=GLOB,layers=A-B,spill], got ':kind=kv'"),
                     ("sram:kin=kv", "unknown or repeated condition 'kin=kv'; expected kind=K, name=GLOB, layers=A-B or spill"),
                     ("sram:kind=kv,kind=weight", "unknown or repeated condition 'kind=weight'; expected kind=K, "
                                                  "name=GLOB, layers=A-B or spill"),
                     ("sram:layers=5-2", "expected layers=A-B with integers A <= B, got 'layers=5-2'"),
                     ("sram:layers=x", "expected layers=A-B with integers A <= B, got 'layers=x'")]:
        with pytest.raises(UsageError) as e:
            parse_rule(bad)
        assert str(e.value) == f"place: {msg}"
    # parsed rules act as extra rules, ahead of the chip's
    p = place(chip(*TWO, rules=[{"tier": "sram", "kind": "kv"}]), tensors([10], kinds=["kv"]), [parse_rule("hbm:kind=kv")])
    assert p.home.tolist() == [1]
