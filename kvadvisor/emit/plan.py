"""`--emit plan`: the recommended deployment as a plan file that `review` and `replay` read.

The plan names the catalog instance and storage of every tier, so the review looks up the same
figures the advisor used; the GPU KV pool per instance is the one the engine files were sized
against. Written with one engine's files, the plan is that engine's deployment: its
``engine_files`` (so `review` lints the very files an operator starts, and `replay` takes the
engine's page, write policy and prefix loads from them), only the tiers the engine was given,
whether decode saves the KV it generates, and the engine's token budget per step.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import yaml

from kvadvisor.emit.context import EmitContext
from kvadvisor.emit.deployment import TierKind, storage_tier, tier_kind
from kvadvisor.engines import registry
from kvadvisor.plan.model import Plan, StagePlan, TierPlan
from kvadvisor.plan.writer import plan_mapping
from kvadvisor.vocab import Stage


def engine_keys(engine: str, ctx: EmitContext, stage: StagePlan) -> set[str]:
    """The names of the settings ``engine`` writes for ``stage``'s tiers."""
    return registry.engine(engine).tier_keys(ctx, stage)


def written_tiers(engine: str, ctx: EmitContext, stage: StagePlan) -> tuple[TierPlan, ...]:
    """The recommended tiers of ``stage`` that ``engine``'s files give the engine.

    The engine's ``host_keys`` size its host tier; its ``storage_keys`` give it the tier below.
    """
    e = registry.engine(engine)
    keys = e.tier_keys(ctx, stage)
    host = bool(keys & e.host_keys)
    below = bool(keys & e.storage_keys)
    storage = storage_tier(stage)
    return tuple(
        t
        for t in stage.tiers
        if (tier_kind(t) == TierKind.HOST and host) or (t is storage and below)
    )


def decode_saves(engine: str, ctx: EmitContext, stage: StagePlan) -> bool:
    """Whether ``engine``'s decode servers write the KV they generate to their tiers.

    Each engine says (``Engine.decode_saves``, in its module); by default its decode servers
    do not.
    """
    return registry.engine(engine).decode_saves(ctx, stage)


def _on_engine_stage(
    ctx: EmitContext, engine: str, stage: StagePlan, files: list[str]
) -> StagePlan:
    """One stage of the plan as ``engine`` runs it (see :func:`on_engine`)."""
    written = {id(t) for t in written_tiers(engine, ctx, stage)}
    tiers = tuple(t for t in stage.tiers if id(t) in written)
    scheduler = stage.scheduler
    step_tokens = registry.engine(engine).step_tokens
    if step_tokens is not None:
        scheduler = replace(scheduler, max_num_batched_tokens=step_tokens(ctx, stage))
    save = stage.save_decode_kv
    if ctx.disaggregated and stage.stage == Stage.DECODE:
        save = decode_saves(engine, ctx, stage)
    return replace(
        stage,
        tiers=tiers,
        chunk_tokens=None,
        scheduler=scheduler,
        save_decode_kv=save,
        engine_files=tuple(files) if files else stage.engine_files,
    )


def on_engine(ctx: EmitContext, engine: str, engine_files: dict[str, list[str]]) -> Plan:
    """The deployment's plan as ``engine`` runs it.

    Per stage: the engine's files; only the tiers its files configure; the engine's own I/O
    unit instead of the advisor's chunk (the replay reads it from the files); vllm serve's
    token budget; whether decode saves its KV.
    """
    plan = ctx.plan
    return replace(
        plan,
        name=f"{plan.name}-{engine}",
        description=f"{plan.description} on {engine}",
        stages=tuple(
            _on_engine_stage(ctx, engine, s, engine_files.get(s.stage) or []) for s in plan.stages
        ),
    )


def plan_document(
    ctx: EmitContext,
    engine: str | None = None,
    engine_files: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The plan as the one writer's mapping: ``engine``'s deployment, ``engine_files`` per stage."""
    plan = ctx.plan if engine is None else on_engine(ctx, engine, engine_files or {})
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
