"""The replay's resolved inputs: a Plan with every default taken, every rate derived.

Private to :mod:`kvadvisor.fleet`: a Plan (:mod:`kvadvisor.plan`) is the one deployment type,
and :func:`kvadvisor.fleet.fromplan.resolve_plan` turns it into these (step tables, GPU pool
tokens, tier rates after the load path), which the engine turns into the kernel's arrays. No
module outside the fleet imports them (tests/test_architecture.py); tests and benchmarks may,
to run toy step tables. Quantities are in base units (bytes, bytes per second, seconds,
tokens); every field is documented in docs/replay.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum

from kvadvisor.errors import ConfigError
from kvadvisor.perfmodel.step import StepTable
from kvadvisor.vocab import Stage, Topology


class RouterPolicy(str, Enum):
    """How a request picks a replica of a stage."""

    ROUND_ROBIN = "round_robin"
    LEAST_OUTSTANDING = "least_outstanding"
    PREFIX_AWARE = "prefix_aware"


class Preemption(str, Enum):
    """What happens to a running request when its replica runs out of KV pages."""

    RECOMPUTE = "recompute"
    SWAP = "swap"


class WritePolicy(str, Enum):
    """When new KV reaches the tiers below the GPU."""

    WRITE_THROUGH = "write_through"
    WRITE_BACK = "write_back"


class LoadMode(str, Enum):
    """When a prefix hit below the GPU is loaded."""

    ASYNC = "async"  # at admission, before the prefill that needs it (vLLM KV connectors)
    PREFETCH = "prefetch"  # at arrival, while the request waits (SGLang HiCache L3 prefetch)


class PrefetchPolicy(str, Enum):
    """What a prefetching request does when the scheduler reaches it (SGLang HiCache)."""

    WAIT_COMPLETE = "wait_complete"
    BEST_EFFORT = "best_effort"
    TIMEOUT = "timeout"


class Scope(str, Enum):
    """Who shares a tier: each replica, the replicas of one instance, or the whole stage."""

    REPLICA = "replica"
    INSTANCE = "instance"
    POOLED = "pooled"


@dataclass(frozen=True)
class ResolvedTier:
    """One KV tier below the GPU pool, fastest first.

    ``capacity_tokens`` is per scope unit (a replica, an instance, or the pool; None =
    unbounded). Bandwidths and IOPS are the whole unit's. ``io_tokens`` is the engine's
    transfer chunk (one I/O). ``write_buffer_bytes`` None is an unbounded buffer.
    """

    name: str
    kind: str
    scope: Scope
    capacity_tokens: float | None
    read_bytes_per_s: float
    write_bytes_per_s: float
    latency_s: float = 0.0
    read_iops: float | None = None
    io_tokens: int = 256
    write_buffer_bytes: float | None = None
    drop_when_full: bool = False


@dataclass(frozen=True)
class ResolvedScheduler:
    """Continuous batching: tokens per step, running sequences, KV page size, preemption."""

    max_batched_tokens: int
    max_seqs: int
    page_tokens: int
    preemption: Preemption = Preemption.RECOMPUTE


@dataclass(frozen=True)
class ResolvedKv:
    """The model's KV per token: distinct bytes (tiers, link), GPU copies, one rank's layout."""

    bytes_per_token: float
    gpu_bytes_per_token: float
    rank_full_bytes_per_token: float
    rank_window_bytes_per_token: float = 0.0
    window_tokens: int = 0
    layers: int = 1


@dataclass(frozen=True)
class ResolvedStage:
    """One resolved stage: its replicas and how they serve (docs/replay.md lists every field)."""

    role: Stage
    instances: int
    replicas_per_instance: int
    gpus_per_replica: int
    step: StepTable
    pool_tokens: int
    scheduler: ResolvedScheduler
    router: RouterPolicy = RouterPolicy.ROUND_ROBIN
    router_weight: float = 1.0
    tiers: tuple[ResolvedTier, ...] = ()
    write_policy: WritePolicy = WritePolicy.WRITE_THROUGH
    load_mode: LoadMode = LoadMode.ASYNC
    prefetch_policy: PrefetchPolicy = PrefetchPolicy.WAIT_COMPLETE
    prefetch_timeout_base_s: float = 0.0
    prefetch_timeout_per_ki_token_s: float = 0.0
    min_load_tokens: int = 0
    offload_tier: str | None = None
    save_decode_kv: bool = False
    swap_bytes_per_s: float | None = None
    # the engine's per-request front-end work inside its loop (docs/replay.md, R13), s
    frontend_fixed_s: float = 0.0
    frontend_per_token_s: float = 0.0
    instance: str | None = None
    gpu: str | None = None
    kv: ResolvedKv | None = None  # this stage's KV layout per rank (its TP); None: the fleet's

    @property
    def replicas(self) -> int:
        """Model replicas in the stage."""
        return self.instances * self.replicas_per_instance

    def __post_init__(self) -> None:
        """Refuse shapes the replay cannot run, naming what to change."""
        checks = [
            (self.instances >= 1, "instances must be at least 1"),
            (self.replicas_per_instance >= 1, "replicas per instance must be at least 1"),
            (self.gpus_per_replica >= 1, "GPUs per replica must be at least 1"),
            (self.pool_tokens >= 1, "the GPU KV pool must hold at least one token"),
            (self.scheduler.max_batched_tokens >= 1, "tokens per step must be at least 1"),
            (self.scheduler.max_seqs >= 1, "running sequences must be at least 1"),
            (self.scheduler.page_tokens >= 1, "the KV page must hold at least one token"),
            (self.min_load_tokens >= 0, "min_load_tokens must be >= 0"),
            (self.frontend_fixed_s >= 0, "the front-end cost per request must be >= 0 s"),
            (self.frontend_per_token_s >= 0, "the front-end cost per token must be >= 0 s"),
        ]
        for ok, what in checks:
            if not ok:
                raise ConfigError(f"stage {self.role.value}: {what}")
        for tier in self.tiers:
            for value, what in (
                (tier.read_bytes_per_s, "read bandwidth"),
                (tier.write_bytes_per_s, "write bandwidth"),
            ):
                if not (value > 0 and math.isfinite(value)):
                    raise ConfigError(f"tier {tier.name}: {what} must be a positive rate")
            if tier.capacity_tokens is not None and not tier.capacity_tokens > 0:
                raise ConfigError(f"tier {tier.name}: capacity must be positive")
        names = [t.name for t in self.tiers]
        if self.offload_tier is not None and self.offload_tier not in names:
            raise ConfigError(
                f"stage {self.role.value}: decode offload tier '{self.offload_tier}' is not "
                f"one of its tiers ({', '.join(names) or 'none'})"
            )


@dataclass(frozen=True)
class ResolvedLink:
    """The prefill-to-decode link of one decode instance (its NIC), shared by its replicas."""

    bytes_per_s: float
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        """A link needs a positive bandwidth."""
        if not (self.bytes_per_s > 0 and math.isfinite(self.bytes_per_s)):
            raise ConfigError("the P-to-D link needs a positive bandwidth")


@dataclass(frozen=True)
class ResolvedFleet:
    """A resolved plan: one serving stage (aggregated) or prefill and decode stages."""

    name: str
    topology: Topology
    stages: tuple[ResolvedStage, ...]
    kv: ResolvedKv
    link: ResolvedLink | None = None

    def __post_init__(self) -> None:
        """The stages must match the topology; disaggregated needs a link."""
        roles = tuple(s.role for s in self.stages)
        if self.topology is Topology.AGGREGATED and roles != (Stage.SERVING,):
            raise ConfigError("an aggregated deployment has exactly one serving stage")
        if self.topology is Topology.DISAGGREGATED:
            if roles != (Stage.PREFILL, Stage.DECODE):
                raise ConfigError("a disaggregated deployment has a prefill and a decode stage")
            if self.link is None:
                raise ConfigError("a disaggregated deployment needs a P-to-D link")

    def stage(self, role: Stage) -> ResolvedStage | None:
        """The stage with this role, or None."""
        return next((s for s in self.stages if s.role is role), None)

    def slowed(self, factor: float) -> ResolvedFleet:
        """Every stage's steps ``factor`` times as long (1: this one, unchanged)."""
        if factor == 1.0:
            return self
        return replace(
            self, stages=tuple(replace(s, step=s.step.scaled(factor)) for s in self.stages)
        )
