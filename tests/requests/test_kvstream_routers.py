"""Replicas (dp > 1): the prefix router keeps a session where its prefix lives, least-loaded balances the
tokens outstanding, and one shared remote pool (as Mooncake Store) beats per-replica pools of the same
total size on sessions spread across replicas."""
from pathlib import Path

import numpy as np
import pytest

from tierlab.kvstream.server import serve_requests
from tierlab.traces.model.spec import load_model

from kvstream_helpers import make_trace, session_trace

TINY = Path(__file__).parents[1] / "data" / "models" / "tiny-llama.json"
BT = 16


@pytest.fixture(scope="module")
def spec():
    return load_model(str(TINY))


@pytest.fixture(scope="module")
def sessions():
    return session_trace(400, sessions=32, sys_blocks=2, turn_blocks=4, rate=200.0, output=4, bt=BT, seed=1)


def _serve(tr, spec, **kw):
    return serve_requests(tr, spec, system="dgx-h100", max_batch_tokens=256, **kw)


@pytest.mark.parametrize("dp", [2, 4])
def test_prefix_router_hits_more_than_round_robin(spec, sessions, dp):
    rr = _serve(sessions, spec, dp=dp, hbm_tokens=16384).summary["hit_ratio"]["total"]
    px = _serve(sessions, spec, dp=dp, hbm_tokens=16384, router="prefix")
    assert px.summary["hit_ratio"]["total"] > rr + 0.05, (px.summary["hit_ratio"], rr)
    # every turn after a session's first went to the replica that served its previous turn (it holds
    # the history: turns only grow, and nothing else holds it)
    t = px.table
    rep = t["replica"].to_numpy()
    ids = [sessions.blocks[sessions.block_offsets[i]:sessions.block_offsets[i + 1]] for i in range(len(sessions))]
    last = {}
    for i, b in enumerate(ids):
        key = int(b[2])                                   # the session's first own block
        if key in last:
            assert rep[i] == rep[last[key]], i
        last[key] = i


def test_least_loaded_balances_outstanding_tokens(spec):
    """A burst of one long and three short prompts, repeated: round-robin puts every long one on
    replica 0; least-loaded (fewest input + output tokens outstanding) spreads the tokens."""
    prompts, nxt = [], 0
    for k in range(24):
        n = 32 if k % 4 == 0 else 2
        prompts.append(list(range(nxt, nxt + n)))
        nxt += n
    tr = make_trace(prompts, np.zeros(len(prompts)), 4, BT)
    tokens = tr.input_tokens + 4

    def spread(router):
        rep = _serve(tr, spec, dp=4, router=router).table["replica"].to_numpy()
        per = np.bincount(rep, weights=tokens, minlength=4)
        return per.max() - per.min(), per

    rr, per_rr = spread("round-robin")
    ll, per_ll = spread("least-loaded")
    assert per_rr.sum() == per_ll.sum() == tokens.sum()
    # greedy to the least loaded: no replica ends more than the largest request above another
    assert ll <= tokens.max(), per_ll
    assert rr > 3 * ll, (per_rr, per_ll)


def test_shared_remote_beats_local_pools(spec, sessions):
    """Round-robin spreads each session over the replicas; a shared remote pool of 2 MB serves a turn
    whatever replica made its history, four pools of 0.5 MB only their own."""
    shared = _serve(sessions, spec, dp=4, hbm_tokens=2048, kv_tiers={"remote": 2e6}).summary
    local = _serve(sessions, spec, dp=4, hbm_tokens=2048, kv_tiers={"remote": 0.5e6}, shared_remote=False).summary
    assert shared["hit_ratio"]["hbm"] == local["hit_ratio"]["hbm"]     # HBM is per replica in both
    assert shared["hit_ratio"]["remote"] > 2 * local["hit_ratio"]["remote"], (shared["hit_ratio"], local["hit_ratio"])
    kv = shared["kv_bytes_per_token"]
    for s in (shared, local):                                           # loads: hit tokens x KV bytes per token
        assert s["tier_bytes"]["remote"]["loaded"] == pytest.approx(
            s["load_or_recompute"]["remote"]["loaded_tokens"] * kv)


def test_ttft_router_rule_by_hand():
    """Mooncake's Algorithm 1 (an instance's own prefix): the replica with the least queued prefill
    plus this prompt's prefill after the prefix it holds, against hand arithmetic on a linear surface
    (1 ms per token computed)."""
    from types import SimpleNamespace

    from tierlab.kvstream.sim import Sim

    class Rep(SimpleNamespace):
        def prefix_len(self, ids):
            return self.held

    surf = SimpleNamespace(prefill_time=lambda tokens, start=0: tokens * 1e-3)
    sim = SimpleNamespace(inp=np.array([4096]), bt=512, surf=surf, est_prefill_s=np.zeros(1))
    ids = list(range(8))
    # replica 0 holds 6 of the 8 blocks but has 3.5 s of prefill queued; replica 1 holds none, 0.1 s queued:
    # 3.5 + 1.024 > 0.1 + 4.096? no: 4.524 > 4.196, so replica 1; the prefix router would take replica 0
    reps = [Rep(idx=0, held=6, queued_prefill_s=3.5), Rep(idx=1, held=0, queued_prefill_s=0.1)]
    best = Sim._route_ttft(sim, 0, ids, reps, lambda r: r.idx)
    assert best.idx == 1 and sim.est_prefill_s[0] == pytest.approx(4.096)
    assert reps[1].queued_prefill_s == pytest.approx(4.196) and reps[0].queued_prefill_s == 3.5
    # a lighter queue on the holder: it wins (1.024 + 2.0 < 4.096 + 0.1)
    reps = [Rep(idx=0, held=6, queued_prefill_s=2.0), Rep(idx=1, held=0, queued_prefill_s=0.1)]
    assert Sim._route_ttft(sim, 0, ids, reps, lambda r: r.idx).idx == 0
    # a prompt held whole still computes its last token (a prefill of at least one token)
    reps = [Rep(idx=0, held=8, queued_prefill_s=0.0)]
    Sim._route_ttft(sim, 0, ids, reps, lambda r: r.idx)
    assert sim.est_prefill_s[0] == pytest.approx(1e-3)


def test_ttft_router_balances_prefill_and_keeps_prefixes(spec, sessions):
    """With nothing shared it spreads the prefill work as least-loaded spreads tokens; on sessions it
    finds their prefixes as the prefix router does (hits above round-robin)."""
    prompts, nxt = [], 0
    for k in range(24):
        n = 32 if k % 4 == 0 else 2
        prompts.append(list(range(nxt, nxt + n)))
        nxt += n
    tr = make_trace(prompts, np.zeros(len(prompts)), 4, BT)
    tokens = tr.input_tokens + 4
    rep = _serve(tr, spec, dp=4, router="ttft").table["replica"].to_numpy()
    per = np.bincount(rep, weights=tokens, minlength=4)
    assert per.max() - per.min() <= tokens.max(), per
    rr = _serve(sessions, spec, dp=4, hbm_tokens=16384).summary["hit_ratio"]["total"]
    tt = _serve(sessions, spec, dp=4, hbm_tokens=16384, router="ttft").summary["hit_ratio"]["total"]
    assert tt > rr + 0.05, (tt, rr)
