"""The tensors of a captured run's trace (:mod:`tierlab.traces.capture.lower`): every recorded weight, the KV
caches and recurrent states with the shapes the model's cache objects received, and the activation
buffers per row width — declared once, before any op, by :class:`CaptureTensors`, the base of
:class:`tierlab.traces.capture.lower.CaptureLowering`."""

from __future__ import annotations

import math

from tierlab.kernels import attention as attn
from tierlab.kernels.base import Op, Ten
from tierlab.traces.model.dtypes import GROUP_QUANTISED, SCALE_DTYPE, activation_storage, nbytes_of, scale_bytes, vector_dtype


def numel(shape) -> int:
    return int(math.prod(shape)) if shape else 1


class CaptureTensors:
    """Declares a capture's tensors (see the module docstring); the lowering's state (``cap``,
    ``run``, ``w`` and the dtypes) is set by :class:`tierlab.traces.capture.lower.CaptureLowering`."""

    def _matrix(self, name, rows, cols, layer, expert) -> tuple[Ten, Ten | None]:
        wd = self.run.weights
        nb = nbytes_of(rows * cols, wd)
        t = Ten(self.w.add_tensor(name, "weight", nb, wd, layer, expert), nb)
        sc = None
        if wd in GROUP_QUANTISED:
            sb = scale_bytes(rows, cols, wd, self.run.quant_group)
            sc = Ten(self.w.add_tensor(name + ".scales", "weight", sb, SCALE_DTYPE, layer, expert), sb)
        return t, sc

    def _declare_weights(self) -> None:
        for name, shape, _dtype, kind, layer in self.cap.weights:
            n = numel(shape)
            self.params += n
            if kind == "experts" and len(shape) == 3:
                self.experts[name] = [self._matrix(f"{name}.{e}", shape[1], shape[2], layer, e)
                                      for e in range(shape[0])]
            elif kind == "experts" and len(shape) == 2:       # one bias vector per expert
                vd = vector_dtype(self.run.weights)
                nb = nbytes_of(shape[1], vd)
                self.experts[name] = [(Ten(self.w.add_tensor(f"{name}.{e}", "weight", nb, vd, layer, e), nb), None)
                                      for e in range(shape[0])]
            elif len(shape) <= 1:
                vd = vector_dtype(self.run.weights)
                nb = nbytes_of(n, vd)
                self.weights[name] = (Ten(self.w.add_tensor(name, "weight", nb, vd, layer), nb), None)
            else:
                self.weights[name] = self._matrix(name, shape[0], n // shape[0], layer, -1)

    def _declare_kv(self, positions: int) -> None:
        """K and V per layer, rows as wide as the cache received (heads x head dim of each)."""
        rows: dict[int, tuple[int, int]] = {}
        for _seg, events in self.cap.segments:
            for e in events:
                if e.kind == "kv_append":
                    k, v = e.shapes
                    rows[e.info["layer"]] = (k[1] * k[3], v[1] * v[3])
        self.caches: dict[int, list[attn.Cache]] = {}
        self._kv_widths = rows
        kvd = self.run.kv
        # a sparse-attention indexer's own keys (DeepSeek-V3.2: index_head_dim per position), every position
        # (Transformers' DynamicIndexedLayer keeps them all); kind kv_index, named layers.i.kv.index
        index_rows = {e.info["layer"]: e.shapes[0][-1] for _seg, events in self.cap.segments for e in events
                      if e.kind == "index_append"}
        self.index_caches: dict[int, attn.Cache] = {}
        for i, width in sorted(index_rows.items()):
            row = nbytes_of(width, kvd)
            nb = self.B * positions * row
            index = Ten(self.w.add_tensor(f"layers.{i}.kv.index", "kv_index", nb, kvd, i), nb)
            self.index_caches[i] = attn.Cache(index, row, positions * row, 0)
        spans = self.cap.info.get("layers") or []
        for i in sorted(rows):
            kind, span = spans[i] if i < len(spans) else ("full", 0)
            keep = positions if kind == "full" else min(positions, span)   # a ring of window / chunk rows
            layer = []
            for part, width in zip("kv", rows[i]):
                row = nbytes_of(width, kvd)
                nb = self.B * keep * row
                layer.append(attn.Cache(Ten(self.w.add_tensor(f"layers.{i}.kv.{part}", "kv", nb, kvd, i), nb),
                                        row, keep * row, keep if keep < positions else 0))
            self.caches[i] = layer

    def _declare_states(self) -> None:
        """Each state layer's recurrent-state tensors (kind ``state``, ``batch x`` the elements per sequence
        the cache object held, in the KV dtype, as the hand lowering keeps Mamba's), and the mixer's own
        parameters no leaf op reads (its convolution, ``A_log``, ``D``, ``dt_bias``): the state op reads them."""
        kvd = self.run.kv
        self.states: dict[int, list[Ten]] = {}
        self.mixer_params: dict[int, list[Ten]] = {}
        self.mixer_scopes: dict[int, set] = {}
        leaf_read = {n for m in self.cap.modules.values() for n in m["params"].values()}
        entered = {e.scope for _seg, events in self.cap.segments for e in events if e.kind != "aten"}
        for i, parts in sorted(self.cap.info.get("states", {}).items()):
            i = int(i)
            ts = []
            for part, n in parts:
                nb = self.B * nbytes_of(n, kvd)
                ts.append(Ten(self.w.add_tensor(f"layers.{i}.state.{part}", "state", nb, kvd, i), nb))
            self.states[i] = ts
            own = [name for name, _shape, _d, kind, layer in self.cap.weights
                   if layer == i and kind is None and name not in leaf_read and name in self.weights]
            self.mixer_params[i] = [self.weights[n][0] for n in own]
            owners = {n.rsplit(".", 1)[0] for n in own}
            # a convolution module (nn.Conv1d, no leaf) holds its weight: its mixer is the module around it
            self.mixer_scopes[i] = {o.rsplit(".", 1)[0] if self._module_classes.get(o, "").startswith("Conv") else o
                                    for o in owners}
            # a leaf inside the mixer that never runs as a module (Jamba's slow scan multiplies by
            # dt_proj.weight itself): its parameters are the scan's to read
            for scope, mod in self.cap.modules.items():
                if scope not in entered and any(scope.startswith(m + ".") for m in self.mixer_scopes[i]):
                    self.mixer_params[i] += [self.weights[n][0] for n in mod["params"].values() if n in self.weights]

    def _state_op(self, i: int, seg) -> Op:
        """A state layer's recurrence over the segment: every sequence's state read once and written once
        (the scan carries it through the segment's tokens on chip, as kernels/ssm.py's scan does), the
        mixer's own parameters read. FLOPs an estimate: 6 per recurrent-state element and 2 per
        convolution-window element, per token (kernels/ssm.py's closed forms)."""
        m = self.B * seg.tokens
        elems = sum(n for part, n in self.cap.info["states"][i])
        conv = sum(n for part, n in self.cap.info["states"][i] if part.startswith("conv"))
        op = Op("state_update", "ssm_scan", m, m * (6 * (elems - conv) + 2 * conv))
        for p in self.mixer_params[i]:
            op.read_all(p)
        for t in self.states[i]:
            op.read_all(t)
            op.write(t, 0, t.nbytes)
        return op

    def _in_mixer(self, e, layer: int) -> bool:
        scopes = self.mixer_scopes.get(layer)
        return bool(scopes) and any(e.scope == s or e.scope.startswith(s + ".") for s in scopes)

    def _declare_activations(self) -> None:
        widths: dict[int, int] = {}
        k = self._top_k
        for _seg, events in self.cap.segments:
            for e in events:
                shapes = list(e.shapes + ((e.out,) if e.out else ()))
                if e.kind in ("attention", "kv_append"):
                    shapes = [(s[0] * s[2], s[1] * s[3]) for s in shapes]
                if e.kind == "experts":
                    ffn = self._ffn(e.scope, e.shapes[0][-1])
                    shapes.append(e.shapes[0][:-1] + (ffn,))
                for s in shapes:
                    if len(s) >= 1 and s[-1] > 0:
                        rows = max(1, numel(s[:-1])) * (k if e.kind == "experts" else 1)
                        widths[s[-1]] = max(widths.get(s[-1], 0), rows)
        self.act = {wd: Ten(self.w.add_tensor(f"act.w{wd}", "activation", max(1, r * wd * self.ab),
                                              activation_storage(self.run.activations)), max(1, r * wd * self.ab))
                    for wd, r in sorted(widths.items())}

    def _buf(self, width: int, rows: int = 0) -> Ten:
        """The activation buffer of rows ``width`` wide; one the recorded shapes did not foresee (a router's
        output, a block's inner width) is declared when first used, for every routed row of a segment; a
        use of more ``rows`` than it holds (a module whose input is not the shape it was entered with:
        DeepSeek-V4's grouped output projection) gets a buffer of its own that holds them."""
        if width not in self.act:
            n = self.B * max(seg.tokens for seg, _ in self.cap.segments) * self._top_k
            nb = max(1, n * width * self.ab)
            self.act[width] = Ten(self.w.add_tensor(f"act.w{width}", "activation", nb, self.run.activations), nb)
        t = self.act[width]
        if rows * width * self.ab > t.nbytes:
            key = (width, rows)
            if key not in self._wide:
                nb = rows * width * self.ab
                self._wide[key] = Ten(self.w.add_tensor(f"act.w{width}x{rows}", "activation", nb,
                                                        self.run.activations), nb)
            t = self._wide[key]
        return t
