"""A system replay for people: the text tables of :func:`tierlab.analysis.system_result.to_json`'s
dict (devices, network, collectives, coordination, per token), built with the one
:func:`tierlab.present.format.table`."""

from __future__ import annotations

from tierlab.present.format import format_bytes, format_percent, format_si, table


def format_system_text(d: dict) -> str:
    """Human output of a system run."""
    par = d["parallelism"]
    out = []
    head = (f"system {d['system']}: {d['n_devices']} device(s) of {d['chip']}; "
            + ", ".join(f"{k} {v}" for k, v in par.items()))
    rows = []
    for dev in d["devices"]:
        read = sum(t["bytes_read"] for t in dev["tiers"])
        links = sum(lk["bytes_down"] + lk["bytes_up"] for lk in dev["links"])
        rows.append([dev["device"], dev["chip"], format_bytes(read), format_bytes(links),
                     format_si(dev["energy_j"]["total"], "J"), format_si(dev["latency_s"], "s")])
    out.append(table(["device", "chip", "tier reads", "link bytes", "energy", "busy"], rows, title=head))
    out.append(table(["fabric", "name", "bytes", "messages", "energy"],
                     [[n["name"], n["fabric"], format_bytes(n["bytes"]), n["messages"], format_si(n["energy_j"], "J")]
                      for n in d["network"]], title="network (whole run; bytes are link-bytes carried)"))
    if d["collectives"]:
        out.append(table(["kind", "algorithm", "count", "bytes/rank", "time", "calibrated", "as run", "energy"],
                         [[c["kind"], c["algorithm"], c["count"], format_bytes(c["bytes_per_rank"]),
                           format_si(c["time_s"], "s"),
                           format_si(c["time_calibrated_s"], "s") if "time_calibrated_s" in c else "-",
                           ", ".join(f"{k} x{v}" for k, v in c.get("calibrated", {}).items()) or "-",
                           format_si(c["energy_j"], "J")] for c in d["collectives"]],
                         title="collectives (whole run; 'as run': the calibrated algorithm/protocol)"))
    e = d["energy_j"]
    out.append(table(["energy", "joules"], [["total", format_si(e["total"], "J")],
                                            ["devices", format_si(e["devices"], "J")],
                                            ["network", format_si(e["network"], "J")]],
                     title=f"whole run (critical path {format_si(d['latency_s'], 's')})"))
    pt = d["per_token"]
    if pt:
        rows = [[f"bytes {n}", format_bytes(v)] for n, v in pt["bytes_by_link"].items()]
        rows += [[f"energy {k}", format_si(v, "J")] for k, v in pt["energy_split_j"].items()]
        rows += [["energy", format_si(pt["energy_j"], "J")], ["latency (per step)", format_si(pt["latency_s"], "s")],
                 ["tokens/s", f"{pt['tokens_per_s']:.4g}"], ["bound", pt["bound"]]]
        if "latency_calibrated_s" in pt:
            cal = pt["calibration"]
            rows += [["latency calibrated (per step)", format_si(pt["latency_calibrated_s"], "s")],
                     ["tokens/s calibrated", f"{pt['tokens_per_s_calibrated']:.4g}"],
                     ["kernels (per step, busiest device)", f"{pt['kernels']:.4g} (fusion {cal['fusion']}, "
                                                            f"overlap {cal['overlap']})"],
                     ["kernel overhead (per step)", format_si(pt["overhead_s"], "s")],
                     ["collectives as run", f"{cal['collectives']['library']}, protocol "
                                            f"{cal['collectives']['protocol']}, comm overlap {cal['comm_overlap']}"],
                     ["bound calibrated", pt["bound_calibrated"]]]
        out.append(table(["per decode token", "value"], rows,
                         title=f"per output token (averaged over {pt['steps']} decode "
                               f"step{'s' if pt['steps'] != 1 else ''}; each step makes {pt['tokens_per_step']} "
                               f"token{'s' if pt['tokens_per_step'] != 1 else ''})"))
        c = d["coordination"]
        rows = [["collectives per step", f"{c['collectives_per_step']:.4g}"],
                ["collectives per token", f"{c['collectives_per_token']:.4g}"],
                ["time in collectives on the critical path", format_si(c["collective_time_on_path_s"], "s")],
                ["share of the step latency", format_percent(c["collective_time_share"])],
                *([["time in collectives, calibrated", format_si(c["collective_time_on_path_calibrated_s"], "s")],
                   ["share of the calibrated step", format_percent(c["collective_time_share_calibrated"])],
                   ["contention (links shared by overlapping collectives)", format_si(c["contention_s"], "s")],
                   *[[f"busiest {f} link's utilisation", format_percent(u)]
                     for f, u in c["busiest_link_utilisation"].items()]]
                  if "collective_time_share_calibrated" in c else []),
                ["per-message overhead (steps x latency)", format_si(c["per_message_overhead_s"], "s")],
                ["messages per step", f"{c['messages_per_step']:.4g}"]]
        cn = c["connections"]
        rows += [["peer processes per rank (max)", cn["peer_processes_per_rank_max"]],
                 ["peer nodes per rank (max)", cn["peer_nodes_per_rank_max"]],
                 ["connection queues per rank (max; estimate)", format_bytes(cn["queue_bytes_per_rank_max"])]]
        out.append(table(["coordination (per decode step)", "value"], rows, cell=str))
        out.append("latency: " + pt["latency_model"])
    if d.get("prefill"):
        out.insert(len(out) - (1 if pt else 0), format_prefill(d["prefill"]))
    return "\n\n".join(out)


def format_prefill(pf: dict) -> str:
    """The prompt's prefill (time to first token) as a table."""
    rows = [["tokens", pf["tokens"]], ["latency (time to first token)", format_si(pf["latency_s"], "s")],
            ["bound", pf["bound"]]]
    if pf.get("latency_calibrated_s") is not None:
        rows += [["latency calibrated", format_si(pf["latency_calibrated_s"], "s")],
                 ["bound calibrated", pf["bound_calibrated"]]]
    return table(["prefill", "value"], rows, cell=str, title="prefill (the prompt, before the first token)")
