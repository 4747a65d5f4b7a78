"""Which tierlab operator kind a recorded PyTorch module or ATen operator is.

The recorder (:mod:`tierlab.traces.capture.record`) sees two things: the modules a forward enters, and
every ATen operator it dispatches (with shapes and dtypes). A *leaf* module is lowered as one
tierlab op whatever ATen operators it runs inside (a linear, a norm, an embedding gather, an
activation, an MoE router or the experts of an MoE layer); outside leaves, single ATen operators
are mapped by name and shape (a residual add in a decoder layer, the gated product of an MLP, and
rotary's products of q and k with cos and sin broadcast over the heads). The attention
core and the KV append are recorded where Transformers calls them (the attention interface and the
cache object), not from ATen operators.
"""

from __future__ import annotations

# module class name fragments -> leaf kind (checked after the isinstance tests in leaf_kind)
NORM_CLASSES = ("RMSNorm", "LayerNorm", "RmsNorm", "L2Norm")   # L2Norm: Llama 4's q/k norm before Transformers 5.25
ACTIVATION_CLASSES = ("SiLU", "SiLUActivation", "GELU", "GELUActivation", "NewGELUActivation", "GELUTanh",
                      "PytorchGELUTanh", "FastGELUActivation", "QuickGELUActivation", "ReLU", "ReLUSquaredActivation",
                      "SwiGLU", "Tanh", "Sigmoid", "GELUTanhActivation", "ClippedGELUActivation")
ROUTER_NAMES = ("gate", "router")

# ATen operators outside leaves that tierlab lowers (overload-free names, ``aten.add`` for
# ``aten.add.Tensor``); every other operator is recorded but moves nothing tierlab models
# separately (views, reshapes, casts, masks).
ELEMENTWISE_ATEN = {"aten.add": "add", "aten.add_": "add", "aten.mul": "mul", "aten.mul_": "mul"}

DECODER_LAYER_SUFFIXES = ("DecoderLayer", "Block", "Layer")

# ATen operators that move no data tierlab models: views and layout changes, factories, casts (tierlab
# keeps each tensor in one dtype), and the bookkeeping of a forward. Anything else outside a leaf that
# the lowering does not map is named in the capture's ``unmapped_ops`` (and on stderr), never dropped
# silently.
MOVES_NOTHING = frozenset({
    "aten.view", "aten._unsafe_view", "aten.reshape", "aten.transpose", "aten.t", "aten.permute", "aten.unsqueeze",
    "aten.squeeze", "aten.expand", "aten.slice", "aten.select", "aten.split", "aten.split_with_sizes",
    "aten.chunk", "aten.unbind", "aten.alias", "aten.detach", "aten.contiguous", "aten.clone", "aten._to_copy",
    "aten.to", "aten.copy_", "aten.new_empty", "aten.new_zeros", "aten.new_ones", "aten.empty", "aten.empty_like",
    "aten.zeros", "aten.zeros_like", "aten.ones", "aten.ones_like", "aten.full", "aten.full_like", "aten.arange",
    "aten.lift_fresh", "aten.scalar_tensor", "aten.view_as_complex", "aten.view_as_real", "aten._local_scalar_dense",
    "aten.sym_size", "aten.sym_numel", "aten.sym_stride", "aten.as_strided", "aten.unflatten", "aten.flatten",
    "aten.fill_", "aten.zero_", "aten.empty_strided", "aten.resolve_conj", "aten.resolve_neg", "aten.is_nonzero",
    "aten.item", "aten.detach_", "aten._assert_tensor_metadata", "aten.dim", "aten.numel", "aten.size", "aten.stride",
})
ROTARY_CLASS = "Rotary"           # a rotary-embedding module computes its cos/sin table: no weights, no cache


def leaf_kind(module, name: str, torch_nn) -> str | None:
    """The tierlab kind of a module lowered as one op, or None for a container."""
    cls = type(module).__name__
    params = list(module.parameters(recurse=False))
    if isinstance(module, torch_nn.Linear) or (cls == "Conv1D" and params and params[0].dim() == 2):
        return "linear"            # Conv1D: GPT-2's linear, weight stored [in, out]
    if isinstance(module, torch_nn.Embedding):
        return "embedding"
    if isinstance(module, torch_nn.LayerNorm) or any(c in cls for c in NORM_CLASSES):
        return "norm"
    bare_children = not any(True for c in module.children() for _ in c.parameters())
    if isinstance(module, (torch_nn.Conv1d, torch_nn.Conv2d)):
        return None                # a recurrent mixer's causal convolution: its state op reads it
    # experts stored as [expert, out, in] tensors (Transformers 5), biases [expert, out], with a down projection
    # among them (a lone 3-D tensor is something else: Inkling 2's learned queries per loop layer)
    down = any(p.dim() == 3 and "down" in n for n, p in module.named_parameters(recurse=False))
    if bare_children and down and all(p.dim() in (2, 3) for p in params) \
            and (len({p.shape[0] for p in params}) == 1 or _identity_experts(module)):
        return "experts"
    short = name.rsplit(".", 1)[-1]
    if short in ROUTER_NAMES and len(params) >= 1 and params[0].dim() == 2 and bare_children:
        return "router"            # a router module holding its [experts, hidden] weight
    if short in ROUTER_NAMES and _router_with_parts(module):
        return "router"
    if cls in ACTIVATION_CLASSES or (not list(module.children()) and "Activation" in cls
                                     and all(p.dim() <= 1 for p in params)):
        return "act"               # a learned activation's scalars (Apertus' xIELU alphas) read with it
    return None


def _router_with_parts(module) -> bool:
    """A router whose [experts, hidden] matrix is held by a child module, or beside a child holding a bias
    per expert, which its own forward multiplies or adds itself (LongCat-Flash's ``classifier``, ERNIE 4.5's
    ``moe_statics``): every parameter below it one matrix and vectors of at most one value per expert."""
    if not list(module.children()):
        return False
    every = list(module.parameters())
    mats = [p for p in every if p.dim() == 2 and min(p.shape) > 1]
    if len(mats) != 1 or any(p.dim() > 2 for p in every):
        return False
    experts = mats[0].shape[0]
    return all(p is mats[0] or p.numel() <= experts for p in every) and not any(
        list(c.children()) for c in module.children())


def _identity_experts(module) -> bool:
    """Experts of which some are the identity (LongCat-Flash's zero-computation experts: an ``nn.Identity``
    child, and fewer down projections than routed experts), so their tensors' leading dims differ."""
    return any(type(c).__name__ == "Identity" for c in module.children())


def aten_name(func) -> str:
    """``aten.add.Tensor`` -> ``aten.add`` (the packet name, without the overload)."""
    name = str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func)
    return name if name.startswith("aten.") else f"aten.{name}"


def is_decoder_layer(cls_name: str) -> bool:
    return cls_name.endswith(DECODER_LAYER_SUFFIXES) and "Attention" not in cls_name and "MLP" not in cls_name


def layer_of(name: str) -> int:
    """The decoder layer of a module or parameter name (``model.layers.3.mlp`` -> 3), else -1."""
    parts = name.split(".")
    for a, b in zip(parts, parts[1:]):
        if a in ("layers", "h", "blocks") and b.isdigit():
            return int(b)
    return -1
