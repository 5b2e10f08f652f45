"""The verdict model: the deployment the advisor recommends per provider, found on the replay.

`kvadvisor analyze` searches deployments (topology, instance type and count per stage, TP and
replicas, the KV hierarchy the instance can have), replays the survivors of its analytic
bounds, and keeps the cheapest that meets the SLO. This module is what it found, as frozen
dataclasses; the report's ``recommendation.verdict`` holds a :class:`VerdictSet`. Engine
configurations and ``--emit plan`` are written from a :class:`Verdict` (its ``plan`` is the
plan document ``kvadvisor review`` and ``kvadvisor replay`` read). docs/advisor.md defines
every field.

Units: bytes, bytes per second, seconds, tokens, US dollars per hour; rates of a tier are per
unit of its scope (one instance's, or the pool's), rates of a mechanism per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from kvadvisor.vocab import Stage, Topology


class VerdictStatus(str, Enum):
    """What the search concluded for one provider."""

    CHOSEN = "chosen"  # a deployment meets the SLO: the cheapest one (chosen_by says how)
    NO_DEPLOYMENT_MEETS_SLO = "no_deployment_meets_slo"  # the closest is shown, not recommended
    ABSTAINED = "abstained"  # the evidence to size a fleet is missing, or nothing fits


class LossReason(str, Enum):
    """Why a candidate that was not chosen lost."""

    COST = "cost"  # met the SLO, cost more (or, unpriced, used more GPUs)
    SLO = "slo"  # replayed and missed a target
    CONSTRAINT = "constraint"  # cannot be deployed or cannot run (memory fit, a cap, no figure)


@dataclass(frozen=True)
class SloTargets:
    """The latency targets a deployment must meet (seconds, keyed like ``ttft_p99_s``)."""

    targets: dict[str, float]
    source: str  # where the targets come from: --slo, or the documented default and its source
    rule: str = ""  # a default's rule in a few words (which default applied and why); "" for --slo


@dataclass(frozen=True)
class SloAttained:
    """A replayed deployment's latencies against the targets.

    ``attainment`` is the share of requests within each target; ``met`` whether at least the
    target's percentile of requests are (a request that never finished misses every target).
    """

    ttft_p90_s: float | None
    ttft_p99_s: float | None
    tpot_p90_s: float | None
    tpot_p99_s: float | None
    attainment: dict[str, float] = field(default_factory=dict)
    met: dict[str, bool] = field(default_factory=dict)

    @property
    def all_met(self) -> bool:
        """Whether every target is met."""
        return bool(self.met) and all(self.met.values())


@dataclass(frozen=True)
class Rate:
    """A per-window rate over the replay (bytes per second): mean, 99th percentile, peak."""

    mean: float
    p99: float
    peak: float


@dataclass(frozen=True)
class Mechanism:
    """One way KV moves between a stage and storage (or the link), as the replay measured it.

    ``bytes_per_s`` is per node (per instance) of the stage; None when the mechanism does not
    run in this deployment, and ``statement`` then says why.
    """

    name: str  # prefix_loads | new_kv_writes | decode_writeback | preemption_swaps |
    # decode_offload_reads | kv_transfer_in
    bytes_per_s: Rate | None
    tier: str | None  # the tier (or "p-to-d link") it uses; None when it uses none
    statement: str


@dataclass(frozen=True)
class TierChoice:
    """One KV tier bought (or used) for a stage, fastest first below the GPU pool.

    ``capacity_bytes`` and the bandwidths are per unit of ``scope`` ("instance": one node's;
    "pooled": the whole pool shared by the stage); ``devices`` drives or volumes per unit.
    ``read_p99_bytes_per_s``/``write_p99_bytes_per_s`` and ``utilization_p99`` are the
    replayed demand per unit (the busier direction, window by window).
    """

    name: str
    storage: str  # catalog entry name
    category: str  # storage catalog category (memory, local_nvme, block, parallel_fs, ...)
    scope: str
    capacity_bytes: float | None
    devices: int
    read_bytes_per_s: float
    write_bytes_per_s: float
    usd_per_hour: float | None  # the whole stage's tier (every unit), None when unpriced
    price_basis: str
    hit_ratio: float | None  # prompt tokens this tier served / prompt tokens (replayed)
    read_p99_bytes_per_s: float | None
    write_p99_bytes_per_s: float | None
    utilization_p99: float | None
    why: str  # the sizing: what the capacity and bandwidth were derived from
    unconfirmed: tuple[str, ...] = ()
    read_utilization: Rate | None = None  # replayed reads delivered / read bandwidth, per window
    write_utilization: Rate | None = None
    # Replayed loads asked of the tier (bytes per second per unit, per window): the bytes of
    # the loads started in each window, which may exceed what the tier delivers (they queue).
    read_demand: Rate | None = None


# A TierValue's ``tier`` for prefix reuse as a whole (GPU memory first, and every tier below).
REUSE_TIER = "prefix_cache"


@dataclass(frozen=True)
class TierValue:
    """What one KV tier of a stage is worth: the fleet replayed without it (docs/advisor.md).

    ``without`` is the same configuration with this tier removed and the other tiers kept (for
    the host tier, the capacity tier below it when there is one). What it saves compares that
    fleet and the chosen one, each re-sized on the search's sample (``without_instances``,
    None when no count up to ``max_instances`` meets the SLO, ``without_why`` then says why;
    ``with_instances`` the chosen configuration's count there, below the verdict's when the
    whole trace needed more). Latency is compared at the verdict's own count, so the tier's
    effect alone shows. Latencies, hits and the break-even are the sample's replays (seconds,
    tokens); $/h on-demand.
    """

    tier: str  # the tier's name in the plan (host, capacity)
    storage: str  # what holds it: the storage catalog entry (host memory's: the instance's)
    without: str  # the tiers the alternative keeps, in words
    instances: int  # instances of the stage in the chosen fleet (the verdict's count)
    usd_per_hour: float | None  # the chosen fleet
    gpus: int  # GPUs of the chosen fleet
    with_instances: int | None  # fewest instances meeting the SLO on the sample with it
    with_usd_per_hour: float | None  # that fleet
    without_instances: int | None  # fewest instances meeting the SLO on the sample without it
    max_instances: int  # the most instances the re-sizing tried
    without_why: str  # why no count meets the SLO without it ("" when one does)
    without_usd_per_hour: float | None  # the re-sized fleet without the tier
    usd_per_hour_saved: float | None  # without - with, both sized on the sample (negative: costs)
    gpus_saved: int | None  # GPUs without it - GPUs with it, both sized on the sample
    ttft_p50_s: float | None  # with the tier, at the chosen count
    ttft_p99_s: float | None
    without_ttft_p50_s: float | None  # without it, at the same count
    without_ttft_p99_s: float | None
    without_meets_at_same_count: bool  # whether the same count meets the SLO without it
    hit_tokens: float  # prompt tokens the tier served on the sample
    prompt_tokens: float  # prompt tokens of the sample
    break_even_prompt_tokens: float | None  # above it loading from the tier beats recompute
    break_even_basis: str  # the bandwidth and latency the break-even is for
    basis: str  # what was replayed

    @property
    def hit_ratio(self) -> float | None:
        """Prompt tokens the tier served over prompt tokens (None for an empty sample)."""
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens > 0 else None


@dataclass(frozen=True)
class Transport:
    """How KV crosses between a stage's instances: the network kind and the engines' settings.

    From the fabric catalog (kvadvisor/catalog/data/fabrics.yaml): Mooncake's transfer-engine
    protocol (rdma, efa, tcp), NIXL's backend (UCX, LIBFABRIC), and the RDMA NICs to name
    (None: the engine is given none, as on EFA or TCP).
    """

    fabric: str  # infiniband | roce | efa | tcpx | tcpxo | ethernet
    display_name: str
    rdma: bool
    mooncake_protocol: str
    nixl_backend: str
    device_hint: str | None
    link_efficiency: float
    source: str = ""


@dataclass(frozen=True)
class StageVerdict:
    """One stage of the recommended fleet (serving when aggregated)."""

    role: Stage  # serving when aggregated, else prefill or decode
    instance: str
    gpu: str
    instances: int
    gpus_per_instance: int
    tp: int
    replicas_per_instance: int
    gpu_kv_pool_tokens_per_replica: int
    gpu_memory_gib: float
    host_memory_gib: float | None
    router: str
    max_batched_tokens: int
    max_seqs: int
    page_tokens: int
    tiers: tuple[TierChoice, ...]
    mechanisms: tuple[Mechanism, ...]
    storage_statement: str  # what storage the stage needs and why (or why none)
    usd_per_hour: float | None  # instances x on-demand price + tiers; None when any is unpriced
    price_basis: str
    busy_fraction: float | None  # mean replica busy time over the replay span
    # Replica time executing steps: the stage's replica-seconds of steps (prefill and decode)
    # over replicas x the span from the first arrival to the last completion.
    step_busy_fraction: float | None = None
    # What each tier is worth (the primary verdict's stage that holds tiers), fastest first.
    tier_values: tuple[TierValue, ...] = ()
    transport: Transport | None = None  # the instance's network between instances
    # The GPU's architecture (hopper, blackwell, ...): which attention back-end, and so which
    # KV page, an engine runs (engines/data/<engine>.yaml ``page``); None when unknown.
    gpu_architecture: str | None = None

    @property
    def replicas(self) -> int:
        """Model replicas of the stage (engine instances)."""
        return self.instances * self.replicas_per_instance

    @property
    def gpus(self) -> int:
        """GPUs of the stage."""
        return self.instances * self.gpus_per_instance


@dataclass(frozen=True)
class LinkChoice:
    """The prefill-to-decode link of each decode instance and what the replay put on it."""

    bytes_per_s: float  # per decode instance, after the efficiency
    network: str  # which network carries it (the decode instance's back end or front end)
    p99_bytes_per_s: float | None
    peak_bytes_per_s: float | None
    utilization_p99: float | None
    efficiency: float = 1.0  # share of the line rate KV moves at (a TCP fabric's is lower)


@dataclass(frozen=True)
class CandidateSummary:
    """A deployment the search considered: what it is, what it costs, how it replayed.

    Latencies are None for a candidate that was not replayed (pruned by a bound).
    """

    label: str
    topology: Topology
    gpus: int
    usd_per_hour: float | None
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    tpot_p90_s: float | None
    tpot_p99_s: float | None
    meets_slo: bool
    replayed: bool
    lost: LossReason | None  # None for the chosen one
    why: str


@dataclass(frozen=True)
class Sample:
    """What the search replayed of the trace, and how far the sample is from the whole.

    ``error`` maps a figure (e.g. ``ttft_p90_s``) to the relative difference of the chosen
    deployment's figure on the sample against the same deployment on the check set
    (``error_basis`` says which: the whole trace, or another window).
    """

    requests: int
    trace_requests: int
    start_s: float
    span_s: float
    how: str
    error: dict[str, float] = field(default_factory=dict)
    error_basis: str = ""


@dataclass(frozen=True)
class TargetMargin:
    """One target of the chosen deployment: its replayed percentile against the target.

    ``margin`` is ``1 - replayed_s / target_s`` (None for an e2e or queue target, whose share
    of requests within it, ``attainment``, says it).
    """

    target: str  # e.g. "ttft_p99_s"
    target_s: float
    replayed_s: float | None
    attainment: float | None
    margin: float | None


@dataclass(frozen=True)
class Stress:
    """The chosen deployment replayed under one stress, and the pick that would win then.

    ``kind`` is ``step_time`` (every step ``factor`` times as long) or ``traffic`` (arrivals
    ``factor`` times as dense). ``alternative`` is None when the pick holds, else the cheapest
    deployment found that meets the SLO under the stress (``""`` when none did).
    """

    kind: str
    factor: float
    holds: bool
    margins: tuple[TargetMargin, ...]
    why_not: str  # "" when it holds
    alternative: str | None = None
    alternative_usd_per_hour: float | None = None
    alternative_gpus: int | None = None
    statement: str = ""
    # The alternative costs less than the pick (it meets the SLO without the stress too): the
    # search's sample sizing or cost estimate missed it.
    undercuts: bool = False


@dataclass(frozen=True)
class BurstFleet:
    """The cheaper fleet a burst-sized one could be: the same configuration held to p90.

    Each target is asked at the 90th percentile instead (same time), so bursts queue; its
    replayed p90 and p99 figures say what that costs the tail.
    """

    label: str
    usd_per_hour: float | None
    gpus: int
    targets: dict[str, float]  # the p90 targets it meets, seconds
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    tpot_p90_s: float | None
    tpot_p99_s: float | None


@dataclass(frozen=True)
class Robustness:
    """How much margin the chosen deployment has, and whether the pick survives stresses.

    ``headroom``: a candidate met a target only at most ``(1 - headroom) x`` it; ``spare``:
    one instance per stage was added to the fewest that meet the SLO (N+1).
    """

    headroom: float
    spare: bool
    margins: tuple[TargetMargin, ...]
    stresses: tuple[Stress, ...] = ()
    step_busy_fraction: float | None = None  # the fleet's replica time executing steps
    step_busy_floor: float | None = None  # under it the fleet idles (docs/advisor.md)
    arrival_peak_to_mean: float | None = None  # busiest minute's arrivals / mean minute's
    # Steps under the floor, arrivals in bursts, and a stage of more than one instance.
    sized_for_bursts: bool = False
    burst_fleet: BurstFleet | None = None  # when sized for bursts: the cheaper one at p90
    occupancy_fraction: float | None = None  # the fleet's replica time holding requests


@dataclass(frozen=True)
class ClosestMiss:
    """A provider's deployment nearest the SLO when none meets it, priced, and what it reaches.

    ``reached`` maps each target (``ttft_p99_s``) to the replayed figure (seconds; None when
    requests were left unfinished, so no target is met at that percentile); ``loosest`` the
    targets it meets, each one raised to what it reached, rounded up to two significant digits
    (None when no loosening meets it: unfinished requests, or a tier that cannot keep up);
    ``slo_text`` that as ``--slo`` text.
    """

    label: str
    gpus: int
    usd_per_hour: float | None
    price_basis: str
    reached: dict[str, float | None]
    loosest: dict[str, float] | None
    slo_text: str  # "" when ``loosest`` is None
    basis: str  # what it was replayed on: "the whole trace", "the search's sample"
    why_not: str  # how it misses the SLO, in words
    headroom: float = 0.0  # the --headroom the offered targets keep (0: none)
    price_kind: str = ""  # the kind of rate its $/h rests on, as a verdict's (on_demand, ...)
    price_unconfirmed: bool = False


@dataclass(frozen=True)
class Verdict:
    """The recommended deployment of one provider, or why there is none.

    ``replayed_plan`` is the deployment the search replayed, a typed ``kvadvisor.plan.Plan``;
    ``plan`` is that plan as the one plan writer writes it (docs/review.md keys): the JSON
    report's form, which ``kvadvisor.plan.check_plan`` reads back. ``--emit plan`` writes the
    deployment, and `kvadvisor review` checks it.
    """

    provider: str
    status: VerdictStatus
    reason: str
    topology: Topology | None = None
    stages: tuple[StageVerdict, ...] = ()
    link: LinkChoice | None = None
    usd_per_hour: float | None = None
    usd_per_m_input_tokens: float | None = None
    usd_per_m_output_tokens: float | None = None
    chosen_by: str = ""
    slo: SloAttained | None = None
    runners_up: tuple[CandidateSummary, ...] = ()
    candidates: tuple[CandidateSummary, ...] = ()
    pruned: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    unconfirmed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    plan: dict[str, Any] = field(default_factory=dict)
    # Not in the JSON contract (as AdviceReport.request_rows): the typed Plan ``plan`` was
    # written from, held by the search's verdict; None when read back from JSON (``plan`` is
    # what the report keeps). Typed Any: results imports no plan (tests/test_architecture.py).
    replayed_plan: Any = field(default=None, repr=False, compare=False)
    robustness: Robustness | None = None
    closest: ClosestMiss | None = None  # when nothing meets the SLO: the nearest, priced
    # The kind of the instance rates its $/h rests on (on_demand, calendar, reservation,
    # capacity_block, ...; "mixed" when its stages differ; "" unpriced), and whether any of them
    # is unconfirmed: the primary verdict compares like with like (docs/advisor.md).
    price_kind: str = ""
    price_unconfirmed: bool = False

    @property
    def chosen(self) -> bool:
        """Whether this verdict recommends a deployment."""
        return self.status is VerdictStatus.CHOSEN

    def stage(self, role: Stage) -> StageVerdict | None:
        """The stage with this role (serving, prefill or decode), or None."""
        return next((s for s in self.stages if s.role == role), None)

    def serves(self, stage: Stage) -> StageVerdict | None:
        """The stage that runs ``stage`` (prefill or decode): its own, or the serving one."""
        return self.stage(stage) or self.stage(Stage.SERVING)


@dataclass(frozen=True)
class VerdictSet:
    """Every provider's verdict, the SLO they were held to, and what the search replayed.

    ``primary`` names the provider whose verdict fills ``recommendation.prefill``/``decode``:
    the provider asked for, else the cheapest chosen verdict whose price is known (unpriced
    verdicts are never called cheapest), else the first chosen one by GPU count.
    """

    slo: SloTargets
    verdicts: tuple[Verdict, ...]
    primary: str | None
    primary_why: str
    sample: Sample | None = None
    enumerated: int = 0
    pruned: int = 0
    replayed: int = 0
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # With no primary: the provider whose closest miss needs the least loosening (then $/h).
    closest: str | None = None

    def verdict(self, provider: str) -> Verdict | None:
        """The verdict for ``provider``, or None."""
        return next((v for v in self.verdicts if v.provider == provider), None)

    def without_plans(self) -> VerdictSet:
        """The same verdicts without their typed plans: what the JSON report holds."""
        return replace(self, verdicts=tuple(replace(v, replayed_plan=None) for v in self.verdicts))

    @property
    def primary_verdict(self) -> Verdict | None:
        """The verdict ``primary`` names."""
        return None if self.primary is None else self.verdict(self.primary)
