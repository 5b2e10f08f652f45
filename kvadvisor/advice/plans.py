"""The search's deployments, built as Plans: a stage per shape, its tiers, the form replayed.

The search builds every deployment it tries as a :class:`~kvadvisor.plan.model.Plan` (its
catalog entries resolved as the plan loader resolves them, its prices and reasons in the
plan's commentary fields); the replay takes that Plan (:func:`kvadvisor.fleet.run_replay`)
in the form its written plan reads back as (:func:`as_written`), and the one plan writer
(:mod:`kvadvisor.plan.writer`) writes it for the verdict. What the search replayed is
therefore what ``--emit plan`` writes and what `kvadvisor review` replays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from kvadvisor.advice.space import Shape
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.engines import registry
from kvadvisor.plan.loader import instance_resources, storage_capability
from kvadvisor.plan.model import (
    KvLoadPlan,
    ModelPlan,
    Plan,
    SchedulerPlan,
    Slo,
    StagePlan,
    TierPlan,
)
from kvadvisor.units import rate_as_written, size_as_written, time_as_written
from kvadvisor.vocab import Stage, Topology


@dataclass(frozen=True)
class PlanBasis:
    """What every plan of one search shares: name, model, dtypes, engine, chunk, SLO, catalogs.

    ``model`` is a catalog name of ``catalogs``; ``attention`` its attention kind (the engine's
    KV page depends on it); ``slo`` the targets in seconds (p99 ones are written).
    """

    name: str
    model: str
    attention: str
    kv_dtype: str
    weight_dtype: str
    chunk_tokens: int
    engine: str = "vllm"
    description: str = ""
    slo: Mapping[str, float] = field(default_factory=dict)
    catalogs: PerfCatalogs = field(default_factory=PerfCatalogs.packaged, repr=False)


def shape_of(stage: StagePlan) -> Shape:
    """The search point a stage the search built was sized from."""
    shape = stage.shape
    assert isinstance(shape, Shape), f"stage {stage.stage} was not built by the search"
    return shape


def restaged(stage: StagePlan, count: int, tiers: tuple[TierPlan, ...]) -> StagePlan:
    """``stage`` at ``count`` instances with ``tiers``: written through, loaded async, if any.

    Every tier moves the stage's engine chunk per I/O.
    """
    chunk = stage.chunk_tokens
    return replace(
        stage,
        count=count,
        tiers=tuple(replace(t, io_tokens=chunk) for t in tiers),
        write_policy="write_through" if tiers else None,
        kv_load=KvLoadPlan(mode="async") if tiers else None,
    )


def stage_plan(
    basis: PlanBasis,
    role: Stage,
    shape: Shape,
    count: int,
    tiers: tuple[TierPlan, ...] = (),
    router: str = "prefix_aware",
    tier_note: str = "",
) -> StagePlan:
    """One stage of ``count`` instances of ``shape``, with ``tiers`` (``tier_note``: why none).

    Its KV page is the one ``basis.engine`` runs a model of its attention with on the shape's
    GPU (the engine registry's ``page``).
    """
    page = registry.page_for(basis.engine, basis.attention, shape.gpu.architecture).tokens
    host_memory, disk_cap, network = instance_resources(shape.instance)
    stage = StagePlan(
        stage=role,
        instance=shape.instance.name,
        count=count,
        gpu=shape.gpu,
        instance_spec=shape.instance,
        gpus_per_instance=shape.instance.gpu_count,
        host_memory_bytes=host_memory,
        disk_bandwidth_cap_bytes_per_s=disk_cap,
        chunk_tokens=basis.chunk_tokens,
        gpus_per_replica=shape.tp,
        replicas_per_instance=shape.replicas_per_instance,
        scheduler=SchedulerPlan(
            max_num_batched_tokens=shape.max_batched_tokens,
            max_num_seqs=shape.max_seqs,
            page_tokens=page,
            preemption="recompute",
        ),
        router=router,
        # Decode KV is not kept in storage: the next turn's prefill looks up its prompt's blocks.
        save_decode_kv=False,
        network_bytes_per_s=network,
        tier_note=tier_note,
        shape=shape,
    )
    return restaged(stage, count, tiers)


def fleet_plan(
    basis: PlanBasis, provider: str, topology: Topology, stages: tuple[StagePlan, ...]
) -> Plan:
    """A whole deployment of one provider: one serving stage, or prefill and decode."""
    return Plan(
        name=basis.name,
        path=basis.name,
        model=ModelPlan(
            name=basis.model,
            kv_bytes_per_token=None,
            spec=basis.catalogs.model(basis.model),
            tp=shape_of(stages[0]).tp,
            kv_dtype=basis.kv_dtype,
            weight_dtype=basis.weight_dtype,
        ),
        stages=stages,
        slo=Slo(ttft_p99_s=basis.slo.get("ttft_p99_s"), tpot_p99_s=basis.slo.get("tpot_p99_s")),
        description=basis.description,
        topology=topology,
        catalogs=basis.catalogs,
        provider=provider,
    )


def _tier_as_written(t: TierPlan) -> TierPlan:
    """The tier as its written form reads back: a catalog entry at the written capacity."""
    capacity = None if t.capacity_bytes is None else size_as_written(t.capacity_bytes)
    if t.spec is not None:
        per_device = None if capacity is None else capacity / t.devices
        storage = storage_capability(t.spec, per_device)
    else:
        inline = t.storage
        storage = replace(
            inline,
            read_bytes_per_s=_maybe(rate_as_written, inline.read_bytes_per_s),
            write_bytes_per_s=_maybe(rate_as_written, inline.write_bytes_per_s),
            latency_s=_maybe(time_as_written, inline.latency_s),
        )
    return replace(t, storage=storage, capacity_bytes=capacity)


def _maybe(as_written: Callable[[float], float], value: float | None) -> float | None:
    return None if value is None else as_written(value)


def as_written(plan: Plan, slo: Mapping[str, float]) -> Plan:
    """``plan`` against targets ``slo`` (seconds), its tiers as its written plan reads back.

    Its quantities are the ones the written plan reads back as (``units.size_as_written``), so
    the search replays the very deployment `review` and `replay` load from the plan file.
    """
    stages = tuple(
        replace(s, tiers=tuple(_tier_as_written(t) for t in s.tiers)) for s in plan.stages
    )
    targets = Slo(ttft_p99_s=slo.get("ttft_p99_s"), tpot_p99_s=slo.get("tpot_p99_s"))
    return replace(plan, stages=stages, slo=targets)
