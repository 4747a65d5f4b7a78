"""Serving request streams through tiered KV (tierlab.kvstream.server): closed loop against
``throughput``, conservation of tier bytes, TTFT against host capacity, bad inputs."""
import numpy as np
import pytest

from tierlab.common.errors import UsageError
from tierlab.chip.chipfile import load_chip
from tierlab.kvstream.server import serve_requests
from tierlab.kvstream.tiers import parse_kv_tier
from tierlab.traces.model.spec import load_model

from kvstream_helpers import session_trace, unique_trace

BUDGET = 1024
BT = 16


@pytest.fixture(scope="module")
def spec():
    return load_model("qwen2-0.5b")


@pytest.fixture(scope="module")
def chip():
    return load_chip("h100")


def test_closed_loop_matches_throughput(spec, chip):
    """Identical requests, nothing shared, no host tier, C clients: the steady output tokens/s equals
    ``throughput``'s at concurrency C. Tolerance 6 %: the two time steps differently (the surface
    interpolates replays, throughput replays class representatives, each within a few %), and our
    window (between the C-th and the (N-C)-th finish) starts from requests that arrived together."""
    from tierlab.serving.throughput import throughput

    isl, osl, C, n = 256, 32, 8, 160
    r = serve_requests(unique_trace(n, isl // BT, osl, BT), spec, chip=chip, closed_loop=C, max_batch_tokens=BUDGET)
    fin = np.sort(r.table["finish_s"].to_numpy())
    t0, t1 = fin[C - 1], fin[n - C - 1]
    ours = (n - 2 * C) * osl / (t1 - t0)
    ref = throughput(spec, chip=chip, isl=isl, osl=osl, concurrency=str(C), max_batch_tokens=BUDGET)
    theirs = ref["curve"][0]["output_tokens_per_s"]
    assert abs(ours / theirs - 1) < 0.06, (ours, theirs)
    assert r.summary["hit_ratio"]["total"] == 0


def test_tier_bytes_conserved(spec, chip):
    tr = session_trace(120, sessions=12, sys_blocks=8, turn_blocks=6, rate=40.0, output=8, bt=BT)
    r = serve_requests(tr, spec, chip=chip, kv_tiers={"dram": 64 * 1024 * 1024}, hbm_tokens=2048,
                       max_batch_tokens=BUDGET)
    s, t = r.summary, r.table
    kv = s["kv_bytes_per_token"]
    assert t["bytes_dram"].to_numpy().sum() == pytest.approx(t["tokens_dram"].to_numpy().sum() * kv)
    assert s["tier_bytes"]["dram"]["loaded"] > 0
    # every prompt token is held in HBM, loaded, or computed
    served = t["tokens_hbm"].to_numpy() + t["tokens_dram"].to_numpy() + t["tokens_computed"].to_numpy()
    assert (served == t["input_tokens"].to_numpy()).all()
    # nothing shared: every HBM eviction is written once into dram
    u = unique_trace(60, 8, 4, BT)
    r = serve_requests(u, spec, chip=chip, kv_tiers={"dram": "1GB"}, hbm_tokens=30 * 8 * 16, max_batch_tokens=BUDGET)
    tb = r.summary["tier_bytes"]
    assert tb["hbm"]["evicted_blocks"] > 0
    assert tb["dram"]["written"] == pytest.approx(tb["hbm"]["evicted_blocks"] * BT * r.summary["kv_bytes_per_token"])


def test_ttft_falls_with_host_capacity(spec, chip):
    tr = session_trace(200, sessions=30, sys_blocks=16, turn_blocks=4, rate=30.0, output=4, bt=BT)
    ttft = []
    for cap in (None, 4e6, 4e7, 4e8):
        kt = None if cap is None else {"dram": cap}
        r = serve_requests(tr, spec, chip=chip, kv_tiers=kt, hbm_tokens=2048, max_batch_tokens=BUDGET)
        ttft.append(r.summary["ttft_s"]["mean"])
    assert all(b <= a * 1.001 for a, b in zip(ttft, ttft[1:])), ttft
    assert ttft[-1] < 0.98 * ttft[0], ttft          # lower, by what recomputing the reused prefixes cost


@pytest.mark.parametrize("call, field", [
    (lambda: parse_kv_tier("dramm=1TB"), "kv_tiers"),
    (lambda: parse_kv_tier("dram=0TB"), "kv_tiers"),
    (lambda: parse_kv_tier("ssd=-3GB"), "kv_tiers"),
])
def test_bad_tiers(call, field):
    with pytest.raises(UsageError) as e:
        call()
    assert e.value.field == field and "\n" not in str(e.value)


def test_bad_serving_inputs(spec, chip):
    tr = unique_trace(4, 2, 2, BT)
    for kw, field, text in [(dict(kv_tiers={"dram": 0}), "kv_tiers", "positive"),
                            (dict(kv_tiers={"drma": "1TB"}), "kv_tiers", "did you mean 'dram'"),
                            (dict(router="prefix"), "router", "dp > 1"),
                            (dict(write_policy="write-around"), "write_policy", "")]:
        with pytest.raises(UsageError) as e:
            serve_requests(tr, spec, chip=chip, max_batch_tokens=BUDGET, **kw)
        assert e.value.field == field and text in str(e.value) and "\n" not in str(e.value)


def test_a_request_that_cannot_be_served_is_named_by_its_line(spec, chip, tmp_path):
    """Longer than the model's positions, or than HBM holds: one line naming the file and the request's
    line (after a blank line and a sort of backwards arrivals), not its index; a synthetic stream's by
    its index."""
    from tierlab.kvstream.reader import read_requests

    rec = '{{"timestamp": {t}, "input_length": {n}, "output_length": 4, "hash_ids": {ids}}}\n'
    text = (rec.format(t=0, n=32, ids=[0, 1]) + "\n" + rec.format(t=50, n=32, ids=[0, 1])
            + rec.format(t=20, n=160000, ids=list(range(2, 2 + 10000))))
    p = tmp_path / "trace.jsonl"
    p.write_text(text)
    with pytest.warns(UserWarning):
        tr = read_requests(p, block_tokens=BT)
    with pytest.raises(UsageError) as e:
        serve_requests(tr, spec, chip=chip, max_batch_tokens=BUDGET)
    assert str(e.value) == f"{p}: line 4: 160000 + 4 positions exceed {spec.name}'s max_position_embeddings " \
                           f"{spec.max_position_embeddings}"
    p.write_text(text.replace("160000", "480").replace(str(list(range(2, 2 + 10000))), str(list(range(2, 32)))))
    with pytest.warns(UserWarning):
        tr = read_requests(p, block_tokens=BT)
    with pytest.raises(UsageError) as e:
        serve_requests(tr, spec, chip=chip, max_batch_tokens=BUDGET, hbm_tokens=256)
    assert str(e.value).startswith(f"{p}: line 4: ") and "positions" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UsageError) as e:
        serve_requests(unique_trace(3, 20, 4, BT), spec, chip=chip, max_batch_tokens=BUDGET, hbm_tokens=256)
    assert "request 0: " in str(e.value) and e.value.field == "trace"


def test_closed_loop_requests_count_from_when_they_are_sent(spec, chip):
    """In a closed loop of C clients a request is sent when a client's last one finishes: its
    ``arrival_s`` is that finish (0 for the first C), and its TTFT and latency count from then."""
    C, n = 3, 12
    r = serve_requests(unique_trace(n, 4, 4, BT), spec, chip=chip, closed_loop=C, max_batch_tokens=BUDGET)
    t = r.table
    arr, first, fin = (np.asarray(t[c].to_numpy(), np.float64) for c in ("arrival_s", "first_token_s", "finish_s"))
    assert np.all(arr[:C] == 0.0)
    assert np.allclose(np.sort(arr)[C:], np.sort(fin)[:n - C])
    assert np.allclose(t["ttft_s"].to_numpy(), first - arr) and np.allclose(t["e2e_s"].to_numpy(), fin - arr)
    assert r.summary["e2e_s"]["p99"] < fin.max()            # no request waits from time 0 for the run
