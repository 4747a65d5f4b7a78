"""Disaggregated prefill and decode (tierlab.kvstream.transfer): every prompt's KV moves once, in the
closed form's bytes, over the fabric the network model picks, in the closed form's time."""
from pathlib import Path

import numpy as np
import pytest

from tierlab.kvstream.server import serve_requests
from tierlab.system.systemfile import load_system
from tierlab.traces.model.spec import load_model

from kvstream_helpers import session_trace

TINY = Path(__file__).parents[1] / "data" / "models" / "tiny-llama.json"
BT = 16


@pytest.fixture(scope="module")
def spec():
    return load_model(str(TINY))


@pytest.fixture(scope="module")
def trace():
    return session_trace(80, sessions=8, sys_blocks=4, turn_blocks=2, rate=400.0, output=6, bt=BT)


def _check_closed_form(r, trace, spec, fabric, tp):
    s, t = r.summary, r.table
    kv = spec.kv_bytes_per_token("bf16")                  # the whole model's KV per token (all tp shards)
    inp = np.asarray(trace.input_tokens, np.float64)
    assert s["kv_bytes_per_token"] == kv
    # every prompt's KV moves once, none less
    assert s["kv_transfer"]["transfers"] == len(inp)
    assert s["kv_transfer"]["bytes"] == pytest.approx(inp.sum() * kv, rel=1e-12)
    assert np.allclose(t["transfer_bytes"].to_numpy(), inp * kv)
    # through a switch a byte crosses two links (chip to switch, switch to chip), on the named fabric only
    carried = s["kv_transfer"]["link_bytes_by_fabric"]
    assert carried[fabric] == pytest.approx(2 * inp.sum() * kv)
    assert sum(carried.values()) == pytest.approx(carried[fabric])
    # time: the fabric's latency plus one device's shard over its port, all shards at once
    fab = getattr(r_system(r), fabric)
    want = fab.latency_s + inp * kv / tp / (fab.bandwidth_bytes_per_s * fab.ports)
    assert np.allclose(t["transfer_s"].to_numpy(), want, rtol=1e-9)
    assert s["energy"]["transfer_j"] == pytest.approx(2 * inp.sum() * kv * fab.energy_j_per_byte)
    # decode starts after the KV lands: admission on the prefill side, then prefill, wait, transfer
    first = t["first_token_s"].to_numpy()
    assert (first >= t["admitted_s"].to_numpy() + t["transfer_s"].to_numpy() - 1e-12).all()
    assert np.isfinite(t["finish_s"].to_numpy()).all()
    # prefill replicas serve the prompt, decode replicas the rest
    P = s["settings"]["prefill_instances"]
    assert (t["replica"].to_numpy() < P).all() and (t["decode_replica"].to_numpy() >= P).all()
    served = t["tokens_hbm"].to_numpy() + t["tokens_computed"].to_numpy()
    assert (served == t["input_tokens"].to_numpy()).all()


def r_system(r):
    return load_system(r.summary["target"]["system"])


def test_kv_bytes_and_time_within_a_node(spec, trace):
    r = serve_requests(trace, spec, system="dgx-h100", prefill_instances=2, decode_instances=2,
                       max_batch_tokens=256)
    _check_closed_form(r, trace, spec, "scale_up", 1)
    assert r.summary["parallelism"]["chips"] == 4
    assert r.summary["hit_ratio"]["hbm"] > 0.3            # the prefill replicas keep their prefix caches


def test_kv_bytes_and_time_between_nodes(spec, trace):
    """4 + 4 replicas of TP2 on two DGX nodes: prefill on node 0, decode on node 1, over the NICs."""
    r = serve_requests(trace, spec, system="dgx-h100-x2", tp=2, prefill_instances=4, decode_instances=4,
                       max_batch_tokens=256)
    _check_closed_form(r, trace, spec, "scale_out", 2)


def test_disaggregated_against_colocated(spec, trace):
    """The same chips co-located (dp 4) and split 2 + 2: the same tokens out, no KV moved co-located."""
    co = serve_requests(trace, spec, system="dgx-h100", dp=4, max_batch_tokens=256).summary
    dis = serve_requests(trace, spec, system="dgx-h100", prefill_instances=2, decode_instances=2,
                         max_batch_tokens=256).summary
    assert co["kv_transfer"] is None and co["energy"]["transfer_j"] == 0
    assert co["output_tokens"] == dis["output_tokens"] and co["parallelism"]["chips"] == dis["parallelism"]["chips"]
    assert dis["energy"]["j_per_output_token"] > 0
