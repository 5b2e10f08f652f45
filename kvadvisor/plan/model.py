"""The deployment plan as frozen dataclasses: what a user proposes to deploy, in base units."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.catalog.models import ModelSpec

STAGES = ("prefill", "decode")
ENGINES = ("lmcache", "sglang-hicache", "dynamo-kvbm", "mooncake", "vllm")
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


@dataclass(frozen=True)
class StagePlan:
    """One serving stage: instances, the device KV pool, KV tiers and engine settings."""

    stage: str
    instance: str | None
    count: int
    gpu: GpuSpec | None = None
    gpus_per_instance: int | None = None
    host_memory_bytes: float | None = None
    gpu_kv_pool_bytes: float | None = None
    disk_bandwidth_cap_bytes_per_s: float | None = None
    tiers: tuple[TierPlan, ...] = ()
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)
    chunk_tokens: int | None = None


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

    def stage(self, name: str) -> StagePlan | None:
        """The plan for ``name`` (prefill or decode), or None when the plan omits it."""
        return next((s for s in self.stages if s.stage == name), None)
