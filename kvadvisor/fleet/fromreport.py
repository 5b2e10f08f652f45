"""The deployment the advisor recommends, replayed and sized until it carries the load.

The advisor picks an instance, a count and KV tiers per stage from open-loop figures. Here
that choice is written as a plan (prefill and decode blocks: the advisor sizes the stages
apart, so the fleet is disaggregated), checked by the plan loader like any plan file, and
replayed. While the replay says the fleet is overloaded (docs/replay.md R11), the busiest
stage's instance count is doubled and the replay run again, at most ``MAX_SIZING_ROUNDS``
times; every step is a note in the report. The plan document is kept, so a user can replay or
review the very deployment the report describes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kvadvisor.errors import KvAdvisorError
from kvadvisor.fleet.engine import ReplayOptions, run_replay
from kvadvisor.fleet.fromplan import deployment_from_plan
from kvadvisor.fleet.hits import ReplayContext
from kvadvisor.fleet.summary import request_columns, summarize
from kvadvisor.perfmodel.calibrate import StepCalibration
from kvadvisor.plan.loader import PlanCatalogs, check_plan
from kvadvisor.results.replay import ReplayResult
from kvadvisor.results.report import AdviceReport, StageRecommendation
from kvadvisor.units import plural
from kvadvisor.vocab import Stage

MAX_SIZING_ROUNDS = 4
PLAN_PATH = "the recommended deployment"


@dataclass(frozen=True)
class RecommendedReplay:
    """The replay of the recommended deployment, the plan it ran, and how it was sized."""

    result: ReplayResult
    plan_document: dict[str, Any]
    notes: tuple[str, ...]
    # One array per column of `replay --requests-out`, one value per trace request.
    columns: dict[str, np.ndarray] = field(default_factory=dict)


def _stage_doc(rec: StageRecommendation) -> dict[str, Any] | None:
    if rec.instance is None:
        return None
    doc: dict[str, Any] = {"instance": rec.instance, "count": rec.instance_count or 1}
    if rec.chunk_tokens:
        doc["chunk_tokens"] = rec.chunk_tokens
    tiers = []
    for t in rec.tiers:
        tier: dict[str, Any] = {"name": t.name, "storage": t.name, "shared": t.shared}
        capacity = t.capacity_gib
        tier["capacity"] = None if capacity is None else f"{capacity:.6g} GiB"  # exact: plan value
        if t.devices != 1:
            tier["devices"] = t.devices
        tiers.append(tier)
    doc["tiers"] = tiers
    return doc


def recommended_plan_document(
    report: AdviceReport, catalogs: PlanCatalogs | None = None
) -> tuple[dict[str, Any] | None, str]:
    """The recommendation as a plan mapping, or None and why it cannot be written as one.

    A deployment verdict's own plan when the advisor searched one (issue 13): the very
    deployment its search replayed; else the plan written from the per-stage recommendation.
    ``catalogs``: where the model is looked up (the packaged catalogs when None).
    """
    model, rec = report.model, report.recommendation
    verdicts = rec.verdict if rec is not None else None
    if verdicts is not None:
        primary = verdicts.primary_verdict
        if primary is None or not primary.chosen or not primary.plan:
            why = primary.reason if primary is not None else verdicts.primary_why
            return None, f"no deployment was recommended: {why}"
        return copy.deepcopy(primary.plan), ""
    if model is None or model.deployment is None:
        return None, "no model and GPU: the stage profile did not run"
    if rec is None:
        return None, "the advisor made no recommendation"
    try:
        (catalogs or PlanCatalogs.packaged()).perf.model(model.name)
    except KvAdvisorError:
        return None, f"model {model.name} is not in the model catalog (the replay needs its shape)"
    stages = {}
    for stage in (Stage.PREFILL, Stage.DECODE):
        doc = _stage_doc(rec.stage(stage))
        if doc is None:
            return None, f"no {stage} instance was recommended"
        stages[stage.value] = doc
    dep = model.deployment
    return {
        "name": "recommended",
        "description": f"the deployment kvadvisor recommended for {report.trace.path}",
        "model": {
            "name": model.name,
            "tp": dep.tp,
            "kv_dtype": dep.kv_dtype,
            "weight_dtype": dep.weight_dtype,
        },
        "stages": stages,
    }, ""


def replay_recommended(
    ctx: ReplayContext,
    report: AdviceReport,
    catalogs: PlanCatalogs | None = None,
    options: ReplayOptions | None = None,
    calibration: StepCalibration | None = None,
) -> tuple[RecommendedReplay | None, str]:
    """Replay the recommended deployment, doubling an overloaded stage; None and why if not.

    ``catalogs``: the catalogs the advisor chose from (the packaged ones when None).
    ``calibration``: the coefficients fitted to the trace's measured requests; a stage on the
    GPU and model they were measured on replays on them (the stage's ``step_model`` says so,
    and says when they do not apply).
    """
    doc, why = recommended_plan_document(report, catalogs)
    if doc is None:
        return None, why
    notes: list[str] = []
    result: ReplayResult | None = None
    for _ in range(MAX_SIZING_ROUNDS):
        try:
            plan = check_plan(PLAN_PATH, doc, catalogs)
            dep, dep_notes = deployment_from_plan(plan, calibration)
        except KvAdvisorError as exc:
            return None, str(exc).removeprefix(f"{PLAN_PATH}: ")
        run = run_replay(ctx, dep, options)
        result = summarize(run)
        result = replace(result, notes=(*dep_notes, *result.notes))
        if not result.overload.overloaded:
            break
        busiest = max(result.stages, key=lambda s: s.busy_fraction or 0.0)
        block = doc["stages"][busiest.role.value]
        notes.append(
            f"sized to carry the load: {plural(block['count'], f'{busiest.role.value} instance')} "
            f"overloaded ({result.overload.reason}); replayed again with {2 * block['count']}"
        )
        doc = copy.deepcopy(doc)
        doc["stages"][busiest.role.value]["count"] = 2 * block["count"]
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
    return RecommendedReplay(result, doc, tuple(notes), request_columns(run)), ""
