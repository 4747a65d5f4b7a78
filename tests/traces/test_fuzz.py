"""Fuzzing the loaders: random and mutated chip files, model configs and trace bytes.

The only outcomes allowed are a valid object (which then also works downstream: a chip replays a
trace, a model config lowers into a trace, a trace reads to its last access) or one of tierlab's
own errors, whose text is one line. Anything else (a KeyError, a pyarrow exception, a numpy
overflow) fails the test. ``benchmarks/fuzz_long.py`` runs the same cases many more times and
prints how many it tried and what came out; here each runs a few seconds at most.

Each ``fuzz_*`` function takes hypothesis' ``data`` object and a scratch directory and returns
``"ok"`` or ``"error:<TierlabError subclass>"``; it raises on any other outcome.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlab.chip.chipfile import list_presets as chip_presets
from tierlab.chip.chipfile import load_chip
from tierlab.engine.options import ReplayOptions
from tierlab.pipeline.chip_replay import replay_trace
from tierlab.traces.format import schema as fmt
from tierlab.common.errors import TierlabError
from tierlab.traces.lowering.generate import generate_trace
from tierlab.common.paths import configs_dir
from tierlab.traces.format.reader import open_trace
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import load_model

HERE = Path(__file__).parents[1]
GOLDEN = HERE / "data" / "golden-v1-synthetic.trace"
TINY_MODELS = sorted((HERE / "data" / "models").glob("*.json"))
PRESET_MODELS = sorted(configs_dir("models").glob("*.json"))

# Replay state is bounded so a fuzzed chip with a huge set-associative cache is refused, not allocated.
FUZZ_REPLAY = ReplayOptions(max_slots=1 << 21, opt_max_lookups=1 << 16)


LAST_ERROR = ""   # text of the last TierlabError seen by outcome() (fuzz_long.py samples them)


def outcome(fn) -> str:
    """Run ``fn``; "ok" if it returns, "error:<type>" for a one-line TierlabError, raise otherwise."""
    global LAST_ERROR
    try:
        fn()
    except TierlabError as err:
        text = str(err)
        if "\n" in text or not text.strip():
            raise AssertionError(f"{type(err).__name__} is not one line: {text!r}") from err
        LAST_ERROR = text
        return f"error:{type(err).__name__}"
    return "ok"


# ---- values a mutation may write ----------------------------------------------------------------

JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 8), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
    st.text(max_size=8), st.sampled_from(["LlamaForCausalLM", "mixtral", "noaux_tc", "64", ""]),
    st.lists(st.one_of(st.integers(-2, 4), st.text(max_size=3), st.lists(st.integers(), max_size=2)), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)

TOML_VALUES = st.one_of(
    st.sampled_from(['"0 B"', '"-1 KiB"', '"1 PiB"', '"3 GB/s"', '"1e999 B"', '"7 B"', '"128 B"', '"64 KiB"',
                     '"lru"', '"opt"', '"random"', '"fifo"', '"memory"', '"cache"', '"scratchpad"', '"hbm"',
                     '"sram"', '"1 pJ"', '"0 pJ/bit"', '"linear"', 'true', 'false', '[]', '{}', '[0, 1]']),
    st.integers(-2, 2**40).map(str), st.text(max_size=6).map(json.dumps),
)


# ---- chip files -----------------------------------------------------------------------------------


def _mutate_lines(data, text: str) -> str:
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        action = data.draw(st.sampled_from(["value", "delete", "duplicate", "swap", "chars"]), label="action")
        if action == "value" and "=" in lines[i]:
            key = lines[i].split("=", 1)[0]
            lines[i] = f"{key}= {data.draw(TOML_VALUES, label='value')}"
        elif action == "delete":
            del lines[i]
        elif action == "duplicate":
            lines.insert(i, lines[i])
        elif action == "swap":
            j = data.draw(st.integers(0, len(lines) - 1), label="other line")
            lines[i], lines[j] = lines[j], lines[i]
        else:
            s = lines[i]
            a = data.draw(st.integers(0, len(s)), label="at")
            lines[i] = s[:a] + data.draw(st.text(max_size=4), label="chars") + s[a + 2:]
        if not lines:
            lines = [""]
    return "\n".join(lines) + "\n"


def fuzz_chip(data, scratch: Path) -> str:
    """A preset's TOML with lines changed, deleted, duplicated or swapped; if it loads, it must also
    replay the golden synthetic trace (placement, geometry, engine, invariants) or refuse it cleanly."""
    name = data.draw(st.sampled_from(chip_presets()), label="preset")
    text = _mutate_lines(data, (configs_dir("chips") / f"{name}.toml").read_text())
    path = scratch / "chip.toml"
    path.write_text(text)

    def load_and_replay():
        chip = load_chip(path)
        replay_trace(GOLDEN, chip, FUZZ_REPLAY)

    return outcome(load_and_replay)


# ---- model configs ------------------------------------------------------------------------------


def _key_paths(d, prefix=()):
    if prefix:
        yield prefix
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _key_paths(v, prefix + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _key_paths(v, prefix + (i,))


def _mutate_config(data, config: dict) -> dict:
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        paths = list(_key_paths(config))
        if not paths:
            break
        path = data.draw(st.sampled_from(paths), label="path")
        parent = config
        for p in path[:-1]:
            parent = parent[p]
        action = data.draw(st.sampled_from(["set", "set", "delete", "scale"]), label="action")
        value = parent[path[-1]]
        if action == "delete":
            del parent[path[-1]]
        elif action == "scale" and isinstance(value, int) and not isinstance(value, bool):
            parent[path[-1]] = value * data.draw(st.sampled_from([0, -1, 2, 3, 7]), label="factor") + \
                data.draw(st.integers(-1, 1), label="offset")
        else:
            parent[path[-1]] = data.draw(JSON_VALUES, label="value")
    return config


def fuzz_config(data, scratch: Path) -> str:
    """A model config (tiny test model, lowered into a short trace if it loads; or a full-size preset,
    loaded and measured only) with fields changed, deleted or scaled; or raw bytes as config.json."""
    kind = data.draw(st.sampled_from(["tiny", "tiny", "preset", "bytes"]), label="kind")
    path = scratch / "config.json"
    if kind == "bytes":
        base = data.draw(st.sampled_from(TINY_MODELS), label="model").read_bytes()
        i = data.draw(st.integers(0, len(base)), label="at")
        blob = base[:i] + data.draw(st.binary(max_size=6), label="bytes") + base[i + data.draw(st.integers(0, 6)):]
        path.write_bytes(blob)
    else:
        src = data.draw(st.sampled_from(TINY_MODELS if kind == "tiny" else PRESET_MODELS), label="model")
        path.write_text(json.dumps(_mutate_config(data, json.loads(src.read_text()))))
    out = scratch / "m.trace"

    def load_and_lower():
        spec = load_model(path)
        spec.param_count(), spec.active_param_count(), spec.kv_bytes_per_token("bf16")
        if kind != "preset" and spec.param_count() < 50_000_000:
            generate_trace(spec, RunConfig(prompt=3, generate=2, batch=2), out, force=True)
            trace = open_trace(out)
            for _ in trace.iter_accesses():
                pass

    return outcome(load_and_lower)


# ---- traces -------------------------------------------------------------------------------------

TRACE_FILES = (fmt.MANIFEST, fmt.TENSORS_FILE, fmt.OPS_FILE, fmt.ACCESSES_FILE)


def _mutate_bytes(data, blob: bytes) -> bytes:
    b = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        action = data.draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]), label="action")
        i = data.draw(st.integers(0, max(0, len(b) - 1)), label="at")
        if action == "flip" and b:
            b[i] ^= 1 << data.draw(st.integers(0, 7), label="bit")
        elif action == "set" and b:
            b[i] = data.draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80, 0x01]), label="byte")
        elif action == "truncate":
            del b[i:]
        elif action == "insert":
            b[i:i] = data.draw(st.binary(min_size=1, max_size=8), label="inserted")
        else:
            del b[i:i + data.draw(st.integers(1, 8), label="length")]
    return bytes(b)


def fuzz_trace(data, scratch: Path) -> str:
    """The golden synthetic trace with one file's bytes flipped, set, cut or spliced, or its manifest
    given changed values; if it opens, every access must read and the info summary must compute."""
    t = scratch / "t.trace"
    if t.exists():
        shutil.rmtree(t)
    shutil.copytree(GOLDEN, t)
    target = data.draw(st.sampled_from(TRACE_FILES + ("manifest-values",)), label="file")
    if target == "manifest-values":
        m = _mutate_config(data, json.loads((t / fmt.MANIFEST).read_text()))
        (t / fmt.MANIFEST).write_text(json.dumps(m))
    else:
        (t / target).write_bytes(_mutate_bytes(data, (t / target).read_bytes()))

    def read_all():
        from tierlab.traces.format.summary import summarize

        trace = open_trace(t)
        rows = sum(b.num_rows for b in trace.iter_accesses(batch_rows=3))
        assert rows == trace.n_accesses
        summarize(trace)

    return outcome(read_all)


EDGE_U64 = st.sampled_from([0, 1, 63, 64, 4096, 65536, 2**31, 2**32 - 1, 2**32, 2**62 - 65536, 2**62, 2**63,
                            2**64 - 65536, 2**64 - 1])


def _u64(data, label: str, lo: int, hi: int, edgy: bool) -> int:
    """A value in [lo, hi]; in an ``edgy`` case, one time in six an edge value of uint64 instead."""
    if edgy and data.draw(st.integers(0, 5), label=f"{label} edge?") == 0:
        return data.draw(EDGE_U64, label=label)
    return data.draw(st.integers(lo, max(lo, hi)), label=label)


def fuzz_trace_values(data, scratch: Path) -> str:
    """A synthetic trace written with pyarrow from random rows (edge values for addresses, sizes,
    offsets and strides, ids that may not exist, out-of-order ops); if it opens, it must read to the
    end and replay on a cache hierarchy (engine, placement, invariants) or be refused cleanly."""
    import pyarrow as pa

    t = scratch / "v.trace"
    if t.exists():
        shutil.rmtree(t)
    t.mkdir()
    n_t = data.draw(st.integers(0, 4), label="tensors")
    n_o = data.draw(st.integers(0, 4), label="ops")
    edgy = data.draw(st.integers(0, 3), label="edgy?") == 0     # a quarter of the cases try edge values
    n_a = data.draw(st.integers(0, 8 if edgy or (n_o and n_t) else 0), label="accesses")
    next_addr = 0
    tensors = []
    for i in range(n_t):
        nbytes = _u64(data, "nbytes", 1, 1 << 18, edgy)
        addr = next_addr if data.draw(st.integers(0, 7), label="packed?") else \
            _u64(data, "address", 0, 1 << 20, edgy) * (64 if edgy else 65536)
        addr %= 2**64
        next_addr = min(2**64 - 65536, -(-(addr + max(nbytes, 1)) // 65536) * 65536)
        tensors.append((i, f"t{i}", data.draw(st.sampled_from(["weight", "kv", "activation", "x"])), -1, -1,
                        "bf16", addr, nbytes))
    ops = [(i if not edgy or data.draw(st.integers(0, 3), label="op id ok?") else i + 1, f"o{i}", "linear", 0,
            data.draw(st.sampled_from(["prefill", "decode", "other"]), label="phase"),
            data.draw(st.integers(-2, 3), label="step"), 1, _u64(data, "flops", 0, 1000, edgy), -1,
            data.draw(st.booleans(), label="pim")) for i in range(n_o)]
    accesses = []
    op = 0
    for _ in range(n_a):
        op = max(0, op + data.draw(st.sampled_from([0, 0, 1, 1, -1] if edgy else [0, 0, 1]), label="op step"))
        if not edgy:
            op = min(op, max(0, n_o - 1))
        tid = data.draw(st.integers(0, n_t if edgy or not n_t else n_t - 1), label="tensor")   # n_t: no such tensor
        size = tensors[tid][7] if tid < n_t else 1 << 12
        size = min(size, 1 << 20)
        offset = _u64(data, "offset", 0, max(0, size - 1), edgy)
        chunk = _u64(data, "chunk", 1, max(1, size - offset), edgy)
        count = data.draw(st.integers(0 if edgy else 1, 40), label="count")
        stride = _u64(data, "stride", 0, max(0, (size - offset - chunk) // max(1, count - 1)), edgy)
        accesses.append((op, tid, offset, chunk, count, stride, data.draw(st.booleans(), label="write")))
    for name, rows in (("tensors", tensors), ("ops", ops), ("accesses", accesses)):
        file, schema = fmt.TABLES[name]
        cols = list(zip(*rows)) if rows else [[] for _ in schema]
        table = pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(cols, schema)], schema=schema)
        with pa.OSFile(str(t / file), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
            w.write_table(table)
    manifest = {"format": fmt.FORMAT_NAME, "version": 1, "generator": "fuzz", "model": None,   # v1: stream form
                "run": None, "tables": {"tensors": n_t, "ops": n_o, "accesses": n_a}}
    if data.draw(st.booleans(), label="alignment"):
        manifest["alignment"] = data.draw(st.sampled_from([1, 64, 4096, 65536, 3 if edgy else 64]), label="align")
    (t / fmt.MANIFEST).write_text(json.dumps(manifest))

    chip = data.draw(st.sampled_from(["h100", "sn40l", "h100-hbm-pim"]), label="chip")

    def read_and_replay():
        trace = open_trace(t)
        for _ in trace.iter_accesses():
            pass
        replay_trace(trace, chip, FUZZ_REPLAY)

    return outcome(read_and_replay)


# ---- the default-suite runs (short) -------------------------------------------------------------

FAST = settings(max_examples=60, deadline=None, derandomize=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory(prefix="tierlab-fuzz-") as d:
        yield Path(d)


@FAST
@given(data=st.data())
def test_fuzz_chip_files_load_and_replay(scratch, data):
    fuzz_chip(data, scratch)


@settings(FAST, max_examples=30)
@given(data=st.data())
def test_fuzz_model_configs_load_and_lower(scratch, data):
    fuzz_config(data, scratch)


@settings(FAST, max_examples=150)
@given(data=st.data())
def test_fuzz_trace_bytes_read(scratch, data):
    fuzz_trace(data, scratch)


@FAST
@given(data=st.data())
def test_fuzz_trace_values_read_and_replay(scratch, data):
    fuzz_trace_values(data, scratch)


def test_outcome_lets_only_tierlab_errors_through():
    from tierlab.common.errors import TraceError

    assert outcome(lambda: None) == "ok"
    assert outcome(lambda: (_ for _ in ()).throw(TraceError("bad", file="x"))) == "error:TraceError"
    with pytest.raises(KeyError):
        outcome(lambda: {}["missing"])
    with pytest.raises(AssertionError):
        outcome(lambda: (_ for _ in ()).throw(TraceError("two\nlines")))
