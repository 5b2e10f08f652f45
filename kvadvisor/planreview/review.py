"""Review a deployment plan against a replayed trace: every check, per stage and tier (pure).

Everything here is a pure function of the plan and of arrays measured from the trace
(:class:`~kvadvisor.planreview.demand.TraceReplay`); the orchestration that runs the cache
simulation lives in :mod:`kvadvisor.pipeline.review`. The tier arithmetic is in
:mod:`~kvadvisor.planreview.demand`, the facts every check reads in
:mod:`~kvadvisor.planreview.facts`; the checks themselves are rules (``rules/review/``,
``rules/lint/``), run by :mod:`~kvadvisor.planreview.rules`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvadvisor.plan.model import Plan
from kvadvisor.planreview.closedloop import Replayed, with_replayed_demand
from kvadvisor.planreview.demand import (
    TierCalc,
    TraceReplay,
    device_pool,
    load_times,
    plan_times,
    stage_tiers,
)
from kvadvisor.planreview.facts import plan_facts, stage_facts, tier_facts
from kvadvisor.planreview.perf import PlanPerf
from kvadvisor.planreview.rules import judge
from kvadvisor.planreview.scope import ScopeFacts, all_scopes
from kvadvisor.planreview.settings import engine_facts
from kvadvisor.results.common import Meta, TraceSummary, Utilization
from kvadvisor.results.report import FORMAT_VERSION
from kvadvisor.results.review import PlanReview, ReviewReport, StageReview, TierReview
from kvadvisor.rules.model import Rule
from kvadvisor.vocab import Stage


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


def plan_scopes(
    plan: Plan,
    replay: TraceReplay,
    perf: PlanPerf,
    *,
    window_s: float = 1.0,
    replayed: Replayed | None = None,
    not_replayed: str | None = None,
) -> tuple[tuple[StageReview, ...], list[ScopeFacts]]:
    """The plan's stages replayed against the trace, and the facts of every scope (pure)."""
    kvb = perf.kv_bytes_per_token
    times, span = plan_times(plan, replay)
    stage_reviews: list[StageReview] = []
    per_stage = []
    calcs_by: dict[str, tuple] = {}
    for stage in plan.stages:
        calcs: list[TierCalc] = stage_tiers(stage, replay, perf, times, span, window_s)
        calcs = with_replayed_demand(stage, calcs, replayed)
        calcs_by[stage.stage] = (stage, calcs)
        load = load_times(calcs, kvb) if stage.prefills and calcs else None
        load_p99 = float(np.percentile(load, 99)) if load is not None and load.size else None
        if replayed is not None and stage.prefills and calcs:
            load_p99 = replayed.load_p99_s  # contended: loads share each tier's bandwidth
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
        pool = device_pool(stage, perf)
        sf = stage_facts(plan, stage, pool, load_p99, replayed is not None)
        tfs = [
            tier_facts(stage, c, sf, kvb, times, span, window_s, replayed is not None)
            for c in calcs
        ]
        per_stage.append((stage, sf, engine_facts(plan, stage, pool), tfs))
    pf = plan_facts(plan, calcs_by, stage_reviews, replayed, not_replayed)
    return tuple(stage_reviews), all_scopes(pf, per_stage)


def review_plan(
    plan: Plan,
    replay: TraceReplay,
    perf: PlanPerf,
    *,
    rules: Sequence[Rule] | None = None,
    window_s: float = 1.0,
    replayed: Replayed | None = None,
    not_replayed: str | None = None,
) -> PlanReview:
    """Check ``plan`` against the trace arrays and its closed-loop replay (pure).

    ``rules``: the review's rules (plan, stage, tier and engine scopes; workload rules are
    analyze's and are left out), each evaluated on every scope it applies to; None: the
    built-in ones.
    ``replayed``: the plan's replay (its tier demand, load times and SLOs replace the open-loop
    figures); None with ``not_replayed`` saying why it could not run.
    """
    stages, scopes = plan_scopes(
        plan, replay, perf, window_s=window_s, replayed=replayed, not_replayed=not_replayed
    )
    return PlanReview(
        name=plan.name,
        path=plan.path,
        traffic_scale=plan.traffic_scale,
        kv_bytes_per_token=perf.kv_bytes_per_token,
        stages=stages,
        checks=judge(rules, scopes),
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
