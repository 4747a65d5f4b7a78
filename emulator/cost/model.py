"""Energy and latency from a replay's counts and the chip's numbers (no re-simulation).

Count first, cost later: changing an energy or bandwidth figure only needs this module again.

Energy (joules), per op, split by component:
  tier ``i``:   bytes_read_i x read_energy_i + bytes_written_i x write_energy_i
  link ``l``:   (bytes_down_l + bytes_up_l) x link energy_l
  compute:      FLOPs x energy per FLOP of the run's compute dtype, for ops run on the chip's compute
  PIM at ``i``: pim_bytes_i x the PIM unit's in-bank read energy, plus the FLOPs of the ops that unit
                runs (:mod:`tierlab.pipeline.pim_plan`) x its energy per FLOP
The end-of-run flush, if replayed, is costed separately (``flush_j``) and not in the totals.
That is the **dynamic** energy. The **board** energy adds the chip's static power (``[power]``:
``static``, else ``idle``) over the modelled time of each decode step: the calibrated latency where the
chip has one, else the roofline's (``per_token``'s ``energy_board_basis`` says which). A chip without
``[power]`` reports dynamic energy only, with a :class:`NoPowerWarning` saying so.

Latency (seconds), per op, a roofline stated as such: the largest of the op's compute time
(FLOPs / peak FLOP/s; resource ``compute``), each tier's (bytes_read + bytes_written) / bandwidth (less, on a tier that forwards its misses, the
fetched fill bytes a read took on their way through: see below),
each link's (bytes_down + bytes_up) / bandwidth, each PIM unit's pim_bytes / internal bandwidth
(``pim:TIER``) and, for an op run in memory, its FLOPs / the unit's FLOP/s (``pim_flops:TIER``).
The resource reaching that maximum is the op's **bound**. Per decode step: the sum over the step's
ops. Per token: a decode step produces one token for each of the ``batch`` sequences, so bytes and
energy per token are per step / batch, the latency per token is the step's latency, and tokens/s =
batch / step latency (averaged over the decode steps).

A tier with ``forward_misses`` (a memory-side cache: a GPU's L2) hands a read miss's block to the
reader as it fills it, so the block crosses the tier's port once. Its busy time counts, per op,
bytes_read + bytes_written - min(fetched fill bytes, bytes_read): a streamed weight costs the L2 one
pass, and the HBM behind it binds. Measured: a one-pass reduction on H100 reads 3,134 GB/s from HBM
(95 % of 3.35 TB/s), which a fill-plus-read charge at the L2's 5.5 TB/s (2.75 TB/s of streaming)
could not reach (chip file h100.toml, [S104] [S47]).

Compute dtype: the trace's activations dtype (``manifest["run"]["activations"]``), falling back to its
weights dtype, then ``bf16``, then the chip's first listed dtype (synthetic traces have no run); an FP4
activation format (``nvfp4``, ``mxfp4``) the chip lacks falls to ``fp8`` then ``bf16``, with a note
(:mod:`tierlab.chip.compute`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from tierlab.engine.counters import BYTES_READ, BYTES_WRITTEN, FILLS, PIM_BYTES, UNFETCHED, link_bytes
from tierlab.chip.hierarchy import Chip


class NoPowerWarning(UserWarning):
    """A chip without ``[power]``: its energy is the dynamic energy only (the CLI prints one line)."""


def compute_dtype(chip: Chip, manifest: dict | None) -> str:
    """The dtype whose peak rate and energy per FLOP cost the run's arithmetic
    (:func:`tierlab.chip.compute.compute_dtype_of_run`: an FP4 format the chip lacks falls back
    to fp8, then bf16, with a note)."""
    from tierlab.chip.compute import compute_dtype_of_run
    return compute_dtype_of_run(chip, manifest)


@dataclass
class Cost:
    """Per-op energy and latency. Arrays are indexed by op id (and tier / link where named)."""

    resources: tuple[str, ...]       # "compute", "tier:NAME", "link:A-B", "pim:NAME"
    dtype: str
    tier_j: np.ndarray               # [op, tier]
    link_j: np.ndarray               # [op, link]
    compute_j: np.ndarray            # [op]
    pim_j: np.ndarray                # [op, tier]
    time_s: np.ndarray               # [op, resource]: each resource's busy time
    latency_s: np.ndarray            # [op]
    bound: np.ndarray                # [op]: index into resources
    flush_j: float
    organisation: object = None      # tierlab.cost.organisation.Organisation: the calibrated latency
    static_power_w: float | None = None  # the chip's [power] static watts (None: no [power], dynamic only)

    @property
    def energy_j(self) -> np.ndarray:
        """Total energy per op."""
        return self.tier_j.sum(1) + self.link_j.sum(1) + self.compute_j + self.pim_j.sum(1)

    def totals(self, rows=None) -> dict:
        """Energy split (joules) over the ops selected by ``rows`` (a bool mask or index; all if None)."""
        sel = slice(None) if rows is None else rows
        tiers = self.tier_j[sel].sum(0)
        links = self.link_j[sel].sum(0)
        pim = self.pim_j[sel].sum(0)
        comp = float(self.compute_j[sel].sum())
        return {"total": float(tiers.sum() + links.sum() + pim.sum() + comp),
                "tiers": float(tiers.sum()), "links": float(links.sum()), "compute": comp,
                "pim": float(pim.sum()), "by_tier": tiers.tolist(), "by_link": links.tolist(),
                "pim_by_tier": pim.tolist()}


def port_bytes(tiers, per_op: np.ndarray) -> np.ndarray:
    """Bytes through each tier's port per op, ``[op, tier]``: bytes read + written, less, on a tier
    that forwards its misses, the fetched fill bytes a read took on their way through (module
    docstring)."""
    b_rd = per_op[:, :, BYTES_READ].astype(np.float64)
    port = b_rd + per_op[:, :, BYTES_WRITTEN].astype(np.float64)
    for i, t in enumerate(tiers):
        if t.forward_misses:
            fetched = (per_op[:, i, FILLS] - per_op[:, i, UNFETCHED]).astype(np.float64) * t.block_bytes
            port[:, i] -= np.minimum(fetched, b_rd[:, i])
    return port


def cost(chip: Chip, per_op: np.ndarray, block_bytes: np.ndarray, flops: np.ndarray,
         manifest: dict | None = None, flush: np.ndarray | None = None) -> Cost:
    """Cost ``per_op[op, tier, counter]`` counts on ``chip`` given each op's FLOPs."""
    tiers, links = chip.tiers, chip.links
    n_ops, n_t = per_op.shape[0], len(tiers)
    dtype = compute_dtype(chip, manifest)
    flops = np.asarray(flops, np.float64)
    rd = np.array([t.read_energy_j_per_byte for t in tiers])
    wr = np.array([t.write_energy_j_per_byte for t in tiers])
    bw = np.array([t.bandwidth_bytes_per_s for t in tiers])
    le = np.array([lk.energy_j_per_byte for lk in links])
    lbw = np.array([lk.bandwidth_bytes_per_s for lk in links])
    b_rd = per_op[:, :, BYTES_READ].astype(np.float64)
    b_wr = per_op[:, :, BYTES_WRITTEN].astype(np.float64)
    pimb = per_op[:, :, PIM_BYTES].astype(np.float64)
    lb = link_bytes(per_op, block_bytes).sum(axis=2).astype(np.float64)  # [op, link] down + up
    tier_j = b_rd * rd + b_wr * wr
    link_j = lb * le if len(links) else np.zeros((n_ops, 0))

    pim_tiers = [i for i, t in enumerate(tiers) if t.pim is not None]
    pim_j = np.zeros((n_ops, n_t))
    pim_time = np.zeros((n_ops, len(pim_tiers)))
    on_pim = np.full(n_ops, -1)
    if pim_tiers:
        any_pim = pimb.sum(1) > 0
        on_pim[any_pim] = pimb[any_pim].argmax(1)
        for k, i in enumerate(pim_tiers):
            u = tiers[i].pim
            pim_j[:, i] = pimb[:, i] * u.read_energy_j_per_byte
            pim_time[:, k] = pimb[:, i] / u.internal_bandwidth_bytes_per_s
    peak = chip.compute.flop_per_s[dtype]
    e_flop = chip.compute.energy_j_per_flop.get(dtype, 0.0)
    compute_j = flops * e_flop
    compute_s = flops / peak
    pim_flop_time = np.zeros((n_ops, len(pim_tiers)))
    for k, i in enumerate(pim_tiers):
        # an op run in memory does its arithmetic in the PIM unit: its FLOPs are PIM energy and time
        sel = on_pim == i
        u = tiers[i].pim
        pim_j[sel, i] += flops[sel] * u.energy_j_per_flop
        pim_flop_time[sel, k] = flops[sel] / u.flop_per_s
        compute_j[sel] = 0.0
        compute_s[sel] = 0.0
    port = port_bytes(tiers, per_op)
    time_s = np.concatenate([compute_s[:, None], port / bw, lb / lbw if len(links) else
                             np.zeros((n_ops, 0)), pim_time, pim_flop_time], axis=1)
    resources = (("compute",) + tuple(f"tier:{t.name}" for t in tiers)
                 + tuple(f"link:{lk.upper}-{lk.lower}" for lk in links)
                 + tuple(f"pim:{tiers[i].name}" for i in pim_tiers)
                 + tuple(f"pim_flops:{tiers[i].name}" for i in pim_tiers))
    latency = time_s.max(axis=1) if n_ops else np.zeros(0)
    bound = time_s.argmax(axis=1) if n_ops else np.zeros(0, np.int64)
    flush_j = 0.0
    if flush is not None:
        f = np.asarray(flush)[None]
        flush_j = float((f[0, :, BYTES_READ] * rd + f[0, :, BYTES_WRITTEN] * wr).sum()
                        + (link_bytes(f, block_bytes)[0].sum(1) * le).sum())
    static_w = None
    if chip.power is None:
        warnings.warn(NoPowerWarning(f"{chip.source_file or chip.name}: no [power] section, so energy is the "
                                     "dynamic energy only (j_per_token = j_per_token_dynamic)"), stacklevel=2)
    else:
        static_w = chip.power.static_power_w
    return Cost(resources, dtype, tier_j, link_j, compute_j, pim_j, time_s, latency, bound, flush_j,
                static_power_w=static_w)


def board_energy(cst: Cost, dynamic_j: float, time_s: float) -> float:
    """Board energy (J) of a step or request: its dynamic energy plus the chip's static power over its
    modelled ``time_s``; the dynamic energy alone for a chip without ``[power]``."""
    return dynamic_j + (cst.static_power_w or 0.0) * time_s


def add_board_energy(out: dict, cst: Cost, time_s: float, basis: str, devices: int = 1) -> dict:
    """Add the per-token board-energy keys to a ``per_token`` dict whose ``energy_j`` is the dynamic
    energy per token: ``energy_dynamic_j`` and ``j_per_token_dynamic`` (= ``energy_j``, kept in its
    meaning), ``energy_board_j`` and ``j_per_token`` (dynamic + ``devices`` x static power x
    ``time_s`` per token, ``time_s`` the step's modelled time), ``static_power_w`` and
    ``energy_board_basis`` (``calibrated``, ``roofline`` or ``dynamic only``)."""
    dyn = float(out["energy_j"])
    batch = int(out.get("tokens_per_step", out.get("batch", 1)) or 1)   # tokens a step makes
    static = None if cst.static_power_w is None else cst.static_power_w * devices
    board = dyn + (static or 0.0) * time_s / batch
    out.update({"energy_dynamic_j": dyn, "j_per_token_dynamic": dyn, "energy_board_j": board,
                "j_per_token": board, "static_power_w": static,
                "energy_board_basis": basis if static is not None else "dynamic only"})
    return out


def per_step(cst: Cost, step: np.ndarray, phase: np.ndarray) -> dict[int, np.ndarray]:
    """Op ids of each decode step (``phase == "decode"``), keyed by step."""
    out: dict[int, np.ndarray] = {}
    dec = np.nonzero(np.asarray(phase) == "decode")[0]
    steps = np.asarray(step)[dec]
    for s in np.unique(steps):
        out[int(s)] = dec[steps == s]
    return out


def per_token(cst: Cost, per_op: np.ndarray, block_bytes: np.ndarray, step: np.ndarray,
              phase: np.ndarray, batch: int, link_names: list[str], tier_names=None) -> dict | None:
    """Decode figures per token (see the module docstring); None when the trace has no decode.

    ``in_memory_bytes_by_tier`` (tiers whose PIM unit read anything, with ``tier_names``) and
    ``energy_split_j`` (tiers, links, compute, pim) are per token like ``bytes_by_link``.
    With ``cst.organisation`` (:mod:`tierlab.cost.organisation`) the calibrated figures are added
    beside the roofline's (``latency_s`` and ``tokens_per_s`` stay the roofline): per decode step
    ``latency_calibrated_s``, ``tokens_per_s_calibrated``, ``kernels`` (kernels per step, i.e. per
    token of each sequence), ``overhead_s`` (their fixed overhead), ``bound_calibrated`` and
    ``calibration`` (the settings used).
    """
    steps = per_step(cst, step, phase)
    if not steps:
        return None
    lat = np.array([cst.latency_s[ids].sum() for ids in steps.values()])
    en = np.array([cst.energy_j[ids].sum() for ids in steps.values()])
    lb = np.stack([link_bytes(per_op[ids].sum(0), block_bytes).sum(1) for ids in steps.values()])
    time_by_res = np.stack([cst.time_s[ids].sum(0) for ids in steps.values()]).mean(0)
    bound_counts = np.zeros(len(cst.resources))
    for ids in steps.values():
        np.add.at(bound_counts, cst.bound[ids], cst.latency_s[ids])
    step_latency = float(lat.mean())
    n_steps = len(steps)
    ids_all = np.concatenate(list(steps.values()))
    split = cst.totals(ids_all)
    in_mem = per_op[ids_all][:, :, PIM_BYTES].sum(0) / n_steps / batch
    out = {
        "steps": len(steps),
        "batch": int(batch),
        "bytes_by_link": {n: float(v) / batch for n, v in zip(link_names, lb.mean(0))},
        "energy_j": float(en.mean()) / batch,
        "latency_s": step_latency,
        "tokens_per_s": batch / step_latency if step_latency > 0 else float("inf"),
        "bound": cst.resources[int(bound_counts.argmax())],
        "time_by_resource_s": {r: float(t) for r, t in zip(cst.resources, time_by_res)},
        "in_memory_bytes_by_tier": {} if tier_names is None else
        {n: float(v) for n, v in zip(tier_names, in_mem) if v},
        "energy_split_j": {k: split[k] / n_steps / batch for k in ("tiers", "links", "compute", "pim")},
    }
    org = cst.organisation
    if org is not None:
        cal = np.array([org.latency_s(ids) for ids in steps.values()])
        kernels = np.array([org.kernels(ids) for ids in steps.values()])
        by_res = np.zeros(len(cst.resources))
        for ids in steps.values():
            g = np.unique(org.group[ids])
            np.add.at(by_res, org.group_bound[g], org.group_s[g])
        cal_latency = float(cal.mean())
        out.update({
            "latency_calibrated_s": cal_latency,
            "tokens_per_s_calibrated": batch / cal_latency if cal_latency > 0 else float("inf"),
            "kernels": float(kernels.mean()),
            "overhead_s": float(kernels.mean()) * org.kernel_overhead_s,
            "bound_calibrated": cst.resources[int(by_res.argmax())],
            "calibration": {"fusion": org.fusion, "overlap": org.overlap,
                            "kernel_overhead_s": org.kernel_overhead_s, "achievable": dict(org.achievable)},
        })
        return add_board_energy(out, cst, cal_latency, "calibrated")
    return add_board_energy(out, cst, step_latency, "roofline")


def prefill(cst: Cost, phase: np.ndarray, tokens: int) -> dict | None:
    """The prefill of the prompt, the time to first token without queueing or the host (None without
    prefill): ``tokens`` (prompt x batch), ``latency_s`` (its ops' roofline latencies summed) and
    ``bound`` (the resource bounding most of it); with :attr:`Cost.organisation`,
    ``latency_calibrated_s`` and ``bound_calibrated`` as :func:`per_token` has them."""
    ids = np.flatnonzero(np.asarray(phase, dtype=object) == "prefill")
    if not len(ids):
        return None
    by = np.zeros(len(cst.resources))
    np.add.at(by, cst.bound[ids], cst.latency_s[ids])
    out = {"tokens": int(tokens), "latency_s": float(cst.latency_s[ids].sum()),
           "bound": cst.resources[int(by.argmax())], "latency_calibrated_s": None, "bound_calibrated": None}
    org = cst.organisation
    if org is not None:
        g = np.unique(org.group[ids])
        cal = np.zeros(len(cst.resources))
        np.add.at(cal, org.group_bound[g], org.group_s[g])
        out["latency_calibrated_s"] = org.latency_s(ids)
        out["bound_calibrated"] = cst.resources[int(cal.argmax())]
    return out
