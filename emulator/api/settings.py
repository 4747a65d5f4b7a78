"""The option groups of the library's functions, each a frozen dataclass whose defaults are written
here once.

* :class:`Workload` -- the run's shape: what is traced (lengths, batch, dtypes, routing, kernels'
  tiles, conversation turns, parallelism).
* :class:`ReplaySettings` -- how a trace is replayed (accounting rules that change counts, and the
  tuning that never does).
* :class:`Execution` -- the calibrated latency's settings (fusion, overlap, kernel overhead,
  achievable fractions); they change the calibrated figures only.
* :class:`Collectives` -- how a system's collectives are chosen and run.
* :class:`Views` -- the files a replay may also write (HTML report, timeline, roofline plot).

The functions of :mod:`tierlab.api` take these as flat keyword parameters (``tierlab.run(...,
context=1024, pim=False)``) and build the groups with :meth:`Settings.take`; the CLI generates its
click options from the fields (:mod:`tierlab.cli.params`), so a default and a help text are written
once. A value of the wrong type is a :class:`~tierlab.common.errors.UsageError` naming the
parameter; the CLI maps a parameter to its flag at its one edge.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Mapping

from tierlab.common.errors import UsageError
from tierlab.traces.format.schema import DEFAULT_ALIGNMENT

KINDS = ("bool", "int", "float", "text", "texts")
_EXPECTED = {"bool": "True or False", "int": "an integer", "float": "a number", "text": "a string or path",
             "texts": "a string or a list of strings"}


def option(default: Any, help: str, *, kind: str, flag: str | None = None, short: str | None = None,
           choices: tuple | None = None, metavar: str | None = None, switch: bool = False,
           cli_default: str | None = None) -> Any:
    """A field of a settings group: its default, help text and how the CLI spells it.

    ``kind``: bool, int, float, text (a string, or None where the default is None) or texts (a tuple
    of strings: a repeatable option). ``choices``: the values allowed, or a function giving them (for
    names whose module is loaded only when a value is checked). ``flag``: the long option when it is not ``--`` + the name with
    ``-`` for ``_``; ``short``: a short alias (``-o``). A bool is ``--x/--no-x`` unless ``switch``
    (a plain ``--x``). ``cli_default``: how ``--help`` shows a default of None."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    meta = dict(help=help, kind=kind, flag=flag, short=short, choices=choices, metavar=metavar, switch=switch,
                cli_default=cli_default)
    return field(default=default, metadata=meta)


def choices_of(f) -> tuple | None:
    """The values field ``f`` of a settings group allows (None: any of its kind)."""
    c = f.metadata["choices"]
    return c() if callable(c) else c


def check_value(name: str, kind: str, v: Any, choices: tuple | None = None, *, nullable: bool = False) -> Any:
    """``v`` as the parameter ``name`` of ``kind`` takes it, else a UsageError naming ``name``."""
    if v is None and nullable:
        return v
    ok = {"bool": isinstance(v, bool),
          "int": isinstance(v, int) and not isinstance(v, bool),
          "float": isinstance(v, (int, float)) and not isinstance(v, bool),
          "text": isinstance(v, (str, os.PathLike)),
          "texts": isinstance(v, (str, os.PathLike, list, tuple))}[kind]
    if not ok:
        raise UsageError(f"expected {_EXPECTED[kind]}, got {type(v).__name__} {v!r}", field=name)
    if kind == "text":
        v = os.fspath(v)
    if kind == "texts":
        v = (os.fspath(v),) if isinstance(v, (str, os.PathLike)) else tuple(v)
        for x in v:
            if not isinstance(x, (str, os.PathLike)):
                raise UsageError(f"expected strings, got {type(x).__name__} {x!r}", field=name)
        v = tuple(os.fspath(x) for x in v)
    if choices is not None and v not in choices:
        raise UsageError(f"expected one of {', '.join(map(str, choices))}, got {v!r}", field=name)
    return v


@dataclass(frozen=True)
class Settings:
    """Base of the option groups: type checks from the fields' metadata, and :meth:`take`."""

    lenient: ClassVar[tuple[str, ...]] = ()     # fields whose values a later check reads (kept as given)

    def __post_init__(self):
        for f in fields(self):
            if f.name in self.lenient:
                continue
            v = getattr(self, f.name)
            checked = check_value(f.name, f.metadata["kind"], v, choices_of(f),
                                  nullable=f.default is None)
            if checked is not v:
                object.__setattr__(self, f.name, checked)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def take(cls, given: Mapping[str, Any]):
        """The group of the entries of ``given`` that are its fields (others are left alone)."""
        return cls(**{k: given[k] for k in cls.names() if k in given})

    def changed(self) -> list[str]:
        """The fields not at their default, in order."""
        return [f.name for f in fields(self) if getattr(self, f.name) != _default(f)]


def _default(f) -> Any:
    return f.default if f.default is not MISSING else f.default_factory()


def defaults(cls) -> dict[str, Any]:
    """Field name -> default of a settings group."""
    return {f.name: _default(f) for f in fields(cls)}


def _dtypes():
    from tierlab.traces.model.dtypes import ACTIVATION_DTYPES, KV_DTYPES, WEIGHT_DTYPES

    return WEIGHT_DTYPES, KV_DTYPES, ACTIVATION_DTYPES


@dataclass(frozen=True)
class Workload(Settings):
    """The run's shape: what one trace holds (``tierlab trace``'s options)."""

    # RunConfig checks these itself, naming the parameter: an integer given as text on the command line
    # reaches it as the text, so its message is tierlab's one line, not click's usage block
    lenient: ClassVar[tuple[str, ...]] = ("prompt", "context", "generate", "batch", "seed", "tile_m", "tile_n",
                                          "attn_tile", "quant_group", "turns", "turn_prompt", "turn_answer", "tp",
                                          "pp", "pp_microbatches", "ep", "dp", "align")

    prompt: int = option(0, "Prompt tokens per sequence, prefilled (traced).", kind="int")
    context: int = option(0, "Tokens already in the KV cache per sequence (not traced).", kind="int")
    generate: int = option(0, "Decode steps (tokens generated per sequence).", kind="int")
    batch: int = option(1, "Sequences processed together.", kind="int")
    weights: str | None = option(None, "Weights dtype: bf16, fp16, fp32, fp8, int8, int4, a checkpoint format "
                                 "or native (default bf16; native for a model released in MXFP4, gpt-oss).",
                                 kind="text")
    kv: str = option("bf16", "KV-cache dtype: bf16, fp16, fp32, fp8, int8.", kind="text")
    activations: str = option("bf16", "Activations dtype: bf16, fp16, fp32, fp8, nvfp4, mxfp4.", kind="text")
    router: str = option("uniform", "MoE routing: uniform, zipf:S, or table:PATH.arrow (columns step, layer, "
                         "token, expert).", kind="text")
    seed: int = option(0, "Seed of routing and token ids.", kind="int")
    attention: str = option("flash", "Attention kernel: flash or naive.", kind="text")
    tile_m: int = option(256, "Prefill GEMM tile: tokens.", kind="int")
    tile_n: int = option(256, "Prefill GEMM tile: output features.", kind="int")
    attn_tile: int = option(128, "Flash attention: queries per tile.", kind="int")
    align: str | int = option(str(DEFAULT_ALIGNMENT), "Tensor address alignment in bytes (power of two; e.g. "
                              "64KiB, 2MiB).", kind="text")
    quant_group: int = option(128, "Group size of int8/int4 weight scales (elements along the input dimension).",
                              kind="int")
    turns: int | None = option(None, "A conversation of this many turns (with --turn-prompt/--turn-answer), "
                               "instead of --prompt/--generate.", kind="int")
    turn_prompt: int | None = option(None, "Conversation: new prompt tokens per turn.", kind="int")
    turn_answer: int | None = option(None, "Conversation: answer tokens (decode steps) per turn.", kind="int")
    turn_lengths: str | None = option(None, "Conversation: PROMPT:ANSWER per turn, e.g. 512:128,256:128 "
                                      "(instead of --turns N ...).", kind="text")
    kv_reuse: bool = option(True, "Conversation: keep earlier turns' KV (else each turn re-prefills the whole "
                            "history).", kind="bool")
    kv_offload: bool = option(False, "Conversation with reuse: copy the KV to kind 'kv_offload' tensors after "
                              "each turn and back before the next (a placement rule for kind kv_offload "
                              "decides where it lives).", kind="bool", switch=True)
    tp: int = option(1, "Tensor-parallel ranks per pipeline stage (heads, MLP columns and vocabulary split).",
                     kind="int")
    pp: int = option(1, "Pipeline stages (layers split).", kind="int")
    pp_layers: str | None = option(None, "Layers per stage, e.g. 6,18,18,18 (default: as even as possible, the "
                                   "rest on the last stages).", kind="text")
    pp_microbatches: int = option(1, "Microbatches each segment is split into (must divide --batch).", kind="int")
    ep: int = option(1, "Expert-parallel ranks (MoE models): experts spread over the tp x dp devices of a stage.",
                     kind="int")
    dp: int = option(1, "Data-parallel replicas, each serving --batch sequences.", kind="int")
    collective_buffers: str = option("in_place", "Collective operands: in_place, or staged (copied into and out "
                                     "of a contiguous buffer).", kind="text")

    def __post_init__(self):
        super().__post_init__()
        for name in self.lenient:     # what RunConfig does not see as given: None or an integer (or its text)
            v = getattr(self, name)
            if isinstance(v, bool) or not (v is None or isinstance(v, (int, str))):
                raise UsageError(f"expected an integer, got {type(v).__name__} {v!r}", field=name)

    def run_config(self, spec=None):
        """The :class:`~tierlab.traces.workload.run.RunConfig` of this workload; without ``weights``,
        the model's default (:func:`tierlab.traces.model.weight_formats.default_weights`)."""
        from tierlab.traces.model.weight_formats import default_weights
        from tierlab.traces.workload.run import RunConfig, conversation

        weights = self.weights or (default_weights(spec) if spec is not None else "bf16")
        turns = conversation(self.turns, self.turn_prompt, self.turn_answer, self.turn_lengths)
        return RunConfig(turns=turns, kv_reuse=self.kv_reuse, kv_offload=self.kv_offload, prompt=self.prompt,
                         context=self.context, generate=self.generate, batch=self.batch, weights=weights,
                         kv=self.kv, activations=self.activations, router=self.router, seed=self.seed,
                         attention=self.attention, tile_m=self.tile_m, tile_n=self.tile_n,
                         attn_tile=self.attn_tile, alignment=parse_size(self.align, "align"),
                         quant_group=self.quant_group, tp=self.tp, pp=self.pp, pp_layers=self.pp_layers,
                         pp_microbatches=self.pp_microbatches, ep=self.ep, dp=self.dp,
                         collective_buffers=self.collective_buffers)


_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}


def parse_size(text, name: str) -> int:
    """``65536``, ``64KiB``, ``1MiB`` (or an integer) -> bytes (binary units)."""
    import re

    if isinstance(text, int) and not isinstance(text, bool):
        return text
    m = re.match(r"^\s*(\d+)\s*(|b|kib|k|mib|m|gib|g)\s*$", str(text), re.I)
    if not m:
        raise UsageError(f"expected a size in bytes such as 65536 or 64KiB, got {text!r}", field=name)
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def kernel_names() -> tuple:
    from tierlab.engine.dispatch import KERNEL_NAMES

    return ("auto", *KERNEL_NAMES)


@dataclass(frozen=True)
class ReplaySettings(Settings):
    """How a trace is replayed: the accounting rules (they change counts) and the tuning (never)."""

    pim: bool = option(True, "Run PIM-eligible ops in the memory's PIM unit where the chip has one.", kind="bool")
    flush: bool = option(False, "Write dirty blocks back at the end (reported separately).", kind="bool")
    store_hit_recency: bool = option(True, "A store hit counts as a use for LRU.", kind="bool")
    fetch_on_write_miss: bool = option(True, "A store missing a whole tier-0 block still fetches it.", kind="bool")
    fetch_on_writeback_miss: bool = option(True, "A whole-block write from a nearer tier that misses still "
                                           "fetches the block.", kind="bool")
    inclusive: bool = option(False, "Inclusive caching tiers: an eviction back-invalidates nearer tiers' copies.",
                             kind="bool")
    policy_seed: int = option(0, "Seed of the random policy.", kind="int")
    kernel: str = option("auto", "Which kernel counts (identical counts): auto takes the fastest that serves the "
                         "replay; the one that ran, and why, is provenance.kernel in --json.", kind="text",
                         choices=kernel_names)
    fast_path: bool = option(True, "Use the exact fast paths (identical counts; --no-fast-path is --kernel walk).",
                             kind="bool")
    set_groups: bool = option(True, "Replay a lone LRU/FIFO caching tier as groups of sets that hold alike "
                              "(identical counts; off for checking).", kind="bool")
    threads: int = option(1, "Threads for an address trace's stream on the stream kernels: 2 serve half of the "
                          "sets each (identical counts; other replays use one).", kind="int")
    place: tuple[str, ...] = option((), "Placement rule tried before the chip's own (repeatable): TIER then "
                                    "kind=K, name=GLOB, layers=A-B, spill; e.g. --place ddr:kind=kv_offload or "
                                    "--place sram:kind=kv,spill.", kind="texts", metavar="TIER[:COND,...]")

    def options(self):
        """The engine's :class:`~tierlab.engine.options.ReplayOptions`."""
        from tierlab.engine.options import ReplayOptions

        return ReplayOptions(store_hit_recency=self.store_hit_recency, fetch_on_write_miss=self.fetch_on_write_miss,
                             fetch_on_writeback_miss=self.fetch_on_writeback_miss, flush=self.flush,
                             seed=self.policy_seed, pim=self.pim, fast_path=self.fast_path,
                             set_groups=self.set_groups, kernel=self.kernel, inclusive=self.inclusive,
                             threads=self.threads)

    def rules(self) -> tuple:
        """The ``place`` rules as PlacementRule objects (checked against the chip by placement)."""
        from tierlab.chip.placement import parse_rule

        return tuple(parse_rule(t) for t in self.place)


@dataclass(frozen=True)
class Execution(Settings):
    """The calibrated latency's settings (:mod:`tierlab.cost.organisation`), each overriding the chip
    file's ``[execution]`` and ``achievable`` keys where given. They change only the calibrated figures
    (``per_token.latency_calibrated_s`` and its neighbours), never the counts, energy or roofline."""

    fusion: str | None = option(None, "Kernels for the calibrated latency: none (one per op) or layer (one per "
                                "decoder layer and step); default the chip file's [execution] fusion (none if "
                                "absent).", kind="text", choices=("none", "layer"))
    overlap: str | None = option(None, "Run consecutive kernels that share no written tensor concurrently "
                                 "(independent) or not (none); default the chip file's (none).", kind="text",
                                 choices=("none", "independent"))
    kernel_overhead: str | None = option(None, 'Fixed time per kernel (launch + synchronisation), e.g. "1.3 us"; '
                                         'default the chip file\'s [execution] kernel_overhead ("0 s" if absent).',
                                         kind="text", metavar="TIME")
    achievable: bool = option(True, "Divide resources' times by the chip file's achievable fractions of peak "
                              "(--no-achievable: peak rates).", kind="bool")

    def given(self) -> bool:
        return bool(self.changed())

    def apply(self, chip):
        """``chip`` with these settings in place of its own."""
        from tierlab.chip.units import parse_quantity
        from tierlab.cost.organisation import with_execution

        overhead = self.kernel_overhead
        if overhead is not None:
            overhead = parse_quantity(overhead, "time", field="kernel_overhead")
            if overhead < 0:
                raise UsageError(f"must not be negative, got {self.kernel_overhead!r}", field="kernel_overhead")
        return with_execution(chip, fusion=self.fusion, overlap=self.overlap, kernel_overhead_s=overhead,
                              achievable=self.achievable)


def algorithm_names() -> tuple:
    from tierlab.network.algorithm_names import ALGORITHM_NAMES

    return ("auto", *ALGORITHM_NAMES)


@dataclass(frozen=True)
class Collectives(Settings):
    """How a system's collectives are picked and run (a ``--system`` replay)."""

    collective_algo: str = option("auto", "Collective algorithm where it serves the collective's kind (others: "
                                  "auto); one the fabric cannot run is an error.", kind="text",
                                  choices=algorithm_names)
    collective_lib: str | None = option(None, "Calibrated latency: nccl (ring, tree, NVLS) or custom (adds vLLM's "
                                        "one-shot and two-shot all-reduce on one node); default the system file's "
                                        "[collectives] (nccl).", kind="text", choices=("nccl", "custom"))
    protocol: str = option("auto", "Calibrated latency: the NCCL protocol collectives use (auto: the fastest per "
                           "message, as NCCL's tuner picks).", kind="text", choices=("auto", "LL", "LL128", "Simple"))
    comm_overlap: str = option("none", "Calibrated latency: run tensor-parallel collectives (tp) or EP "
                               "dispatch/combine (ep) beside the next ops instead of waiting for them.", kind="text",
                               choices=("none", "tp", "ep"))
    no_overheads: bool = option(False, "Calibrated latency with every overhead off (peak rates, no kernel or "
                                "collective launch and latency, the roofline's collectives): it then equals the "
                                "roofline.", kind="bool", switch=True)


@dataclass(frozen=True)
class Views(Settings):
    """Files a replay also writes: the HTML report (with a tier's miss-ratio curve), a timeline, the roofline."""

    html: str | None = option(None, "Write a self-contained HTML report (figures embedded; needs the plot extra).",
                              kind="text", metavar="FILE.html")
    timeline: str | None = option(None, "Write a Chrome trace-event timeline (one track per resource; opens in "
                                  "ui.perfetto.dev or chrome://tracing).", kind="text", metavar="FILE.json")
    plot: str | None = option(None, "Draw the roofline (each op kind at its arithmetic intensity against the "
                              "compute peak and each tier's bandwidth) to this image (needs the plot extra).",
                              kind="text", metavar="FILE.png")
    mrc: str | None = option(None, "With --html: add TIER's miss-ratio curve (as `tierlab mrc` draws it) to the "
                             "report.", kind="text", metavar="TIER")


def documented(*groups, intro_returns: str = "", **extra: str):
    """A decorator giving a library function a numpydoc ``Parameters`` section: each parameter's text
    is ``extra[name]`` or the help of the field of that name in one of ``groups`` (written once)."""
    import inspect

    def decorate(fn):
        helps = {}
        for g in groups:
            for f in fields(g):
                helps[f.name] = f.metadata["help"]
        helps.update(extra)
        lines = ["", "Parameters", "----------"]
        for name, p in inspect.signature(fn).parameters.items():
            ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
            default = "" if p.default is inspect.Parameter.empty else f", default {p.default!r}"
            lines.append(f"{name} : {ann}{default}")
            lines.append(f"    {helps.get(name, '')}".rstrip())
        if intro_returns:
            lines += ["", "Returns", "-------", intro_returns]
        fn.__doc__ = (inspect.cleandoc(fn.__doc__ or "") + "\n" + "\n".join(lines)).strip() + "\n"
        return fn

    return decorate
