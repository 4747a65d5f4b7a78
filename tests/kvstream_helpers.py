"""Small synthetic traces for the kvstream serving tests (built here; the reader's synthetic streams
may replace them)."""
import numpy as np

from tierlab.kvstream.trace import RequestTrace, dense_block_ids


def make_trace(prompts, arrival, output, bt: int) -> RequestTrace:
    """``prompts``: one list of block ids per request (ids as in Mooncake: equal id, equal prefix);
    input tokens are ``len x bt``."""
    off = np.zeros(len(prompts) + 1, np.int64)
    off[1:] = np.cumsum([len(p) for p in prompts])
    raw = np.array([b for p in prompts for b in p], np.int64)
    blocks, u = dense_block_ids(raw)
    n = len(prompts)
    return RequestTrace(arrival_s=np.asarray(arrival, np.float64), input_tokens=np.array([len(p) * bt for p in prompts]),
                        output_tokens=np.broadcast_to(np.asarray(output, np.int64), (n,)).copy(),
                        session=np.full(n, -1, np.int64), block_offsets=off, blocks=blocks, block_tokens=bt,
                        n_unique_blocks=u, source="test", format="synthetic")


def unique_trace(n: int, blocks: int, output: int, bt: int) -> RequestTrace:
    """``n`` requests of ``blocks`` blocks each, nothing shared, all arriving at 0."""
    return make_trace([list(range(i * blocks, (i + 1) * blocks)) for i in range(n)], np.zeros(n), output, bt)


def session_trace(n: int, sessions: int, sys_blocks: int, turn_blocks: int, rate: float, output: int, bt: int,
                  seed: int = 0) -> RequestTrace:
    """Multi-turn sessions sharing a system prompt: each turn extends its session's last prompt."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate, n))
    last, nxt, prompts = {}, 10 ** 6, []
    for _ in range(n):
        s = int(rng.integers(0, sessions))
        p = last.get(s, list(range(sys_blocks))) + list(range(nxt, nxt + turn_blocks))
        nxt += turn_blocks
        last[s] = p
        prompts.append(p)
    return make_trace(prompts, arrival, output, bt)
