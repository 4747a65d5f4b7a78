"""The options of a replay: every choice that changes counts, and the tuning that never does.

Count-changing options are the accounting rules of ``docs/design.md``; the tuning options pick how
the counting is done (which kernel, batch sizes, threads) and leave every count as it is. A
semantic option never chooses a kernel: a kernel that cannot honour it is passed over by the
dispatch table (:mod:`tierlab.engine.dispatch`), which says so in the result's provenance.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tierlab.common.errors import UsageError


@dataclass(frozen=True)
class ReplayOptions:
    """Every choice that changes counts, with its default, then the tuning (same counts)."""

    # --- count-changing (docs/design.md, accounting rules)
    store_hit_recency: bool = True        # a store hit counts as a use for LRU
    fetch_on_write_miss: bool = True      # a store miss covering a whole tier-0 block still fetches it
    fetch_on_writeback_miss: bool = True  # a whole-block write arriving from above still fetches it
    flush: bool = False                   # write dirty blocks back at the end (reported separately)
    inclusive: bool = False               # a caching tier's eviction back-invalidates nearer caching tiers
    seed: int = 0                         # the random policy's seed
    pim: bool = True                      # run PIM-eligible ops in memory where the chip allows
    # --- tuning (identical counts)
    kernel: str = "auto"                  # "auto" (the fastest that serves the request) or a kernel's name
    fast_path: bool = True                # alias: False means kernel "walk" (plain per-block replay)
    set_groups: bool = True               # alias: False keeps "auto" from choosing "set_groups"
    fast_min_blocks: int = 64             # shortest read chunk (tier-0 blocks) the walk's fast path takes
    lazy_max_runs: int = 16               # runs a lazy tier keeps stacked before it is written out
    max_set_groups: int = 1 << 30         # more groups (or a quarter of tier 0's sets, past 64): tier 0
                                          # written out, walked per set. Was 1024, which a large last
                                          # cache (125,000 sets) passes on every prefill: the walk took
                                          # over, 50-250x slower (issue 42); the quarter is the real bound
    threads: int = 1                      # block streams: split the stream by set over 2 threads where exact
    batch_rows: int = 1 << 16             # access descriptors per engine call
    opt_max_lookups: int = 1 << 26        # largest per-tier future the opt pre-pass may hold
    max_slots: int = 1 << 27              # largest emulated state (blocks over all tiers)
    debug: bool = False                   # check conservation/count invariants after the replay
                                          # (tierlab.engine.invariants; also on with TIERLAB_DEBUG=1)

    def __post_init__(self):
        if self.lazy_max_runs < 1:
            raise UsageError(f"expected at least 1 run, got {self.lazy_max_runs}", field="lazy_max_runs")
        if not isinstance(self.threads, int) or self.threads < 1:
            raise UsageError(f"expected a whole number of threads of at least 1, got {self.threads!r}",
                             field="threads")
        if self.max_set_groups < 1:
            raise UsageError(f"expected at least 1 group, got {self.max_set_groups}", field="max_set_groups")
        if not self.fast_path and self.kernel not in ("auto", "walk"):
            raise UsageError(f"fast_path off asks for kernel 'walk', but kernel {self.kernel!r} was given",
                             field="kernel")

    @property
    def requested_kernel(self) -> str:
        """The kernel asked for once the aliases are applied: "auto" or a kernel's name."""
        return "walk" if not self.fast_path else self.kernel

    def to_dict(self) -> dict:
        return asdict(self)


def random_seed_state(seed: int, tier: int) -> int:
    """Initial xorshift64 state of tier ``tier`` for ``seed`` (never zero)."""
    x = (int(seed) * 0x9E3779B97F4A7C15 + (tier + 1) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    x ^= x >> 31
    return x or 1
