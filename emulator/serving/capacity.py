"""How many requests fit at once: the paged KV cache's limit on concurrency, a closed form.

Per device, in bytes (the busiest device of the plan)::

    max_concurrency = floor((utilisation x memory - weights - workspace) / kv_per_sequence) x dp

- ``memory``: the capacity of the chip's home tiers (:func:`memory_tiers`: its scratchpads and
  memories nearest first, up to its first ``memory`` tier: HBM on a GPU), where a serving engine
  keeps weights and KV, less the **runtime's reserve** (the chip file's ``[reserve]``,
  :class:`tierlab.chip.hierarchy.Reserve`: the CUDA context, the framework's fixed workspace and an
  allocator fragmentation share), which :func:`memory_tier` takes off, so that every user of it (this
  closed form, ``throughput --concurrency auto``, the request-stream server) keeps the same reserve.
- ``utilisation``: the share of what is left the engine may take (vLLM's ``gpu_memory_utilization``,
  default 0.9).
- ``weights``: the device's weight tensors exactly as the trace declares them
  (:func:`tierlab.traces.model.weight_formats.weight_tensors` over the weights the shard holds).
- ``workspace``: the activation tensors of a step of ``max_batch_tokens`` tokens
  (:func:`tierlab.analysis.capacity.activation_bytes` of the device's local model).
- ``kv_per_sequence``: the KV a request holds at its longest, ``isl + osl`` positions rounded up to
  whole 16-token blocks (vLLM's default block), over the layers the device holds (a sliding-window
  layer keeps at most its window): a paged cache admits a request only if its blocks can be had.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tierlab.common.errors import CapacityError, UsageError
from tierlab.analysis.capacity import activation_bytes
from tierlab.chip.hierarchy import Chip
from tierlab.traces.workload.run import RunConfig
from tierlab.traces.model.spec import ModelSpec
from tierlab.traces.model.weight_formats import weight_tensors

BLOCK_TOKENS = 16
UTILISATION = 0.9


@dataclass(frozen=True)
class KvLimit:
    """The closed form's terms (bytes per device) and its answer."""

    memory_tier: str
    memory_bytes: int                  # the home tiers' capacity less the runtime's reserve
    utilisation: float
    weight_bytes: int
    workspace_bytes: int
    kv_bytes_per_sequence: int
    positions_per_sequence: int
    dp: int
    max_concurrency: int
    runtime_reserve_bytes: int = 0     # the chip's [reserve]: context + workspace + fragmentation

    @property
    def reserve_bytes(self) -> int:
        """Everything kept from weights and KV: the runtime's reserve, the share past ``utilisation``
        and the activation workspace of the largest step."""
        return (self.runtime_reserve_bytes + self.memory_bytes - int(self.utilisation * self.memory_bytes)
                + self.workspace_bytes)

    def to_dict(self) -> dict:
        return {**asdict(self), "reserve_bytes": self.reserve_bytes,
                "formula": "floor((utilisation x memory - weights - workspace) / kv_per_sequence) x dp"}


def memory_tiers(chip: Chip) -> list:
    """The tiers a serving engine keeps weights and KV in: the chip's scratchpads and memories nearest
    first, up to and including its first ``memory`` tier (HBM on a GPU, TPU, Trainium or SN40L, with
    the SRAM scratchpad above it where the chip has one; SRAM and MemoryX on a WSE-3; the SRAM alone
    on a chip with no memory tier). Farther memories (host DDR) are not used for KV."""
    out = []
    for t in chip.tiers:
        if t.managed in ("memory", "scratchpad"):
            out.append(t)
            if t.managed == "memory":
                break
    if not out:
        raise UsageError(f"chip {chip.name!r} has no memory or scratchpad tier to hold the KV cache", field="chip")
    return out


def memory_tier(chip: Chip):
    """The home tiers of :func:`memory_tiers` as one: its ``name`` (``a+b``), ``capacity_bytes`` (what
    weights, KV and activations may use: the tiers' capacity less the runtime's reserve),
    ``raw_capacity_bytes`` and ``reserve_bytes`` (the chip's ``[reserve]``; 0 without one)."""
    from types import SimpleNamespace

    tiers = memory_tiers(chip)
    raw = int(sum(t.capacity_bytes for t in tiers))
    reserve = chip.reserve.bytes_of(raw) if getattr(chip, "reserve", None) is not None else 0
    if reserve >= raw:
        raise UsageError(f"chip {chip.name!r}: its [reserve] ({reserve / 1e9:.2f} GB) leaves nothing of "
                         f"{raw / 1e9:.2f} GB", field="reserve")
    return SimpleNamespace(name="+".join(t.name for t in tiers), capacity_bytes=raw - reserve,
                           raw_capacity_bytes=raw, reserve_bytes=reserve)


def device_terms(spec: ModelSpec, run: RunConfig, positions: int, max_batch_tokens: int) -> list[tuple[int, int, int]]:
    """(weights, workspace, kv per sequence) bytes of each device of one replica of ``run`` on ``spec``."""
    if not run.sharded:
        w = sum(t.nbytes + sum(nb for *_, nb in t.aux) for t in weight_tensors(spec, run.weights, run.quant_group))
        kv = spec.kv_bytes(positions, run.kv)      # the index keys of a sparse-attention indexer too
        return [(w, activation_bytes(spec, 1, max_batch_tokens, run.activations), kv)]
    from tierlab.traces.workload.shard import ShardPlan

    plan = ShardPlan(spec, run)
    out = []
    for sh in plan.shards:
        if sh.dp_rank:
            continue
        local = plan.local_spec(sh)
        shapes = [x for x in local.weight_shapes() if plan.holds(sh, x.name, x.layer, x.expert)]
        w = sum(t.nbytes + sum(nb for *_, nb in t.aux)
                for t in weight_tensors(local, run.weights, run.quant_group, shapes=shapes))
        kv = sum(local.layer_kv_bytes(i, positions, run.kv) for i in sh.layers)
        act = activation_bytes(local, 1, max_batch_tokens, run.activations)
        out.append((w, act, kv))
    return out


def kv_limit(spec: ModelSpec, run: RunConfig, chip: Chip, isl: int, osl: int, max_batch_tokens: int, *,
             utilisation: float = UTILISATION) -> KvLimit:
    """The closed form of the module docstring. CapacityError when not one request fits."""
    if not 0 < utilisation <= 1:
        raise UsageError(f"expected a share in (0, 1], got {utilisation}", field="memory_utilisation")
    tier = memory_tier(chip)
    positions = -(-(isl + osl) // BLOCK_TOKENS) * BLOCK_TOKENS
    cap = int(utilisation * tier.capacity_bytes)
    # the device with room for the fewest sequences bounds them all
    w, act, kv = min(device_terms(spec, run, positions, max_batch_tokens),
                     key=lambda t: (cap - t[0] - t[1]) // t[2] if t[2] else 1 << 62)
    n = (cap - w - act) // kv if kv else 0
    if n < 1:
        raise CapacityError(f"{spec.name} on {chip.name}: weights {w / 1e9:.2f} GB and workspace {act / 1e9:.2f} GB "
                            f"of {utilisation:g} x {tier.capacity_bytes / 1e9:.1f} GB ({tier.name}) leave room for no "
                            f"request of {isl}+{osl} tokens ({kv / 1e9:.3f} GB of KV each)", field="input")
    return KvLimit(memory_tier=tier.name, memory_bytes=int(tier.capacity_bytes), utilisation=utilisation,
                   weight_bytes=int(w), workspace_bytes=int(act), kv_bytes_per_sequence=int(kv),
                   positions_per_sequence=positions, dp=run.dp, max_concurrency=int(n) * run.dp,
                   runtime_reserve_bytes=int(tier.reserve_bytes))
