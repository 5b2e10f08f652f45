"""What `kvadvisor verify` generates and reads back, as frozen dataclasses (base units)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvadvisor.errors import KvAdvisorError
from kvadvisor.vocab import CheckStatus, Severity, Stage, Vocab

# What each manifest format_version changed:
#   1: first version.
MANIFEST_VERSION = 1
MANIFEST_NAME = "verify.json"
RESULTS_DIR = "results"

DIRECTIONS = ("read", "write")


class VerifyError(KvAdvisorError):
    """A verify folder or a result in it does not match (the message names file and what)."""

    slug = "verify"


@dataclass(frozen=True)
class IoShape:
    """How a tier's KV traffic is cut into I/Os, and where each number comes from.

    One chunk of ``chunk_tokens`` tokens is written by ``writers`` ranks (the TP shards; one rank
    for MLA, whose latent is the same on every rank), each piece split ``pieces_per_chunk`` ways
    by the layout (K and V apart, or one piece per layer). ``kv_bytes_per_io`` is the KV in one
    I/O; ``io_bytes`` that rounded up to whole device units, what fio issues.
    """

    chunk_tokens: int
    chunk_from: str
    layout: str  # contiguous | kv_split | layer_wise
    layout_from: str
    pieces_per_chunk: int
    writers: int
    writers_from: str
    kv_bytes_per_io: float
    io_unit_bytes: int
    io_unit_from: str

    @property
    def io_bytes(self) -> int:
        """One I/O as the device sees it: the KV piece rounded up to whole device units."""
        unit = self.io_unit_bytes
        return max(int(-(-self.kv_bytes_per_io // unit) * unit), unit)


@dataclass(frozen=True)
class BurstProfile:
    """On/off phases of a demand series: windows above its mean are "on".

    ``on_s``/``off_s`` are the mean lengths of consecutive on and off windows; the rates are the
    mean demand over the on and over the off windows (bytes per second).
    """

    on_bytes_per_s: float
    off_bytes_per_s: float
    on_s: float
    off_s: float
    on_fraction: float
    threshold_bytes_per_s: float


@dataclass(frozen=True)
class DirectionDemand:
    """One direction of one tier: the measured demand per instance (or per pool when shared)."""

    direction: str
    mean_bytes_per_s: float
    p99_bytes_per_s: float
    peak_bytes_per_s: float
    burst: BurstProfile | None
    ios_per_request_p99: float  # I/Os per writer of the p99 request moving KV on this tier
    latency_target_s: float | None
    latency_target_from: str


@dataclass(frozen=True)
class TierDemand:
    """A tier of one stage: its I/O shape, demand per direction and queue depth.

    ``skipped`` says why no fio job is written (memory, a KV pool, no demand); None otherwise.
    """

    stage: Stage
    tier: str
    kind: str
    shared: bool
    devices: int
    catalog_name: str | None
    gds: bool
    gds_from: str
    shape: IoShape
    read: DirectionDemand | None
    write: DirectionDemand | None
    iodepth: int
    iodepth_from: str
    window_s: float
    skipped: str | None = None
    demand_from: str = ""
    # Closed loop only: what the traffic asks with no queueing (the review's open-loop p99 and
    # peak per direction, bytes per second), and the plan's capability per direction.
    open_loop: dict[str, tuple[float, float]] = field(default_factory=dict)
    capability_bytes_per_s: dict[str, float] = field(default_factory=dict)
    # One device's (one volume's) rated limits, ``read_bytes_per_s``, ``write_iops``...: the
    # plan's storage figures before ``devices`` multiplies them; and where they come from.
    device_limits: dict[str, float] = field(default_factory=dict)
    device_limits_from: str = ""

    def directions(self) -> tuple[DirectionDemand, ...]:
        """The directions with demand, read first."""
        return tuple(d for d in (self.read, self.write) if d is not None)


@dataclass(frozen=True, eq=False)
class ReplayedTier:
    """One tier's demand in the closed-loop replay of the plan, for one device unit.

    The unit is the tier's scope (a replica, an instance or the pool): the busiest one, by the
    p99 of its read plus write bytes per window. ``inflight`` is the mean number of the stage's
    requests in flight on that unit per window (the queue depth's source); ``served_tokens``
    the tokens the tier served each request (None for a tier nobody reads).
    """

    stage: Stage
    tier: str
    read_bytes_per_s: np.ndarray
    write_bytes_per_s: np.ndarray
    window_s: float
    inflight: np.ndarray
    inflight_from: str
    served_tokens: np.ndarray | None
    units: int
    source: str


class PhaseStatus(Vocab):
    """How a fio phase came out against the rates it had to hold."""

    PASS = "pass"
    FAIL = "fail"
    INFO = "info"  # a max-* phase: it measures what the tier does, no rate to hold


@dataclass(frozen=True)
class FioPhase:
    """One stonewalled group of a job file: the job name fio reports and what it must hold.

    ``rates_bytes_per_s`` are the per-instance rates the phase caps each direction at (fio's
    ``rate`` divided over the ranks); empty for the unthrottled ``max-*`` phases, which measure
    what the tier does and feed the catalog override. ``severity`` is the finding's when the
    phase fails (``info`` for the measurement-only phases).
    """

    name: str
    phase: str
    rates_bytes_per_s: dict[str, float]
    latency_target_s: dict[str, float]
    severity: Severity
    # burst phase: per direction (extra rate while on, on seconds, off seconds) on top of the
    # always-on rate in rates_bytes_per_s.
    bursts: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    what: str = ""
    # A striped tier: the job names fio reports for each device, in device order (each runs
    # 1/N of the rates above; their sum is judged against them). Empty: one job, ``name``.
    device_jobs: tuple[str, ...] = ()


@dataclass(frozen=True)
class FioJobFile:
    """One fio job file: a tier's phases, plain (``libaio``) or the GPUDirect Storage variant."""

    path: str
    result: str
    stage: Stage
    tier: str
    gds: bool
    io_bytes: int
    numjobs: int
    iodepth: int
    phases: tuple[FioPhase, ...]
    text: str
    devices: int = 1  # job sections per phase: the devices of a striped tier


@dataclass(frozen=True, eq=False)
class RoutedShare:
    """The requests the replay routed to one serving node, which its benchmark replays.

    ``instance`` of ``instances`` of ``stage`` (the one that served the most), whose
    ``share_requests`` requests the plan's ``router`` sent there; ``rows`` the trace rows kept
    (the first ``--bench-requests`` of them), in arrival order; ``replayed`` what the replay
    measured for those requests (:func:`kvadvisor.verifyjobs.share.serving_figures`).
    """

    stage: Stage
    router: str
    instance: int
    instances: int
    share_requests: int
    rows: np.ndarray
    replayed: dict[str, float | None]


@dataclass(frozen=True)
class BenchRun:
    """One serving-benchmark command and the dataset it replays."""

    engine: str  # vllm | sglang
    script: str
    dataset: str
    result: str
    requests: int
    input_tokens_total: int
    output_tokens_total: int
    replay_s: float  # how long the replay takes at the arrival times written


@dataclass(frozen=True)
class VerifySet:
    """Everything `verify TRACE --plan` writes: files by relative path, and the manifest."""

    job_set_id: str
    files: dict[str, str]
    manifest: dict[str, Any]
    tiers: tuple[TierDemand, ...]
    jobs: tuple[FioJobFile, ...]
    benches: tuple[BenchRun, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Measured:
    """One direction of one phase as fio measured it (from its JSON output)."""

    direction: str
    bytes_per_s: float
    iops: float
    io_bytes: float  # bytes moved over I/Os completed: the I/O size actually issued
    ios: int
    runtime_s: float
    clat_p50_s: float | None
    clat_p99_s: float | None
    clat_p999_s: float | None


@dataclass(frozen=True)
class PhaseResult:
    """A phase's required figures against fio's measured ones, per direction, and the verdict."""

    job: str
    stage: Stage
    tier: str
    gds: bool
    phase: str
    severity: Severity
    status: PhaseStatus
    measured: dict[str, Measured]
    required_bytes_per_s: dict[str, float]
    latency_target_s: dict[str, float]
    read_share_required: float | None
    read_share_measured: float | None
    reasons: tuple[str, ...] = ()
    # A striped tier: each device's measured directions, in device order (``measured`` is
    # their sum).
    devices: tuple[dict[str, Measured], ...] = ()


@dataclass(frozen=True)
class BenchResult:
    """A serving benchmark read back: its latencies against the plan's SLO, and the fit."""

    engine: str
    path: str
    requests: int
    completed: int
    ttft_p99_s: float | None
    tpot_p99_s: float | None
    ttft_slo_s: float | None
    tpot_slo_s: float | None
    status: CheckStatus
    input_tokens_ratio: float | None
    calibration: dict[str, Any] | None = None
    reasons: tuple[str, ...] = ()
    # The serving figures measured (:func:`kvadvisor.verifyjobs.share.serving_figures`) and
    # what the replay gave for the same requests (the manifest's ``share.replayed``; None
    # for a slowed whole trace, which no replay ran).
    figures: dict[str, float | None] = field(default_factory=dict)
    replayed: dict[str, float | None] | None = None


@dataclass(frozen=True)
class VerifyReport:
    """`verify --results`: every phase and benchmark judged, and the measured catalog."""

    job_set_id: str
    plan: str
    phases: tuple[PhaseResult, ...]
    benches: tuple[BenchResult, ...]
    catalog: dict[str, Any] | None
    missing: tuple[str, ...] = ()
    trace_sha256: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The folder's files this report was read from (relative paths): outputs must not replace
    # them.
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class VerifyFolder:
    """A verify folder as read back: manifest, fio documents per job file, benchmark traces.

    ``fio`` maps a job file (the manifest's ``file``) to (result path, parsed fio JSON);
    ``benches`` an engine to (result path, the benchmark output read as a trace);
    ``bench_spans`` an engine whose output has no per-request start times (SGLang's) to the
    seconds the tool measured its runs for (their ``duration``, summed).
    """

    path: str
    manifest: dict[str, Any]
    fio: dict[str, tuple[str, Any]] = field(default_factory=dict)
    benches: dict[str, tuple[str, Any]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    bench_spans: dict[str, float] = field(default_factory=dict)
