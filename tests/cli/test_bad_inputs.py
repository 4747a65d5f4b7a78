"""The catalogue of bad inputs: each one, fed to the CLI, gives exactly one known line and exit 2.

Every case writes its input files into a fresh directory, runs ``tierlab`` there (click's
CliRunner, in process), and requires: exit status 2, stdout empty, stderr exactly
``tierlab: error: <message>`` on one line (no traceback), and no file created, changed or removed
in the directory. ``{tmp}`` in arguments and messages stands for that directory.

Sections: chip files, model configs, traces, command-line arguments (see issue 6).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pytest
from click.testing import CliRunner

from tierlab.chip.chipfile import list_presets as chip_presets
from tierlab.system.systemfile import list_presets as system_presets
from tierlab.cli import main
from tierlab.traces.format import schema as fmt
from tierlab.traces.model.spec import ARCHITECTURES

DATA = Path(__file__).parents[1] / "data"
GOLDEN = DATA / "golden-v1-synthetic.trace"
TINY = DATA / "models" / "tiny-llama.json"

# ---- chip files ---------------------------------------------------------------------------------

CHIP = """\
name = "toy"
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
write_energy = "0.2 pJ/bit"
[[tier]]
name = "hbm"
capacity = "16 GiB"
block = "64 KiB"
managed = "memory"
bandwidth = "1 TB/s"
read_energy = "3 pJ/bit"
write_energy = "3 pJ/bit"
[[tier]]
name = "ddr"
capacity = "64 GiB"
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
bandwidth = "100 GB/s"
energy = "8 pJ/bit"
"""


def chip(*edits: tuple[str, str]) -> str:
    """CHIP with each ``(old, new)`` applied once (``old`` must occur)."""
    text = CHIP
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def chip_file(*edits) -> dict:
    return {"c.toml": chip(*edits)}


# ---- model configs ------------------------------------------------------------------------------

LLAMA = json.loads(TINY.read_text())
_TRANSFORMERS = importlib.metadata.version("transformers") if importlib.util.find_spec("transformers") else "?"
MIXTRAL = json.loads((DATA / "models" / "tiny-mixtral.json").read_text())
QWEN3_MOE = json.loads((DATA / "models" / "tiny-qwen3-moe.json").read_text())


def config(base: dict, drop=(), **changes) -> dict:
    d = {k: v for k, v in base.items() if k not in drop}
    d.update(changes)
    return {"m.json": json.dumps(d)}


# ---- traces -------------------------------------------------------------------------------------


def _read(path: Path) -> pa.Table:
    with pa.OSFile(str(path), "rb") as f:
        return pa.ipc.open_stream(f).read_all()


def _write(path: Path, table: pa.Table) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)


def trace(edit: Callable[[Path], None] | None = None) -> Callable[[Path], None]:
    """A builder copying the golden synthetic trace to ``{tmp}/t.trace`` and applying ``edit``."""

    def build(tmp: Path) -> None:
        t = tmp / "t.trace"
        shutil.copytree(GOLDEN, t)
        if edit is not None:
            edit(t)

    return build


def address_trace(edit: Callable[[Path], None] | None = None) -> Callable[[Path], None]:
    """A builder importing a small din log to ``{tmp}/a.trace`` (an address trace, 32-bit words)
    and applying ``edit``."""

    def build(tmp: Path) -> None:
        from tierlab.traces.importers.tracer_logs import import_trace

        (tmp / "a.din").write_text("".join(f"{i % 2} {i * 64:x} 8\n" for i in range(64)))
        import_trace(tmp / "a.din", tmp / "a.trace")
        (tmp / "a.din").unlink()
        if edit is not None:
            edit(tmp / "a.trace")

    return build


def wide_lines(t: Path) -> None:
    """The trace's words rewritten as uint64 (what version 4 stored), its manifest unchanged."""
    with pa.OSFile(str(t / fmt.LINES_FILE), "rb") as f:      # read, not mapped: the file is rewritten
        words = pa.ipc.open_file(f).read_all().column(0).to_numpy().copy()
    with pa.OSFile(str(t / fmt.LINES_FILE), "wb") as sink, pa.ipc.new_file(sink, fmt.LINES_SCHEMA) as w:
        w.write_table(pa.table({"word": pa.array(words.astype("uint64"))}))


def manifest(**changes) -> Callable[[Path], None]:
    def edit(t: Path) -> None:
        m = json.loads((t / fmt.MANIFEST).read_text())
        for k, v in changes.items():
            if isinstance(v, dict) and isinstance(m.get(k), dict):
                m[k].update(v)
            else:
                m[k] = v
        (t / fmt.MANIFEST).write_text(json.dumps(m))
    return edit


def table(name: str, fn: Callable[[pa.Table], pa.Table]) -> Callable[[Path], None]:
    """Rewrite table ``name`` of the trace (decoded to plain Python rows) through ``fn``."""
    def edit(t: Path) -> None:
        file = t / fmt.TABLES[name][0]
        _write(file, fn(_read(file)))
    return edit


def set_column(name: str, column: str, values: list, type_=None) -> Callable[[Path], None]:
    def fn(tab: pa.Table) -> pa.Table:
        i = tab.schema.get_field_index(column)
        typ = type_ or tab.schema.field(column).type
        if pa.types.is_dictionary(typ):
            typ = typ.value_type
        return tab.set_column(i, pa.field(column, typ), pa.array(values, type=typ))
    return table(name, fn)


def truncate(file: str, keep: float) -> Callable[[Path], None]:
    def edit(t: Path) -> None:
        p = t / file
        data = p.read_bytes()
        p.write_bytes(data[:int(len(data) * keep)])
    return edit


def scribble(file: str) -> Callable[[Path], None]:
    """Overwrite the middle third of a file with 0xFF bytes."""
    def edit(t: Path) -> None:
        p = t / file
        data = bytearray(p.read_bytes())
        n = len(data)
        data[n // 3: 2 * n // 3] = b"\xff" * (2 * n // 3 - n // 3)
        p.write_bytes(bytes(data))
    return edit


def _bad_dictionary(tab: pa.Table) -> pa.Table:
    """The ops table with its ``kind`` column dictionary-encoded, one index pointing past the
    dictionary (pyarrow's IPC reader accepts it; a cast of it would crash the process)."""
    kind = pa.DictionaryArray.from_arrays(pa.array([0, 1, 7], pa.int32()), pa.array(["linear", "attention"]),
                                          safe=False)
    i = tab.schema.get_field_index("kind")
    return tab.set_column(i, pa.field("kind", kind.type), kind)


def remove(file: str) -> Callable[[Path], None]:
    return lambda t: (t / file).unlink()


# ---- the catalogue ------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    args: list[str]
    message: str
    files: dict | Callable[[Path], None] = field(default_factory=dict)
    hide_modules: tuple = ()     # modules made unimportable for the case (an optional extra absent)
    needs: tuple = ()            # modules the case needs (the capture extra): skipped without them, unless CI=true


TRACE_OUT = ["-o", "{tmp}/out.trace"]

# A directory nobody may write in: a read-only one for ordinary users; root writes everywhere on
# ordinary file systems, so for root a pseudo file system where nothing can be created.
UNWRITABLE = "/proc" if os.geteuid() == 0 else "{tmp}/ro"


def _unwritable(tmp: Path) -> None:
    if UNWRITABLE != "/proc":
        (tmp / "ro").mkdir()
        (tmp / "ro").chmod(0o555)

def _nine_devices(tmp: Path) -> None:
    """A version-2 trace of nine devices, each one op reading its own tensor."""
    from tierlab.traces.format.writer import TraceWriter

    with TraceWriter(tmp / "t.trace", run=None, devices=9) as w:
        for d in range(9):
            x = w.add_tensor("x", "activation", 64, "bf16", device=d)
            w.add_access(w.add_op("op", "other", -1, "decode", 0, 1, 0, device=d), x, 0, 64)


SWEEP_OUT = ["-o", "{tmp}/r.parquet"]


def _preset(name: str, **over) -> dict:
    """A shipped preset's config.json with some top-level fields changed."""
    from tierlab.common.paths import configs_dir

    return {**json.loads((configs_dir("models") / f"{name}.json").read_text()), **over}


def _nested(name: str, **over) -> dict:
    cfg = _preset(name)
    cfg["text_config"] = {**cfg["text_config"], **over}
    return cfg


def _other_sweep(tmp: Path) -> None:
    """A sweep file of another grid's columns."""
    import pyarrow.parquet as pq

    t = pa.table({"model": ["a"]}).replace_schema_metadata(
        {b"tierlab": b"tierlab-sweep", b"grid_columns": json.dumps(["model"]).encode()})
    pq.write_table(t, tmp / "r.parquet")


CASES = [
    # -- chip files: `tierlab chips FILE` loads and validates one --------------------------------
    Case("chip-unknown-key", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[0].blok: unknown key; did you mean 'block'?",
         chip_file(('block = "128 B"', 'blok = "128 B"'))),
    Case("chip-missing-key", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[0].bandwidth: missing required key",
         chip_file(('bandwidth = "10 TB/s"\n', ''))),
    Case("chip-negative-power", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: power.idle: must not be negative, got '-5 W'",
         chip_file(('energy = "8 pJ/bit"\n', 'energy = "8 pJ/bit"\n[power]\nidle = "-5 W"\ntdp = "300 W"\n'))),
    Case("chip-non-numeric-power", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: power.static: expected a power such as \"700 W\" or \"1.2 kW\", got 'lots'",
         chip_file(('energy = "8 pJ/bit"\n', 'energy = "8 pJ/bit"\n[power]\nidle = "50 W"\ntdp = "300 W"\nstatic = "lots"\n'))),
    Case("chip-gemv-fraction-out-of-range", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: execution.gemv.int4: expected a fraction of peak in (0, 1], e.g. 0.9, got 1.5",
         chip_file(('energy = "8 pJ/bit"\n', 'energy = "8 pJ/bit"\n[execution]\ngemv = { int4 = 1.5 }\n'))),
    Case("chip-gemv-unknown-format", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: execution.gemv.int3: expected a weight format: bf16, fp16, fp32, fp8, fp8-block, int8, int4, "
         "nvfp4, mxfp4, or int8/int4 with -gN (e.g. int4-g32)",
         chip_file(('energy = "8 pJ/bit"\n', 'energy = "8 pJ/bit"\n[execution]\ngemv = { int3 = 0.5 }\n'))),
    Case("chip-negative-reserve", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: reserve.context: must not be negative, got '-1 GiB'",
         chip_file(('energy = "8 pJ/bit"\n', 'energy = "8 pJ/bit"\n[reserve]\ncontext = "-1 GiB"\n'))),
    Case("chip-non-numeric-reserve", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: reserve.workspace: expected a size such as \"128 B\", \"50 MiB\" or \"64 GB\", got 'lots'",
         chip_file(('energy = "8 pJ/bit"\n', 'energy = "8 pJ/bit"\n[reserve]\nworkspace = "lots"\n'))),
    Case("chip-reserve-fragmentation", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: reserve.fragmentation: expected a share of memory in [0, 1), e.g. 0.02, got -0.1",
         chip_file(('energy = "8 pJ/bit"\n', 'energy = "8 pJ/bit"\n[reserve]\nfragmentation = -0.1\n'))),
    Case("capacity-negative-reserve", ["capacity", "llama-3.1-8b", "--memory", "80GB", "--reserve", "-1GiB"],
         "--reserve: the reserve must not be negative, got '-1GiB'"),
    Case("chip-power-unknown-key", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: power.tpd: unknown key; did you mean 'tdp'?",
         chip_file(('energy = "8 pJ/bit"\n', 'energy = "8 pJ/bit"\n[power]\nidle = "50 W"\ntpd = "300 W"\n'))),
    Case("chip-bad-unit", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[0].capacity: expected a size such as \"128 B\", \"50 MiB\" or \"64 GB\", got '1 MiBs'",
         chip_file(('capacity = "1 MiB"', 'capacity = "1 MiBs"'))),
    Case("chip-unitless-number", ["chips", "{tmp}/c.toml"],
         '{tmp}/c.toml: tier[0].capacity: expected a size such as "128 B", "50 MiB" or "64 GB" (a string with a unit), got 1048576',
         chip_file(('capacity = "1 MiB"', 'capacity = 1048576'))),
    Case("chip-bandwidth-as-size", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[1].bandwidth: expected a bandwidth such as \"3.35 TB/s\", \"900 GB/s\" or \"100 Gb/s\", got '1 TB'",
         chip_file(('bandwidth = "1 TB/s"\nread', 'bandwidth = "1 TB"\nread'))),
    Case("chip-energy-per-second", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[0].read_energy: expected an energy per bit or byte such as \"3.9 pJ/bit\" or \"0.5 pJ/B\", got '0.2 pJ/s'",
         chip_file(('read_energy = "0.2 pJ/bit"', 'read_energy = "0.2 pJ/s"'))),
    Case("chip-negative-capacity", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[1].capacity: must be positive, got '-16 GiB'",
         chip_file(('capacity = "16 GiB"', 'capacity = "-16 GiB"'))),
    Case("chip-zero-capacity", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[0].capacity: must be positive, got '0 B'",
         chip_file(('capacity = "1 MiB"', 'capacity = "0 B"'))),
    Case("chip-block-not-power-of-two", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[0].block: must be a power of two, got 96 B (96 B)",
         chip_file(('block = "128 B"', 'block = "96 B"'))),
    Case("chip-block-not-dividing-capacity", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[0].capacity: must be a multiple of the block (128 B), got '1000 kB'",
         chip_file(('capacity = "1 MiB"', 'capacity = "1000 kB"'))),
    Case("chip-ways-not-dividing-blocks", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[0].ways: must divide the number of blocks (8192), got 3",
         chip_file(('ways = 4', 'ways = 3'))),
    Case("chip-ways-zero", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[0].ways: expected a positive integer (omit for fully associative), got 0",
         chip_file(('ways = 4', 'ways = 0'))),
    Case("chip-farther-block-smaller", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[1].block: must be a multiple of (so not smaller than) the nearer tier's block (tier[0] 'sram': 128 B), got 64 B",
         chip_file(('block = "64 KiB"', 'block = "64 B"'))),
    Case("chip-link-non-adjacent", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: link[0]: links must join adjacent tiers in order: expected 'sram' -> 'hbm', got 'sram' -> 'ddr'",
         chip_file(('to = "hbm"', 'to = "ddr"'))),
    Case("chip-link-missing", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: link: expected 2 links (one per adjacent pair of tiers), got 1; missing 'hbm' -> 'ddr'",
         chip_file(('[[link]]\nfrom = "hbm"\nto = "ddr"\nbandwidth = "100 GB/s"\nenergy = "8 pJ/bit"\n', ''))),
    Case("chip-duplicate-tier", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[2].name: duplicate tier name 'hbm' (also tier[1])",
         chip_file(('name = "ddr"', 'name = "hbm"'))),
    Case("chip-pim-on-cache", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[0].pim: a PIM unit needs a 'memory' tier, got managed = 'cache'",
         chip_file(('write_energy = "0.2 pJ/bit"\n', 'write_energy = "0.2 pJ/bit"\n[tier.pim]\n'
                    'internal_bandwidth = "4 TB/s"\nflops = "1 TFLOP/s"\nread_energy = "0.5 pJ/bit"\n'
                    'energy = "1 pJ"\nops = ["linear"]\n'))),
    Case("chip-pim-unknown-op", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[1].pim.ops[0]: unknown op kind 'gemv'; expected one of linear, attention, norm, elementwise, rotary, embedding, kv_append, moe_router, moe_dispatch, moe_combine",
         chip_file(('write_energy = "3 pJ/bit"\n', 'write_energy = "3 pJ/bit"\n[tier.pim]\n'
                    'internal_bandwidth = "4 TB/s"\nflops = "1 TFLOP/s"\nread_energy = "0.5 pJ/bit"\n'
                    'energy = "1 pJ"\nops = ["gemv"]\n'))),
    Case("chip-unknown-policy", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[0].policy: unknown value 'lfu'; did you mean 'lru'?",
         chip_file(('policy = "lru"', 'policy = "lfu"'))),
    Case("chip-unknown-managed", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[0].managed: unknown value 'cached'; did you mean 'cache'?",
         chip_file(('managed = "cache"', 'managed = "cached"'))),
    Case("chip-cache-farthest", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[2].managed: the farthest tier must be 'memory' or 'scratchpad' (a cache has nowhere to fetch from), got 'cache'",
         chip_file(('name = "ddr"\ncapacity = "64 GiB"\nblock = "64 KiB"\nmanaged = "memory"',
                    'name = "ddr"\ncapacity = "64 GiB"\nblock = "64 KiB"\nmanaged = "cache"'))),
    Case("chip-unknown-compute-dtype", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: compute.flops.bf61: unknown dtype; did you mean 'bf16'?",
         chip_file(('flops = { bf16', 'flops = { bf61'))),
    Case("chip-home-rule-on-cache", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: placement[0].tier: a 'cache' tier cannot be a home; expected a 'memory' or 'scratchpad' tier, got 'sram'",
         {"c.toml": CHIP + '[[placement]]\ntier = "sram"\nkind = "kv"\n'}),
    Case("chip-not-toml", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: not valid TOML: Invalid value (at line 1, column 8)",
         {"c.toml": "name = toy\n[[tier]\n"}),
    Case("chip-not-utf8", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: not a UTF-8 text file",
         {"c.toml": b"name = \"\xff\xfe\"\n"}),
    Case("chip-file-missing", ["chips", "{tmp}/none.toml"],
         "{tmp}/none.toml: chip file not found"),
    Case("chip-file-is-a-directory", ["replay", str(GOLDEN), "--chip", "{tmp}/d.toml"],
         "{tmp}/d.toml: is a directory, expected a chip .toml file",
         {"d.toml/x": "x"}),
    Case("chip-unknown-preset", ["chips", "h1000"],
         "unknown chip preset 'h1000'; did you mean 'h100'? (presets: " + ", ".join(chip_presets()) + ")"),
    # -- model configs: `tierlab trace CONFIG -o OUT --generate 1` ---------------------------------
    Case("config-not-json", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: malformed JSON at line 1 column 20: Expecting property name enclosed in double quotes",
         {"m.json": '{"hidden_size": 64,'}),
    Case("config-not-object", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: expected a JSON object",
         {"m.json": '[1, 2]'}),
    Case("config-missing-dimension", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: hidden_size: missing required field",   # ChatGLM's remote code: no class defaults to apply
         config(json.loads((DATA / "models" / "tiny-chatglm.json").read_text()), drop=["hidden_size"])),
    Case("config-heads-wider-than-hidden", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: hidden_size: 64 is smaller than num_attention_heads 128: a head would have no width",
         config(LLAMA, num_attention_heads=128, num_key_value_heads=128)),
    Case("config-kv-heads-not-dividing-heads", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: num_key_value_heads: num_attention_heads 4 is not a multiple of num_key_value_heads 3",
         config(LLAMA, num_key_value_heads=3)),
    # a family with no hand lowering goes to the capture path (issue 25): without the extra, one line naming it
    Case("config-unknown-family", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: architectures: OlmoForCausalLM has no hand lowering; tracing it through Transformers needs "
         "the optional extra 'capture' (PyTorch and Transformers): pip install -e '.[capture]'",
         config(LLAMA, architectures=["OlmoForCausalLM"], model_type="olmo"), hide_modules=("torch", "transformers")),
    Case("throughput-no-hand-lowering", ["throughput", "{tmp}/m.json", "--chip", "h100", "--input", "8", "--output", "2"],
         "{tmp}/m.json: architectures: model family 'OlmoForCausalLM' has no hand lowering (`tierlab models --families` "
         "lists those that have one); tierlab trace, run and compare take it through Transformers (docs/capture.md)",
         config(LLAMA, architectures=["OlmoForCausalLM"], model_type="olmo")),
    Case("config-no-hand-lowering-sharded", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1", "--tp", "2"],
         "--capture: no hand lowering of OlmoForCausalLM: its capture traces one device's --prompt/--context/--generate "
         "run (no --turns, --tp, --pp, --ep, --dp or microbatches)",
         config(LLAMA, architectures=["OlmoForCausalLM"], model_type="olmo"),
         needs=("torch", "transformers")),
    Case("config-not-decoder-only", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: model_type: model_type 'bert' is an encoder or an encoder-decoder model, not a decoder-only "
         "causal LM: tierlab traces decoder-only models",
         config(LLAMA, architectures=["BertForMaskedLM"], model_type="bert"),
         needs=("torch", "transformers")),
    Case("config-transformers-cannot-build", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: model_type: Transformers " + _TRANSFORMERS + " cannot build this cohere2_moe config: "
         "`num_hidden_layers` (2) must be equal to the number of `layer_types` (3)",
         config(LLAMA, architectures=["Cohere2MoeForCausalLM"], model_type="cohere2_moe",
                layer_types=["full_attention"] * 3),
         needs=("torch", "transformers")),
    Case("config-remote-code", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: auto_map: remote-code model: model_type 'mycustom' is defined by code in its repository "
         "(auto_map: modeling_my.MyForCausalLM), which Transformers " + _TRANSFORMERS + " does not ship and tierlab "
         "does not run; write its config in a family `tierlab models --families` lists, or one Transformers knows",
         config(LLAMA, architectures=["MyForCausalLM"], model_type="mycustom",
                auto_map={"AutoModelForCausalLM": "modeling_my.MyForCausalLM"}),
         needs=("torch", "transformers")),
    # JetMoE's router copies its top-k counts out of a tensor (a value a capture on the meta device has not)
    Case("config-capture-needs-values", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "--capture: the jetmoe model could not run on the meta device (a capture has no weights: its forward needs "
         "values, or Transformers' code fails for it): NotImplementedError: Cannot copy out of meta tensor; no data!",
         config(LLAMA, architectures=["JetMoeForCausalLM"], model_type="jetmoe", num_local_experts=4,
                num_experts_per_tok=2, kv_channels=16),
         needs=("torch", "transformers")),
    # Gemma 4's assistant: every layer reads the target model's KV, which a capture of the assistant has not
    Case("config-assistant-without-its-target", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: text_config.num_kv_shared_layers: model_type 'gemma4_unified_assistant' computes no KV of its "
         "own: all 2 layers read KV shared from another model (num_kv_shared_layers 2), an assistant (draft) model "
         "attending to its target model's cache, which a capture of it alone does not have; trace the target model",
         config({}, architectures=["Gemma4UnifiedAssistantForCausalLM"], model_type="gemma4_unified_assistant",
                text_config={"model_type": "gemma4_unified_text", "num_hidden_layers": 2, "num_kv_shared_layers": 2}),
         needs=("torch", "transformers")),
    Case("config-zero-experts", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: num_local_experts: expected a positive integer, got 0",
         config(MIXTRAL, num_local_experts=0)),
    Case("config-top-k-above-experts", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: num_experts_per_tok: num_experts_per_tok 5 exceeds the 4 experts",
         config(MIXTRAL, num_experts_per_tok=5)),
    Case("config-negative-dimension", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: intermediate_size: expected a positive integer, got -128",
         config(LLAMA, intermediate_size=-128)),
    Case("config-string-dimension", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: num_hidden_layers: expected a positive integer, got '2'",
         config(LLAMA, num_hidden_layers="2")),
    Case("config-zero-layers", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: num_hidden_layers: expected a positive integer, got 0",
         config(LLAMA, num_hidden_layers=0)),
    Case("config-zero-hidden", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: hidden_size: expected a positive integer, got 0",
         config(LLAMA, hidden_size=0)),
    Case("config-architectures-not-strings", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: architectures: expected a model family name, got ['LlamaForCausalLM']; `tierlab models "
         "--families` lists those tierlab reads",
         config(LLAMA, architectures=[["LlamaForCausalLM"]], model_type=["llama"])),
    Case("config-no-family", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: architectures: the config names no model family: expected 'architectures' (e.g. "
         "[\"LlamaForCausalLM\"]) or 'model_type' (e.g. \"llama\"); `tierlab models --families` lists those "
         "tierlab reads",
         lambda tmp: (tmp / "m.json").write_text(json.dumps({k: v for k, v in _preset("llama-3.1-8b").items()
                                                             if k not in ("architectures", "model_type")}))),
    Case("config-absurd-layers", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: num_hidden_layers: 1000000 layers is beyond what tierlab models (at most 4096)",
         config(LLAMA, num_hidden_layers=10**6)),
    Case("config-dimension-overflow", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: vocab_size: expected at most 2147483647, got 1099511627776",
         config(LLAMA, vocab_size=2**40)),
    Case("config-mlp-only-layers-not-a-list", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: mlp_only_layers: expected a list of layer numbers, got 1.5",
         config(QWEN3_MOE, mlp_only_layers=1.5)),
    Case("config-zero-sparse-step", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: decoder_sparse_step: expected a positive integer, got 0",
         config(QWEN3_MOE, decoder_sparse_step=0)),
    Case("config-dir-without-config", ["trace", "{tmp}/model", *TRACE_OUT, "--generate", "1"],
         "{tmp}/model: directory holds no config.json",
         {"model/README": "x"}),
    # -- traces: `tierlab info TRACE` validates it and reads every access -----------------------
    Case("trace-missing-manifest", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace: no manifest.json: not a complete trace (interrupted write?)",
         trace(remove(fmt.MANIFEST))),
    Case("trace-newer-version", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/manifest.json: version: trace format version 6 is newer than this tierlab reads (5); upgrade tierlab",
         trace(manifest(version=6))),
    Case("trace-unknown-format", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/manifest.json: format: format is 'parquet-trace', expected 'tierlab-trace'",
         trace(manifest(format="parquet-trace"))),
    Case("trace-manifest-not-json", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/manifest.json: unreadable manifest: Expecting property name enclosed in double quotes: line 1 column 28 (char 27)",
         trace(lambda t: (t / fmt.MANIFEST).write_text('{"format": "tierlab-trace",'))),
    Case("trace-missing-table", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/ops.arrow: missing table file",
         trace(remove(fmt.OPS_FILE))),
    Case("trace-truncated-accesses", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/accesses.arrow: truncated or corrupt Arrow stream after 3 rows: Expected to read 424 metadata bytes, but only read 174",
         trace(truncate(fmt.ACCESSES_FILE, 0.6))),
    Case("trace-truncated-tensors", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/tensors.arrow: truncated or corrupt Arrow stream: Expected to be able to read 16 bytes for message body, got 0",
         trace(truncate(fmt.TENSORS_FILE, 0.5))),
    Case("trace-corrupt-ops", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/ops.arrow: truncated or corrupt Arrow stream: Invalid flatbuffers message.",
         trace(scribble(fmt.OPS_FILE))),
    Case("trace-empty-accesses-file", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/accesses.arrow: truncated or corrupt Arrow stream after 0 rows: Tried reading schema message, was null or length 0",
         trace(truncate(fmt.ACCESSES_FILE, 0.0))),
    Case("trace-row-count-ops", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/ops.arrow: holds 3 rows, the manifest says 4",
         trace(manifest(tables={"ops": 4}))),
    Case("trace-row-count-accesses", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/accesses.arrow: holds 7 access rows, the manifest says 9 (truncated?)",
         trace(manifest(tables={"accesses": 9}))),
    Case("trace-wrong-column-type", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/tensors.arrow: nbytes: column has type double, expected uint64",
         trace(set_column("tensors", "nbytes", [8192, 4096, 256], pa.float64()))),
    Case("trace-missing-column", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/ops.arrow: schema mismatch: missing columns ['flops']",
         trace(table("ops", lambda t: t.drop_columns(["flops"])))),
    Case("trace-access-outside-tensor", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/accesses.arrow: offset: row 4: access (offset 4000, nbytes 64, count 1, stride 0) lies outside tensor 2 of 256 bytes",
         trace(set_column("accesses", "offset", [0, 0, 0, 0, 4000, 0, 0]))),
    Case("trace-access-op-without-op", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/accesses.arrow: op_id: rows 6..6: op id 3 does not exist (3 ops)",
         trace(set_column("accesses", "op_id", [0, 0, 0, 1, 1, 2, 3]))),
    Case("trace-access-unknown-tensor", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/accesses.arrow: tensor_id: rows 6..6: tensor id 5 does not exist (3 tensors)",
         trace(set_column("accesses", "tensor_id", [0, 2, 1, 1, 2, 0, 5]))),
    Case("trace-accesses-out-of-op-order", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/accesses.arrow: op_id: rows 3..5: op ids decrease; accesses must be grouped by op in execution order",
         trace(set_column("accesses", "op_id", [0, 0, 1, 0, 1, 2, 2]))),
    Case("trace-ops-out-of-order", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/ops.arrow: op_id: op_id must be 0..n-1 in order",
         trace(set_column("ops", "op_id", [0, 2, 1]))),
    Case("trace-tensors-overlap", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/tensors.arrow: address: tensors 0 and 1 overlap",
         trace(set_column("tensors", "address", [0, 4096, 131072]))),
    Case("trace-zero-count", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/accesses.arrow: count: rows 3..5: count below 1",
         trace(set_column("accesses", "count", [1, 4, 4, 2, 0, 2, 1]))),
    Case("trace-null-values", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/accesses.arrow: nbytes: rows 3..5: 1 null value; every cell must hold a value",
         trace(set_column("accesses", "nbytes", [8192, 64, 1024, 1024, None, 4096, 32]))),
    Case("trace-dictionary-index-out-of-range", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/ops.arrow: truncated or corrupt Arrow stream: Column 2: In chunk 1: Invalid: Dictionary indices invalid: Invalid: Value at position 0 out of bounds: 7 (should be in [0, 1])",
         trace(table("ops", _bad_dictionary))),
    Case("trace-column-name-not-utf8", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/tensors.arrow: truncated or corrupt Arrow stream: 'utf-8' codec can't decode byte 0xff in position 4: invalid start byte",
         trace(lambda t: (t / fmt.TENSORS_FILE).write_bytes((t / fmt.TENSORS_FILE).read_bytes()
                                                             .replace(b"nbytes", b"nbyt\xff\xfe")))),
    Case("trace-address-beyond-range", ["replay", "{tmp}/t.trace", "--chip", "h100"],
         "{tmp}/t.trace/tensors.arrow: address: tensor 2 (address 9223372036854775808, 256 bytes) ends beyond the 2**62-byte address space tierlab emulates",
         trace(set_column("tensors", "address", [0, 65536, 2**63]))),
    Case("trace-bad-alignment", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/manifest.json: alignment: alignment '64KiB' is not a positive integer",
         trace(manifest(alignment="64KiB"))),
    Case("trace-is-a-file", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace: not a trace directory",
         {"t.trace": "not a directory"}),
    Case("trace-missing", ["info", "{tmp}/none.trace"],
         "{tmp}/none.trace: no such trace"),
    # -- command-line arguments -----------------------------------------------------------------
    Case("arg-negative-prompt", ["trace", str(TINY), *TRACE_OUT, "--prompt", "-4"],
         "--prompt: must not be negative, got -4"),
    Case("arg-negative-generate", ["trace", str(TINY), *TRACE_OUT, "--generate", "-1"],
         "--generate: must not be negative, got -1"),
    Case("arg-zero-batch", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--batch", "0"],
         "--batch: must be at least 1"),
    Case("arg-absurd-batch", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--batch", "100000000"],
         "--batch: at most 65536 sequences, got 100000000"),
    Case("arg-absurd-align", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--align", "1024GiB"],
         "alignment: at most 1073741824 bytes (1 GiB), got 1099511627776"),
    Case("arg-non-integer-length", ["trace", str(TINY), *TRACE_OUT, "--generate", "1.5"],
         "--generate: expected an integer, got '1.5'"),
    Case("arg-nothing-to-trace", ["trace", str(TINY), *TRACE_OUT, "--context", "8"],
         "--prompt: nothing to trace: give a prompt length and/or tokens to generate"),
    Case("arg-unknown-weights-dtype", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--weights", "int3"],
         "--weights: unknown dtype 'int3'; expected one of bf16, fp16, fp32, fp8, int8, int4, mxfp4, nvfp4, "
         "fp8-block, int4-g128, native"),
    Case("arg-unknown-kv-dtype", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--kv", "int4"],
         "--kv: unknown dtype 'int4'; expected one of bf16, fp16, fp32, fp8, int8"),
    Case("arg-unknown-activations-dtype", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--activations", "int8"],
         "--activations: unknown dtype 'int8'; expected one of bf16, fp16, fp32, fp8, nvfp4, mxfp4"),
    Case("arg-unknown-model-preset", ["trace", "llama-3.1-9b", *TRACE_OUT, "--generate", "1"],
         "llama-3.1-9b: no such model preset or config file (did you mean llama-3.1-8b?)"),
    Case("arg-unknown-router", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--router", "topk"],
         "--router: unknown router 'topk'; expected uniform, zipf:S or table:PATH.arrow"),
    Case("arg-bad-zipf", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--router", "zipf:-1"],
         "--router: zipf exponent in 'zipf:-1' must be a positive number, e.g. zipf:1.2"),
    Case("arg-routing-table-missing", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--router", "table:{tmp}/r.arrow"],
         "{tmp}/r.arrow: router: routing table not found"),
    Case("arg-unknown-attention", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--attention", "paged"],
         "--attention: unknown attention kernel 'paged'; expected one of flash, naive"),
    Case("arg-align-not-power-of-two", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--align", "3000"],
         "alignment: must be a power of two number of bytes, got 3000"),
    Case("arg-output-exists", ["trace", str(TINY), *TRACE_OUT, "--generate", "1"],
         "{tmp}/out.trace: output exists; pass --force to replace it",
         {"out.trace/keep": "x"}),
    Case("arg-output-exists-as-file", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--force"],
         "{tmp}/out.trace: output exists as a file, expected a directory",
         {"out.trace": "x"}),
    Case("arg-output-parent-missing", ["trace", str(TINY), "-o", "{tmp}/no/out.trace", "--generate", "1"],
         "{tmp}/no/out.trace: parent directory {tmp}/no does not exist"),
    Case("arg-output-not-writable", ["trace", str(TINY), "-o", UNWRITABLE + "/out.trace", "--generate", "1"],
         UNWRITABLE + "/out.trace: directory " + UNWRITABLE + " is not writable",
         _unwritable),
    Case("arg-output-parent-is-file", ["trace", str(TINY), "-o", "{tmp}/f/out.trace", "--generate", "1"],
         "{tmp}/f/out.trace: parent directory {tmp}/f is not a directory",
         {"f": "x"}),
    Case("replay-unknown-chip", ["replay", str(GOLDEN), "--chip", "h1000"],
         "unknown chip preset 'h1000'; did you mean 'h100'? (presets: " + ", ".join(chip_presets()) + ")"),
    Case("replay-output-exists", ["replay", str(GOLDEN), "--chip", "h100", "-o", "{tmp}/r.parquet"],
         "{tmp}/r.parquet: output exists; pass --force to replace it",
         {"r.parquet": "x"}),
    Case("replay-trace-does-not-fit", ["replay", "{tmp}/t.trace", "--chip", "groq-lpu"],
         "placement: tensor 'x' (activation, 1 TiB) fits in no home tier; free: sram 230.7 MB",
         trace(set_column("tensors", "nbytes", [8192, 4096, 1 << 40]))),
    Case("replay-kernel-cannot-serve", ["replay", str(GOLDEN), "--chip", "sn40l", "--kernel", "set_groups"],
         "--kernel: 'set_groups' cannot serve this replay: needs tier 0 as the only caching tier (caching here: tier 1)"),
    Case("replay-kernel-cannot-split", ["replay", str(GOLDEN), "--chip", "h100", "--kernel", "cache_stream_passes"],
         "--kernel: 'cache_stream_passes' cannot serve this replay: counts one op of one tensor kind (3 ops, 3 kinds here)"),
    Case("replay-threads-zero", ["replay", str(GOLDEN), "--chip", "h100", "--threads", "0"],
         "--threads: expected a whole number of threads of at least 1, got 0"),
    Case("replay-kernel-and-no-fast-path", ["replay", str(GOLDEN), "--chip", "h100", "--kernel", "walk_fast",
                                            "--no-fast-path"],
         "--kernel: fast_path off asks for kernel 'walk', but kernel 'walk_fast' was given"),
    Case("replay-trace-misaligned", ["replay", str(DATA / "golden-v1-tiny-llama.trace"), "--chip", "sn40l"],
         str(DATA) + "/golden-v1-tiny-llama.trace/tensors.arrow: address: tensor 1 at address 32768 is not aligned to the 65536 B block of tier 'hbm'; regenerate the trace with --align 65536 or more"),
    Case("run-keep-trace-exists", ["run", str(TINY), "--generate", "1", "--chip", "h100", "--keep-trace", "{tmp}/k.trace"],
         "{tmp}/k.trace: output exists; pass --force to replace it",
         {"k.trace/x": "x"}),
    Case("run-output-exists", ["run", str(TINY), "--generate", "1", "--chip", "h100", "-o", "{tmp}/r.parquet"],
         "{tmp}/r.parquet: output exists; pass --force to replace it",
         {"r.parquet": "x"}),
    Case("run-keep-trace-then-output-exists", ["run", str(TINY), "--generate", "1", "--chip", "h100",
                                                "--keep-trace", "{tmp}/k.trace", "-o", "{tmp}/r.parquet"],
         "{tmp}/r.parquet: output exists; pass --force to replace it",
         {"r.parquet": "x"}),
    Case("compare-csv-exists", ["compare", str(GOLDEN), "--chips", "h100,a100", "--csv", "{tmp}/c.csv"],
         "{tmp}/c.csv: output exists; pass --force to replace it",
         {"c.csv": "x"}),
    Case("compare-plot-exists", ["compare", str(GOLDEN), "--chips", "h100,a100", "--plot", "{tmp}/c.png"],
         "{tmp}/c.png: output exists; pass --force to replace it",
         {"c.png": "x"}),
    Case("compare-unknown-chip", ["compare", str(TINY), "--chips", "h100,h1000", "--generate", "1"],
         "unknown chip preset 'h1000'; did you mean 'h100'? (presets: " + ", ".join(chip_presets()) + ")"),
    Case("compare-chip-twice", ["compare", str(TINY), "--chips", "h100,h100", "--generate", "1"],
         "--chips: chip 'h100' is listed twice"),
    Case("capacity-budget-below-weights", ["capacity", "llama-3.1-8b", "--memory", "1 GiB"],
         "--weights: the weights of llama-3.1-8b in bf16 need 16060522496 B, more than the 1073741824 B budget (memory)"),
    Case("capacity-bad-budget", ["capacity", "llama-3.1-8b", "--memory", "lots"],
         "--memory: expected a size such as \"128 B\", \"50 MiB\" or \"64 GB\", got 'lots'"),
    Case("mrc-unknown-tier", ["mrc", str(GOLDEN), "--chip", "h100", "--tier", "l3"],
         "--tier: unknown tier 'l3'; chip h100 has l2, hbm, ddr"),
    Case("mrc-bad-size", ["mrc", str(GOLDEN), "--chip", "h100", "--tier", "l2", "--sizes", "1 MiB,2 parsecs"],
         "--sizes: expected a size such as \"128 B\", \"50 MiB\" or \"64 GB\", got '2 parsecs'"),
    Case("mrc-plot-exists", ["mrc", str(GOLDEN), "--chip", "h100", "--tier", "l2", "--plot", "{tmp}/p.png"],
         "{tmp}/p.png: output exists; pass --force to replace it",
         {"p.png": "x"}),
    # -- systems of many chips: `tierlab run --system`, `tierlab compare --systems` ----------------
    Case("run-chip-and-system", ["run", str(TINY), "--generate", "1", "--chip", "h100", "--system", "dgx-h100"],
         "--chip: give exactly one of --chip and --system"),
    Case("run-neither-chip-nor-system", ["run", str(TINY), "--generate", "1"],
         "--chip: give --chip NAME or --system NAME"),
    Case("run-unknown-system", ["run", str(TINY), "--generate", "1", "--system", "dgx-h1000"],
         "unknown system preset 'dgx-h1000'; did you mean 'dgx-h100'? (presets: " + ", ".join(system_presets()) + ")"),
    Case("run-collective-algo-the-fabric-cannot-run",
         ["run", str(TINY), "--generate", "1", "--system", "sn40l-16", "--collective-algo", "in_network"],
         "--collective-algo: 'in_network' cannot run on sn40l-16: the scale_up fabric 'scale_up' is a direct "
         "mesh, with no switch to reduce in"),
    Case("compare-trace-needs-more-devices-than-the-system", ["compare", "{tmp}/t.trace", "--systems", "dgx-h100"],
         "--systems or --tp: the trace needs 9 devices; dgx-h100 has 8 chips", lambda tmp: _nine_devices(tmp)),
    Case("compare-unknown-system", ["compare", str(GOLDEN), "--systems", "dgx-h1000"],
         "unknown system preset 'dgx-h1000'; did you mean 'dgx-h100'? (presets: " + ", ".join(system_presets()) + ")"),
    # -- system files: `tierlab systems FILE` loads and validates one -------------------------
    Case("system-unknown-key", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: scale_up.bandwith: unknown key; did you mean 'bandwidth'?",
         {"s.toml": (SYSTEM := 'name = "toy"\nchip = "h100"\nchips = 16\nchips_per_node = 8\n[scale_up]\n'
                               'topology = "switch"\nbandwidth = "450 GB/s"\nlatency = "1.5 us"\n'
                               'energy = "5.5 pJ/bit"\nin_network_reduction = true\n[scale_out]\n'
                               'bandwidth = "400 Gb/s"\nlatency = "5 us"\nenergy = "5.5 pJ/bit"\n'
                     ).replace("bandwidth = \"450", "bandwith = \"450")}),
    Case("system-missing-key", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: chip: missing required key",
         {"s.toml": SYSTEM.replace('chip = "h100"\n', "")}),
    Case("system-fabric-without-bandwidth", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: scale_out.bandwidth: missing required key",
         {"s.toml": SYSTEM.replace('bandwidth = "400 Gb/s"\n', "")}),
    Case("system-unknown-chip", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: chip: unknown chip 'h1000'; did you mean 'h100'?",
         {"s.toml": SYSTEM.replace('chip = "h100"', 'chip = "h1000"')}),
    Case("system-chips-not-multiple", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: chips: must be a multiple of chips_per_node (8), got 12",
         {"s.toml": SYSTEM.replace("chips = 16", "chips = 12")}),
    Case("system-multi-node-without-scale-out", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: scale_out: missing: 16 chips in nodes of 8 make 2 nodes, which need a [scale_out] fabric",
         {"s.toml": SYSTEM.split("[scale_out]")[0]}),
    Case("system-bad-topology", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: scale_up.topology: unknown topology 'ring'; expected one of switch, direct, torus, mesh",
         {"s.toml": SYSTEM.replace('topology = "switch"', 'topology = "ring"')}),
    Case("system-reduction-on-direct", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: scale_up.in_network_reduction: a 'direct' fabric has no switch to reduce in; expected false (or topology = \"switch\")",
         {"s.toml": SYSTEM.replace('topology = "switch"', 'topology = "direct"')}),
    Case("system-latency-as-bandwidth", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: scale_out.latency: expected a time such as \"20 us\", \"1.5 ms\" or \"800 ns\", got '5 GB/s'",
         {"s.toml": SYSTEM.replace('latency = "5 us"', 'latency = "5 GB/s"')}),
    # -- sharding: `tierlab trace MODEL -o OUT --generate 1 --tp/--pp/--ep/--dp ...` ---------------
    Case("arg-tp-not-dividing-heads", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--tp", "3"],
         "--tp: 3 ranks do not divide the model's 4 attention heads"),
    Case("arg-tp-not-dividing-kv-heads", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1", "--tp", "3"],
         "--tp: 3 ranks neither divide the model's 4 KV heads nor are a multiple of them",
         {"m.json": json.dumps(dict(json.loads(TINY.read_text()), hidden_size=192, num_attention_heads=12,
                                    num_key_value_heads=4, intermediate_size=192, vocab_size=384))}),
    Case("arg-pp-layers-not-adding-up", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--pp", "2",
                                         "--pp-layers", "1,2"], "--pp-layers: stages hold 3 layers; the model has 2"),
    Case("arg-ep-above-experts", ["trace", "mixtral-8x7b", *TRACE_OUT, "--generate", "1", "--ep", "16", "--dp", "16"],
         "--ep: 16 ranks for the model's 8 experts; at most one rank per expert"),
    Case("arg-ep-not-dividing-experts", ["trace", "mixtral-8x7b", *TRACE_OUT, "--generate", "1", "--ep", "3", "--dp", "3"],
         "--ep: 3 ranks must divide the model's 8 experts"),
    Case("arg-ep-on-dense-model", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--ep", "2", "--dp", "2"],
         "--ep: expert parallelism needs a mixture-of-experts model; tiny-llama is dense"),
    Case("arg-microbatches-not-dividing-batch", ["trace", str(TINY), *TRACE_OUT, "--generate", "1", "--batch", "4",
                                                 "--pp-microbatches", "3"],
         "--pp-microbatches: 3 microbatches do not divide the batch of 4 sequences"),
    # -- sweeps: `tierlab sweep GRID.toml` or `tierlab sweep --model ... --chip ... -o OUT` ---------
    Case("sweep-unknown-axis", ["sweep", "{tmp}/g.toml"], "{tmp}/g.toml: bach: unknown axis; did you mean 'batch'?",
         {"g.toml": f'model = ["{TINY}"]\nchip = ["h100"]\nbach = [1]\n'}),
    Case("sweep-empty-axis", ["sweep", "{tmp}/g.toml"], "{tmp}/g.toml: batch: empty axis: give at least one value",
         {"g.toml": f'model = ["{TINY}"]\nchip = ["h100"]\nbatch = []\n'}),
    Case("sweep-empty-axis-cli", ["sweep", "--model", str(TINY), "--chip", "h100", "--batch", ",", *SWEEP_OUT],
         "--batch: empty axis: give at least one value"),
    Case("sweep-unknown-override-key", ["sweep", "--model", str(TINY), "--chip", "h100", "--override",
                                        "tier.l2.capcity=1MiB", *SWEEP_OUT],
         "overrides.tier.l2.capcity: unknown tier key 'capcity'; did you mean 'capacity'?"),
    Case("sweep-unknown-override-tier", ["sweep", "--model", str(TINY), "--chip", "h100", "--override",
                                         "tier.l3.capacity=1MiB", *SWEEP_OUT],
         "overrides.tier.l3.capacity: 'h100' has no tier 'l3'; expected one of l2, hbm, ddr"),
    Case("sweep-unknown-override-link", ["sweep", "--model", str(TINY), "--chip", "h100", "--override",
                                         "link.l2-hmb.bandwidth=1TB/s", *SWEEP_OUT],
         "overrides.link.l2-hmb.bandwidth: 'h100' has no link 'l2-hmb'; did you mean 'l2-hbm'?"),
    Case("sweep-bad-override-value", ["sweep", "--model", str(TINY), "--chip", "{tmp}/c.toml", "--override",
                                      "tier.sram.capacity=1MiBs", *SWEEP_OUT],
         '{tmp}/c.toml [tier.sram.capacity=1MiBs]: tier[0].capacity: expected a size such as "128 B", "50 MiB" or '
         "\"64 GB\", got '1MiBs'", chip_file()),
    Case("sweep-too-many-points", ["sweep", "--model", str(TINY), "--chip", "h100,a100", "--batch", "1,2,4",
                                   "--max-points", "5", *SWEEP_OUT],
         "GRID: the grid has 6 points, more than the limit of 5; raise it with --max-points 6 or sweep fewer values"),
    Case("sweep-unreachable-scheduler", ["sweep", "--model", str(TINY), "--chip", "h100", "--scheduler",
                                         "tcp://127.0.0.1:1", "--connect-timeout", "0.5", *SWEEP_OUT],
         "--scheduler: cannot reach the scheduler tcp://127.0.0.1:1 within 0.5 s"),
    Case("sweep-output-not-parquet", ["sweep", "--model", str(TINY), "--chip", "h100", *SWEEP_OUT],
         "{tmp}/r.parquet: output exists and is not a tierlab sweep (not a Parquet file); choose another -o",
         {"r.parquet": "hello\n"}),
    Case("sweep-output-other-grid", ["sweep", "--model", str(TINY), "--chip", "h100", *SWEEP_OUT],
         "{tmp}/r.parquet: output is a sweep of other columns (model); choose another -o", _other_sweep),
    Case("sweep-unknown-override-section", ["sweep", "--model", str(TINY), "--chip", "h100", "--override",
                                            "teir.l2.capacity=1MiB", *SWEEP_OUT],
         "overrides.teir.l2.capacity: expected tier.NAME.KEY, tier.NAME.pim.KEY, link.UPPER-LOWER.KEY or "
         "compute.KEY[.DTYPE], execution.KEY; did you mean 'tier'?"),
    Case("sweep-unknown-system-override", ["sweep", "--model", str(TINY), "--system", "dgx-h100", "--override",
                                           "scale_up.bandwith=1TB/s", *SWEEP_OUT],
         "overrides.scale_up.bandwith: unknown scale_up key 'bandwith'; did you mean 'bandwidth'?"),
    Case("sweep-system-override-missing-fabric", ["sweep", "--model", str(TINY), "--system", "dgx-h100",
                                                  "--override", "scale_out.bandwidth=1TB/s", *SWEEP_OUT],
         "overrides.scale_out.bandwidth: 'dgx-h100' has no [scale_out] fabric"),
    Case("sweep-system-chip-override", ["sweep", "--model", str(TINY), "--system", "dgx-h100", "--override",
                                        "chip.tier.hbm.bandwdith=1TB/s", *SWEEP_OUT],
         "overrides.chip.tier.hbm.bandwdith: unknown tier key 'bandwdith'; did you mean 'bandwidth'?"),
    Case("sweep-chip-and-system", ["sweep", "--model", str(TINY), "--chip", "h100", "--system", "dgx-h100",
                                   *SWEEP_OUT], "--chip: give exactly one of the axes chip and system"),
    # -- the calibrated latency (issue 14): achievable fractions, [execution], --kernel-overhead --
    Case("chip-achievable-above-one", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: tier[0].achievable: expected a fraction of peak in (0, 1], e.g. 0.9, got 1.5",
         chip_file(('bandwidth = "10 TB/s"', 'bandwidth = "10 TB/s"\nachievable = 1.5'))),
    Case("chip-link-achievable-zero", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: link[0].achievable: expected a fraction of peak in (0, 1], e.g. 0.9, got 0",
         chip_file(('bandwidth = "1 TB/s"\nenergy', 'bandwidth = "1 TB/s"\nachievable = 0\nenergy'))),
    Case("chip-compute-achievable-string", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: compute.achievable: expected a fraction of peak in (0, 1], e.g. 0.9, got '90%'",
         chip_file(('energy = { bf16 = "0.5 pJ" }', 'energy = { bf16 = "0.5 pJ" }\nachievable = "90%"'))),
    Case("chip-execution-unknown-fusion", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: execution.fusion: unknown value 'layers'; did you mean 'layer'?",
         chip_file(('energy = "8 pJ/bit"\n', 'energy = "8 pJ/bit"\n[execution]\nfusion = "layers"\n'))),
    Case("chip-execution-unknown-key", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: execution.kernel_overheads: unknown key; did you mean 'kernel_overhead'?",
         chip_file(('energy = "8 pJ/bit"\n', 'energy = "8 pJ/bit"\n[execution]\nkernel_overheads = "1 us"\n'))),
    Case("chip-execution-overhead-not-a-time", ["chips", "{tmp}/c.toml"],
         "{tmp}/c.toml: execution.kernel_overhead: expected a time such as \"20 us\", \"1.5 ms\" or \"800 ns\", "
         "got '1 GB'",
         chip_file(('energy = "8 pJ/bit"\n', 'energy = "8 pJ/bit"\n[execution]\nkernel_overhead = "1 GB"\n'))),
    Case("arg-kernel-overhead-unitless", ["replay", str(GOLDEN), "--chip", "h100", "--kernel-overhead", "3"],
         '--kernel-overhead: expected a time such as "20 us", "1.5 ms" or "800 ns", got \'3\''),
    Case("arg-kernel-overhead-negative", ["replay", str(GOLDEN), "--chip", "h100", "--kernel-overhead", "-1 us"],
         "--kernel-overhead: must not be negative, got '-1 us'"),
    # -- issue 22: how collectives run (the calibrated system latency) --------------------------
    Case("arg-comm-overlap-no-tp", ["run", str(TINY), "--system", "dgx-h100", "--generate", "1", "--comm-overlap", "tp"],
         "--comm-overlap: 'tp' overlaps tensor-parallel collectives (all_reduce, all_gather, reduce_scatter), "
         "and this trace has none (--tp/--ep above 1 makes them)"),
    Case("arg-comm-overlap-no-ep", ["run", str(TINY), "--system", "dgx-h100", "--tp", "2", "--generate", "1",
                                    "--comm-overlap", "ep"],
         "--comm-overlap: 'ep' overlaps expert-parallel all_to_all (dispatch and combine), and this trace has "
         "none (--tp/--ep above 1 makes them)"),
    Case("arg-protocol-algo-cannot-run", ["run", str(TINY), "--system", "dgx-h100", "--tp", "2", "--generate", "1",
                                          "--protocol", "LL128", "--collective-algo", "in_network"],
         "--protocol: protocol 'LL128' is not one 'in_network' can run on 'dgx-h100'"),
    Case("arg-protocol-unknown", ["run", str(TINY), "--system", "dgx-h100", "--tp", "2", "--generate", "1",
                                  "--protocol", "LL9"],
         "main run: Invalid value for '--protocol': 'LL9' is not one of 'auto', 'LL', 'LL128', 'Simple'."),
    Case("arg-collective-lib-on-chip", ["run", str(TINY), "--chip", "h100", "--generate", "1",
                                        "--collective-lib", "custom"],
         "--collective-lib: applies to a --system run (collectives), not one chip"),
    Case("arg-comm-overlap-on-chip", ["run", str(TINY), "--chip", "h100", "--generate", "1", "--comm-overlap", "tp"],
         "--comm-overlap: applies to a --system run (collectives), not one chip"),
    # -- interoperability: trace tables in other forms, import, export ---------------------------
    Case("trace-table-is-parquet", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/ops.arrow: is a Parquet file, not an Arrow IPC table (file or stream form)",
         trace(lambda t: (t / fmt.OPS_FILE).write_bytes(b"PAR1" + bytes(8) + b"PAR1"))),
    Case("trace-table-not-arrow", ["info", "{tmp}/t.trace"],
         "{tmp}/t.trace/accesses.arrow: is not Arrow IPC (starts with b'op_id,te'; expected b'ARROW1' or "
         "b'\\xff\\xff\\xff\\xff')",
         trace(lambda t: (t / fmt.ACCESSES_FILE).write_text("op_id,tensor_id\n0,0\n"))),
    Case("import-unparseable-line", ["import", "{tmp}/a.din", *TRACE_OUT],
         "{tmp}/a.din: line 3: cannot parse '0 zz10' as 'label address [size]' (label 0, 1 or 2)",
         {"a.din": "0 1000\n1 1040 8\n0 zz10\n"}),
    Case("import-bad-csv-kind", ["import", "{tmp}/a.csv", *TRACE_OUT],
         "{tmp}/a.csv: line 2: cannot parse '4096,8,fetch' as 'address,size,read|write'",
         {"a.csv": "address,size,kind\n4096,8,fetch\n"}),
    Case("import-unknown-extension", ["import", "{tmp}/a.bin", *TRACE_OUT],
         "{tmp}/a.bin: cannot tell the format from the extension '.bin'; pass --format npy|text|din|csv|lackey|drcachesim|champsim",
         {"a.bin": "0x10\n"}),
    Case("import-npy-not-addresses", ["import", "{tmp}/a.npy", *TRACE_OUT],
         "{tmp}/a.npy: expected a 1-d integer array of addresses, got 1-d float64",
         lambda tmp: __import__("numpy").save(tmp / "a.npy", __import__("numpy").ones(3))),
    # -- address traces (issue 27): tracers' logs, compressed input, binary data ------------------
    Case("import-lackey-unknown-record", ["import", "{tmp}/a.lackey", *TRACE_OUT],
         "{tmp}/a.lackey: line 4: unknown Lackey record 'X 1234,8'; expected 'I  addr,size' or ' L|S|M addr,size' "
         "(hex address)",
         {"a.lackey": "==7== Lackey\nI  0400,3\n L 1000,8\nX 1234,8\n"}),
    Case("import-lackey-malformed-line", ["import", "{tmp}/a.lackey", *TRACE_OUT],
         "{tmp}/a.lackey: line 2: cannot parse ' L 10zz,8' as 'I  addr,size' or ' L|S|M addr,size' (hex address)",
         {"a.lackey": " S 1000,8\n L 10zz,8\n"}),
    Case("import-gzip-truncated", ["import", "{tmp}/a.din.gz", *TRACE_OUT],
         "{tmp}/a.din.gz: line 301: the gzip stream ends before its end-of-stream marker (truncated?)",
         {"a.din.gz": __import__("gzip").compress("".join(f"0 {i * 64:x} 8\n" for i in range(300)).encode(),
                                                  mtime=0)[:-4]}),
    Case("import-binary-as-text", ["import", "{tmp}/a.txt", *TRACE_OUT],
         "{tmp}/a.txt: line 1: binary data (byte 0x01 at column 7), not text (--format text)",
         {"a.txt": b"\x93NUMPY\x01\x00v\x00{'descr': '<i8'}\n"}),
    Case("import-champsim-truncated", ["import", "{tmp}/a.champsim", *TRACE_OUT],
         "{tmp}/a.champsim: ends inside record 3 (10 of its 64 bytes): not a whole number of ChampSim input_instr "
         "records (truncated?)",
         {"a.champsim": bytes(64 * 3 + 10)}),
    Case("address-trace-word-bits", ["info", "{tmp}/a.trace"],
         "{tmp}/a.trace/manifest.json: lines.word_bits: word_bits is 16, expected 32 or 64",
         address_trace(manifest(lines={"word_bits": 16}))),
    Case("address-trace-word-type", ["replay", "{tmp}/a.trace", "--chip", "h100"],
         "{tmp}/a.trace/lines.arrow: word: column has type uint64, expected uint32",
         address_trace(wide_lines)),
    Case("import-din-flush-label", ["import", "{tmp}/a.din", *TRACE_OUT],
         "{tmp}/a.din: line 2: din label 4 (escape or flush) is not an access; expected 0, 1 or 2",
         {"a.din": "0 1000\n4 0\n"}),
    Case("export-unknown-tier", ["export", str(GOLDEN), "--format", "ramulator", "--chip", "h100", "--tier", "l3",
                                 "-o", "{tmp}/r.txt"],
         "--tier: unknown tier 'l3'; chip h100 has l2, hbm, ddr"),
    Case("export-needs-tier", ["export", str(GOLDEN), "--format", "dramsim3", "--chip", "h100", "-o", "{tmp}/r.txt"],
         "--tier: --format dramsim3 needs --chip and --tier"),
    # -- trace --capture (traces/capture/): the extra absent, and what capture refuses ----------
    Case("capture-without-extra", ["trace", str(TINY), "--capture", "--generate", "1", *TRACE_OUT],
         "--capture: needs the optional extra 'capture' (PyTorch and Transformers): pip install -e '.[capture]'",
         hide_modules=("torch", "transformers")),
    Case("capture-turns", ["trace", str(TINY), "--capture", "--turns", "2", "--turn-prompt", "4",
                           "--turn-answer", "2", *TRACE_OUT],
         "--capture: --capture traces one device's --prompt/--context/--generate run (no --turns, --tp, --pp, "
         "--ep, --dp or microbatches)"),
    Case("capture-naive-attention", ["trace", str(TINY), "--capture", "--generate", "1", "--attention", "naive",
                                     *TRACE_OUT], "--attention: --capture lowers attention with the flash kernel only"),
    Case("capture-record-routing", ["trace", str(TINY), "--capture", "--generate", "1", "--record-routing",
                                    *TRACE_OUT],
         "--record-routing: not available with --capture (its routing is tierlab's --router, replayable as is)"),
    Case("capture-no-config", ["trace", "{tmp}/nowhere", "--capture", "--generate", "1", *TRACE_OUT],
         "{tmp}/nowhere: no such model preset, config file or directory holding a config.json"),
    # ---- the report, timeline and roofline outputs (issue 16) ----
    Case("replay-html-exists", ["replay", str(GOLDEN), "--chip", "h100", "--html", "{tmp}/r.html"],
         "{tmp}/r.html: output exists; pass --force to replace it", {"r.html": "old\n"}),
    Case("replay-timeline-exists", ["replay", str(GOLDEN), "--chip", "h100", "--timeline", "{tmp}/t.json"],
         "{tmp}/t.json: output exists; pass --force to replace it", {"t.json": "{}\n"}),
    Case("replay-plot-not-an-image", ["replay", str(GOLDEN), "--chip", "h100", "--plot", "{tmp}/roof.bmp"],
         "--plot: expected an image file ending in .png, .svg, .pdf, got '{tmp}/roof.bmp'"),
    Case("run-html-no-directory", ["run", str(TINY), "--chip", "h100", "--generate", "1", "--html", "{tmp}/no/r.html"],
         "{tmp}/no/r.html: parent directory {tmp}/no does not exist"),
    Case("compare-html-exists", ["compare", str(TINY), "--chips", "h100", "--html", "{tmp}/c.html"],
         "{tmp}/c.html: output exists; pass --force to replace it", {"c.html": "old\n"}),
    # -- families (issue 14): fields a family reads but tierlab does not model, named ---------------
    Case("config-unknown-layer-type", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: layer_types: unknown entry 'linear_attention'; expected one of sliding_attention, "
         "full_attention", {"m.json": json.dumps(_preset("gpt-oss-20b", layer_types=["linear_attention"] * 24))}),
    Case("config-falcon-alibi", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: alibi: alibi = True is not modelled for falcon (only False)",
         {"m.json": json.dumps(_preset("falcon-7b", alibi=True))}),
    Case("config-text-config-not-object", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: text_config: expected a JSON object, got list",
         {"m.json": json.dumps(_preset("llama-4-scout-17b-16e", text_config=[1]))}),
    Case("config-nested-field", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: text_config.num_local_experts: expected a positive integer, got 0",
         {"m.json": json.dumps(_nested("llama-4-scout-17b-16e", num_local_experts=0))}),
    Case("config-unknown-quant-method", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1", "--weights",
                                         "native"],
         "{tmp}/m.json: quantization_config.quant_method: quant_method 'bitsandbytes' is not modelled; expected "
         "mxfp4, fp8, awq, gptq or modelopt", {"m.json": json.dumps(_preset("gpt2", quantization_config={"quant_method": "bitsandbytes"}))}),
    Case("capacity-state-space-model", ["capacity", "mamba-codestral-7b", "--memory", "14.6GB"],
         "--batch: weights (14570807296 B) and workspace (237824 B) of mamba-codestral-7b leave 28954880 B of the "
         "14600000000 B budget, less than one token for 1 sequence(s) (139460608 B of KV and state)"),
    Case("arg-tp-unsplit-family", ["trace", "mamba-codestral-7b", *TRACE_OUT, "--generate", "1", "--tp", "16"],
         "--tp: 16 ranks do not divide the model's state-space groups (key heads) 8"),
    # -- systems on the command line: a trace of several devices is replayed on a system ----------
    Case("replay-devices-on-one-chip", ["replay", "{tmp}/t.trace", "--chip", "h100"],
         "--chip: {tmp}/t.trace is a trace of 2 devices; replay it on a system (--system NAME) or trace it "
         "for one device", lambda tmp: _tp2_trace(tmp / "t.trace")),
    Case("run-devices-on-one-chip", ["run", str(TINY), "--chip", "h100", "--tp", "2", "--generate", "1"],
         "--chip: --tp/--pp/--ep/--dp make 2 devices; replay them on a system (--system NAME), not one chip"),
    Case("replay-system-and-chip", ["replay", str(GOLDEN), "--chip", "h100", "--system", "dgx-h100"],
         "--chip: give exactly one of --chip and --system"),
    Case("replay-system-too-small", ["replay", "{tmp}/t.trace", "--system", "{tmp}/s.toml"],
         "--system or --tp: the trace needs 2 devices; one has 1 chips", lambda tmp: (_tp2_trace(tmp / "t.trace"),
          (tmp / "s.toml").write_text((DATA.parent.parent / "configs" / "systems" / "dgx-h100.toml").read_text()
                                      .replace('name = "dgx-h100"', 'name = "one"').replace("chips = 8", "chips = 1")
                                      .replace("chips_per_node = 8", "chips_per_node = 1")))),
    # -- FP4 and topologies (issue 24) -----------------------------------------------------------
    Case("run-fp4-strict-on-chip-without-fp4", ["run", str(TINY), "--chip", "h100", "--generate", "1",
                                                "--activations", "nvfp4", "--strict-dtype"],
         "--activations: h100 has no FP4 compute; expected one of the chip's dtypes (bf16, fp16, fp8, int8, tf32)"),
    Case("system-torus-dims-not-the-chips", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: scale_up.dims: [4, 3] make 12 chips; expected a grid of the node's 16 chips (chips_per_node)",
         {"s.toml": (TORUS := 'name = "t"\nchip = "h100"\nchips = 16\n[scale_up]\ntopology = "torus"\ndims = [4, 4]\n'
                    'bandwidth = "100 GB/s"\nlatency = "1 us"\nenergy = "5 pJ/bit"\n').replace("[4, 4]", "[4, 3]")}),
    Case("system-torus-without-dims", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: scale_up.dims: missing: a 'torus' needs dims = [..], the chips along each axis (multiplying "
         "to chips_per_node, 16)", {"s.toml": TORUS.replace("dims = [4, 4]\n", "")}),
    Case("system-dims-on-a-switch", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: scale_up.dims: dims apply to a 'torus' or 'mesh' fabric, not a 'switch'",
         {"s.toml": TORUS.replace('"torus"', '"switch"')}),
    Case("system-torus-scale-out", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: scale_out.topology: a 'torus' joins one node's chips; the scale-out fabric must be a 'switch'",
         {"s.toml": TORUS.replace("chips = 16", "chips = 32\nchips_per_node = 16") + '[scale_out]\ntopology = "torus"\n'
                    'dims = [2]\nbandwidth = "50 GB/s"\nlatency = "5 us"\nenergy = "5 pJ/bit"\n'}),
    Case("system-oversubscription-below-one", ["systems", "{tmp}/s.toml"],
         "{tmp}/s.toml: scale_out.oversubscription: expected a ratio >= 1 (1 = non-blocking, 4 = 4:1), got 0.5",
         {"s.toml": TORUS.replace("chips = 16", "chips = 32\nchips_per_node = 16") + '[scale_out]\n'
                    'bandwidth = "50 GB/s"\nlatency = "5 us"\nenergy = "5 pJ/bit"\noversubscription = 0.5\n'}),
    Case("run-torus-on-a-switch", ["run", str(TINY), "--generate", "1", "--system", "dgx-h100", "--collective-algo",
                                   "torus"],
         "--collective-algo: 'torus' cannot run on dgx-h100: torus needs a 'torus' or 'mesh' scale-up fabric "
         "(topology = \"torus\", dims = [..]), not a 'switch'"),
    Case("run-nvfp4-strict-on-mxfp4-chip", ["run", str(TINY), "--chip", "mi355x", "--generate", "1",
                                            "--activations", "nvfp4", "--strict-dtype"],
         "--activations: mi355x has no nvfp4 compute (its FP4 rate is for mxfp4); expected one of the chip's "
         "dtypes (bf16, fp16, fp8, int8, mxfp4)"),
    # -- crosscheck (issue 14): partial rotary ----------------------------------------------------
    Case("config-partial-rotary-out-of-range", ["trace", "{tmp}/m.json", *TRACE_OUT, "--generate", "1"],
         "{tmp}/m.json: partial_rotary_factor: expected a fraction in (0, 1], got 1.5",
         {"m.json": json.dumps(_preset("glm-4.5-air", partial_rotary_factor=1.5))}),
    # -- throughput (issue 23): the serving curve --------------------------------------------------
    Case("throughput-beyond-positions", ["throughput", str(TINY), "--chip", "h100", "--input", "4000",
                                         "--output", "200"],
         "--input: --input 4000 + --output 200 = 4200 positions exceeds tiny-llama's max_position_embeddings 4096"),
    Case("throughput-kv-does-not-fit", ["throughput", "llama-3.1-8b", "--chip", "h100", "--input", "1000",
                                        "--output", "1000", "--concurrency", "300"],
         "--concurrency: concurrency 300: the KV of 300 requests of 1000+1000 tokens does not fit; at most 207 do "
         "(hbm of h100)"),
    Case("throughput-batch-tokens-below-decodes", ["throughput", str(TINY), "--chip", "h100", "--input", "100",
                                                   "--output", "10", "--concurrency", "8", "--max-batch-tokens", "4"],
         "--max-batch-tokens: --max-batch-tokens 4 is below one decode batch of 8 sequences (every running decode "
         "takes a token of each step)"),
    Case("throughput-slo-unmet", ["throughput", str(TINY), "--chip", "h100", "--input", "16", "--output", "4",
                                  "--concurrency", "1", "--slo-tpot", "0.000001"],
         "--slo-tpot: no point meets the SLO (TPOT <= 1e-06 ms); the nearest is concurrency 1: TPOT 0.043 ms, "
         "TTFT 0.043 ms"),
    Case("throughput-two-targets", ["throughput", str(TINY), "--chip", "h100", "--system", "dgx-h100",
                                    "--input", "16", "--output", "4"],
         "--chip: give exactly one of --chip, --system, --chips and --systems"),
    Case("throughput-parquet-suffix", ["throughput", str(TINY), "--chip", "h100", "--input", "16", "--output", "4",
                                       "-o", "{tmp}/c.csv"],
         "--parquet: expected a .parquet file, got '{tmp}/c.csv'"),
]

# ---- request streams (issue 41): tierlab mrc REQUESTS and tierlab requests ---------------------------

_REQ = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'
_SERVE = ["--model", str(TINY), "--chip", "h100"]
CASES += [
    Case("requests-malformed-line", ["mrc", "{tmp}/r.jsonl"],
         "{tmp}/r.jsonl: line 2: malformed JSON (Expecting ',' delimiter)",
         {"r.jsonl": _REQ + '{"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [0 1]}\n'}),
    Case("requests-none", ["mrc", "{tmp}/r.jsonl"], "{tmp}/r.jsonl: line 1: no requests", {"r.jsonl": ""}),
    Case("requests-hash-ids-and-length", ["mrc", "{tmp}/r.jsonl"],
         "{tmp}/r.jsonl: line 1: hash_ids: 3 ids for 600 input tokens; expected ceil(600/512) = 2 at 512 tokens per "
         "block", {"r.jsonl": _REQ.replace("[0, 1]", "[0, 1, 2]")}),
    Case("requests-longer-than-positions", ["requests", "{tmp}/r.jsonl", *_SERVE],
         "{tmp}/r.jsonl: line 1: 4608 + 5 positions exceed tiny-llama's max_position_embeddings 4096",
         {"r.jsonl": '{"timestamp": 0, "input_length": 4608, "output_length": 5, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, '
                     '8]}\n'}),
    Case("requests-zero-tier", ["requests", "{tmp}/r.jsonl", *_SERVE, "--kv-tier", "dram=0TB"],
         "--kv-tier: a tier's capacity must be positive, got '0TB'", {"r.jsonl": _REQ}),
    Case("requests-negative-tier", ["requests", "{tmp}/r.jsonl", *_SERVE, "--kv-tier", "dram=-1TB"],
         "--kv-tier: expected a size such as 1TB or 512GiB, got '-1TB'", {"r.jsonl": _REQ}),
    Case("requests-unknown-tier", ["requests", "{tmp}/r.jsonl", *_SERVE, "--kv-tier", "disk=1TB"],
         "--kv-tier: unknown KV tier 'disk'; expected one of dram, ssd, remote", {"r.jsonl": _REQ}),
    Case("requests-prefix-router-without-dp", ["requests", "{tmp}/r.jsonl", *_SERVE, "--router", "prefix"],
         "--router: router 'prefix' chooses among replicas; it needs dp > 1 (or prefill instances > 1)",
         {"r.jsonl": _REQ}),
    Case("requests-prefill-without-decode", ["requests", "{tmp}/r.jsonl", "--model", str(TINY), "--system",
                                             "dgx-h100", "--prefill-instances", "2"],
         "--decode-instances: disaggregated serving needs both prefill and decode instances (prefill_instances is "
         "given)", {"r.jsonl": _REQ}),
    Case("requests-disaggregated-on-a-chip", ["requests", "{tmp}/r.jsonl", *_SERVE, "--prefill-instances", "1",
                                              "--decode-instances", "1"],
         "--chip: disaggregated prefill and decode move KV over a system's links; give a system", {"r.jsonl": _REQ}),
    Case("requests-disaggregated-too-many", ["requests", "{tmp}/r.jsonl", "--model", str(TINY), "--system",
                                             "dgx-h100", "--tp", "2", "--prefill-instances", "3",
                                             "--decode-instances", "2"],
         "--prefill-instances: (prefill + decode instances) x tp x pp = 10 devices; dgx-h100 has 8 chips",
         {"r.jsonl": _REQ}),
    Case("requests-html-parent-missing", ["requests", "{tmp}/r.jsonl", *_SERVE, "--html", "{tmp}/no/r.html"],
         "{tmp}/no/r.html: parent directory {tmp}/no does not exist", {"r.jsonl": _REQ}),
    Case("requests-disaggregated-and-dp", ["requests", "{tmp}/r.jsonl", "--model", str(TINY), "--system",
                                           "dgx-h100", "--dp", "2", "--prefill-instances", "1",
                                           "--decode-instances", "1"],
         "--dp: give dp or prefill and decode instances, not both", {"r.jsonl": _REQ}),
]


def _tp2_trace(out: Path) -> None:
    from tierlab.traces.lowering.generate import generate_trace
    from tierlab.traces.workload.run import RunConfig
    from tierlab.traces.model.spec import load_model

    generate_trace(load_model(str(TINY)), RunConfig(context=8, generate=1, tp=2), out)


def _materialise(files, tmp: Path) -> None:
    if callable(files):
        files(tmp)
        return
    for name, content in files.items():
        p = tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)


def _snapshot(tmp: Path) -> dict[str, tuple]:
    out = {}
    for root, dirs, files in os.walk(tmp):
        for n in dirs + files:
            p = Path(root) / n
            st = p.lstat()
            out[str(p.relative_to(tmp))] = (st.st_mode, None if p.is_dir() else st.st_size, st.st_mtime_ns)
    return out


def run_case(case: Case, tmp: Path):
    _materialise(case.files, tmp)
    before = _snapshot(tmp)
    args = [a.replace("{tmp}", str(tmp)) for a in case.args]
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    return r, before, _snapshot(tmp)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path: Path, monkeypatch):
    missing = [m for m in case.needs if importlib.util.find_spec(m) is None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {', '.join(missing)} (the capture extra) must be installed; .ci/run installs it")
        pytest.skip(f"needs {', '.join(missing)}: pip install -e '.[capture]' (with PyTorch's CPU build)")
    for name in case.hide_modules:
        monkeypatch.setitem(sys.modules, name, None)
    r, before, after = run_case(case, tmp_path)
    expected = "tierlab: error: " + case.message.replace("{tmp}", str(tmp_path))
    assert r.stderr.rstrip("\n") == expected
    assert r.exit_code == 2
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    assert after == before, "the command wrote, changed or removed files"


def test_catalogue_size_and_ids():
    assert len(CASES) >= 218   # with issue 14's (families, calibrated latency, capture), 15's, 16's, 23's, 24's, 25's and 27's cases
    assert len({c.id for c in CASES}) == len(CASES)
