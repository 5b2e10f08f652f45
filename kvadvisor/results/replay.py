"""The replay model: what a replay found, as frozen dataclasses (the JSON `replay` section).

Renderers read this module only. Every number's definition is in docs/replay.md ("Outputs").
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any

from kvadvisor.vocab import Stage, Topology, Vocab

# What each version of the standalone replay document changed:
#   1: first version (`kvadvisor replay -o replay.json`).
REPLAY_FORMAT_VERSION = 1


class ReplaySeriesKey(Vocab):
    """What a replay chart series shows (renderers make the labels)."""

    TTFT_CDF = "ttft_cdf"
    TPOT_CDF = "tpot_cdf"
    QUEUE = "queue"
    RUNNING = "running"
    TIER_READ = "tier_read"
    TIER_WRITE = "tier_write"
    LINK = "link"
    STEP_TIME = "step_time"  # the busiest replica-minute's steps: x start, y duration (s)
    STEP_PREFILL = "step_prefill"  # ... its prefill tokens per step
    STEP_DECODE = "step_decode"  # ... its decode sequences per step


@dataclass(frozen=True)
class Percentiles:
    """A per-request quantity over the requests that have it."""

    mean: float
    p50: float
    p90: float
    p99: float
    max: float
    count: int


@dataclass(frozen=True)
class WindowRate:
    """A per-window rate (per second) over the replay: mean, 99th percentile, peak window."""

    mean: float
    p99: float
    peak: float


@dataclass(frozen=True)
class RequestStats:
    """Latencies of the requests that finished (seconds); ``load_s`` over those that loaded."""

    count: int
    completed: int
    unfinished: int
    ttft_s: Percentiles | None
    tpot_s: Percentiles | None
    e2e_s: Percentiles | None
    queue_s: Percentiles | None
    load_s: Percentiles | None


@dataclass(frozen=True)
class ReplayStageSplit:
    """GPU time per stage (GPU-seconds: replica-seconds x GPUs per replica), closed loop."""

    prefill_gpu_s: float
    decode_gpu_s: float
    prefill_share: float | None
    source: str = "replay"


@dataclass(frozen=True)
class StageSummary:
    """One stage as replayed: its replicas, how busy they were, how they batched."""

    role: Stage
    instance: str | None
    gpu: str | None
    instances: int
    replicas: int
    gpus_per_replica: int
    router: str
    step_model: str
    pool_tokens_per_replica: int
    max_batched_tokens: int
    max_seqs: int
    page_tokens: int
    busy_fraction: float | None  # mean over replicas of time executing steps / replay span
    steps: int
    # mean over replicas of time holding at least one admitted request / replay span
    occupancy_fraction: float | None = None


@dataclass(frozen=True)
class ReplayTierDemand:
    """One tier's demand per device (a replica's, an instance's or the pool's unit)."""

    name: str
    stage: Stage
    kind: str
    scope: str
    devices: int
    capacity_bytes: float | None
    read_capability_bytes_per_s: float
    write_capability_bytes_per_s: float
    hit_ratio: float | None  # prompt tokens this tier served / prompt tokens
    read_bytes_per_s: WindowRate  # delivered by the device
    write_bytes_per_s: WindowRate  # drained to the device
    read_demand_bytes_per_s: WindowRate  # asked for: loads started, their bytes in the window
    write_demand_bytes_per_s: WindowRate  # offered: bytes the GPUs handed to the write buffer
    read_iops: WindowRate
    read_utilization: WindowRate
    write_utilization: WindowRate
    utilization: WindowRate  # the busier direction, window by window


@dataclass(frozen=True)
class LinkDemand:
    """The P-to-D link per decode instance."""

    links: int
    capability_bytes_per_s: float
    bytes_per_s: WindowRate
    utilization: WindowRate


@dataclass(frozen=True)
class Counts:
    """Events counted over the replay (docs/replay.md says what each counts)."""

    preemptions: int
    recomputed_loads: int
    recomputed_tokens: float
    blocked_writes: int
    dropped_writes: int
    dropped_write_bytes: float
    swaps: int
    steps: int
    unfinished: int


@dataclass(frozen=True)
class SloAttainment:
    """SLO targets in seconds (``ttft_p90_s`` ...), the share meeting each, percentile met.

    A request that never finished misses every target.
    """

    targets: dict[str, float] = field(default_factory=dict)
    attainment: dict[str, float] = field(default_factory=dict)
    met: dict[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class Overload:
    """Whether the fleet kept up: queue growth over the arrivals, what the drain left."""

    overloaded: bool
    reason: str
    queue_mean_second_quarter: float
    queue_mean_last_quarter: float
    unfinished: int


@dataclass(frozen=True)
class ReplaySeries:
    """One chart line: x and y of equal length (x in seconds, or the quantity for a CDF)."""

    kind: ReplaySeriesKey
    name: str
    x: tuple[float, ...]
    y: tuple[float, ...]


@dataclass(frozen=True)
class DeploymentSummary:
    """The deployment replayed, as the report names it."""

    name: str
    topology: Topology
    link_bytes_per_s: float | None = None


@dataclass(frozen=True)
class ReplayResult:
    """The whole replay: the contract's `replay` section plus chart data and notes."""

    step_model: dict[str, str]
    deployment: DeploymentSummary
    stages: tuple[StageSummary, ...]
    requests: RequestStats
    stage_split: ReplayStageSplit
    hit_ratio: float | None  # prompt tokens served from any cache level / prompt tokens
    tiers: tuple[ReplayTierDemand, ...]
    link: LinkDemand | None
    counts: Counts
    slo: SloAttainment
    overload: Overload
    window_s: float
    drain_cap_s: float
    span_s: float
    series: tuple[ReplaySeries, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (enums as their values)."""
        return {f.name: plain(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class TraceInfo:
    """What was replayed."""

    path: str
    format: str
    requests: int
    duration_s: float
    block_tokens: int | None


@dataclass(frozen=True)
class ReplayReport:
    """The standalone document of `kvadvisor replay`: provenance, trace, the replay."""

    format_version: int
    kvadvisor_version: str
    generated_at: str
    trace: TraceInfo
    replay: ReplayResult

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (this model's fields only, also for a subclass that adds more)."""
        return {f.name: plain(getattr(self, f.name)) for f in fields(ReplayReport)}


def plain(value: Any) -> Any:
    """Dataclasses, enums, tuples and dicts as plain JSON values (recursively)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
