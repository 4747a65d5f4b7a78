"""The run: what is traced (prompt, context, tokens generated, batch), dtypes, router and kernel choices.

Lengths are in tokens per sequence. ``context`` tokens are already in the KV cache and are not
traced; ``prompt`` tokens are prefilled (after the context); then ``generate`` decode steps each
process one new token per sequence. Tile sizes are in elements: ``tile_m`` tokens per prefill GEMM
tile (the weight matrix is streamed once per tile of tokens, so prefill reads each weight
``ceil(tokens / tile_m)`` times), ``tile_n`` output features per tile (the activation tile is read
once per tile of outputs), ``attn_tile`` query rows per flash-attention tile.

A **conversation** (``turns``, one ``(prompt, answer)`` pair of token counts per turn, per
sequence) replaces ``prompt``/``generate``: turn t prefills its prompt and decodes ``answer`` steps.
With ``kv_reuse`` the KV of earlier turns stays in the cache and turn t prefills only its new prompt
(attending to all history); without it turn t re-prefills the whole history (every earlier prompt
and answer) plus its prompt. ``context`` positions are a cached prefix (e.g. a system prompt) kept by
both modes. ``kv_offload`` (reuse only) copies the live KV to tensors of kind ``kv_offload`` after
each turn but the last and reads it back before the next (see :mod:`tierlab.traces.lowering.generate`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from tierlab.kernels.attention import ATTENTION
from tierlab.traces.model.dtypes import ACTIVATION_DTYPES, DEFAULT_QUANT_GROUP, KV_DTYPES, WEIGHT_DTYPES, check_dtype
from tierlab.common.errors import UsageError
from tierlab.traces.format.schema import DEFAULT_ALIGNMENT

ATTENTION_KERNELS = tuple(ATTENTION)
# Limits that keep a run's lowering within memory (it holds one op's descriptors for every sequence
# of the batch at once) and its addresses within what the reader accepts.
MAX_BATCH = 1 << 16
MAX_ALIGNMENT = 1 << 30


@dataclass(frozen=True)
class RouterSpec:
    """``uniform``, ``zipf`` (with exponent ``s``) or ``table`` (an Arrow routing log at ``path``)."""

    kind: str
    s: float = 0.0
    path: str | None = None

    @classmethod
    def parse(cls, text: str) -> "RouterSpec":
        """Parse ``uniform``, ``zipf:S`` (S > 0), ``table:PATH`` or a path to an ``.arrow`` file."""
        if isinstance(text, RouterSpec):
            return text
        t = str(text).strip()
        if t == "uniform":
            return cls("uniform")
        if t.startswith("zipf:"):
            try:
                s = float(t[5:])
            except ValueError:
                s = -1.0
            if not s > 0 or s != s or s == float("inf"):
                raise UsageError(f"zipf exponent in {t!r} must be a positive number, e.g. zipf:1.2", field="router")
            return cls("zipf", s=s)
        if t.startswith("table:"):
            return cls("table", path=t[6:])
        if t.endswith((".arrow", ".feather", ".ipc")):
            return cls("table", path=t)
        raise UsageError(f"unknown router {t!r}; expected uniform, zipf:S or table:PATH.arrow", field="router")

    def __str__(self) -> str:
        return {"uniform": "uniform", "zipf": f"zipf:{self.s:g}"}.get(self.kind, f"table:{self.path}")


@dataclass(frozen=True)
class RunConfig:
    """One traced run; validated at construction (UsageError naming the field)."""

    prompt: int = 0
    context: int = 0
    generate: int = 0
    batch: int = 1
    weights: str = "bf16"
    kv: str = "bf16"
    activations: str = "bf16"
    router: str | RouterSpec = "uniform"
    seed: int = 0
    tile_m: int = 256
    tile_n: int = 256
    attn_tile: int = 128
    attention: str = "flash"
    alignment: int = DEFAULT_ALIGNMENT
    quant_group: int = DEFAULT_QUANT_GROUP
    turns: tuple = ()           # ((prompt, answer), ...) tokens per sequence per turn; () = no conversation
    kv_reuse: bool = True       # conversation: keep earlier turns' KV (else re-prefill the history)
    kv_offload: bool = False    # conversation with reuse: copy the KV out after a turn, back before the next
    tp: int = 1                 # tensor-parallel ranks per pipeline stage (Megatron)
    pp: int = 1                 # pipeline stages
    ep: int = 1                 # expert-parallel ranks (MoE layers), over the tp x dp devices of a stage
    dp: int = 1                 # data-parallel replicas (each serves ``batch`` sequences)
    pp_layers: tuple | None = None   # layers per stage; None = as even as possible, remainder to the last stages
    pp_microbatches: int = 1    # microbatches per segment (must divide batch)
    collective_buffers: str = "in_place"   # or "staged": copy into/out of a contiguous staging buffer

    def __post_init__(self):
        for name in ("prompt", "context", "generate", "batch", "seed", "tile_m", "tile_n", "attn_tile",
                     "alignment", "quant_group"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise UsageError(f"expected an integer, got {v!r}", field=name)
            if v < 0:
                raise UsageError(f"must not be negative, got {v}", field=name)
        for name in ("batch", "tile_m", "tile_n", "attn_tile", "quant_group"):
            if getattr(self, name) < 1:
                raise UsageError("must be at least 1", field=name)
        if self.alignment < 1 or self.alignment & (self.alignment - 1):
            raise UsageError(f"must be a power of two number of bytes, got {self.alignment}", field="alignment")
        if self.alignment > MAX_ALIGNMENT:
            raise UsageError(f"at most {MAX_ALIGNMENT} bytes (1 GiB), got {self.alignment}", field="alignment")
        if self.batch > MAX_BATCH:
            raise UsageError(f"at most {MAX_BATCH} sequences, got {self.batch}", field="batch")
        _check_parallel(self)
        object.__setattr__(self, "turns", _check_turns(self.turns))
        for name in ("kv_reuse", "kv_offload"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"expected true or false, got {getattr(self, name)!r}", field=name)
        if self.turns:
            if self.prompt or self.generate:
                raise UsageError("a conversation gives per-turn prompt and answer lengths; drop --prompt/--generate",
                                 field="turns")
            if self.kv_offload and not self.kv_reuse:
                raise UsageError("offloading KV between turns needs --kv-reuse (without reuse nothing is kept)",
                                 field="kv_offload")
        elif not self.kv_reuse or self.kv_offload:
            raise UsageError("--no-kv-reuse and --kv-offload apply to conversations; give --turns",
                             field="kv_offload" if self.kv_offload else "kv_reuse")
        if self.prompt == 0 and self.generate == 0 and not self.turns:
            raise UsageError("nothing to trace: give a prompt length and/or tokens to generate", field="prompt")
        check_dtype(self.weights, WEIGHT_DTYPES, "weights")
        check_dtype(self.kv, KV_DTYPES, "kv")
        check_dtype(self.activations, ACTIVATION_DTYPES, "activations")
        if self.attention not in ATTENTION_KERNELS:
            raise UsageError(f"unknown attention kernel {self.attention!r}; expected one of "
                             f"{', '.join(ATTENTION_KERNELS)}", field="attention")
        object.__setattr__(self, "router", RouterSpec.parse(self.router))
        if self.router.kind == "table" and not Path(self.router.path).is_file():
            raise UsageError("routing table not found", file=self.router.path, field="router")

    @property
    def devices(self) -> int:
        """Devices of the run: ``dp x pp x tp``."""
        return self.dp * self.pp * self.tp

    @property
    def sharded(self) -> bool:
        """Whether the run departs from one device lowered as one (any parallelism or microbatching)."""
        return any(getattr(self, k) != v for k, v in PARALLEL_DEFAULTS.items())

    @property
    def max_positions(self) -> int:
        """KV-cache positions per sequence at the end of the run."""
        return self.context + self.prompt + self.generate + sum(p + a for p, a in self.turns)

    def to_dict(self) -> dict:
        """JSON-able parameters; the conversation keys appear only for a conversation (so single runs
        keep the manifest they always had)."""
        d = asdict(self)
        d["router"] = str(self.router)
        if self.turns:
            d["turns"] = [list(t) for t in self.turns]
        else:
            for k in ("turns", "kv_reuse", "kv_offload"):
                del d[k]
        for k, v in PARALLEL_DEFAULTS.items():   # parallelism keys only when set (one-device manifests unchanged)
            if d[k] == v:
                del d[k]
        if d.get("pp_layers") is not None:
            d["pp_layers"] = list(d["pp_layers"])
        return d


PARALLEL_DEFAULTS = {"tp": 1, "pp": 1, "ep": 1, "dp": 1, "pp_layers": None, "pp_microbatches": 1,
                     "collective_buffers": "in_place"}
COLLECTIVE_BUFFERS = ("in_place", "staged")
MAX_DEVICES = 1 << 12


def _check_parallel(run: "RunConfig") -> None:
    """The model-independent checks of the parallelism fields (the model's are in tierlab.traces.workload.shard)."""
    for name in ("tp", "pp", "ep", "dp", "pp_microbatches"):
        v = getattr(run, name)
        opt = "--" + name.replace("_", "-")
        if isinstance(v, bool) or not isinstance(v, int):
            raise UsageError(f"expected an integer, got {v!r}", field=opt)
        if v < 1:
            raise UsageError(f"must be at least 1, got {v}", field=opt)
    if run.dp * run.pp * run.tp > MAX_DEVICES:
        raise UsageError(f"dp x pp x tp = {run.dp * run.pp * run.tp} devices; at most {MAX_DEVICES}", field="tp")
    if run.collective_buffers not in COLLECTIVE_BUFFERS:
        raise UsageError(f"unknown {run.collective_buffers!r}; expected one of {', '.join(COLLECTIVE_BUFFERS)}",
                         field="collective_buffers")
    if run.batch % run.pp_microbatches:
        raise UsageError(f"{run.pp_microbatches} microbatches do not divide the batch of {run.batch} sequences",
                         field="pp_microbatches")
    if run.pp_layers is not None:
        layers = parse_pp_layers(run.pp_layers)
        if len(layers) != run.pp:
            raise UsageError(f"{len(layers)} stages listed for --pp {run.pp}", field="pp_layers")
        object.__setattr__(run, "pp_layers", layers)


def parse_pp_layers(value) -> tuple:
    """``"6,18,18"`` or a sequence of ints -> a tuple of layers per stage (each at least 1)."""
    items = str(value).split(",") if isinstance(value, str) else list(value)
    try:
        out = tuple(int(str(x).strip()) if not isinstance(x, int) or isinstance(x, bool) else x for x in items)
    except ValueError:
        raise UsageError(f"expected layers per stage separated by commas (e.g. 6,18,18), got {value!r}",
                         field="pp_layers") from None
    if not out or min(out) < 1:
        raise UsageError(f"every stage needs at least 1 layer, got {value!r}", field="pp_layers")
    return out


def _check_turns(turns) -> tuple:
    """``turns`` as a tuple of ``(prompt, answer)`` int pairs; prompt >= 1, answer >= 0."""
    if isinstance(turns, str):
        return parse_turn_lengths(turns)
    try:
        pairs = [tuple(t) for t in turns]
    except TypeError:
        raise UsageError(f"expected (prompt, answer) pairs, got {turns!r}", field="turns") from None
    out = []
    for i, pair in enumerate(pairs):
        if len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in pair):
            raise UsageError(f"turn {i}: expected a (prompt, answer) pair of integers, got {pair!r}", field="turns")
        p, a = pair
        if p < 1 or a < 0:
            raise UsageError(f"turn {i}: prompt must be at least 1 and answer not negative, got {p}:{a}",
                             field="turns")
        out.append((p, a))
    return tuple(out)


def parse_turn_lengths(text: str) -> tuple:
    """``"512:128,256:64"`` -> ``((512, 128), (256, 64))`` (prompt:answer tokens per turn)."""
    out = []
    for item in str(text).split(","):
        p, colon, a = item.strip().partition(":")
        try:
            out.append((int(p), int(a)))
        except ValueError:
            raise UsageError(f"expected PROMPT:ANSWER pairs separated by commas (e.g. 512:128,256:128), "
                             f"got {item.strip()!r}", field="turn_lengths") from None
    return _check_turns(out)


def conversation(turns: int | None = None, prompt: int | None = None, answer: int | None = None,
                 lengths: str | None = None) -> tuple:
    """Per-turn lengths from the command-line forms: ``turns`` equal turns of ``prompt``/``answer``
    tokens, or an explicit ``lengths`` list (``turns``, if also given, must match its length).
    Returns ``()`` when none is given."""
    if lengths is not None:
        if prompt is not None or answer is not None:
            raise UsageError("give either --turn-lengths or --turn-prompt/--turn-answer", field="turn_lengths")
        out = parse_turn_lengths(lengths)
        if turns is not None and turns != len(out):
            raise UsageError(f"--turns {turns} but --turn-lengths lists {len(out)}", field="turns")
        return out
    if turns is None:
        if prompt is not None or answer is not None:
            raise UsageError("--turn-prompt/--turn-answer need --turns", field="turns")
        return ()
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        raise UsageError(f"expected a number of turns of at least 1, got {turns!r}", field="turns")
    if prompt is None or answer is None:
        raise UsageError("--turns needs --turn-prompt and --turn-answer (or --turn-lengths)",
                         field="turn_prompt" if prompt is None else "turn_answer")
    for name, v in (("turn_prompt", prompt), ("turn_answer", answer)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise UsageError(f"expected an integer, got {v!r}", field=name)
    return _check_turns([(prompt, answer)] * turns)
