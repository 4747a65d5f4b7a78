"""MoE routers: which experts each token of each MoE layer activates. Seeded and deterministic.

- ``uniform``: every token picks ``k`` distinct experts uniformly at random.
- ``zipf:S``: expert popularity in each layer follows Zipf's law with exponent S over a random
  (seeded, per-layer) ranking of the experts; ``k`` distinct experts are drawn without replacement
  in proportion to popularity (Gumbel top-k).
- ``table``: a recorded routing log, an Arrow IPC file or stream with integer columns ``step``,
  ``layer``, ``token``, ``expert`` (one row per token and chosen expert). ``step`` is -1 for
  prefill and the decode step otherwise; ``token`` is ``sequence * prompt + position`` in prefill
  and the sequence index in decode; ``layer`` is the model's layer index. Each token that a run
  needs must appear with exactly ``k`` distinct experts.

The random stream of (layer, step) depends only on (seed, layer, step), never on the order of calls.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tierlab.common.errors import TraceError, UsageError
from tierlab.traces.workload.run import RouterSpec

ROUTING_COLUMNS = ("step", "layer", "token", "expert")
ROUTING_SCHEMA = pa.schema([(c, pa.int32()) for c in ROUTING_COLUMNS])
ROUTING_FILE = "routing.arrow"   # optional side table of a trace (``tierlab trace --record-routing``)


_ROUTES: dict = {}        # (router, seed, experts, k, layer, step, tokens) -> experts drawn
_ROUTES_MAX = 512


class Router:
    """Routes tokens to experts: :meth:`route` returns an int array ``(tokens, k)``."""

    def __init__(self, spec: RouterSpec, seed: int, n_experts: int, k: int):
        self.spec, self.seed, self.n_experts, self.k = spec, seed, n_experts, k
        self._table = None
        if spec.kind == "table":
            self._table = _load_table(spec.path, n_experts)

    def route(self, layer: int, step: int, n_tokens: int) -> np.ndarray:
        """The experts of each of ``n_tokens`` tokens at (``layer``, ``step``): an int array
        ``(n_tokens, k)``, read-only. A random router's draws depend only on (seed, layer, step,
        tokens), so they are kept (:data:`_ROUTES`): the devices of a sharded replica, which route the
        same tokens with the same seed, draw them once."""
        if self.spec.kind == "table":
            return self._from_table(layer, step, n_tokens)
        key = (str(self.spec), self.seed, self.n_experts, self.k, layer, step, n_tokens)
        hit = _ROUTES.get(key)
        if hit is None:
            if len(_ROUTES) >= _ROUTES_MAX:
                _ROUTES.clear()
            hit = _ROUTES[key] = self._draw(layer, step, n_tokens)
            hit.flags.writeable = False
        return hit

    def _draw(self, layer: int, step: int, n_tokens: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, layer, step + 1])
        log_p = np.zeros(self.n_experts)
        if self.spec.kind == "zipf":
            rank = np.random.default_rng([self.seed, layer, 1 << 30]).permutation(self.n_experts)
            log_p = -self.spec.s * np.log1p(rank.astype(np.float64))   # expert e has rank rank[e]
        out = np.empty((n_tokens, self.k), dtype=np.int64)
        chunk = max(1, (1 << 22) // max(1, self.n_experts))
        for lo in range(0, n_tokens, chunk):
            hi = min(n_tokens, lo + chunk)
            keys = log_p + rng.gumbel(size=(hi - lo, self.n_experts))
            out[lo:hi] = np.argpartition(-keys, self.k - 1, axis=1)[:, :self.k]
        return out

    def _from_table(self, layer: int, step: int, n_tokens: int) -> np.ndarray:
        rows = self._table.get((step, layer))
        where = f"step {step}, layer {layer}"
        if rows is None:
            raise TraceError(f"routing table has no rows for {where}", file=self.spec.path, field="step")
        token, expert = rows
        got = np.bincount(token, minlength=n_tokens)[:n_tokens]   # tokens past the run's are ignored
        if np.any(got != self.k):
            t = int(np.flatnonzero(got != self.k)[0])
            raise TraceError(f"routing table gives token {t} at {where} {int(got[t])} experts, expected {self.k}",
                             file=self.spec.path, field="expert")
        keep = token < n_tokens
        token, expert = token[keep], expert[keep]
        order = np.argsort(token, kind="stable")
        out = expert[order].reshape(n_tokens, self.k)
        srt = np.sort(out, axis=1)
        if self.k > 1 and np.any(srt[:, 1:] == srt[:, :-1]):
            raise TraceError(f"routing table repeats an expert for one token at {where}", file=self.spec.path,
                             field="expert")
        return out


def _load_table(path: str, n_experts: int) -> dict:
    try:
        with pa.memory_map(path) as src:
            try:
                table = pa.ipc.open_file(src).read_all()
            except pa.ArrowInvalid:
                src.seek(0)
                table = pa.ipc.open_stream(src).read_all()
    except (pa.ArrowInvalid, OSError) as err:
        raise UsageError(f"cannot read routing table as Arrow IPC: {err}", file=path, field="router") from None
    missing = [c for c in ROUTING_COLUMNS if c not in table.schema.names]
    if missing:
        raise TraceError(f"routing table lacks columns {missing}", file=path, field=missing[0])
    cols = {}
    for c in ROUTING_COLUMNS:
        if not pa.types.is_integer(table.schema.field(c).type):
            raise TraceError(f"column must be integer, is {table.schema.field(c).type}", file=path, field=c)
        cols[c] = table.column(c).to_numpy().astype(np.int64)
    if np.any(cols["expert"] < 0) or np.any(cols["expert"] >= n_experts):
        raise TraceError(f"expert ids must be in 0..{n_experts - 1}", file=path, field="expert")
    if np.any(cols["token"] < 0):
        raise TraceError("token ids must be non-negative", file=path, field="token")
    out = {}
    key = cols["step"] * (1 << 20) + cols["layer"]
    order = np.argsort(key, kind="stable")
    key_s = key[order]
    bounds = np.flatnonzero(np.diff(key_s)) + 1
    for idx in np.split(order, bounds):
        if len(idx):
            out[(int(cols["step"][idx[0]]), int(cols["layer"][idx[0]]))] = (cols["token"][idx], cols["expert"][idx])
    return out


def write_routing_table(path: str, step, layer, token, expert) -> None:
    """Write a routing log in the format :class:`Router` reads (Arrow IPC file, int32 columns)."""
    table = pa.table({c: pa.array(np.asarray(v), type=pa.int32())
                      for c, v in zip(ROUTING_COLUMNS, (step, layer, token, expert))})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)


def log_routes(log, logged: dict, layer: int, step: int, m: int, routes: np.ndarray) -> None:
    """Each routed token's experts (``routes``, ``(m, k)``) into the routing log ``log`` (``--record-routing``'s
    table; None: nothing). The prefills of a conversation route prefixes of one (step -1) stream: each
    token is logged once (``logged``: the prefill tokens logged so far, per layer)."""
    if log is None or not (step >= 0 or m > logged.get(layer, 0)):
        return
    k = routes.shape[1]
    first = logged.get(layer, 0) if step < 0 else 0
    if step < 0:
        logged[layer] = max(first, m)
    n = max(0, m - first) * k
    log.extend({"step": np.full(n, step, np.int32), "layer": np.full(n, layer, np.int32),
                "token": np.repeat(np.arange(first, max(first, m), dtype=np.int32), k),
                "expert": routes[first:].ravel().astype(np.int32)}, n)
