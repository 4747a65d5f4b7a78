"""What a kernel returns: operators with their access descriptors and FLOPs.

A kernel is a plain function of shapes, dtypes (as byte sizes) and tensor handles; it returns a
list of :class:`Op`. It never writes a trace itself, so each kernel can be tested on its own; the
lowering (:mod:`tierlab.traces.lowering.generate`) stamps layer/phase/step and hands the ops to the trace writer.

``kernels/`` has one module per operator family: ``embedding`` (gather), ``norm`` (norms, rotary,
element-wise), ``linear`` (decode GEMV / prefill tiled GEMM), ``attention`` (flash and naive,
GQA/MQA/MLA-aware, KV append, sliding and chunked rings; ``ATTENTION`` is their registry by name),
``mlp`` (gated and ungated), ``moe`` (router, dispatch, experts, combine) and ``ssm`` (Mamba / Gated
DeltaNet convolution and scan over a fixed recurrent state). It is imported as ``tierlab.kernels``
(``pyproject.toml`` maps the name to the folder): the bare name ``kernels`` belongs to Hugging Face's
package, which Transformers imports, so the folder has no ``__init__.py`` and never shadows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class Ten(NamedTuple):
    """A tensor handle: trace tensor id and size in bytes."""

    id: int
    nbytes: int


class Access(NamedTuple):
    """``count`` chunks of ``nbytes`` bytes at ``offset + k*stride`` in tensor ``tensor``."""

    tensor: int
    offset: int
    nbytes: int
    count: int = 1
    stride: int = 0
    is_write: bool = False


@dataclass
class Op:
    """One operator instance: name, kind, tokens processed, FLOPs, and its accesses in issue order."""

    name: str
    kind: str
    tokens: int
    flops: int
    accesses: list[Access] = field(default_factory=list)
    pim_eligible: bool = False
    expert: int = -1

    def read(self, t: Ten, offset: int, nbytes: int, count: int = 1, stride: int = 0) -> "Op":
        if nbytes > 0 and count > 0:
            self.accesses.append(Access(t.id, offset, nbytes, count, stride, False))
        return self

    def write(self, t: Ten, offset: int, nbytes: int, count: int = 1, stride: int = 0) -> "Op":
        if nbytes > 0 and count > 0:
            self.accesses.append(Access(t.id, offset, nbytes, count, stride, True))
        return self

    def read_all(self, t: "Ten | tuple[Ten, ...] | None") -> "Op":
        """Read the whole of ``t`` (a tensor, or each of a tuple: a weight's scales and zero points)."""
        if type(t) is Ten:
            self.read(t, 0, t.nbytes)
        elif t is not None:
            for x in t:
                self.read_all(x)
        return self
