"""The report model: what `kvadvisor analyze` shows, as frozen dataclasses (the JSON contract).

Renderers and engine-config writers depend on the result models only. Field names follow
DESIGN.md's JSON report; sections that an analysis could not compute are None, never invented.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import asdict, dataclass, field
from typing import Any

from kvadvisor.results.common import IoRate, Meta, TraceSummary, Utilization
from kvadvisor.results.replay import ReplayResult
from kvadvisor.results.review import PlanReview
from kvadvisor.results.serial import from_plain
from kvadvisor.results.series import Series
from kvadvisor.results.verdict import VerdictSet
from kvadvisor.units import Unit
from kvadvisor.vocab import CacheStatus, Severity, SplitSource, Stage, TierRole, Topology

# What each format_version changed:
#   1: first version (DESIGN.md's contract). Within it: facts gained the unit "iops" (I/O
#      operations per second, was "per_s"), and every finding's evidence is {value, unit, text}.
#   2: a top-level `replay` section (the recommended deployment replayed closed loop; its shape
#      is `$defs/replay` of replay.schema.json, null when not replayed), and `stage_split` may
#      have source "replay": its prefill_s/decode_s/prefill_share are then the closed loop's
#      GPU-seconds, and the open-loop figures move to open_loop_prefill_s, open_loop_decode_s,
#      open_loop_prefill_share (a bound: no queueing, batches from arrivals). Within it: each
#      verdict gained `price_kind` (on_demand, calendar, ...; "mixed"; "" unpriced) and
#      `price_unconfirmed` (additive: readers of 2 ignore them).
FORMAT_VERSION = 2


@dataclass(frozen=True)
class ModelDeployment:
    """Where the model runs in the performance model; ``*_assumed`` marks defaults not chosen."""

    gpu: str
    gpu_display_name: str
    gpu_assumed: bool
    tp: int
    tp_assumed: bool
    kv_dtype: str
    weight_dtype: str
    # the step-time model's coefficients (fractions of peak, overheads) and where they come from
    efficiency: dict[str, Any] = field(default_factory=dict)
    # which model produced the step times ("roofline" | "silicon") and why
    step_model: str = "roofline"
    step_model_reason: str = ""


@dataclass(frozen=True)
class MemorySummary:
    """Weights and KV against GPU memory, per GPU of the TP group (bytes, tokens, requests)."""

    memory_bytes_per_gpu: float
    usable_bytes_per_gpu: float
    weight_bytes_per_gpu: float
    kv_budget_bytes_per_gpu: float
    weights_fit: bool
    kv_capacity_tokens: float
    max_concurrent_requests: float
    mean_context_tokens: float
    kv_working_set_peak_bytes_per_gpu: float
    kv_working_set_fits: bool


@dataclass(frozen=True)
class ModelSummary:
    """The served model and its KV footprint (``kv_bytes_per_token``: distinct bytes, all ranks)."""

    name: str
    kv_bytes_per_token: int
    display_name: str = ""
    assumed: bool = False
    origin: str = "catalog"  # "catalog" | "hf-config"
    attention: str = "gqa"
    kv_bytes_per_token_per_gpu: int | None = None
    kv_bytes_per_token_all_gpus: int | None = None  # per-GPU bytes x TP (replicas counted)
    sliding_window_tokens: int | None = None
    sliding_window_layers: int = 0
    total_params: float | None = None
    active_params: float | None = None
    deployment: ModelDeployment | None = None
    memory: MemorySummary | None = None
    sources: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class FitErrorSummary:
    """Absolute percentage error of the model against measured rows (fractions, not %)."""

    rows: int
    mape: float | None
    median_ape: float | None


@dataclass(frozen=True)
class CalibrationSummary:
    """Efficiency factors fitted to measured rows, with errors before/after on held-out rows.

    ``method``: "replay" (closed loop: measured TTFT, queueing included, and time per output
    token against the trace replayed through one replica; ``prefill_*`` then hold the TTFT
    errors and ``decode_step_*`` the TPOT errors) or "open_loop" (prefill latency and decode
    step time modelled request by request).
    """

    fit_rows: int
    heldout_rows: int
    efficiency: dict[str, Any]
    prior_efficiency: dict[str, Any]
    prefill_heldout: FitErrorSummary
    decode_step_heldout: FitErrorSummary
    prefill_heldout_prior: FitErrorSummary
    decode_step_heldout_prior: FitErrorSummary
    converged: bool
    method: str = "open_loop"
    replayed_requests: int | None = None


# The per-request distributions a StageSplit carries (``per_request``), with their units.
PER_REQUEST_UNITS: dict[str, Unit] = {
    "prefill_gpu_s": Unit.SECONDS,
    "decode_gpu_s": Unit.SECONDS,
    "prefill_share": Unit.RATIO,
    "ttft_s": Unit.SECONDS,
    "decode_latency_s": Unit.SECONDS,
}


@dataclass(frozen=True)
class StageSplit:
    """GPU-time totals per stage over the trace; ``source`` is measured, modeled or calibrated.

    ``prefill_s``/``decode_s``/``prefill_share`` are GPU time (batch-aware); the latency split
    (sum of TTFT against sum of decode time) is beside it, as are the split had no prefix been
    reused, the classification with its thresholds, and per-request distributions.
    """

    source: SplitSource
    prefill_s: float
    decode_s: float
    prefill_share: float
    classification: str = ""
    thresholds: dict[str, float] = field(default_factory=dict)
    latency_prefill_s: float | None = None
    latency_decode_s: float | None = None
    latency_prefill_share: float | None = None
    latency_classification: str = ""
    hits_source: str | None = None  # where prefix hits came from; None = unknown (assumed 0)
    no_reuse_prefill_s: float | None = None
    no_reuse_prefill_share: float | None = None
    prefill_s_saved_by_reuse: float | None = None
    request_classes: dict[str, int] = field(default_factory=dict)
    per_request: dict[str, dict[str, float]] = field(default_factory=dict)
    mean_decode_batch: float | None = None  # per instance
    measured_requests: int = 0
    instances: int = 1  # model instances the trace's load was spread over
    gpu_busy_fraction: float | None = None  # GPU time / (instances x trace duration)
    calibration: CalibrationSummary | None = None
    series: tuple[Series, ...] = ()
    notes: tuple[str, ...] = ()
    # With source "replay": the open-loop figures the closed loop replaced (a bound).
    open_loop_prefill_s: float | None = None
    open_loop_decode_s: float | None = None
    open_loop_prefill_share: float | None = None


@dataclass(frozen=True)
class MrcPoint:
    """Token hit ratio at one capacity (None = unbounded); None ratios when there are no hashes.

    ``capacity_bytes`` is the capacity in KV bytes when the model's KV bytes per token is known.
    """

    capacity_tokens: int | None
    hit_ratio_all: float | None
    hit_ratio_steady: float | None
    capacity_bytes: int | None = None


@dataclass(frozen=True)
class HitRatio:
    """Token hit ratio over all requests and in steady state (after the warm-up)."""

    all: float | None
    steady: float | None


@dataclass(frozen=True)
class CacheSampling:
    """How a sampled (SHARDS) curve was estimated: rate, sample size and estimated error."""

    rate: float
    sampled_accesses: int
    total_accesses: int
    error_estimate: float | None
    error_method: str


@dataclass(frozen=True)
class ExtraSampling:
    """One prefix-cache extra estimated on a spatial hash sample (SHARDS), with its error.

    ``extra`` names the section ("reuse", "block_sizes" or "routing"); ``error_estimate`` is a
    standard error in ``error_unit`` ("ratio": of a hit ratio; "relative": of a TTL, as a
    fraction of it), and ``error_method`` says how it was found.
    """

    extra: str
    rate: float
    sampled_accesses: int
    total_accesses: int
    error_estimate: float | None
    error_unit: str
    error_method: str


@dataclass(frozen=True)
class CacheTier:
    """Hit tokens served by one tier of an inclusive hierarchy (fastest tier holding them)."""

    name: str
    capacity_tokens: int | None
    effective_capacity_tokens: int | None
    hit_tokens_all: float
    hit_tokens_steady: float
    share_all: float | None
    share_steady: float | None
    hit_bytes_all: float | None = None


@dataclass(frozen=True)
class CacheTiers:
    """Every tier's share of the input tokens, and the share no tier holds (recomputed)."""

    levels: tuple[CacheTier, ...]
    miss_tokens_all: float
    miss_share_all: float | None
    miss_share_steady: float | None


@dataclass(frozen=True)
class RoutingPointSummary:
    """Token hit ratio of one routing policy at one per-instance capacity (None = unbounded)."""

    capacity_tokens_per_instance: int | None
    hit_ratio_all: float | None
    hit_ratio_steady: float | None


@dataclass(frozen=True)
class RoutingPolicySummary:
    """One routing policy's hit ratios, or why it could not be evaluated."""

    policy: str
    points: tuple[RoutingPointSummary, ...]
    unavailable: str | None = None


@dataclass(frozen=True)
class CacheRouting:
    """N local caches under each routing policy against one pool (prefix_aware) of N × capacity."""

    instances: int
    seed: int
    policies: tuple[RoutingPolicySummary, ...]


@dataclass(frozen=True)
class TtlPoint:
    """The shortest retention keeping ``share`` of the hit tokens, and the capacity it needs."""

    share: float
    ttl_s: float
    capacity_tokens: int
    lru_capacity_tokens: int | None


@dataclass(frozen=True)
class ReuseQuantile:
    """A token-weighted quantile of the time since a hit block was last used."""

    quantile: float
    seconds: float


@dataclass(frozen=True)
class CacheReuse:
    """Reuse times of the hits at unbounded capacity and the TTL table."""

    hit_tokens: int
    quantiles: tuple[ReuseQuantile, ...]
    histogram: Series | None
    ttl: tuple[TtlPoint, ...]


@dataclass(frozen=True)
class BlockSizePoint:
    """Token hit ratio at unbounded capacity with the hashes coarsened to ``chunk_tokens``."""

    chunk_tokens: int
    save_unfull_chunk: bool
    hit_ratio_all: float | None
    hit_ratio_steady: float | None


@dataclass(frozen=True)
class SharedPrefixSummary:
    """One maximal shared prefix: its length, the requests starting with it, what reuse saves.

    ``reusable_tokens`` = ``prefix_tokens × (requests − 1)``; ``reusable_share`` is that over
    all prompt tokens of the trace; ``first_arrival_s`` when the first request holding it came.
    """

    prefix_tokens: int
    blocks: int
    requests: int
    reusable_tokens: int
    reusable_share: float
    first_arrival_s: float


@dataclass(frozen=True)
class CacheSharing:
    """The trace's shared prefixes: how many, and the top ones by requests and by volume."""

    groups: int
    requests_sharing: int
    top_by_count: tuple[SharedPrefixSummary, ...] = ()
    top_by_volume: tuple[SharedPrefixSummary, ...] = ()


@dataclass(frozen=True)
class ConversationReuse:
    """The unbounded prefix hit ratio split into within- and across-conversation parts.

    ``basis`` is "session" (the trace's ``session_id``) or "continuation" (inferred from the
    hashes; ``within`` is then an upper bound). Shares are of all prompt tokens, over all
    requests and in steady state; within + across is the unbounded token hit ratio.
    """

    basis: str
    conversations: int
    within_share_all: float | None
    across_share_all: float | None
    within_share_steady: float | None
    across_share_steady: float | None
    within_tokens_all: int
    across_tokens_all: int


@dataclass(frozen=True)
class PrefixCache:
    """Prefix reuse: hit ratio at unbounded capacity and the miss-ratio curve.

    ``status`` is "exact", "sampled" or "unknown" (no block hashes: every ratio None and
    ``note`` says why). The fields after ``mrc`` are additions to DESIGN.md's contract.
    """

    warmup_fraction: float
    hit_ratio: HitRatio
    mrc: tuple[MrcPoint, ...]
    status: CacheStatus = CacheStatus.EXACT
    note: str | None = None
    block_tokens: int | None = None
    block_hit_ratio: HitRatio | None = None
    sampling: CacheSampling | None = None
    curve: tuple[Series, ...] = ()
    tiers: CacheTiers | None = None
    routing: CacheRouting | None = None
    reuse: CacheReuse | None = None
    block_sizes: tuple[BlockSizePoint, ...] = ()
    sharing: CacheSharing | None = None
    conversations: ConversationReuse | None = None
    # The extras estimated on a sample (a streamed trace whose rows do not fit), one per extra.
    extras_sampling: tuple[ExtraSampling, ...] = ()


@dataclass(frozen=True)
class IoPattern:
    """I/Os at the chunk size: counts, rates, sizes and write amplification on the device unit."""

    ios: int
    mean_iops: float
    p99_iops: float
    peak_iops: float
    full_chunk_ios: int
    partial_chunk_ios: int
    mean_io_bytes: float
    full_chunk_bytes: float
    device_bytes: float
    write_amplification: float | None


@dataclass(frozen=True)
class LoadVsRecompute:
    """Prefix length above which loading KV from a tier beats recomputing it on the GPU."""

    tier: str
    bandwidth_bytes_per_s: float
    latency_s: float
    break_even_tokens: float | None  # None: recompute wins at every length considered
    hit_token_share_below: float | None  # share of hit tokens in hits shorter than that
    source: str


@dataclass(frozen=True)
class IoDemand:
    """KV write demand (prefill misses) and read demand (hits), over windows of ``window_s``."""

    write: IoRate
    read: IoRate
    window_s: float
    read_known: bool = True
    chunk_tokens: int | None = None
    io_unit_bytes: int | None = None
    write_io: IoPattern | None = None
    read_io: IoPattern | None = None
    write_bytes_per_day: float | None = None
    drive_capacity_bytes: float | None = None
    drive_writes_per_day: float | None = None
    load_vs_recompute: tuple[LoadVsRecompute, ...] = ()
    series: tuple[Series, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tier:
    """One KV tier of a stage: catalog entry, role, capacity per instance and device count."""

    name: str
    category: str
    role: TierRole
    capacity_gib: float | None
    devices: int = 1
    shared: bool = False


@dataclass(frozen=True)
class Requirement:
    """What a stage's KV tier must sustain per instance, and how each figure was derived."""

    write_bytes_per_s: float | None = None
    read_bytes_per_s: float | None = None
    write_iops: float | None = None
    read_iops: float | None = None
    capacity_gib: float | None = None
    derivation: tuple[str, ...] = ()


@dataclass(frozen=True)
class Alternative:
    """A ranked candidate (storage or instance) with the reason for its rank."""

    kind: str
    name: str
    rank: int
    reason: str
    feasible: bool = True


@dataclass(frozen=True)
class StageRecommendation:
    """The configuration recommended for one stage."""

    instance: str | None
    storage: str | None
    instance_count: int | None = None
    gpu: str | None = None
    tiers: tuple[Tier, ...] = ()
    required: Requirement | None = None
    chunk_tokens: int | None = None
    retention_s: float | None = None
    utilization: Utilization | None = None
    alternatives: tuple[Alternative, ...] = ()
    notes: tuple[str, ...] = ()
    # The chosen instance as the catalog describes it, so engine configurations can size
    # per rank and check the host's memory without a catalog (None when not chosen).
    gpus_per_instance: int | None = None
    gpu_memory_gib: float | None = None  # per GPU
    host_memory_gib: float | None = None
    # From the verdict: tensor-parallel degree, replicas per instance, and the topology
    # (aggregated: this stage shares its replicas with the other; disaggregated).
    tp: int | None = None
    replicas_per_instance: int | None = None
    topology: Topology | None = None


@dataclass(frozen=True)
class RuleOutcome:
    """Whether a rule fired, and if not, why (condition false or a fact unavailable)."""

    code: str
    name: str
    fired: bool
    reason: str = ""


@dataclass(frozen=True)
class Recommendation:
    """One recommendation per stage, and the deployment verdicts it is read from.

    ``prefill`` and ``decode`` describe the stages of the primary verdict (an aggregated
    fleet's one serving stage fills both); ``verdict`` holds every provider's verdict
    (:mod:`kvadvisor.results.verdict`), None when no search ran.
    """

    prefill: StageRecommendation
    decode: StageRecommendation
    shared_storage: bool = False
    rules: tuple[RuleOutcome, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)
    verdict: VerdictSet | None = None

    def stage(self, stage: Stage) -> StageRecommendation:
        """The recommendation for ``stage`` (prefill or decode)."""
        if stage is Stage.PREFILL:
            return self.prefill
        if stage is Stage.DECODE:
            return self.decode
        raise ValueError(f"a recommendation has prefill and decode stages, not {stage}")


@dataclass(frozen=True)
class Evidence:
    """One fact a finding rests on: its value, its unit, and the text every renderer shows.

    ``text`` is the formatted value the finding's message quotes, so the two read the same.
    """

    value: float | int | bool | str | None
    unit: Unit | None
    text: str


@dataclass(frozen=True)
class Finding:
    """One rule that fired: stable code, severity, stage, message, and the facts behind it."""

    code: str
    severity: Severity
    stage: Stage
    message: str
    evidence: dict[str, Evidence] = field(default_factory=dict)
    name: str = ""
    summary: str = ""
    action: str = ""
    candidates: tuple[str, ...] = ()
    references: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """A severity or stage given by its spelling becomes its enum (or fails here)."""
        object.__setattr__(self, "severity", Severity(self.severity))
        object.__setattr__(self, "stage", Stage(self.stage))


@dataclass(frozen=True)
class ContextCheck:
    """The trace's requests against the model's maximum context, and what was decided.

    A request is over the context when its prompt plus output tokens exceed
    ``max_context_tokens`` (the engines refuse it: vLLM's max_model_len bounds both). ``policy``
    is the ``--over-context`` asked for; ``decision`` what was done: "fits" (none over),
    "rope" (served with ``rope_scaling`` at ``served_context_tokens``), "exclude" (``excluded``
    requests left out of the analysis) or "unknown" (the model's context is not known).
    """

    model: str
    max_context_tokens: int | None
    requests: int
    over_context: int
    longest_tokens: int
    policy: str
    decision: str
    served_context_tokens: int | None
    excluded: int
    statement: str  # the decision in one line, as every report and emitted file says it
    rope_scaling: dict[str, Any] | None = None  # config.json's rope_scaling block, when "rope"
    source: str = ""  # where the maximum (and the scaling) comes from


@dataclass(frozen=True)
class AdviceReport:
    """The whole report."""

    meta: Meta
    trace: TraceSummary
    model: ModelSummary | None = None
    stage_split: StageSplit | None = None
    prefix_cache: PrefixCache | None = None
    io: IoDemand | None = None
    recommendation: Recommendation | None = None
    findings: tuple[Finding, ...] = ()
    # The analysis options as given (name -> value), for the report's "inputs" section.
    options: dict[str, Any] = field(default_factory=dict)
    # Versions of the data the advice used, e.g. {"catalog": ..., "rules": ...}.
    versions: dict[str, str] = field(default_factory=dict)
    # Why a section is None (section name -> reason), so reports say "not measured: <why>".
    unavailable: dict[str, str] = field(default_factory=dict)
    # Deployment plans reviewed against this trace (`analyze --plan`); see PlanReview below.
    plan_reviews: tuple[PlanReview, ...] = ()
    # The recommended deployment replayed closed loop (docs/replay.md); None when not replayed
    # (``unavailable["replay"]`` says why).
    replay: ReplayResult | None = None
    # The requests against the model's context (None: not checked; ``unavailable`` says why).
    context: ContextCheck | None = None
    # Not in the JSON contract: one array per column, one value per trace request (the trace's
    # arrival and lengths, and the replayed latencies when the recommended deployment was
    # replayed; docs/api.md). Empty when streamed or read back from JSON.
    request_rows: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict with the contract's top-level keys (meta fields lifted to the top)."""
        # The rows are left out before asdict, which would deep-copy every array; so are the
        # verdicts' typed plans (catalogs and all), which the JSON holds as their ``plan``.
        rec = self.recommendation
        if rec is not None and rec.verdict is not None:
            rec = dataclasses.replace(rec, verdict=rec.verdict.without_plans())
        body = asdict(dataclasses.replace(self, request_rows={}, recommendation=rec))
        body.pop("request_rows")
        if body["recommendation"] is not None and body["recommendation"]["verdict"] is not None:
            for v in body["recommendation"]["verdict"]["verdicts"]:
                v.pop("replayed_plan")
        if not body["plan_reviews"]:  # absent unless plans were given: output stays as before
            body.pop("plan_reviews")
        if body["context"] is None:  # absent when not checked: output stays as before
            body.pop("context")
        meta = body.pop("meta")
        return {**meta, **body}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AdviceReport:
        """Inverse of :meth:`to_dict`: ``AdviceReport.from_dict(r.to_dict()) == r``.

        Also reads parsed JSON output (lists become tuples). Keys this version does not know
        are ignored, so a newer report still loads.
        """
        body = dict(data)
        meta = {f.name: body.pop(f.name) for f in dataclasses.fields(Meta) if f.name in body}
        body["meta"] = meta
        return typing.cast(AdviceReport, from_plain(cls, body))
