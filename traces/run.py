"""The run: what is traced (prompt, context, tokens generated, batch), dtypes, router and kernel choices.

Lengths are in tokens per sequence. ``context`` tokens are already in the KV cache and are not
traced; ``prompt`` tokens are prefilled (after the context); then ``generate`` decode steps each
process one new token per sequence. Tile sizes are in elements: ``tile_m`` tokens per prefill GEMM
tile (the weight matrix is streamed once per tile of tokens, so prefill reads each weight
``ceil(tokens / tile_m)`` times), ``tile_n`` output features per tile (the activation tile is read
once per tile of outputs), ``attn_tile`` query rows per flash-attention tile.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from kernels import ATTENTION
from traces.dtypes import ACTIVATION_DTYPES, DEFAULT_QUANT_GROUP, KV_DTYPES, WEIGHT_DTYPES, check_dtype
from traces.errors import UsageError
from traces.format import DEFAULT_ALIGNMENT

ATTENTION_KERNELS = tuple(ATTENTION)


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
        if self.prompt == 0 and self.generate == 0:
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
    def max_positions(self) -> int:
        """KV-cache positions per sequence at the end of the run."""
        return self.context + self.prompt + self.generate

    def to_dict(self) -> dict:
        d = asdict(self)
        d["router"] = str(self.router)
        return d
