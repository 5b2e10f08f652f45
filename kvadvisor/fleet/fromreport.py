"""The deployment the advisor recommends, replayed and sized until it carries the load.

The recommended deployment is a verdict's plan (the one its search replayed), or, in a
report without verdicts, the instance, count and KV tiers per stage the advisor picked from
open-loop figures (prefill and decode: sized apart, so the fleet is disaggregated). Either is
checked by the plan loader like any plan file, and replayed. While the replay says the fleet
is overloaded (docs/replay.md R11), the busiest stage's instance count is doubled and the
replay run again, at most ``MAX_SIZING_ROUNDS`` times; every step is a note in the report. The
plan is kept, so a user can replay or review the very deployment the report describes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from kvadvisor.errors import KvAdvisorError
from kvadvisor.fleet.engine import ReplayOptions, run_resolved
from kvadvisor.fleet.fanout import Tasks
from kvadvisor.fleet.fromplan import resolve_plan
from kvadvisor.fleet.hits import ReplayContext
from kvadvisor.fleet.summary import request_columns, summarize
from kvadvisor.perfmodel.calibrate import StepCalibration
from kvadvisor.plan.loader import PlanCatalogs, check_plan, named_tier
from kvadvisor.plan.model import ModelPlan, Plan, StagePlan, TierPlan
from kvadvisor.plan.writer import plan_mapping
from kvadvisor.results.replay import ReplayResult
from kvadvisor.results.report import AdviceReport, StageRecommendation, Tier
from kvadvisor.units import plural
from kvadvisor.vocab import Stage

MAX_SIZING_ROUNDS = 4
PLAN_PATH = "the recommended deployment"


@dataclass(frozen=True)
class RecommendedReplay:
    """The replay of the recommended deployment, the plan it ran, and how it was sized."""

    result: ReplayResult
    plan: Plan
    notes: tuple[str, ...]
    # One array per column of `replay --requests-out`, one value per trace request.
    columns: dict[str, np.ndarray] = field(default_factory=dict)


def _tier_plan(t: Tier) -> TierPlan:
    """A recommended tier by its catalog name, its capacity per instance or pool."""
    return named_tier(t.name, t.category, t.capacity_gib, t.devices, t.shared)


def _stage_plan(stage: Stage, rec: StageRecommendation) -> StagePlan | None:
    if rec.instance is None:
        return None
    return StagePlan(
        stage=stage,
        instance=rec.instance,
        count=rec.instance_count or 1,
        tiers=tuple(_tier_plan(t) for t in rec.tiers),
        chunk_tokens=rec.chunk_tokens or None,
    )


def recommended_plan(
    report: AdviceReport, catalogs: PlanCatalogs | None = None
) -> tuple[Plan | None, str]:
    """The recommendation as a checked plan, or None and why it cannot be one (PlanError).

    A deployment verdict's own plan when the advisor searched one (issue 13): the very
    deployment its search replayed (its typed Plan, or its plan mapping checked when the
    report was read back from JSON); else the plan of the per-stage recommendation, its
    instances and storage looked up in ``catalogs`` (the packaged catalogs when None).
    """
    model, rec = report.model, report.recommendation
    verdicts = rec.verdict if rec is not None else None
    if verdicts is not None:
        primary = verdicts.primary_verdict
        if primary is None or not primary.chosen or not primary.plan:
            why = primary.reason if primary is not None else verdicts.primary_why
            return None, f"no deployment was recommended: {why}"
        if primary.replayed_plan is not None:  # the search's own Plan: nothing to read
            return replace(primary.replayed_plan, path=PLAN_PATH), ""
        # A verdict read back from JSON holds the plan as written: the loader reads it.
        return check_plan(PLAN_PATH, primary.plan, catalogs), ""
    if model is None or model.deployment is None:
        return None, "no model and GPU: the stage profile did not run"
    if rec is None:
        return None, "the advisor made no recommendation"
    try:
        (catalogs or PlanCatalogs.packaged()).perf.model(model.name)
    except KvAdvisorError:
        return None, f"model {model.name} is not in the model catalog (the replay needs its shape)"
    stages = []
    for stage in (Stage.PREFILL, Stage.DECODE):
        plan = _stage_plan(stage, rec.stage(stage))
        if plan is None:
            return None, f"no {stage} instance was recommended"
        stages.append(plan)
    dep = model.deployment
    named = Plan(
        name="recommended",
        path=PLAN_PATH,
        model=ModelPlan(
            name=model.name,
            kv_bytes_per_token=None,
            tp=dep.tp,
            kv_dtype=dep.kv_dtype,
            weight_dtype=dep.weight_dtype,
        ),
        stages=tuple(stages),
        description=f"the deployment kvadvisor recommended for {report.trace.path}",
    )
    # The stages name their instances and storage: the loader looks them up in the catalogs.
    return check_plan(PLAN_PATH, plan_mapping(named), catalogs), ""


def _doubled(plan: Plan, role: Stage) -> Plan:
    """``plan`` with twice the instances in stage ``role``."""
    return replace(
        plan,
        stages=tuple(replace(s, count=2 * s.count) if s.stage == role else s for s in plan.stages),
    )


def replay_recommended(
    ctx: ReplayContext,
    report: AdviceReport,
    catalogs: PlanCatalogs | None = None,
    options: ReplayOptions | None = None,
    calibration: StepCalibration | None = None,
    executor: Tasks | None = None,
) -> tuple[RecommendedReplay | None, str]:
    """Replay the recommended deployment, doubling an overloaded stage; None and why if not.

    ``catalogs``: the catalogs the advisor chose from (the packaged ones when None).
    ``calibration``: the coefficients fitted to the trace's measured requests; a stage on the
    GPU and model they were measured on replays on them (the stage's ``step_model`` says so,
    and says when they do not apply).
    ``executor``: where the replica groups replay (``fleet.fanout``; None: here).
    """
    try:
        plan, why = recommended_plan(report, catalogs)
    except KvAdvisorError as exc:
        return None, str(exc).removeprefix(f"{PLAN_PATH}: ")
    if plan is None:
        return None, why
    notes: list[str] = []
    result: ReplayResult | None = None
    for _ in range(MAX_SIZING_ROUNDS):
        try:
            fleet, plan_notes = resolve_plan(plan, calibration)
        except KvAdvisorError as exc:
            return None, str(exc).removeprefix(f"{PLAN_PATH}: ")
        run = run_resolved(ctx, fleet, options, executor=executor)
        result = summarize(run)
        result = replace(result, notes=(*plan_notes, *result.notes))
        if not result.overload.overloaded:
            break
        busiest = max(result.stages, key=lambda s: s.busy_fraction or 0.0)
        stage = plan.stage(busiest.role)
        assert stage is not None
        notes.append(
            f"sized to carry the load: {plural(stage.count, f'{busiest.role.value} instance')} "
            f"overloaded ({result.overload.reason}); replayed again with {2 * stage.count}"
        )
        plan = _doubled(plan, busiest.role)
    assert result is not None
    if result.overload.overloaded:
        notes.append(
            f"still overloaded after {MAX_SIZING_ROUNDS} replays: the figures are those of an "
            "overloaded fleet"
        )
    notes.append(
        "the advisor chose this deployment from open-loop figures; the replay is its closed "
        "loop (docs/replay.md)"
    )
    result = replace(result, notes=(*notes, *result.notes))
    return RecommendedReplay(result, plan, tuple(notes), request_columns(run)), ""
