"""The deployment plan as frozen dataclasses: what a user proposes to deploy, in base units."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.catalog.instances import InstanceSpec
from kvadvisor.catalog.models import ModelSpec
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.engines import registry
from kvadvisor.vocab import Stage, Topology

STAGES = (Stage.PREFILL, Stage.DECODE)
# Stage blocks a plan may give: prefill and decode (disaggregated), or one serving block
# (aggregated: the same replicas prefill and decode).
STAGE_BLOCKS = (Stage.PREFILL, Stage.DECODE, Stage.SERVING)
TOPOLOGIES = tuple(t.value for t in Topology)
ROUTERS = ("round_robin", "least_outstanding", "prefix_aware")
PREEMPTION_MODES = ("recompute", "swap")
# on_eviction is the same rule as write_back in the replay (docs/replay.md, write policies).
WRITE_POLICIES = ("write_through", "write_back", "on_eviction")
TIER_SCOPES = ("replica", "instance", "pooled")
LOAD_MODES = ("async", "prefetch")
PREFETCH_POLICIES = ("wait_complete", "best_effort", "timeout")
FULL_BUFFER_ACTIONS = ("block", "drop")
# Storage kinds. "Disk-like" kinds are the ones that must carry a capacity bound
# (LMCache #4725, Mooncake #924: an unbounded SSD tier fills the disk).
TIER_KINDS = ("dram", "cxl", "ssd", "block", "filesystem", "pool", "object")
DISK_KINDS = frozenset({"ssd", "block", "filesystem"})


@dataclass(frozen=True)
class StorageCapability:
    """What one tier device (or volume) delivers; None where the source does not say."""

    kind: str
    read_bytes_per_s: float | None = None
    write_bytes_per_s: float | None = None
    read_iops: float | None = None
    write_iops: float | None = None
    latency_s: float | None = None
    catalog_name: str | None = None
    source: tuple[str, ...] = ()
    # the figures are a client's measured throughput (a catalog entry of scope per_client, e.g.
    # 3FS's 40 GiB/s, Mooncake's 87 GB/s), not a rating: no transfer share goes on top
    measured: bool = False


@dataclass(frozen=True)
class TierPlan:
    """One KV tier of a stage, fastest first; capacity per instance unless ``shared``.

    ``capacity_bytes`` None means the plan sets no bound (a lint for disk-like tiers).
    ``devices`` multiplies the device's bandwidth and IOPS (e.g. 8 NVMe drives per node).
    """

    name: str
    storage: StorageCapability
    capacity_bytes: float | None
    devices: int = 1
    shared: bool = False
    spec: StorageSpec | None = None  # the catalog entry, when the tier names one
    # Who shares it: each model replica, the replicas of one instance, or the whole stage
    # (``shared: true``); capacity, bandwidth and IOPS are per such unit.
    scope: str = "instance"
    write_buffer_bytes: float | None = None  # None: unbounded
    on_full: str = "block"
    io_tokens: int | None = None  # tokens per I/O; None: the stage's engine chunk
    # share of the rated bandwidth the engine's transfers reach; None: by kind (docs/replay.md)
    efficiency: float | None = None
    # What the advisor says of a tier it chose (commentary: nothing here is replayed or
    # written): the storage category, the $/h of every unit together (None: unpriced, as for
    # a plan read from a file), the price's basis, why this tier, and the catalog figures no
    # source confirmed.
    category: str = field(default="", compare=False)
    usd_per_hour: float | None = field(default=None, compare=False)
    price_basis: str = field(default="", compare=False)
    why: str = field(default="", compare=False)
    unconfirmed: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class SchedulerPlan:
    """Continuous batching settings; None means the engine's default (docs/replay.md)."""

    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    page_tokens: int | None = None
    preemption: str | None = None  # None: recompute


@dataclass(frozen=True)
class KvLoadPlan:
    """When prefix hits below the GPU are loaded, and when recomputing them instead."""

    mode: str = "async"
    prefetch_policy: str = "wait_complete"
    prefetch_timeout_s: float = 0.0
    prefetch_timeout_per_ki_token_s: float = 0.0
    min_tokens: int | None = None


@dataclass(frozen=True)
class LinkPlan:
    """The prefill-to-decode link of each decode instance (its NIC)."""

    bandwidth_bytes_per_s: float | None = None  # None: the decode instance's network
    # Share of that bandwidth KV moves at. None: 1 for a bandwidth the plan gives, else the
    # decode instance's fabric's (the fabric catalog: TCP fabrics are derated).
    efficiency: float | None = None
    latency_s: float = 0.0


@dataclass(frozen=True)
class StagePlan:
    """One serving stage: instances, the device KV pool, KV tiers and engine settings."""

    stage: Stage
    instance: str | None
    count: int
    gpu: GpuSpec | None = None
    instance_spec: InstanceSpec | None = None  # the catalog entry, when the stage names one
    gpus_per_instance: int | None = None
    host_memory_bytes: float | None = None
    gpu_kv_pool_bytes: float | None = None
    disk_bandwidth_cap_bytes_per_s: float | None = None
    tiers: tuple[TierPlan, ...] = ()
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the engine files the plan names, relative to it (their settings are in ``engines``)
    engine_files: tuple[str, ...] = ()
    chunk_tokens: int | None = None
    gpus_per_replica: int | None = None  # TP (x EP); None: model.tp
    replicas_per_instance: int | None = None  # None: the instance's GPUs / gpus_per_replica
    scheduler: SchedulerPlan = field(default_factory=SchedulerPlan)
    router: str = "round_robin"
    write_policy: str | None = None  # None: the engine's (HiCache) or write_through
    kv_load: KvLoadPlan | None = None  # None: from the engines (docs/replay.md)
    decode_offload: str | None = None  # a tier name: decode reads KV beyond HBM from it
    save_decode_kv: bool | None = None  # None: true on a disaggregated decode stage with tiers
    # the engine's front-end work per request in its loop (docs/replay.md, R13); None: the
    # serving engine's (perfmodel.frontend)
    frontend_fixed_s: float | None = None
    frontend_per_ki_token_s: float | None = None
    network_bytes_per_s: float | None = None  # back-end (else front-end) network, per instance
    # Why the advisor gave the stage no tier, when it gave none (commentary).
    tier_note: str = field(default="", compare=False)
    # The point of the advisor's search space the stage was sized from (an advice.space.Shape:
    # step times, KV pool, batch limits); None for a plan read from a file. The plan layer
    # sits below the advisor, so it holds it without reading it.
    shape: object = field(default=None, compare=False, repr=False)

    @property
    def gpus(self) -> int:
        """GPUs of the stage (0 when the plan gives no GPUs per instance)."""
        return self.count * (self.gpus_per_instance or 0)

    @property
    def usd_per_hour(self) -> float | None:
        """Instances at their catalog on-demand price plus tiers; None when any is unpriced."""
        spec = self.instance_spec
        each = None if spec is None else spec.price_usd_per_hour
        parts = [None if each is None else each * self.count]
        parts += [t.usd_per_hour for t in self.tiers]
        return None if any(p is None for p in parts) else float(sum(p for p in parts if p))

    def label(self) -> str:
        """E.g. "3 x p5en.48xlarge TP 2 x 4" (instances, TP, replicas per instance)."""
        return (
            f"{self.count} x {self.instance} TP {self.gpus_per_replica} x "
            f"{self.replicas_per_instance}"
        )

    @property
    def tp(self) -> int:
        """GPUs per replica (TP x EP) as the stage states it; the loader always states it."""
        return self.gpus_per_replica or 1

    @property
    def ranks_per_instance(self) -> int:
        """GPU worker processes on one instance: GPUs per replica x replicas per instance."""
        return self.tp * (self.replicas_per_instance or 1)

    @property
    def replicas(self) -> int:
        """Engine instances (replicas) of the whole stage."""
        return self.count * (self.replicas_per_instance or 1)

    def tier_units(self, tier: TierPlan) -> int:
        """How many of ``tier`` the stage has: one pool, one per instance, or one per replica."""
        if tier.scope == "pooled":
            return 1
        if tier.scope == "replica":
            return self.count * (self.replicas_per_instance or 1)
        return self.count

    @property
    def prefills(self) -> bool:
        """Whether this stage runs prefill (looks prefixes up, loads and writes KV)."""
        return self.stage in (Stage.PREFILL, Stage.SERVING)

    def io_chunk_tokens(self) -> tuple[int, str]:
        """Tokens per KV I/O on this stage's tiers, and where the number comes from."""
        if self.chunk_tokens:
            return self.chunk_tokens, "the plan's chunk_tokens"
        # The first engine of the stage, in registry order, whose settings say (Engine.io_chunk).
        chunk = registry.first(self.engines, "io_chunk")
        if chunk is not None:
            return int(chunk[0]), str(chunk[1])
        return 256, "no engine chunk given: LMCache's default chunk_size"


@dataclass(frozen=True)
class ModelPlan:
    """The served model; ``kv_bytes_per_token`` is the whole model's KV per token (all ranks)."""

    name: str | None
    kv_bytes_per_token: int | None
    spec: ModelSpec | None = None
    tp: int = 1
    kv_dtype: str = "bf16"
    weight_dtype: str | None = None  # None: the checkpoint's published dtype


@dataclass(frozen=True)
class Slo:
    """Service-level objectives at p99 (seconds); None when the plan sets none."""

    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None


@dataclass(frozen=True)
class Plan:
    """A whole deployment plan as read from plan.yaml."""

    name: str
    path: str
    model: ModelPlan
    stages: tuple[StagePlan, ...]
    slo: Slo = field(default_factory=Slo)
    traffic_scale: float = 1.0
    description: str = ""
    topology: Topology = Topology.DISAGGREGATED
    pd_link: LinkPlan = field(default_factory=LinkPlan)
    # The GPU, model and efficiency catalogs the plan was checked against (its GPUs and model
    # come from them); its step times are computed from the same ones.
    catalogs: PerfCatalogs = field(default_factory=PerfCatalogs.packaged, compare=False, repr=False)
    provider: str = field(default="", compare=False)  # the cloud the advisor priced it on

    def stage(self, name: Stage) -> StagePlan | None:
        """The plan for ``name`` (prefill, decode or serving), or None when the plan omits it."""
        return next((s for s in self.stages if s.stage == name), None)

    @property
    def gpus(self) -> int:
        """GPUs of the whole fleet."""
        return sum(s.gpus for s in self.stages)

    @property
    def usd_per_hour(self) -> float | None:
        """The fleet's $/h; None when any instance or tier is unpriced."""
        parts = [s.usd_per_hour for s in self.stages]
        return None if any(p is None for p in parts) else float(sum(p for p in parts if p))

    def label(self) -> str:
        """The fleet in one line, e.g. "prefill 2 x p5en TP 2 x 4 + decode 1 x ..."."""
        if self.topology == Topology.AGGREGATED:
            return f"aggregated {self.stages[0].label()}"
        return " + ".join(f"{s.stage} {s.label()}" for s in self.stages)

    def with_count(self, role: Stage, count: int) -> Plan:
        """The same plan with ``count`` instances in stage ``role`` (tiers as they are)."""
        stages = tuple(replace(s, count=count) if s.stage == role else s for s in self.stages)
        return replace(self, stages=stages)
