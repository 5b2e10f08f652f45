"""A candidate deployment, and the Plan the search replays and the verdict writes.

The search never builds a replay deployment by hand: a candidate becomes a
:class:`~kvadvisor.plan.model.Plan` (:func:`candidate_plan`, its catalog entries resolved as
the plan loader resolves them), the replay takes that Plan (:func:`kvadvisor.fleet.run_replay`
resolves it into its own inputs), and the one plan writer
(:mod:`kvadvisor.plan.writer`) writes it for the verdict. What the search replayed is
therefore what ``--emit plan`` writes and what `kvadvisor review` replays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from kvadvisor.advice.space import Shape
from kvadvisor.catalog.perfcatalogs import PerfCatalogs
from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.engines import registry
from kvadvisor.plan.loader import (
    PlanCatalogs,
    check_plan,
    instance_resources,
    storage_capability,
)
from kvadvisor.plan.model import (
    KvLoadPlan,
    ModelPlan,
    Plan,
    SchedulerPlan,
    Slo,
    StagePlan,
    StorageCapability,
    TierPlan,
)
from kvadvisor.units import rate_as_written, size_as_written, time_as_written
from kvadvisor.vocab import Stage, Topology


@dataclass(frozen=True)
class TierPick:
    """One KV tier of a stage as the plan gives it.

    ``storage`` names the catalog entry; the host-memory tier is written inline (its
    bandwidth is the GPUs' host links, which no storage entry states). ``capacity_bytes`` is
    per unit of ``scope`` (one instance, or the pool).
    """

    name: str
    category: str
    scope: str  # "instance" | "pooled"
    capacity_bytes: float | None
    devices: int = 1
    storage: StorageSpec | None = None
    inline: StorageCapability | None = None  # the capability, when no catalog entry names it
    usd_per_hour: float | None = 0.0  # every unit together
    price_basis: str = ""
    why: str = ""
    unconfirmed: tuple[str, ...] = ()


@dataclass(frozen=True)
class StagePick:
    """One stage: a shape, how many instances, its tiers and router."""

    role: Stage  # serving | prefill | decode
    shape: Shape
    count: int
    tiers: tuple[TierPick, ...] = ()
    router: str = "prefix_aware"
    tier_note: str = field(default="", compare=False)  # why a tier is absent, when one is

    @property
    def gpus(self) -> int:
        """GPUs of the stage."""
        return self.count * self.shape.instance.gpu_count

    @property
    def usd_per_hour(self) -> float | None:
        """Instances at their on-demand price plus tiers; None when any part is unpriced."""
        parts = [None if self.shape.price is None else self.shape.price * self.count]
        parts += [t.usd_per_hour for t in self.tiers]
        return None if any(p is None for p in parts) else float(sum(p for p in parts if p))

    def label(self) -> str:
        """E.g. "3 x p5en.48xlarge TP 2 x 4" (instances, TP, replicas per instance)."""
        s = self.shape
        return f"{self.count} x {s.instance.name} TP {s.tp} x {s.replicas_per_instance}"


@dataclass(frozen=True)
class Candidate:
    """A whole deployment of one provider: one serving stage, or prefill and decode."""

    provider: str
    topology: Topology
    stages: tuple[StagePick, ...]
    notes: tuple[str, ...] = field(default=(), compare=False)

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
        return " + ".join(f"{s.role} {s.label()}" for s in self.stages)

    def with_count(self, role: Stage, count: int) -> Candidate:
        """The same deployment with ``count`` instances in stage ``role`` (tiers rescaled)."""
        stages = tuple(
            StagePick(s.role, s.shape, count, s.tiers, s.router, s.tier_note)
            if s.role == role
            else s
            for s in self.stages
        )
        return Candidate(self.provider, self.topology, stages, self.notes)


def _tier_plan(t: TierPick, chunk_tokens: int) -> TierPlan:
    """The tier as the plan states it: a catalog entry by name, host memory inline.

    Its quantities are the ones its written plan reads back as (``units.size_as_written``), so
    the search replays the very deployment `review` and `replay` load from the plan file.
    """
    capacity = None if t.capacity_bytes is None else size_as_written(t.capacity_bytes)
    if t.storage is not None:
        per_device = None if capacity is None else capacity / t.devices
        storage = storage_capability(t.storage, per_device)
    else:
        assert t.inline is not None, t.name
        inline = t.inline
        storage = replace(
            inline,
            read_bytes_per_s=_maybe(rate_as_written, inline.read_bytes_per_s),
            write_bytes_per_s=_maybe(rate_as_written, inline.write_bytes_per_s),
            latency_s=_maybe(time_as_written, inline.latency_s),
        )
    return TierPlan(
        name=t.name,
        storage=storage,
        capacity_bytes=capacity,
        devices=t.devices,
        shared=t.scope == "pooled",
        spec=t.storage,
        scope=t.scope,
        io_tokens=chunk_tokens,
    )


def _maybe(as_written: Callable[[float], float], value: float | None) -> float | None:
    return None if value is None else as_written(value)


def _stage_plan(s: StagePick, chunk_tokens: int, engine: str, attention: str) -> StagePlan:
    shape = s.shape
    # the page the engine runs this model with on this GPU (engines/data/<engine>.yaml)
    page = registry.page_for(engine, attention, shape.gpu.architecture).tokens
    tiers = tuple(_tier_plan(t, chunk_tokens) for t in s.tiers)
    host_memory, disk_cap, network = instance_resources(shape.instance)
    return StagePlan(
        stage=s.role,
        instance=shape.instance.name,
        count=s.count,
        gpu=shape.gpu,
        instance_spec=shape.instance,
        gpus_per_instance=shape.instance.gpu_count,
        host_memory_bytes=host_memory,
        disk_bandwidth_cap_bytes_per_s=disk_cap,
        tiers=tiers,
        chunk_tokens=chunk_tokens,
        gpus_per_replica=shape.tp,
        replicas_per_instance=shape.replicas_per_instance,
        scheduler=SchedulerPlan(
            max_num_batched_tokens=shape.max_batched_tokens,
            max_num_seqs=shape.max_seqs,
            page_tokens=page,
            preemption="recompute",
        ),
        router=s.router,
        write_policy="write_through" if tiers else None,
        kv_load=KvLoadPlan(mode="async") if tiers else None,
        # Decode KV is not kept in storage: the next turn's prefill looks up its prompt's blocks.
        save_decode_kv=False,
        network_bytes_per_s=network,
    )


def candidate_plan(
    candidate: Candidate,
    model: str,
    kv_dtype: str,
    weight_dtype: str,
    chunk_tokens: int,
    slo: Mapping[str, float],
    name: str,
    description: str,
    catalogs: PerfCatalogs | None = None,
    engine: str = "vllm",
    attention: str = "gqa",
) -> Plan:
    """The candidate as a plan the replay runs as it stands; ``slo`` in seconds (p99 kept).

    Each stage's KV page is the one ``engine`` runs a model of ``attention`` with on the
    stage's GPU (the engine registry's ``page``).

    ``catalogs``: the GPU, model and efficiency catalogs the search sized it with (its step
    times come from them); None leaves the model named only (a plan to write, not replay).
    """
    spec = None if catalogs is None else catalogs.model(model)
    return Plan(
        name=name,
        path=name,
        model=ModelPlan(
            name=model,
            kv_bytes_per_token=None,
            spec=spec,
            tp=candidate.stages[0].shape.tp,
            kv_dtype=kv_dtype,
            weight_dtype=weight_dtype,
        ),
        stages=tuple(_stage_plan(s, chunk_tokens, engine, attention) for s in candidate.stages),
        slo=Slo(ttft_p99_s=slo.get("ttft_p99_s"), tpot_p99_s=slo.get("tpot_p99_s")),
        description=description,
        topology=candidate.topology,
        catalogs=catalogs or PerfCatalogs.packaged(),
    )


@lru_cache(maxsize=1)
def _catalogs() -> PlanCatalogs:
    return PlanCatalogs.packaged()


def plan_of(doc: Mapping[str, Any], catalogs: PlanCatalogs | None = None) -> Plan:
    """The Plan of a plan mapping (a verdict's), through the plan loader (PlanError)."""
    return check_plan(str(doc.get("name", "candidate")), dict(doc), catalogs or _catalogs())
