"""Plan review: a deployment plan checked against a replayed trace (hits, bandwidth, lint)."""

from kvadvisor.planreview.demand import TraceReplay
from kvadvisor.planreview.perf import PlanPerf, StagePerf, plan_perf
from kvadvisor.planreview.review import review_plan, review_report

__all__ = ["PlanPerf", "StagePerf", "TraceReplay", "plan_perf", "review_plan", "review_report"]
