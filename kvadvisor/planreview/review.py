"""Review a deployment plan against a replayed trace: every check, per stage and tier (pure).

Everything here is a pure function of the plan and of arrays measured from the trace
(:class:`~kvadvisor.planreview.demand.TraceReplay`); the orchestration that runs the cache
simulation lives in :mod:`kvadvisor.pipeline.review`. The tier arithmetic is in
:mod:`~kvadvisor.planreview.demand`, the checks on it in :mod:`~kvadvisor.planreview.tierchecks`,
the engine lint (plan only) in :mod:`~kvadvisor.planreview.lint`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvadvisor.plan.model import Plan
from kvadvisor.planreview.checks import check, q
from kvadvisor.planreview.closedloop import Replayed, slo_check, with_replayed_demand
from kvadvisor.planreview.demand import (
    TraceReplay,
    device_pool,
    load_times,
    plan_times,
    stage_tiers,
)
from kvadvisor.planreview.enginelint import engine_lint
from kvadvisor.planreview.lint import engine_checks
from kvadvisor.planreview.perf import PlanPerf
from kvadvisor.planreview.tierchecks import (
    deployable_check,
    same_deployment_check,
    stage_balance,
    tier_checks,
)
from kvadvisor.results.common import Meta, TraceSummary, Utilization
from kvadvisor.results.report import FORMAT_VERSION
from kvadvisor.results.review import PlanReview, ReviewCheck, ReviewReport, StageReview, TierReview
from kvadvisor.results.vocab import Stage
from kvadvisor.units import Unit


def _stage_utilization(tiers: Sequence[TierReview]) -> Utilization:
    """The busiest storage tier direction of a stage, by mean (DRAM and CXL left out, as RV04)."""
    us = [
        u
        for t in tiers
        if t.kind not in ("dram", "cxl")
        for u in (t.write_utilization, t.read_utilization)
        if u.mean is not None
    ]
    if not us:
        return Utilization(None, None, None)
    return max(us, key=lambda u: u.mean or 0.0)


def review_plan(
    plan: Plan,
    replay: TraceReplay,
    perf: PlanPerf,
    *,
    window_s: float = 1.0,
    replayed: Replayed | None = None,
    not_replayed: str | None = None,
) -> PlanReview:
    """Check ``plan`` against the trace arrays and its closed-loop replay (pure).

    ``replayed``: the plan's replay (its tier demand, load times and SLOs replace the open-loop
    figures); None with ``not_replayed`` saying why it could not run.
    """
    kvb = perf.kv_bytes_per_token
    times, span = plan_times(plan, replay)
    stage_reviews: list[StageReview] = []
    checks: list[ReviewCheck] = []
    for stage in plan.stages:
        calcs = stage_tiers(stage, replay, perf, times, span, window_s)
        calcs = with_replayed_demand(stage, calcs, replayed)
        checks.extend(c for c in (deployable_check(stage, t) for t in calcs) if c is not None)
        checks.extend(tier_checks(stage, calcs, perf, times, span, window_s))
        checks.extend(engine_checks(stage, plan, device_pool(stage, perf)))
        checks.extend(engine_lint(stage, plan, device_pool(stage, perf)))
        load = load_times(calcs, kvb) if stage.prefills and calcs else None
        load_p99 = float(np.percentile(load, 99)) if load is not None and load.size else None
        if replayed is not None and stage.prefills and calcs:
            load_p99 = replayed.load_p99_s  # contended: loads share each tier's bandwidth
        if plan.slo.ttft_p99_s is not None and stage.prefills:
            if load_p99 is None:
                checks.append(
                    check(
                        "RV07",
                        "stage.ttft_slo",
                        stage.stage,
                        "error",
                        "skip",
                        "load time unknown (hashes or tier read bandwidth missing)",
                        "slo",
                    )
                )
            else:
                bad = load_p99 > plan.slo.ttft_p99_s
                checks.append(
                    check(
                        "RV07",
                        "stage.ttft_slo",
                        stage.stage,
                        "error",
                        "fail" if bad else "pass",
                        f"p99 time to load the cached prefix is {q(load_p99, Unit.SECONDS)}"
                        + (" in the closed-loop replay" if replayed is not None else " alone")
                        + " against a TTFT p99 "
                        f"SLO of {q(plan.slo.ttft_p99_s, Unit.SECONDS)}"
                        + (" before any compute" if bad else ""),
                        "slo",
                        load_time_p99_s=load_p99,
                        ttft_p99_slo_s=plan.slo.ttft_p99_s,
                    )
                )
        tiers = tuple(c.review for c in calcs)
        stage_reviews.append(
            StageReview(
                stage=Stage(stage.stage),
                instance=stage.instance,
                count=stage.count,
                tiers=tiers,
                utilization=_stage_utilization(tiers),
                load_time_p99_s=load_p99,
            )
        )
    checks.extend(stage_balance(stage_reviews))
    checks.extend(same_deployment_check(plan))
    checks.extend(slo_check(plan, replayed, not_replayed))
    return PlanReview(
        name=plan.name,
        path=plan.path,
        traffic_scale=plan.traffic_scale,
        kv_bytes_per_token=kvb,
        stages=tuple(stage_reviews),
        checks=tuple(checks),
    )


def review_report(
    trace: TraceSummary,
    reviews: Sequence[PlanReview],
    *,
    version: str,
    generated_at: str,
    window_s: float,
    warmup_fraction: float,
    notes: Sequence[str] = (),
) -> ReviewReport:
    """Wrap plan reviews into the report the renderers take."""
    return ReviewReport(
        Meta(FORMAT_VERSION, version, generated_at),
        trace,
        tuple(reviews),
        window_s,
        warmup_fraction,
        tuple(notes),
    )
