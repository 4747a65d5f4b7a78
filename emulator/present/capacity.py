"""The text of ``tierlab capacity``: :func:`format_plan` of a
:meth:`tierlab.analysis.capacity.CapacityPlan.to_dict`."""

from __future__ import annotations

from tierlab.present.format import format_size


def format_plan(d: dict) -> str:
    """The human answer: the limits, then the budget broken down."""
    b = d["budget"]
    src = ", ".join(f"{n} {format_size(v)}" for n, v in b["tiers"].items()) if b["tiers"] else "given size"
    lines = [f"model {d['model']}: weights {d['weights']}, KV {d['kv']}, activations {d['activations']}",
             f"budget {format_size(b['total_bytes'])} ({b['source']}: {src}"
             + (f", less the runtime's reserve {format_size(b['reserve_bytes'])})" if b.get("reserve_bytes") else ")"),
             f"KV per token per sequence: {format_size(d['kv_bytes_per_token'])} ({d['kv_bytes_per_token']} B)"
             + _growth(d)]
    if d.get("state_bytes_per_sequence"):
        lines.append(f"fixed recurrent state per sequence: {format_size(d['state_bytes_per_sequence'])} "
                     f"({d['state_bytes_per_sequence']} B, at any context)")
    if d["max_batch"] is not None:
        lines.append(f"largest batch at context {d['context']}: {d['max_batch']}")
        if d["context"] > d["position_limit"]:
            lines.append(f"note: context {d['context']} exceeds the model's position limit {d['position_limit']}")
    if not d["memory_bounds_context"]:
        end = d["kv_growth_ends_at"]
        mem = (f"memory limit: none at batch {d['batch']} (no layer keeps every position: "
               + (f"the KV stops growing at {end} tokens" if end else "no KV at all") + ", and that fits)")
    else:
        mem = f"memory limit: {d['memory_context']} tokens per sequence at batch {d['batch']}"
    lines += [mem,
              f"model position limit: {d['position_limit']} tokens",
              f"usable context: {d['usable_context']} tokens ({d['limited_by']} bound)"]
    br = d["breakdown"]
    rows = [("weights", br["weights_bytes"]), (f"KV ({d['context']} tok x {d['batch']} seq)", br["kv_bytes"])]
    if br.get("state_bytes"):
        rows.append((f"state ({d['batch']} seq)", br["state_bytes"]))
    rows.append((f"activations (step of {d['chunk']} tok)", br["activation_bytes"]))
    if br.get("reserve_bytes"):
        rows.append(("runtime reserve", br["reserve_bytes"]))
    rows += [("free", br["free_bytes"]), ("total", br["total_bytes"])]
    w = max(len(r[0]) for r in rows)
    total = max(br["total_bytes"], 1)
    lines.append("")
    for name, v in rows:
        lines.append(f"  {name.ljust(w)}  {format_size(v):>10}  {100 * v / total:6.2f}%")
    lines.append(f"(aligning tensors to the trace default would add {format_size(d['alignment_padding_bytes'])})")
    return "\n".join(lines)


def _growth(d: dict) -> str:
    """How the KV of one sequence grows: only on its full-attention layers past the windows, or not
    at all past the largest window."""
    end, full = d.get("kv_growth_ends_at"), d.get("full_attention_layers")
    if end is not None:
        return f"; no full-attention layer: stops growing at {end} tokens" if end else ""
    if not d.get("windowed_layers"):
        return ""
    return f"; within every window ({full} full-attention layer(s) keep growing past it)"
