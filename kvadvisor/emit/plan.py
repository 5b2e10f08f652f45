"""`--emit plan`: the recommended deployment as a plan file that `review` and `replay` read.

The plan names the catalog instance and storage of every tier, so the review looks up the same
figures the advisor used; the GPU KV pool per instance is the one the engine files were sized
against. Written with one engine's files, the plan is that engine's deployment: its
``engine_files`` (so `review` lints the very files an operator starts, and `replay` takes the
engine's page, write policy and prefix loads from them), only the tiers the engine was given,
whether decode saves the KV it generates, and the engine's token budget per step.
"""

from __future__ import annotations

import re
import typing
from dataclasses import replace
from pathlib import PurePath
from typing import Any

import yaml

from kvadvisor.emit.context import EmitContext
from kvadvisor.emit.deployment import StageView, TierKind, TierView
from kvadvisor.engines import registry
from kvadvisor.plan.loader import CATEGORY_KINDS, check_plan
from kvadvisor.plan.model import ModelPlan, Plan, StagePlan, StorageCapability, TierPlan
from kvadvisor.plan.writer import plan_mapping
from kvadvisor.quoting import one_line
from kvadvisor.vocab import Stage


def engine_keys(engine: str, ctx: EmitContext, stage: StageView) -> set[str]:
    """The names of the settings ``engine`` writes for ``stage``'s tiers."""
    return registry.engine(engine).tier_keys(ctx, stage)


def written_tiers(engine: str, ctx: EmitContext, stage: StageView) -> tuple[TierView, ...]:
    """The recommended tiers of ``stage`` that ``engine``'s files give the engine.

    The engine's ``host_keys`` size its host tier; its ``storage_keys`` give it the tier below.
    """
    e = registry.engine(engine)
    keys = e.tier_keys(ctx, stage)
    host = bool(keys & e.host_keys)
    below = bool(keys & e.storage_keys)
    storage = stage.storage_tier
    return tuple(
        t for t in stage.tiers if (t.kind == TierKind.HOST and host) or (t is storage and below)
    )


def decode_saves(engine: str, ctx: EmitContext, stage: StageView) -> bool:
    """Whether ``engine``'s decode servers write the KV they generate to their tiers.

    Each engine says (``Engine.decode_saves``, in its module); by default its decode servers
    do not.
    """
    return registry.engine(engine).decode_saves(ctx, stage)


def _tier_plan(t: TierView) -> TierPlan:
    """A recommended tier by its catalog name, its capacity per instance or pool.

    The advisor sizes a node's tier per instance and a shared one for the whole stage.
    """
    return TierPlan(
        name=t.name,
        storage=StorageCapability(kind=CATEGORY_KINDS.get(t.category, "ssd"), catalog_name=t.name),
        capacity_bytes=t.capacity_bytes,
        devices=t.devices,
        shared=t.shared,
        scope="pooled" if t.shared else "instance",
    )


def _stage_plan(ctx: EmitContext, stage: StageView) -> StagePlan:
    pool = None
    if stage.device_pool_tokens_per_replica is not None:
        pool = (
            stage.device_pool_tokens_per_replica
            * ctx.dep.kv_bytes_per_rank_per_token
            * stage.tp
            * stage.replicas_per_instance
        )
    return StagePlan(
        stage=stage.stage,
        instance=stage.instance,
        count=stage.count,
        gpu_kv_pool_bytes=pool,
        tiers=tuple(_tier_plan(t) for t in stage.tiers),
        chunk_tokens=stage.chunk_tokens,
        gpus_per_replica=stage.tp,
        replicas_per_instance=stage.replicas_per_instance,
    )


def deployment_plan(ctx: EmitContext) -> Plan:
    """The deployment of a report without a verdict as a plan: every recommended tier, no engine.

    Its instances and storage are named, not resolved: the loader looks them up when the plan
    is read back.
    """
    dep = ctx.dep
    # The trace's file name may hold anything a file name can; the plan's name may not (the
    # plan loader refuses control characters), so it keeps the name's printable part.
    stem = re.sub(r"[^\w.-]+", "-", PurePath(ctx.report.trace.path).name.split(".")[0])
    name = f"kvadvisor-{stem.strip('-') or 'trace'}"
    return Plan(
        name=name,
        path=name,
        model=ModelPlan(
            name=dep.model if dep.model_in_catalog else None,
            kv_bytes_per_token=dep.kv_bytes_per_token,
            tp=dep.stages[0].tp,
            kv_dtype=dep.kv_dtype,
            weight_dtype=dep.weight_dtype,
        ),
        stages=tuple(_stage_plan(ctx, s) for s in dep.stages),
        description=f"The {dep.topology.value} deployment kvadvisor recommended for "
        f"{one_line(ctx.report.trace.path)}",
        topology=dep.topology,
    )


def recommended_plan(ctx: EmitContext) -> Plan:
    """The recommended deployment as a typed plan, no engine.

    A chosen deployment verdict's own plan (the one the advisor's search replayed, issue 13):
    its ``Plan``, or, in a report read back from JSON, its plan mapping as the loader reads
    it. :func:`on_engine` needs only a stage per stage of ``ctx.dep`` whose tiers are that
    stage's tiers, in order, which the verdict's are. Else the plan by names.
    """
    rec = ctx.report.recommendation
    verdict = rec.verdict.primary_verdict if rec is not None and rec.verdict is not None else None
    if verdict is not None and verdict.chosen and verdict.plan:
        if verdict.replayed_plan is not None:
            return typing.cast(Plan, verdict.replayed_plan)
        return check_plan(verdict.plan.get("name", "plan"), verdict.plan)
    return deployment_plan(ctx)


def _on_engine_stage(
    plan: StagePlan, ctx: EmitContext, engine: str, stage: StageView, files: list[str]
) -> StagePlan:
    """One stage of the plan as ``engine`` runs it (see :func:`on_engine`)."""
    assert len(plan.tiers) == len(stage.tiers), (stage.stage, plan.tiers)
    written = {id(t) for t in written_tiers(engine, ctx, stage)}
    tiers = tuple(t for t, view in zip(plan.tiers, stage.tiers, strict=True) if id(view) in written)
    scheduler = plan.scheduler
    step_tokens = registry.engine(engine).step_tokens
    if step_tokens is not None:
        scheduler = replace(scheduler, max_num_batched_tokens=step_tokens(ctx, stage))
    save = plan.save_decode_kv
    if ctx.disaggregated and stage.stage == Stage.DECODE:
        save = decode_saves(engine, ctx, stage)
    return replace(
        plan,
        tiers=tiers,
        chunk_tokens=None,
        scheduler=scheduler,
        save_decode_kv=save,
        engine_files=tuple(files) if files else plan.engine_files,
    )


def on_engine(
    plan: Plan, ctx: EmitContext, engine: str, engine_files: dict[str, list[str]]
) -> Plan:
    """``plan`` (a deployment) as ``engine`` runs it.

    Per stage: the engine's files; only the tiers its files configure (the plan's tiers are
    the stage's tiers, in order); the engine's own I/O unit instead of the advisor's chunk (the
    replay reads it from the files); vllm serve's token budget; whether decode saves its KV.
    """
    views = {s.stage: s for s in ctx.dep.stages}
    return replace(
        plan,
        name=f"{plan.name}-{engine}",
        description=f"{plan.description} on {engine}",
        stages=tuple(
            s
            if s.stage not in views
            else _on_engine_stage(s, ctx, engine, views[s.stage], engine_files.get(s.stage) or [])
            for s in plan.stages
        ),
    )


def plan_document(
    ctx: EmitContext,
    engine: str | None = None,
    engine_files: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The plan as the one writer's mapping: ``engine``'s deployment, ``engine_files`` per stage."""
    plan = recommended_plan(ctx)
    if engine is not None:
        plan = on_engine(plan, ctx, engine, engine_files or {})
    return plan_mapping(plan)


def plan_name(engine: str | None) -> str:
    """plan.yaml, or plan-<engine>.yaml when one run writes plans for several engines."""
    return "plan.yaml" if engine is None else f"plan-{engine}.yaml"


def emit_plan(
    ctx: EmitContext,
    engine: str | None = None,
    engine_files: dict[str, list[str]] | None = None,
    name: str = "plan.yaml",
) -> dict[str, str]:
    """``name``: the deployment, on ``engine`` when given."""
    what = "Deployment plan" + (f" on {engine}" if engine else "")
    head = ctx.head(
        f"{what}: kvadvisor review TRACE --plan {name}; kvadvisor replay TRACE --plan {name}"
    )
    body = yaml.safe_dump(plan_document(ctx, engine, engine_files), sort_keys=False)
    return {name: "\n".join(head) + "\n" + body}
