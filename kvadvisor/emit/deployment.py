"""The deployment an engine configuration is written for, read off the advice report only.

Everything the writers size against lives here: per stage the instance, how many of them, the
GPUs in one, the tensor-parallel degree and so the replicas (engine instances) and ranks (GPU
worker processes) per instance, the host memory, the device KV pool of one replica, and the KV
tiers with their capacity per instance (node-local) or per pool (shared).

Today's advisor recommends one instance type per stage, prefill and decode: a disaggregated
fleet, with the tensor-parallel degree of the stage profile (``--tp``, or the smallest that
fits). :func:`deployment_from_report` is the one place that reads the recommendation; when the
advisor's verdict carries topology, TP and replicas per stage, only this function changes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from kvadvisor.errors import ConfigError
from kvadvisor.results import AdviceReport, StageRecommendation, Tier
from kvadvisor.results.verdict import Transport, Verdict
from kvadvisor.units import BYTES_PER_GIB, Unit, format_value
from kvadvisor.vocab import TIER_ROLE_WORDS, Stage, TierRole, Topology


class TierKind(str, Enum):
    """What an engine needs to know about a tier to pick its backend."""

    HOST = "host"  # host DRAM (or CXL memory) of the serving node
    LOCAL_DISK = "local_disk"  # a disk of the serving node: NVMe, ephemeral SSD, attached volume
    SHARED_FS = "shared_fs"  # a file system mounted by every node (Lustre, CPFS)
    POOL = "pool"  # a networked KV store (Mooncake Store, 3FS)
    OBJECT = "object"  # object storage


# Storage catalog categories (kvadvisor/catalog/data/storage.yaml) as tier kinds.
CATEGORY_KINDS = {
    "memory": TierKind.HOST,
    "cxl": TierKind.HOST,
    "local_nvme": TierKind.LOCAL_DISK,
    "ephemeral": TierKind.LOCAL_DISK,
    "block": TierKind.LOCAL_DISK,
    "parallel_fs": TierKind.SHARED_FS,
    "kv_store": TierKind.POOL,
    "object": TierKind.OBJECT,
}


@dataclass(frozen=True)
class TierView:
    """One KV tier of a stage; ``capacity_bytes`` per instance, or for the pool when shared."""

    name: str
    category: str
    kind: TierKind
    role: TierRole
    capacity_bytes: float | None
    devices: int = 1
    shared: bool = False

    @property
    def role_words(self) -> str:
        """What the tier is for, in words (a config comment's)."""
        return TIER_ROLE_WORDS[self.role]


@dataclass(frozen=True)
class StageView:
    """One serving stage as the engines see it: instances, parallelism, memory, tiers."""

    stage: Stage  # prefill, decode, or serving when aggregated
    instance: str
    count: int
    gpu: str | None
    gpus_per_instance: int
    tp: int
    host_memory_bytes: float | None
    device_pool_tokens_per_replica: float | None
    tiers: tuple[TierView, ...]
    chunk_tokens: int
    gpu_memory_bytes: float | None = None  # one GPU's memory (vLLM's batch defaults depend on it)
    transport: Transport | None = None  # the instance's network between instances (the fabric)
    # how the replay routed requests to the stage's replicas (the plan's router; a report
    # without a verdict replayed none, and a plan without one routes round robin)
    router: str = "round_robin"
    # the scheduler the replay ran each replica with (token budget per step, running
    # sequences); None for a report without a verdict, where the engine's defaults apply
    max_batched_tokens: int | None = None
    max_seqs: int | None = None
    # the KV page the verdict was replayed at, and the GPU's architecture (which attention
    # back-end an engine runs there); None for a report without a verdict
    page_tokens: int | None = None
    architecture: str | None = None
    # how the replay preempted a running request when the pool was full (the plan's
    # scheduler.preemption); None for a report without a verdict
    preemption: str | None = None

    @property
    def replicas_per_instance(self) -> int:
        """Engine instances (TP groups) on one instance: its GPUs over TP."""
        return self.gpus_per_instance // self.tp

    @property
    def ranks_per_instance(self) -> int:
        """GPU worker processes on one instance: TP x replicas."""
        return self.tp * self.replicas_per_instance

    @property
    def replicas(self) -> int:
        """Engine instances of the whole stage."""
        return self.count * self.replicas_per_instance

    def tier(self, kind: TierKind) -> TierView | None:
        """The stage's first tier of ``kind``, if any."""
        return next((t for t in self.tiers if t.kind == kind), None)

    @property
    def storage_tier(self) -> TierView | None:
        """The tier below host memory: a local disk, a shared file system, a pool or objects."""
        return next((t for t in self.tiers if t.kind != TierKind.HOST), None)

    def describe(self) -> str:
        """One line: "prefill: 2 x p5e.48xlarge (8 x h200, 2,048 GiB host), TP 2 x 4 replicas"."""
        host = (
            ""
            if self.host_memory_bytes is None
            else f", {format_value(self.host_memory_bytes, Unit.BYTES)} host memory"
        )
        return (
            f"{self.stage}: {self.count} x {self.instance} ({self.gpus_per_instance} x "
            f"{self.gpu or 'GPU'}{host}), TP {self.tp} x {self.replicas_per_instance} "
            f"replica(s) per instance = {self.ranks_per_instance} ranks per instance"
        )


@dataclass(frozen=True)
class Deployment:
    """The fleet an engine configuration is for, and the model's KV geometry."""

    topology: Topology
    stages: tuple[StageView, ...]
    model: str
    model_in_catalog: bool
    kv_bytes_per_token: int  # the whole model, all ranks
    kv_bytes_per_rank_per_token: float  # one rank's share (MLA: the whole latent on every rank)
    attention: str
    kv_dtype: str
    weight_dtype: str
    tp_assumed: bool

    def stage(self, name: str) -> StageView | None:
        """The stage called ``name``, if the deployment has it."""
        return next((s for s in self.stages if s.stage == name), None)

    def describe(self) -> str:
        """The deployment in one paragraph (the header of every emitted file)."""
        tp = "the smallest TP that fits, assumed" if self.tp_assumed else "TP as given (--tp)"
        return f"{self.topology.value} ({tp}); " + "; ".join(s.describe() for s in self.stages)


def _tier_view(t: Tier) -> TierView:
    return TierView(
        name=t.name,
        category=t.category,
        kind=CATEGORY_KINDS.get(t.category, TierKind.LOCAL_DISK),
        role=t.role,
        capacity_bytes=None if t.capacity_gib is None else t.capacity_gib * BYTES_PER_GIB,
        devices=t.devices,
        shared=t.shared,
    )


def _device_pool_tokens(
    report: AdviceReport, rec: StageRecommendation, tp: int, kv_rank: float
) -> float | None:
    """Tokens one replica's GPU KV pool holds on the recommended GPU.

    The stage profile's usable share of GPU memory and its weights per GPU (both at the same
    TP) carried over to the recommended instance's GPU: (usable share x GPU memory - weights
    per GPU) / KV bytes per token on one rank.
    """
    memory = report.model.memory if report.model is not None else None
    if memory is None or rec.gpu_memory_gib is None or not memory.memory_bytes_per_gpu:
        return None
    share = memory.usable_bytes_per_gpu / memory.memory_bytes_per_gpu
    budget = share * rec.gpu_memory_gib * BYTES_PER_GIB - memory.weight_bytes_per_gpu
    return max(0.0, budget) / kv_rank


def _from_verdict(report: AdviceReport, verdict: Verdict) -> Deployment:
    """The deployment of a chosen verdict: its topology, and per stage TP, replicas, tiers."""
    model = report.model
    assert model is not None
    deployment = model.deployment
    stages = []
    kv_rank = None
    for sv in verdict.stages:
        kvb = model.kv_bytes_per_token
        rank = float(
            model.kv_bytes_per_token_per_gpu
            if model.kv_bytes_per_token_per_gpu
            and deployment is not None
            and deployment.tp == sv.tp
            else (kvb if model.attention == "mla" else math.ceil(kvb / sv.tp))
        )
        kv_rank = kv_rank or rank
        stages.append(
            StageView(
                stage=sv.role,
                instance=sv.instance,
                count=sv.instances,
                gpu=sv.gpu,
                gpus_per_instance=sv.gpus_per_instance,
                tp=sv.tp,
                host_memory_bytes=None
                if sv.host_memory_gib is None
                else sv.host_memory_gib * BYTES_PER_GIB,
                device_pool_tokens_per_replica=float(sv.gpu_kv_pool_tokens_per_replica),
                tiers=tuple(
                    TierView(
                        name=t.storage if t.name != "host" else "host-dram",
                        category=t.category,
                        kind=CATEGORY_KINDS.get(t.category, TierKind.LOCAL_DISK),
                        role=TierRole.HOST_POOL if t.name == "host" else TierRole.CAPACITY,
                        capacity_bytes=t.capacity_bytes,
                        devices=t.devices,
                        shared=t.scope == "pooled",
                    )
                    for t in sv.tiers
                ),
                chunk_tokens=int(_stage_doc(verdict.plan, sv.role).get("chunk_tokens", 256)),
                gpu_memory_bytes=sv.gpu_memory_gib * BYTES_PER_GIB,
                transport=sv.transport,
                router=sv.router,
                max_batched_tokens=sv.max_batched_tokens,
                max_seqs=sv.max_seqs,
                page_tokens=sv.page_tokens,
                architecture=sv.gpu_architecture,
                # the replay's default when the plan gives none (fleet/fromplan.py)
                preemption=str(
                    (_stage_doc(verdict.plan, sv.role).get("scheduler") or {}).get(
                        "preemption", "recompute"
                    )
                ),
            )
        )
    return Deployment(
        topology=Topology(verdict.topology or "disaggregated"),
        stages=tuple(stages),
        model=model.name,
        model_in_catalog=model.origin == "catalog",
        kv_bytes_per_token=model.kv_bytes_per_token,
        kv_bytes_per_rank_per_token=float(kv_rank or model.kv_bytes_per_token),
        attention=model.attention,
        kv_dtype=deployment.kv_dtype if deployment is not None else "bf16",
        weight_dtype=deployment.weight_dtype if deployment is not None else "bf16",
        tp_assumed=False,
    )


def _stage_doc(plan: Mapping[str, Any], role: str) -> Mapping[str, Any]:
    """The verdict plan's block of stage ``role`` (empty when it has none)."""
    return (plan.get("stages", {}) or {}).get(role, {}) or {}


def deployment_from_report(report: AdviceReport) -> Deployment:
    """The recommended deployment of ``report``; a ConfigError says what is missing.

    The primary deployment verdict (``recommendation.verdict``) when it chose one: its
    topology, and per stage the instance, count, TP, replicas and tiers the search replayed.
    """
    model = report.model
    if model is None:
        raise ConfigError("--emit needs the model's KV bytes per token: give --model")
    rec = report.recommendation
    verdicts = rec.verdict if rec is not None else None
    if verdicts is not None:
        primary = verdicts.primary_verdict
        if primary is None or not primary.chosen:
            why = primary.reason if primary is not None else verdicts.primary_why
            raise ConfigError(f"--emit needs a recommended deployment, and there is none: {why}")
        return _from_verdict(report, primary)
    if rec is None or rec.prefill.instance is None:
        why = report.unavailable.get("recommendation", "the report has no recommendation")
        raise ConfigError(f"--emit needs the recommended deployment, and there is none: {why}")
    deployment = model.deployment
    tp = deployment.tp if deployment is not None else 1
    kvb = model.kv_bytes_per_token
    kv_rank = float(model.kv_bytes_per_token_per_gpu or math.ceil(kvb / tp))
    stages = []
    for name, stage in ((Stage.PREFILL, rec.prefill), (Stage.DECODE, rec.decode)):
        if stage.instance is None:
            continue
        gpus = stage.gpus_per_instance
        if gpus is None:
            raise ConfigError(
                f"--emit needs the GPUs per instance of the {name} instance {stage.instance}; "
                "this report predates them: run analyze again"
            )
        if tp > gpus:
            raise ConfigError(
                f"--tp {tp} does not fit one {stage.instance} ({gpus} GPUs); engine "
                "configurations are written for tensor parallelism within one instance: "
                f"give --tp {gpus} or less"
            )
        pool = _device_pool_tokens(report, stage, tp, kv_rank)
        if pool == 0.0:
            raise ConfigError(
                f"the model's weights leave no GPU memory for KV on {stage.instance} at TP {tp}: "
                "give a larger --tp"
            )
        stages.append(
            StageView(
                stage=name,
                instance=stage.instance,
                count=stage.instance_count or 1,
                gpu=stage.gpu,
                gpus_per_instance=gpus,
                gpu_memory_bytes=None
                if stage.gpu_memory_gib is None
                else stage.gpu_memory_gib * BYTES_PER_GIB,
                tp=tp,
                host_memory_bytes=None
                if stage.host_memory_gib is None
                else stage.host_memory_gib * BYTES_PER_GIB,
                device_pool_tokens_per_replica=pool,
                tiers=tuple(_tier_view(t) for t in stage.tiers),
                chunk_tokens=stage.chunk_tokens or 256,
            )
        )
    # One instance type per stage is a prefill fleet and a decode fleet: disaggregated.
    topology = Topology.DISAGGREGATED if len(stages) == 2 else Topology.AGGREGATED
    if topology == Topology.AGGREGATED:
        stages = [_as_serving(s) for s in stages]
    return Deployment(
        topology=topology,
        stages=tuple(stages),
        model=model.name,
        model_in_catalog=model.origin == "catalog",
        kv_bytes_per_token=kvb,
        kv_bytes_per_rank_per_token=kv_rank,
        attention=model.attention,
        kv_dtype=deployment.kv_dtype if deployment is not None else "bf16",
        weight_dtype=deployment.weight_dtype if deployment is not None else "bf16",
        tp_assumed=deployment.tp_assumed if deployment is not None else True,
    )


def _as_serving(stage: StageView) -> StageView:
    """An aggregated fleet's one stage serves both prefill and decode."""
    return replace(stage, stage=Stage.SERVING)
