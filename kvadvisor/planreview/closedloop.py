"""The review's closed-loop figures: each plan's tier demand, load times and SLOs from its replay.

A plan the replay can run (a catalog model, each stage's GPU, every tier's bandwidth) is
replayed (:mod:`kvadvisor.fleet`); its tiers' demand and utilization per device then replace
the open-loop arithmetic (`demand.stage_tiers`: bytes placed at arrival), so RV02-RV04 judge
what the fleet can actually produce; RV07 takes the loads' contended times, and RV10 checks the
replay's TTFT and TPOT against the plan's SLO (facts in :mod:`kvadvisor.planreview.facts`).
A plan the replay cannot run keeps the open-loop figures, and the review says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kvadvisor.plan.model import StagePlan
from kvadvisor.planreview.demand import TierCalc
from kvadvisor.results.common import IoRate, Utilization
from kvadvisor.results.replay import ReplayResult, WindowRate


@dataclass(frozen=True)
class Replayed:
    """A plan's replay, and the p99 over all requests of the time to load their prefix."""

    result: ReplayResult
    load_p99_s: float


def _io(rate: WindowRate) -> IoRate:
    return IoRate(rate.mean, rate.p99, rate.peak)


def _util(rate: WindowRate, capability: float | None) -> Utilization:
    if not capability:
        return Utilization(None, None, None)
    return Utilization(rate.mean / capability, rate.p99 / capability, rate.peak / capability)


def with_replayed_demand(
    stage: StagePlan, calcs: Sequence[TierCalc], replayed: Replayed | None
) -> list[TierCalc]:
    """The tiers' demand and utilization per device as the replay measured them."""
    if replayed is None:
        return list(calcs)
    by = {(t.stage.value, t.name): t for t in replayed.result.tiers}
    out = []
    for c in calcs:
        t = by.get((stage.stage, c.plan.name))
        if t is None:
            out.append(c)
            continue
        # The demand the fleet hands the tier (what its GPUs produced, what its loads asked
        # for) against its capability: a saturated tier shows as demand above it.
        read_used = stage.prefills or stage.decode_offload is not None
        r = c.review
        review = replace(
            r,
            write=_io(t.write_demand_bytes_per_s),
            write_utilization=_util(t.write_demand_bytes_per_s, r.write_capability_bytes_per_s),
            read=_io(t.read_demand_bytes_per_s) if read_used else r.read,
            read_utilization=_util(t.read_demand_bytes_per_s, r.read_capability_bytes_per_s)
            if read_used
            else r.read_utilization,
        )
        out.append(replace(c, review=review))
    return out
