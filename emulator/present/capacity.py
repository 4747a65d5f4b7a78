"""The text of ``tierlab capacity``: :func:`format_plan` of a
:meth:`emulator.analysis.capacity.CapacityPlan.to_dict`."""

from __future__ import annotations

from emulator.present.format import format_size


def format_plan(d: dict) -> str:
    """The human answer: the limits, then the budget broken down."""
    b = d["budget"]
    src = ", ".join(f"{n} {format_size(v)}" for n, v in b["tiers"].items()) if b["tiers"] else "given size"
    lines = [f"model {d['model']}: weights {d['weights']}, KV {d['kv']}, activations {d['activations']}",
             f"budget {format_size(b['total_bytes'])} ({b['source']}: {src})",
             f"KV per token per sequence: {format_size(d['kv_bytes_per_token'])} ({d['kv_bytes_per_token']} B)"]
    if d["max_batch"] is not None:
        lines.append(f"largest batch at context {d['context']}: {d['max_batch']}")
        if d["context"] > d["position_limit"]:
            lines.append(f"note: context {d['context']} exceeds the model's position limit {d['position_limit']}")
    lines += [f"memory limit: {d['memory_context']} tokens per sequence at batch {d['batch']}",
              f"model position limit: {d['position_limit']} tokens",
              f"usable context: {d['usable_context']} tokens ({d['limited_by']} bound)"]
    br = d["breakdown"]
    rows = [("weights", br["weights_bytes"]), (f"KV ({d['context']} tok x {d['batch']} seq)", br["kv_bytes"]),
            (f"activations (step of {d['chunk']} tok)", br["activation_bytes"]), ("free", br["free_bytes"]),
            ("total", br["total_bytes"])]
    w = max(len(r[0]) for r in rows)
    total = max(br["total_bytes"], 1)
    lines.append("")
    for name, v in rows:
        lines.append(f"  {name.ljust(w)}  {format_size(v):>10}  {100 * v / total:6.2f}%")
    lines.append(f"(aligning tensors to the trace default would add {format_size(d['alignment_padding_bytes'])})")
    return "\n".join(lines)
