"""A plan's tiers replayed against the trace's arrays: hits served, bytes written and read.

Definitions (docs/review.md gives them in words):

* Tiers form an inclusive LRU hierarchy, fastest first (LMCache, KVBM and HiCache all write
  through). The GPU KV pool, when known, is tier 0. A request's tokens served by tier k are
  ``h(C_k) - max_{j<k} h(C_j)`` where ``h(C)`` is its prefix hit at capacity C (DESIGN.md's
  definition): a tier smaller than a faster one serves nothing.
* Capacity is per instance for node-local tiers; with ``count`` instances behind prefix-aware
  routing the fleet behaves as one cache of ``count ×`` the capacity (an optimistic bound).
* Prefill writes to tier k every prompt token tier k did not hold (computed or promoted):
  ``input - h(C_k)``. Reads from tier k are the tokens it served. Decode tiers (offload on decode
  nodes) are written the whole sequence, ``input + output``, and read by nobody in this model.
* Demand is a time series over windows of ``window_s`` seconds of arrival time divided by the
  traffic scale; per instance it is the fleet demand over ``count`` (even load).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kvadvisor.deploy import TierReach, tier_reach
from kvadvisor.plan.model import Plan, StagePlan, TierPlan
from kvadvisor.planreview.perf import PlanPerf, RecomputeFn, StagePerf
from kvadvisor.results.common import IoRate, Utilization
from kvadvisor.results.review import TierReview
from kvadvisor.vocab import Stage

HitFn = Callable[[float | None], np.ndarray]


@dataclass(frozen=True, eq=False)
class TraceReplay:
    """Per-request arrays measured from the trace (row order), and its prefix hits.

    ``hit_tokens_at(capacity_tokens)`` gives per-request hit tokens at an LRU capacity in tokens
    (None = unbounded), as the cache engine's result does; None when the trace has no hashes.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    warmup_requests: int
    hit_tokens_at: HitFn | None


def plan_times(plan: Plan, replay: TraceReplay) -> tuple[np.ndarray, float]:
    """Arrival seconds since the first request divided by the traffic scale, and their span."""
    times = replay.arrival_s - (replay.arrival_s[0] if replay.arrival_s.size else 0.0)
    times = times / plan.traffic_scale
    return times, float(times[-1]) if times.size else 0.0


def window_rates(
    times_s: np.ndarray, amounts: np.ndarray, window_s: float, span_s: float
) -> np.ndarray:
    """``amounts`` per second in each window of ``window_s`` covering [0, span_s].

    An amount at time t falls in window ``floor(t / window_s)`` (the last window takes what
    lies beyond it); empty windows are zeros.
    """
    n = int(math.floor(span_s / window_s)) + 1
    if times_s.size == 0:
        return np.zeros(n)
    idx = np.minimum((times_s / window_s).astype(np.int64), n - 1)
    return np.bincount(idx, weights=amounts.astype(np.float64), minlength=n) / window_s


def io_rate(times_s: np.ndarray, nbytes: np.ndarray, window_s: float, span_s: float) -> IoRate:
    """Bytes per second over windows of ``window_s`` covering [0, span_s]: mean, p99, peak.

    Empty windows count (they are time the tier sits idle), so the mean is total bytes over
    the whole span, rounded up to whole windows.
    """
    if times_s.size == 0:
        return IoRate(0.0, 0.0, 0.0)
    per = window_rates(times_s, nbytes, window_s, span_s)
    return IoRate(float(per.mean()), float(np.percentile(per, 99)), float(per.max()))


def _util(rate: IoRate | None, capability: float | None) -> Utilization:
    if rate is None or not capability:
        return Utilization(None, None, None)
    return Utilization(
        rate.mean_bytes_per_s / capability,
        rate.p99_bytes_per_s / capability,
        rate.peak_bytes_per_s / capability,
    )


def _ratio(num: float, den: float) -> float | None:
    return float(num) / float(den) if den > 0 else None


@dataclass(frozen=True)
class TierCalc:
    """Working arrays of one tier (per request), kept beside the TierReview for the checks.

    ``reach`` is what the tier delivers through the stage instance's caps (per instance, or
    for the fleet when shared), with anything that makes it undeployable on that instance.
    """

    plan: TierPlan
    review: TierReview
    served_tokens: np.ndarray | None
    written_tokens: np.ndarray
    fleet: int
    reach: TierReach


def stage_chunk_tokens(stage: StagePlan) -> tuple[int, str]:
    """Tokens per KV I/O on a stage's tiers, and where the number comes from (the plan says)."""
    return stage.io_chunk_tokens()


def device_pool(stage: StagePlan, perf: PlanPerf) -> float | None:
    """The stage's device KV pool per instance: the plan's gpu_kv_pool, else the modeled one."""
    return stage.gpu_kv_pool_bytes or perf.stages.get(stage.stage, StagePerf()).device_pool_bytes


def stage_tiers(
    stage: StagePlan,
    replay: TraceReplay,
    perf: PlanPerf,
    times_s: np.ndarray,
    span_s: float,
    window_s: float,
) -> list[TierCalc]:
    """Every tier of one stage replayed: hits served, bytes written and read, utilization."""
    kvb = perf.kv_bytes_per_token
    sp = perf.stages.get(stage.stage, StagePerf())
    steady = np.arange(replay.input_tokens.size) >= replay.warmup_requests
    inp = replay.input_tokens.astype(np.float64)
    hits = replay.hit_tokens_at if stage.prefills else None
    prev = np.zeros_like(inp)
    pool = device_pool(stage, perf)
    if hits is not None and pool:
        prev = hits(pool * stage.count / kvb).astype(np.float64)
    out: list[TierCalc] = []
    for tier in stage.tiers:
        fleet = stage.tier_units(tier)
        cap_tokens = None if tier.capacity_bytes is None else tier.capacity_bytes * fleet / kvb
        if stage.stage is Stage.DECODE:
            written = (replay.input_tokens + replay.output_tokens).astype(np.float64)
            served = None
        elif hits is not None:
            own = hits(cap_tokens).astype(np.float64)
            cum = np.maximum(prev, own)
            served = cum - prev
            written = inp - own
            prev = cum
        else:
            served, written = None, inp  # no hashes: every prompt token is written (upper bound)
        write = io_rate(times_s, written * kvb / fleet, window_s, span_s)
        # Decode tiers are not read here (their KV arrives from prefill over the network);
        # prefill reads are unknown without hashes.
        read = None if served is None else io_rate(times_s, served * kvb / fleet, window_s, span_s)
        # The same rules as the advisor's: disk caps on volumes, NICs on shared systems.
        reach = tier_reach(stage, tier)
        wcap, rcap = reach.write_bytes_per_s, reach.read_bytes_per_s
        # Load vs recompute (RV06) needs the performance model, hits and the read bandwidth.
        p_star = share = None
        if (
            stage.prefills
            and sp.recompute_s is not None
            and served is not None
            and (rcap is not None)
        ):
            p_star, share = _break_even(
                served, tier.storage.latency_s or 0.0, rcap, kvb, sp.recompute_s
            )
        review = TierReview(
            stage=Stage(stage.stage),
            tier=tier.name,
            kind=tier.storage.kind,
            shared=tier.shared,
            capacity_bytes=tier.capacity_bytes,
            capacity_tokens=cap_tokens,
            hit_ratio_all=None if served is None else _ratio(served.sum(), inp.sum()),
            hit_ratio_steady=None
            if served is None
            else _ratio(served[steady].sum(), inp[steady].sum()),
            cumulative_hit_ratio_steady=None
            if served is None
            else _ratio(prev[steady].sum(), inp[steady].sum()),
            write=write,
            read=read,
            write_capability_bytes_per_s=wcap,
            read_capability_bytes_per_s=rcap,
            write_utilization=_util(write, wcap),
            read_utilization=_util(read, rcap),
            break_even_tokens=p_star,
            below_break_even_share=share,
        )
        out.append(TierCalc(tier, review, served, written, fleet, reach))
    return out


def load_times(calcs: Sequence[TierCalc], kvb: int) -> np.ndarray | None:
    """Per-request time to load the served prefix from every tier (latency + bytes / bandwidth)."""
    total = None
    for c in calcs:
        bw = c.review.read_capability_bytes_per_s
        if c.served_tokens is None or not bw:
            return None
        lat = c.plan.storage.latency_s or 0.0
        t = np.where(c.served_tokens > 0, lat + c.served_tokens * kvb / bw, 0.0)
        total = t if total is None else total + t
    return total


def _break_even(
    served_tokens: np.ndarray, latency_s: float, bw: float, kvb: int, recompute: RecomputeFn
) -> tuple[float | None, float | None]:
    """Break-even prefix length (tokens) and the share of served tokens loaded below it."""
    if not bw:
        return None, None
    grid = np.unique(np.geomspace(1, 1 << 24, 512).astype(np.int64)).astype(np.float64)
    wins = latency_s + grid * kvb / bw <= recompute(grid)
    p_star = float(grid[np.argmax(wins)]) if wins.any() else math.inf
    s = served_tokens
    loaded = s > 0
    lose = loaded & (latency_s + s * kvb / bw > recompute(s))
    return p_star, _ratio(s[lose].sum(), s[loaded].sum())
