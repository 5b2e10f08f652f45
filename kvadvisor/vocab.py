"""The shared vocabulary: what a value means (a stage, a severity, a status), not how it reads.

Each is a ``str`` enum whose values are the spellings the JSON report and rule files use, so a
report reads the same, while code compares meanings instead of display text. Renderers turn
them into words.
"""

from __future__ import annotations

from enum import Enum


class Vocab(str, Enum):
    """A str enum that prints as its value (``f"{Stage.PREFILL}"`` is ``prefill``)."""

    def __str__(self) -> str:
        """The spelling, as JSON and rule files write it."""
        return str(self.value)


class Severity(Vocab):
    """How much a finding matters; ordered info < warning < error."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        """0 for info, 1 for warning, 2 for error (for --fail-on and sorting)."""
        return list(Severity).index(self)


class Stage(Vocab):
    """Which serving stage something speaks about."""

    PREFILL = "prefill"
    DECODE = "decode"
    BOTH = "both"  # a finding about the two stages together
    SERVING = "serving"  # an aggregated plan's stage: prefill and decode on the same instances


class Topology(Vocab):
    """Whether prefill and decode share replicas (aggregated) or run apart (disaggregated)."""

    AGGREGATED = "aggregated"
    DISAGGREGATED = "disaggregated"


class CheckStatus(Vocab):
    """What a review check concluded: a failed check is a finding; a skipped one says why."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


class CacheStatus(Vocab):
    """How the prefix-cache curve was obtained."""

    EXACT = "exact"
    SAMPLED = "sampled"  # SHARDS spatial sampling, with its rate and error
    UNKNOWN = "unknown"  # no block hashes: reuse cannot be measured


class SplitSource(Vocab):
    """Where the stage times behind the split come from."""

    MEASURED = "measured"
    MODELED = "modeled"
    CALIBRATED = "calibrated"
    REPLAY = "replay"  # the closed-loop replay of the recommended deployment (docs/replay.md)


class TierRole(Vocab):
    """What a recommended KV tier is for."""

    HOST_POOL = "host_pool"  # host memory KV pool and write buffer
    CAPACITY = "capacity"  # the prefill stage's capacity tier
    READ = "read"  # the decode stage's read tier


# How renderers and engine-config comments say each role.
TIER_ROLE_WORDS: dict[TierRole, str] = {
    TierRole.HOST_POOL: "host memory KV pool and write buffer",
    TierRole.CAPACITY: "capacity tier",
    TierRole.READ: "read tier",
}
