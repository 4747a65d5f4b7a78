"""The address-trace kind (format versions 5 and 4) and its replay through the stream kernels.

* The words replayed by the stream kernels give every counter of every tier exactly as the same
  trace's descriptor view does on the walk (a second path), for 1-3 LRU/FIFO levels, with and
  without writes, on one and two threads; and pycachesim's per-level misses on a read stream.
* ``--straddle once``: tier 0 counts each access once (a miss if any of its lines missed), exactly
  as a plain-Python cache of cachegrind's rule; the tiers below see every line either way.
* The reader refuses a damaged address trace, naming the file; older versions still read
  (tests/traces/test_trace_format.py, tests/traces/test_trace_forms.py, tests/traces/test_trace_v2.py).
"""

from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np
import pytest

from tierlab.common.errors import TraceError, UsageError
from tierlab.chip.chipfile import load_chip
from tierlab.engine.options import ReplayOptions
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.traces.format import schema as fmt
from tierlab.traces.importers.tracer_logs import import_trace
from tierlab.traces.format.reader import open_trace

LEVELS = (("l1", 16, 4), ("l2", 64, 8), ("l3", 256, 8))     # (name, sets, ways), 64-byte lines


def chip_toml(levels, policy="lru", line=64) -> str:
    parts = ['name = "addr"\n[compute]\nflops = { bf16 = "1 TFLOP/s" }\nenergy = { bf16 = "1 pJ" }\n']
    names = [n for n, _, _ in levels] + ["dram"]
    for name, sets, ways in levels:
        parts.append(f'[[tier]]\nname = "{name}"\ncapacity = "{sets * ways * line} B"\nblock = "{line} B"\n'
                     f'ways = {ways}\npolicy = "{policy}"\nmanaged = "cache"\nbandwidth = "1 TB/s"\n'
                     'read_energy = "1 pJ/bit"\nwrite_energy = "1 pJ/bit"\n')
    parts.append(f'[[tier]]\nname = "dram"\ncapacity = "64 GiB"\nblock = "{line} B"\nmanaged = "memory"\n'
                 'bandwidth = "100 GB/s"\nread_energy = "1 pJ/bit"\nwrite_energy = "1 pJ/bit"\n')
    for a, b in zip(names, names[1:]):
        parts.append(f'[[link]]\nfrom = "{a}"\nto = "{b}"\nbandwidth = "1 TB/s"\nenergy = "1 pJ/bit"\n')
    return "\n".join(parts)


def records(seed, n=20000, writes=0.3):
    """Unaligned accesses of 1-32 bytes over a hot set and a sweep, in two 1 GiB regions."""
    rng = np.random.default_rng(seed)
    hot = 0x7F00_0000 + rng.integers(0, 64 * 900, n)
    sweep = 0x2_0000_0000 + (np.arange(n) * 24) % (1 << 20)
    a = np.where(rng.random(n) < 0.6, hot, sweep)
    s = rng.choice([1, 2, 4, 8, 16, 32], n)
    w = rng.random(n) < writes
    return [(int(x), int(y), int(z)) for x, y, z in zip(a, s, w)]


def write_din(path, recs):
    path.write_text("".join(f"{w} {a:x} {s}\n" for a, s, w in recs))
    return path


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    d = tmp_path_factory.mktemp("addr")
    out = {}
    for writes in (0.0, 0.3):
        for straddle in ("both", "once"):
            src = write_din(d / f"w{writes}.din", records(11, writes=writes))
            t = d / f"w{writes}-{straddle}.trace"
            import_trace(src, t, straddle=straddle)
            out[writes, straddle] = t
    return d, out


def _chip(d, levels, policy):
    p = d / f"c-{len(levels)}-{policy}.toml"
    p.write_text(chip_toml(levels, policy))
    return load_chip(str(p))


@pytest.mark.parametrize("writes", [0.0, 0.3])
@pytest.mark.parametrize("policy", ["lru", "fifo"])
@pytest.mark.parametrize("n_levels", [1, 2, 3])
def test_words_on_the_stream_kernels_equal_the_walk(imported, writes, policy, n_levels):
    d, traces = imported
    t = traces[writes, "both"]
    chip = _chip(d, LEVELS[:n_levels], policy)
    fast = replay_trace(t, chip)
    two = replay_trace(t, chip, ReplayOptions(threads=2))
    walk = replay_trace(t, chip, ReplayOptions(kernel="walk"))
    assert fast.result.meta["kernel"]["name"] == ("cache_stream_chain" if writes == 0 else "cache_stream_passes")
    assert walk.result.meta["kernel"]["name"] == "walk"
    assert np.array_equal(fast.result.tiers, walk.result.tiers)
    assert np.array_equal(two.result.tiers, walk.result.tiers)
    assert fast.result.n_accesses == open_trace(t).n_lines


@pytest.mark.parametrize("policy", ["lru", "fifo"])
@pytest.mark.parametrize("n_levels", [1, 2])
def test_a_chain_keyed_on_the_words_hands_over_at_the_first_write(imported, tmp_path, policy, n_levels):
    """A trace whose manifest does not say whether it writes: the chain serves it, its first tier
    keyed on the words (it keeps them, not tags), and hands its state over to the tier passes at
    the first write; every counter as on the walk."""
    from tierlab.traces.format.addresses import AddressTraceWriter

    d, _ = imported
    rng = np.random.default_rng(5)
    # a hot set that stays in tier 0 beside a sweep that misses: the counts after the hand-over
    # depend on every block handed over
    lines = np.where(rng.random(16384) < 0.7, rng.integers(0, 40, 16384), rng.integers(0, 4000, 16384)).astype(np.uint64)
    words = (lines << np.uint64(1)) | (np.arange(16384) >= 10000) & (rng.random(16384) < 0.3)
    t = tmp_path / "unsaid.trace"
    with AddressTraceWriter(t, line_bytes=64, batch_rows=4096) as w:
        for lo in range(0, len(words), 4096):           # chunks of 4096 lines, the first two read only
            w.add(words[lo:lo + 4096])
        w.regions([0x7F00_0000], [int(lines.max() + 1) * 64])
    assert open_trace(t).writes is None
    chip = _chip(d, LEVELS[:n_levels], policy)
    fast = replay_trace(t, chip).result
    walk = replay_trace(t, chip, ReplayOptions(kernel="walk")).result
    k = fast.meta["kernel"]
    assert (k["name"], k["then"], k["at_block"]) == ("cache_stream_chain", "cache_stream_passes", 8192)
    assert np.array_equal(fast.tiers, walk.tiers)


def test_read_stream_equals_pycachesim(imported):
    from cachesim import Cache, CacheSimulator, MainMemory

    d, traces = imported
    t = traces[0.0, "both"]
    words = np.concatenate(list(open_trace(t).iter_lines()))
    mem, below, caches = MainMemory(), None, []
    for name, sets, ways in reversed(LEVELS):
        c = Cache(name, sets, ways, 64, "LRU", load_from=below, store_to=below)
        caches.append(c)
        below = c
    mem.load_to(caches[0])
    mem.store_from(caches[0])
    sim = CacheSimulator(caches[-1], mem)
    sim.load(((words >> 1) * 64).tolist())
    st = {x["name"]: x for x in sim.stats()}
    r = replay_trace(t, _chip(d, LEVELS, "lru")).result
    for name, _, _ in LEVELS:
        assert r.tier(name)["misses"] == st[name]["MISS_count"], name


def once_reference(recs, sets, ways, policy="lru"):
    """One cache, cachegrind's rule: an access touching several lines is one request, a miss if
    any line missed; every line is looked up (and filled) in order. (hits, misses)."""
    cache = [OrderedDict() for _ in range(sets)]
    hits = misses = 0
    for a, s, w in recs:
        missed = False
        for ln in range(a // 64, (a + s - 1) // 64 + 1):
            st = cache[ln % sets]
            if ln in st:
                if policy == "lru":
                    st.move_to_end(ln)
            else:
                missed = True
                st[ln] = True
                if len(st) > ways:
                    st.popitem(last=False)
        hits += not missed
        misses += missed
    return hits, misses


@pytest.mark.parametrize("writes", [0.0, 0.3])
@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_straddle_once_counts_an_access_once(imported, writes, policy):
    d, traces = imported
    recs = records(11, writes=writes)
    chip = _chip(d, LEVELS[:2], policy)
    once = replay_trace(traces[writes, "once"], chip).result
    both = replay_trace(traces[writes, "both"], chip).result
    so = once.meta["kernel"]["straddle_once"]
    assert so["continuation_lines"] == open_trace(traces[writes, "once"]).straddle_rows().size > 0
    # stores touch no LRU order differently here: store_hit_recency is on (the default)
    assert (so["hits"], so["misses"]) == once_reference(recs, *LEVELS[0][1:], policy)
    assert so["accesses"] == len(recs) and so["tier"] == "l1"
    assert both.tier("l1")["hits"] + both.tier("l1")["misses"] == open_trace(traces[writes, "both"]).n_lines
    assert np.array_equal(once.tiers, both.tiers)          # the counters count lines either way
    assert "straddle_once" not in both.meta["kernel"]


def test_straddle_once_needs_a_stream_kernel(imported):
    d, traces = imported
    with pytest.raises(UsageError, match="--straddle once replays on the stream kernels"):
        replay_trace(traces[0.3, "once"], _chip(d, LEVELS[:1], "lru"), ReplayOptions(kernel="walk"))


def test_manifest_and_descriptor_view(imported):
    _, traces = imported
    t = open_trace(traces[0.3, "both"])
    m = json.loads((t.path / fmt.MANIFEST).read_text())
    assert (m["version"], m["kind"], t.kind, t.line_bytes) == (5, "addresses", "addresses", 64)
    assert m["lines"] == {"line_bytes": 64, "encoding": "plain", "word": "line << 1 | is_write", "word_bits": 32}
    first = records(11, writes=0.3)[0][0] >> 30 << 30          # regions in first-seen order
    assert [x["name"] for x in t.tensors.to_pylist()] == [f"region_{r:#x}" for r in
                                                          sorted({0x40000000, 0x200000000}, key=lambda r: r != first)]
    words = np.concatenate(list(t.iter_lines()))
    assert words.dtype == np.uint32                 # every word fits: stored and read as 32 bits
    words = words.astype(np.int64)
    c = t.access_columns()
    base = t.tensors.column("address").to_numpy().astype(np.int64)
    assert np.array_equal(base[c["tensor_id"]] + c["offset"].astype(np.int64), (words >> 1) * 64)
    assert np.array_equal(c["is_write"], (words & 1) == 1) and set(c["nbytes"].tolist()) == {64}


def _copy(src, dst):
    import shutil
    return shutil.copytree(src, dst)


def test_reader_refuses_damaged_address_traces(imported, tmp_path):
    _, traces = imported
    t = _copy(traces[0.3, "both"], tmp_path / "t.trace")
    m = json.loads((t / fmt.MANIFEST).read_text())
    (t / fmt.MANIFEST).write_text(json.dumps({**m, "lines": {**m["lines"], "line_bytes": 48}}))
    with pytest.raises(TraceError, match="line_bytes is 48, expected a power of two"):
        open_trace(t)
    (t / fmt.MANIFEST).write_text(json.dumps({**m, "tables": {**m["tables"], "lines": m["tables"]["lines"] + 1}}))
    with pytest.raises(TraceError, match="the manifest says .* \\(truncated\\?\\)") as e:
        list(open_trace(t).iter_lines())
    assert str(e.value).startswith(str(t / fmt.LINES_FILE))
    import pyarrow as pa
    (t / fmt.MANIFEST).write_text(json.dumps(m))
    bad = np.array([(1 << 40) << 1], np.uint64)
    with pa.OSFile(str(t / fmt.LINES_FILE), "wb") as sink, pa.ipc.new_file(sink, fmt.LINES_SCHEMA) as w:
        w.write_table(pa.table({"word": bad}))
    (t / fmt.MANIFEST).write_text(json.dumps({**m, "tables": {**m["tables"], "lines": 1}}))
    with pytest.raises(TraceError, match="lines.arrow: word: column has type uint64, expected uint32"):
        list(open_trace(t).iter_lines())                # the manifest says 32-bit words
    wide = {**m, "tables": {**m["tables"], "lines": 1}, "lines": {**m["lines"], "word_bits": 64}}
    (t / fmt.MANIFEST).write_text(json.dumps(wide))
    with pytest.raises(TraceError, match="row 0: line 1099511627776 \\(64 B\\) lies outside the tensors"):
        list(open_trace(t).iter_lines())
    for bits in (None, 16, "32", True):
        (t / fmt.MANIFEST).write_text(json.dumps({**wide, "lines": {**wide["lines"], "word_bits": bits}}))
        with pytest.raises(TraceError, match=f"lines.word_bits: word_bits is {bits!r}, expected 32 or 64"):
            open_trace(t)


def test_region_tensors_cover_the_lines_touched(tmp_path):
    """A region's tensor starts at the 1 MiB boundary below its lowest line and ends after its highest
    (a stack near the top of its region is not a 1 GiB tensor); a word below it is refused."""
    from tierlab.traces.format.addresses import AddressTraceWriter

    recs = [(0x1FFEFFF000 + 8 * i, 8, i % 2) for i in range(1000)] + [(0x4000000 + 64 * i, 8, 0) for i in range(50)]
    write_din(tmp_path / "s.din", recs)
    import_trace(tmp_path / "s.din", tmp_path / "s.trace")
    t = open_trace(tmp_path / "s.trace")
    addr, nb = t.tensors.column("address").to_pylist(), t.tensors.column("nbytes").to_pylist()
    off = 0x1FFEFFF000 & ((1 << 30) - 1)            # the stack's offset in its region
    lo, end = off >> 20 << 20, -(-(off + 8 * 1000) // 64) * 64
    assert addr == [(0 << 30) + lo, (1 << 30) + 0x4000000]
    assert nb == [end - lo, 50 * 64] and sum(nb) < 1 << 21
    c = t.access_columns()
    assert (c["offset"] + c["nbytes"] <= np.array(nb)[c["tensor_id"]]).all()
    with AddressTraceWriter(tmp_path / "b.trace", line_bytes=64) as w:
        w.add(np.array([(0x100000 >> 6) << 1, (0xF0000 >> 6) << 1]))
        w.regions([0], [0x200000], [0x100000])
    with pytest.raises(TraceError, match="row 1: line 15360 \\(64 B\\) lies outside the tensors"):
        list(open_trace(tmp_path / "b.trace").iter_lines())
    # the replay checks the words on a second thread beside the kernel: the same refusal
    (tmp_path / "c.toml").write_text(chip_toml(LEVELS[:1]))
    with pytest.raises(TraceError, match="b.trace/lines.arrow: word: row 1: line 15360 \\(64 B\\) lies outside"):
        replay_trace(tmp_path / "b.trace", load_chip(str(tmp_path / "c.toml")))


def _as_version_4(src, dst):
    """The version-5 trace ``src`` rewritten as version 4 wrote it: uint64 words, no word_bits."""
    import pyarrow as pa
    t = _copy(src, dst)
    words = np.concatenate(list(open_trace(t).iter_lines())).astype(np.uint64)
    with pa.OSFile(str(t / fmt.LINES_FILE), "wb") as sink, pa.ipc.new_file(sink, fmt.LINES_SCHEMA) as w:
        w.write_table(pa.table({"word": words}))
    m = json.loads((t / fmt.MANIFEST).read_text())
    lines = {k: v for k, v in m["lines"].items() if k != "word_bits"}
    (t / fmt.MANIFEST).write_text(json.dumps({**m, "version": 4, "lines": lines}))
    return t


@pytest.mark.parametrize("writes", [0.0, 0.3])
@pytest.mark.parametrize("straddle", ["both", "once"])
def test_version_4_traces_read_and_replay_as_before(imported, tmp_path, straddle, writes):
    """A version-4 address trace (64-bit words, no word_bits) reads the same words and replays to
    the same counts as the version-5 trace it was made from (32-bit words), on the stream kernels
    (read only: the chain, keyed on each width of word) and on the walk."""
    d, traces = imported
    v5 = traces[writes, straddle]
    v4 = _as_version_4(v5, tmp_path / "v4.trace")
    a, b = open_trace(v5), open_trace(v4)
    assert (a.word_bits, b.word_bits, b.manifest["version"]) == (32, 64, 4)
    wa, wb = np.concatenate(list(a.iter_lines())), np.concatenate(list(b.iter_lines()))
    assert (wa.dtype, wb.dtype) == (np.uint32, np.int64) and np.array_equal(wa.astype(np.int64), wb)
    for k in a.access_columns():
        assert np.array_equal(a.access_columns()[k], b.access_columns()[k]), k
    for levels, kernel in ((LEVELS[:2], "auto"), (LEVELS[:1], "auto")) + ((((LEVELS[:1], "walk"),) if straddle == "both" else ())):
        chip = _chip(d, levels, "lru")
        ra = replay_trace(v5, chip, ReplayOptions(kernel=kernel)).result
        rb = replay_trace(v4, chip, ReplayOptions(kernel=kernel)).result
        assert np.array_equal(ra.tiers, rb.tiers) and ra.meta["kernel"] == rb.meta["kernel"], (levels, kernel)
        assert ra.tiers.sum() > 0


def test_writer_widens_to_64_bit_words_when_one_needs_them(tmp_path):
    """Words start as 32 bits; the first batch holding a word of 2**32 or more rewrites the batches
    written so far as 64-bit words, in order, and the manifest says word_bits 64."""
    from tierlab.traces.format.addresses import AddressTraceWriter

    low = (np.arange(10, dtype=np.uint64) << np.uint64(1)) | np.uint64(1)
    high = np.array([(1 << 33) + 2, 6], np.uint64)          # line 2**32 + 1: past 32 bits
    with AddressTraceWriter(tmp_path / "w.trace", line_bytes=1, batch_rows=4) as w:
        w.add(low)
        w.add(high)
        w.regions([0, 1 << 30, 2 << 30, 3 << 30, 4 << 30], [1 << 30] * 5)
    t = open_trace(tmp_path / "w.trace")
    assert t.word_bits == 64 and t.manifest["lines"]["word_bits"] == 64
    got = list(t.iter_lines())
    assert [len(x) for x in got] == [10, 2] and got[0].dtype == np.int64   # the first batch rewritten
    assert np.concatenate(got).tolist() == np.concatenate([low, high]).astype(np.int64).tolist()
    assert not list((tmp_path / "w.trace").glob("*.32"))
    with AddressTraceWriter(tmp_path / "n.trace", line_bytes=1, batch_rows=4) as w:
        w.add(low)
        w.regions([0], [64])
    assert open_trace(tmp_path / "n.trace").word_bits == 32
