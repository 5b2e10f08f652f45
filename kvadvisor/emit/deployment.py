"""The deployment an engine configuration is written for: a typed Plan, and the facts beside it.

Emit renders the one deployment type, :class:`kvadvisor.plan.model.Plan`. A chosen verdict's
plan is the one the advisor's search replayed: its typed Plan, or, in a report read back from
JSON, its plan mapping through the plan loader (once). A report without a verdict gets a Plan
built from its stage recommendation (:func:`recommendation_plan`): one instance type per stage,
prefill and decode, is a disaggregated fleet, with the stage profile's TP (``--tp``, or the
smallest that fits).

What a plan does not state and the writers size with is an :class:`EmitFacts` beside it: the
model's KV bytes per token (whole, and one rank's share), the device KV pool of one replica as
the advisor computed it, the GPU as the instance catalog names it, and the fabric between
instances.
"""

from __future__ import annotations

import math
import re
import typing
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import PurePath

from kvadvisor.errors import ConfigError
from kvadvisor.plan.loader import PlanCatalogs, check_plan, named_tier
from kvadvisor.plan.model import ModelPlan, Plan, StagePlan, TierPlan
from kvadvisor.quoting import one_line
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


# The plan's storage kinds (the loader's, from the storage catalog's categories) as tier kinds.
STORAGE_TIER_KINDS = {
    "dram": TierKind.HOST,
    "cxl": TierKind.HOST,
    "ssd": TierKind.LOCAL_DISK,
    "block": TierKind.LOCAL_DISK,
    "filesystem": TierKind.SHARED_FS,
    "pool": TierKind.POOL,
    "object": TierKind.OBJECT,
}


def tier_kind(tier: TierPlan) -> TierKind:
    """The engine's view of ``tier``: host memory, a node's disk, a shared file system, ..."""
    return STORAGE_TIER_KINDS.get(tier.storage.kind, TierKind.LOCAL_DISK)


def tier_role(tier: TierPlan) -> TierRole:
    """Host memory is the KV pool and write buffer; anything below it the capacity tier."""
    return TierRole.HOST_POOL if tier_kind(tier) == TierKind.HOST else TierRole.CAPACITY


def role_words(tier: TierPlan) -> str:
    """What the tier is for, in words (a config comment's)."""
    return TIER_ROLE_WORDS[tier_role(tier)]


def tier_label(tier: TierPlan) -> str:
    """The storage holding the tier: its catalog entry, or host-dram for inline host memory."""
    if tier.storage.catalog_name is not None:
        return tier.storage.catalog_name
    return "host-dram" if tier_kind(tier) == TierKind.HOST else tier.name


def tier_words(tier: TierPlan) -> str:
    """'capacity tier (aws-fsx-lustre-persistent2-125, shared_fs)': role, storage and kind."""
    return f"{role_words(tier)} ({tier_label(tier)}, {tier_kind(tier).value})"


def tier_of(stage: StagePlan, kind: TierKind) -> TierPlan | None:
    """The stage's first tier of ``kind``, if any."""
    return next((t for t in stage.tiers if tier_kind(t) == kind), None)


def storage_tier(stage: StagePlan) -> TierPlan | None:
    """The tier below host memory: a local disk, a shared file system, a pool or objects."""
    return next((t for t in stage.tiers if tier_kind(t) != TierKind.HOST), None)


@dataclass(frozen=True)
class StageFacts:
    """What the advisor knows of one stage that its plan does not state."""

    gpu: str | None  # the GPU as the instance catalog (or the recommendation) names it
    gpu_memory_bytes: float | None  # one GPU's memory (vLLM's batch defaults depend on it)
    pool_tokens_per_replica: float | None  # one replica's device KV pool, as the advisor sized it
    transport: Transport | None = None  # the instance's network between instances (the fabric)


@dataclass(frozen=True)
class EmitFacts:
    """The model's KV geometry and each stage's facts, beside the plan the files are for."""

    model: str
    model_in_catalog: bool
    kv_bytes_per_token: int  # the whole model, all ranks
    kv_bytes_per_rank_per_token: float  # one rank's share (MLA: the whole latent on every rank)
    attention: str
    tp_assumed: bool
    stages: dict[Stage, StageFacts] = field(default_factory=dict)

    def stage(self, stage: StagePlan) -> StageFacts:
        """The facts of ``stage`` (none known: every one None)."""
        return self.stages.get(stage.stage, StageFacts(None, None, None))


def describe_stage(stage: StagePlan, facts: EmitFacts) -> str:
    """One line: "prefill: 2 x p5e.48xlarge (8 x h200, 2,048 GiB host), TP 2 x 4 replicas"."""
    host = (
        ""
        if stage.host_memory_bytes is None
        else f", {format_value(stage.host_memory_bytes, Unit.BYTES)} host memory"
    )
    return (
        f"{stage.stage}: {stage.count} x {stage.instance} ({stage.gpus_per_instance} x "
        f"{facts.stage(stage).gpu or 'GPU'}{host}), TP {stage.tp} x "
        f"{stage.replicas_per_instance} replica(s) per instance = {stage.ranks_per_instance} "
        "ranks per instance"
    )


def describe(plan: Plan, facts: EmitFacts) -> str:
    """The deployment in one paragraph (the header of every emitted file)."""
    tp = "the smallest TP that fits, assumed" if facts.tp_assumed else "TP as given (--tp)"
    return f"{plan.topology.value} ({tp}); " + "; ".join(
        describe_stage(s, facts) for s in plan.stages
    )


def _rank_bytes(report: AdviceReport, tp: int) -> float:
    """KV bytes per token one rank keeps at ``tp``: the profile's own, or the model's over TP."""
    model = report.model
    assert model is not None
    deployment = model.deployment
    kvb = model.kv_bytes_per_token
    if model.kv_bytes_per_token_per_gpu and deployment is not None and deployment.tp == tp:
        return float(model.kv_bytes_per_token_per_gpu)
    return float(kvb if model.attention == "mla" else math.ceil(kvb / tp))


def _facts(
    report: AdviceReport, kv_rank: float, tp_assumed: bool, stages: dict[Stage, StageFacts]
) -> EmitFacts:
    model = report.model
    assert model is not None
    return EmitFacts(
        model=model.name,
        model_in_catalog=model.origin == "catalog",
        kv_bytes_per_token=model.kv_bytes_per_token,
        kv_bytes_per_rank_per_token=kv_rank,
        attention=model.attention,
        tp_assumed=tp_assumed,
        stages=stages,
    )


def verdict_plan(verdict: Verdict) -> Plan:
    """The plan the verdict's search replayed: its Plan, or its mapping through the loader."""
    if verdict.replayed_plan is not None:
        return typing.cast(Plan, verdict.replayed_plan)
    if not verdict.plan:
        raise ConfigError(
            "--emit needs the recommended deployment's plan, and this report predates it: "
            "run analyze again"
        )
    return check_plan(str(verdict.plan.get("name", "plan")), verdict.plan)


def _from_verdict(report: AdviceReport, verdict: Verdict) -> tuple[Plan, EmitFacts]:
    """The verdict's plan, with each stage's replayed pool, GPU and fabric beside it."""
    stages = {
        sv.role: StageFacts(
            gpu=sv.gpu,
            gpu_memory_bytes=sv.gpu_memory_gib * BYTES_PER_GIB,
            pool_tokens_per_replica=float(sv.gpu_kv_pool_tokens_per_replica),
            transport=sv.transport,
        )
        for sv in verdict.stages
    }
    kv_rank = _rank_bytes(report, verdict.stages[0].tp) if verdict.stages else None
    model = report.model
    assert model is not None
    facts = _facts(report, kv_rank or float(model.kv_bytes_per_token), False, stages)
    return verdict_plan(verdict), facts


def deployment_from_report(report: AdviceReport) -> tuple[Plan, EmitFacts]:
    """The recommended deployment of ``report`` and its facts; a ConfigError says what is missing.

    The primary deployment verdict (``recommendation.verdict``) when it chose one: the plan
    its search replayed. Else the stage recommendation's (:func:`recommendation_plan`).
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
    return recommendation_plan(report)


def _device_pool_tokens(
    report: AdviceReport, rec: StageRecommendation, kv_rank: float
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


def _tier_plan(t: Tier) -> TierPlan:
    """A recommended tier by its catalog name, its capacity per instance or pool."""
    return named_tier(t.name, t.category, t.capacity_gib, t.devices, t.shared)


def _recommended_stage(
    report: AdviceReport, name: Stage, stage: StageRecommendation, tp: int, kv_rank: float
) -> tuple[StagePlan, StageFacts]:
    """One recommended stage as a plan stage, refused when TP or the weights leave no room."""
    assert stage.instance is not None
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
    pool = _device_pool_tokens(report, stage, kv_rank)
    if pool == 0.0:
        raise ConfigError(
            f"the model's weights leave no GPU memory for KV on {stage.instance} at TP {tp}: "
            "give a larger --tp"
        )
    replicas = gpus // tp
    plan = StagePlan(
        stage=name,
        instance=stage.instance,
        count=stage.instance_count or 1,
        # the packaged catalog's entry, when it has one: the plan then names the instance only
        instance_spec=PlanCatalogs.packaged().instances.get(stage.instance),
        gpus_per_instance=gpus,
        host_memory_bytes=None
        if stage.host_memory_gib is None
        else stage.host_memory_gib * BYTES_PER_GIB,
        gpu_kv_pool_bytes=None if pool is None else pool * kv_rank * tp * replicas,
        tiers=tuple(_tier_plan(t) for t in stage.tiers),
        chunk_tokens=stage.chunk_tokens or 256,
        gpus_per_replica=tp,
        replicas_per_instance=replicas,
    )
    memory = None if stage.gpu_memory_gib is None else stage.gpu_memory_gib * BYTES_PER_GIB
    return plan, StageFacts(gpu=stage.gpu, gpu_memory_bytes=memory, pool_tokens_per_replica=pool)


def recommendation_plan(report: AdviceReport) -> tuple[Plan, EmitFacts]:
    """The stage recommendation of a report without a verdict as a plan: every tier, no engine.

    Its storage is named, not resolved (the loader looks it up when the plan is read back); its
    instances carry the packaged catalog's entry where it has one, so the written plan names
    them and states only what differs.
    """
    model = report.model
    rec = report.recommendation
    assert model is not None and rec is not None
    deployment = model.deployment
    tp = deployment.tp if deployment is not None else 1
    kv_rank = float(model.kv_bytes_per_token_per_gpu or math.ceil(model.kv_bytes_per_token / tp))
    # One instance type per stage is a prefill fleet and a decode fleet: disaggregated; an
    # aggregated fleet's one stage serves both prefill and decode.
    pairs = ((Stage.PREFILL, rec.prefill), (Stage.DECODE, rec.decode))
    recommended = [(n, s) for n, s in pairs if s.instance is not None]
    topology = Topology.DISAGGREGATED if len(recommended) == 2 else Topology.AGGREGATED
    built = [_recommended_stage(report, n, s, tp, kv_rank) for n, s in recommended]
    if topology == Topology.AGGREGATED:
        built = [(replace(p, stage=Stage.SERVING), f) for p, f in built]
    # The trace's file name may hold anything a file name can; the plan's name may not (the
    # plan loader refuses control characters), so it keeps the name's printable part.
    stem = re.sub(r"[^\w.-]+", "-", PurePath(report.trace.path).name.split(".")[0])
    name = f"kvadvisor-{stem.strip('-') or 'trace'}"
    plan = Plan(
        name=name,
        path=name,
        model=ModelPlan(
            name=model.name if model.origin == "catalog" else None,
            kv_bytes_per_token=model.kv_bytes_per_token,
            tp=tp,
            kv_dtype=deployment.kv_dtype if deployment is not None else "bf16",
            weight_dtype=deployment.weight_dtype if deployment is not None else "bf16",
        ),
        stages=tuple(p for p, _ in built),
        description=f"The {topology.value} deployment kvadvisor recommended for "
        f"{one_line(report.trace.path)}",
        topology=topology,
    )
    tp_assumed = deployment.tp_assumed if deployment is not None else True
    facts = _facts(report, kv_rank, tp_assumed, {p.stage: f for p, f in built})
    return plan, facts
