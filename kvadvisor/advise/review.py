"""Review a deployment plan against a replayed trace: hits, bandwidth, utilization, engine lint.

Everything here is a pure function of the plan and of arrays measured from the trace; the
orchestration that runs the cache simulation lives in :func:`review_trace`. The engine lint,
which needs the plan only, and the checks' sources are in :mod:`kvadvisor.advise.review_checks`.
Definitions
(docs/review.md gives them in words):

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from kvadvisor.advise.engine_lint import engine_lint
from kvadvisor.advise.model import (
    FORMAT_VERSION,
    IoRate,
    Meta,
    PlanReview,
    ReviewCheck,
    ReviewReport,
    StageReview,
    TierReview,
    TraceSummary,
    Utilization,
)
from kvadvisor.advise.review_checks import check, engine_checks, fmt_bytes
from kvadvisor.cache import PrefixCacheResult, simulate_prefix_cache
from kvadvisor.cache.prefix import warmup_requests_for
from kvadvisor.errors import ConfigError
from kvadvisor.perfmodel import PerfModel, kv_size, memory_fit, recompute_s
from kvadvisor.plan.model import DISK_KINDS, Plan, StagePlan, TierPlan
from kvadvisor.trace.model import Trace
from kvadvisor.units import BYTES_PER_GB

HitFn = Callable[[float | None], np.ndarray]
RecomputeFn = Callable[[np.ndarray], np.ndarray]

# Thresholds, each with the reason it has this value.
MIN_TIER_HIT_SHARE = 0.01  # a tier serving under 1% of prompt tokens is not worth its cost
UNDERUSED_MEAN_UTILIZATION = 0.10  # DESIGN.md cause 1: sized for the peak, run at the average
SATURATED_P99_UTILIZATION = 0.70  # a stage this busy at p99 has little headroom
BELOW_BREAK_EVEN_RISK_SHARE = 0.5  # most loads from the tier lose to recomputing them


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


@dataclass(frozen=True)
class StagePerf:
    """What the performance model knows for one stage: device KV pool and recompute time.

    ``recompute_s(tokens)`` is the time one instance takes to prefill that many tokens
    (vectorised); None when no model/GPU figures are available.
    """

    device_pool_bytes: float | None = None
    recompute_s: RecomputeFn | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlanPerf:
    """The model's KV bytes per token and per-stage performance figures."""

    kv_bytes_per_token: int
    stages: Mapping[str, StagePerf] = field(default_factory=dict)


def io_rate(times_s: np.ndarray, nbytes: np.ndarray, window_s: float, span_s: float) -> IoRate:
    """Bytes per second over windows of ``window_s`` covering [0, span_s]: mean, p99, peak.

    Empty windows count (they are time the tier sits idle), so the mean is total bytes over
    the whole span, rounded up to whole windows.
    """
    n = int(math.floor(span_s / window_s)) + 1
    if times_s.size == 0:
        return IoRate(0.0, 0.0, 0.0)
    idx = np.minimum((times_s / window_s).astype(np.int64), n - 1)
    per = np.bincount(idx, weights=nbytes.astype(np.float64), minlength=n) / window_s
    return IoRate(float(per.mean()), float(np.percentile(per, 99)), float(per.max()))


def _util(rate: IoRate | None, capability: float | None) -> Utilization:
    if rate is None or not capability:
        return Utilization(None, None, None)
    return Utilization(
        rate.mean_bytes_per_s / capability,
        rate.p99_bytes_per_s / capability,
        rate.peak_bytes_per_s / capability,
    )


def _capability(tier: TierPlan, stage: StagePlan, direction: str) -> float | None:
    per_device = (
        tier.storage.read_bytes_per_s if direction == "read" else tier.storage.write_bytes_per_s
    )
    if per_device is None:
        return None
    total = per_device * tier.devices
    if tier.storage.kind == "block" and stage.disk_bandwidth_cap_bytes_per_s:
        total = min(total, stage.disk_bandwidth_cap_bytes_per_s)  # the instance's disk cap
    return total


def _ratio(num: float, den: float) -> float | None:
    return float(num) / float(den) if den > 0 else None


@dataclass(frozen=True)
class _TierCalc:
    """Working arrays of one tier (per request), kept beside the TierReview for the checks."""

    plan: TierPlan
    review: TierReview
    served_tokens: np.ndarray | None
    written_tokens: np.ndarray
    fleet: int


def stage_chunk_tokens(stage: StagePlan) -> tuple[int, str]:
    """Tokens per KV I/O on a stage's tiers, and where the number comes from."""
    lmcache, hicache = stage.engines.get("lmcache"), stage.engines.get("sglang-hicache")
    if stage.chunk_tokens:
        return stage.chunk_tokens, "the plan's chunk_tokens"
    if lmcache is not None:
        return int(lmcache.get("chunk_size", 256)), "LMCache chunk_size"
    if hicache is not None and "page-size" in hicache:
        return int(hicache["page-size"]), "SGLang --page-size"
    if "dynamo-kvbm" in stage.engines or "vllm" in stage.engines:
        # KVBM moves the engine's blocks; vLLM's default block is 16 tokens.
        return int(stage.engines.get("vllm", {}).get("block-size", 16)), "vLLM --block-size"
    return 256, "no engine chunk given: LMCache's default chunk_size"


def _device_pool(stage: StagePlan, perf: PlanPerf) -> float | None:
    """The stage's device KV pool per instance: the plan's gpu_kv_pool, else the modeled one."""
    return stage.gpu_kv_pool_bytes or perf.stages.get(stage.stage, StagePerf()).device_pool_bytes


def _stage_tiers(
    stage: StagePlan,
    replay: TraceReplay,
    perf: PlanPerf,
    times_s: np.ndarray,
    span_s: float,
    window_s: float,
) -> list[_TierCalc]:
    kvb = perf.kv_bytes_per_token
    sp = perf.stages.get(stage.stage, StagePerf())
    steady = np.arange(replay.input_tokens.size) >= replay.warmup_requests
    inp = replay.input_tokens.astype(np.float64)
    hits = replay.hit_tokens_at if stage.stage == "prefill" else None
    prev = np.zeros_like(inp)
    pool = _device_pool(stage, perf)
    if hits is not None and pool:
        prev = hits(pool * stage.count / kvb).astype(np.float64)
    out: list[_TierCalc] = []
    for tier in stage.tiers:
        fleet = 1 if tier.shared else stage.count
        cap_tokens = None if tier.capacity_bytes is None else tier.capacity_bytes * fleet / kvb
        if stage.stage == "decode":
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
        wcap, rcap = _capability(tier, stage, "write"), _capability(tier, stage, "read")
        # Load vs recompute (RV06) needs the performance model, hits and the read bandwidth.
        p_star = share = None
        if (
            stage.stage == "prefill"
            and sp.recompute_s is not None
            and served is not None
            and (rcap is not None)
        ):
            p_star, share = _break_even(
                served, tier.storage.latency_s or 0.0, rcap, kvb, sp.recompute_s
            )
        review = TierReview(
            stage=stage.stage,
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
        out.append(_TierCalc(tier, review, served, written, fleet))
    return out


def _load_times(calcs: Sequence[_TierCalc], kvb: int) -> np.ndarray | None:
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


# --- checks ------------------------------------------------------------------------------------


def _gbps(rate: float | None) -> str:
    return "unknown" if rate is None else f"{fmt_bytes(rate)}/s"


def _iops_check(
    stage: StagePlan, c: _TierCalc, times_s: np.ndarray, span_s: float, window_s: float
) -> ReviewCheck:
    """RV08: chunk I/Os per second (each request's tokens in whole chunks) against IOPS."""
    chunk, why = stage_chunk_tokens(stage)
    t, st = c.plan, stage.stage
    directions = [("write", c.written_tokens, t.storage.write_iops)]
    if c.served_tokens is not None:
        directions.append(("read", c.served_tokens, t.storage.read_iops))
    ev: dict[str, Any] = {"chunk_tokens": chunk, "chunk_from": why}
    worst, parts = "pass", []
    for direction, tokens, iops in directions:
        if iops is None:
            continue
        cap = iops * t.devices
        rate = io_rate(times_s, np.ceil(tokens / chunk) / c.fleet, window_s, span_s)
        ev.update(
            {
                f"{direction}_iops_p99": rate.p99_bytes_per_s,
                f"{direction}_iops_peak": rate.peak_bytes_per_s,
                f"{direction}_iops_capability": cap,
            }
        )
        parts.append(
            f"{direction} p99 {rate.p99_bytes_per_s:,.0f} / peak "
            f"{rate.peak_bytes_per_s:,.0f} I/O per s against {cap:,.0f}"
        )
        level = (
            "error"
            if rate.p99_bytes_per_s > cap
            else "warning"
            if rate.peak_bytes_per_s > cap
            else "pass"
        )
        if level == "error" or (level == "warning" and worst == "pass"):
            worst = level
    if not parts:
        return check(
            "RV08",
            "tier.iops",
            st,
            "error",
            "skip",
            f"the tier's IOPS are not known (chunks of {chunk} tokens, {why})",
            "design",
            t.name,
        )
    text = f"'{t.name}' at {chunk}-token chunks ({why}): " + "; ".join(parts)
    if worst == "pass":
        return check("RV08", "tier.iops", st, "error", "pass", text, "design", t.name, **ev)
    return check(
        "RV08",
        "tier.iops",
        st,
        worst,
        "fail",
        text
        + (
            ": the tier runs out of I/O operations"
            if worst == "error"
            else ": bursts exceed the tier's IOPS"
        ),
        "design",
        t.name,
        **ev,
    )


def _tier_checks(
    stage: StagePlan,
    calcs: Sequence[_TierCalc],
    perf: PlanPerf,
    times_s: np.ndarray,
    span_s: float,
    window_s: float,
) -> list[ReviewCheck]:
    out: list[ReviewCheck] = []
    st = stage.stage
    for c in calcs:
        r, t = c.review, c.plan
        subj = t.name
        # RV01: does the tier serve hits at all?
        if st == "prefill":
            if r.hit_ratio_steady is None:
                out.append(
                    check(
                        "RV01",
                        "tier.hit_share",
                        st,
                        "warning",
                        "skip",
                        "prefix reuse unknown: the trace has no block hashes",
                        "design",
                        subj,
                    )
                )
            else:
                ok = r.hit_ratio_steady >= MIN_TIER_HIT_SHARE
                out.append(
                    check(
                        "RV01",
                        "tier.hit_share",
                        st,
                        "warning",
                        "pass" if ok else "fail",
                        f"tier '{t.name}' ({fmt_bytes(t.capacity_bytes)} per "
                        f"{'pool' if t.shared else 'instance'}) serves {r.hit_ratio_steady:.1%} of "
                        f"prompt tokens in steady state (cumulative "
                        f"{r.cumulative_hit_ratio_steady:.1%})"
                        + (
                            ""
                            if ok
                            else "; smaller than or shadowed by a faster tier, it adds "
                            "almost nothing"
                        ),
                        "design",
                        subj,
                        hit_ratio_steady=r.hit_ratio_steady,
                        cumulative_hit_ratio_steady=r.cumulative_hit_ratio_steady,
                        capacity_tokens=r.capacity_tokens,
                    )
                )
        # RV02 / RV03: bandwidth against demand at p99 and peak.
        for code, direction, rate, cap, u in (
            ("RV02", "write", r.write, r.write_capability_bytes_per_s, r.write_utilization),
            ("RV03", "read", r.read, r.read_capability_bytes_per_s, r.read_utilization),
        ):
            name = f"tier.{direction}_bandwidth"
            if rate is None or cap is None or u.p99 is None or u.peak is None:
                why = (
                    f"the tier's {direction} bandwidth is not known"
                    if rate is not None
                    else "decode tiers are written, not read, in this model (KV reaches decode "
                    "from prefill over the network)"
                    if st == "decode"
                    else "read demand is unknown: the trace has no block hashes"
                )
                out.append(check(code, name, st, "error", "skip", why, "design", subj))
                continue
            ev = dict(
                mean_bytes_per_s=rate.mean_bytes_per_s,
                p99_bytes_per_s=rate.p99_bytes_per_s,
                peak_bytes_per_s=rate.peak_bytes_per_s,
                capability_bytes_per_s=cap,
                utilization_p99=u.p99,
                utilization_peak=u.peak,
            )
            text = (
                f"{direction} demand on '{t.name}' mean {_gbps(rate.mean_bytes_per_s)}, p99 "
                f"{_gbps(rate.p99_bytes_per_s)}, peak {_gbps(rate.peak_bytes_per_s)} against "
                f"{_gbps(cap)} ({u.p99:.0%} at p99, {u.peak:.0%} at peak)"
            )
            if u.p99 > 1:
                out.append(
                    check(
                        code,
                        name,
                        st,
                        "error",
                        "fail",
                        text + ": the tier cannot keep up 1% of the time or more",
                        "design",
                        subj,
                        **ev,
                    )
                )
            elif u.peak > 1:
                out.append(
                    check(
                        code,
                        name,
                        st,
                        "warning",
                        "fail",
                        text + ": bursts exceed the tier; they queue",
                        "design",
                        subj,
                        **ev,
                    )
                )
            else:
                out.append(check(code, name, st, "error", "pass", text, "design", subj, **ev))
        # RV04: underutilization (cause 1), for storage bought for its bandwidth: DRAM and CXL
        # bandwidth comes with the memory and is never the thing sized.
        if t.storage.kind in ("dram", "cxl"):
            busy = None
        else:
            busy = max(
                (u for u in (r.write_utilization, r.read_utilization) if u.mean is not None),
                key=lambda u: u.mean or 0.0,
                default=None,
            )
        if busy is None:
            why = (
                "memory bandwidth comes with the memory; it is not sized on its own"
                if t.storage.kind in ("dram", "cxl")
                else "bandwidth or demand unknown"
            )
            out.append(
                check("RV04", "tier.underutilized", st, "warning", "skip", why, "cause1", subj)
            )
        elif busy.mean is not None and busy.mean < UNDERUSED_MEAN_UTILIZATION:
            peak = busy.peak or 0.0
            why = (
                f"sized for the peak: the peak window uses {peak:.0%}, the mean {busy.mean:.1%}"
                if peak >= 0.5
                else f"over-provisioned: even the peak window uses {peak:.0%}"
                f" (mean {busy.mean:.1%})"
            )
            out.append(
                check(
                    "RV04",
                    "tier.underutilized",
                    st,
                    "warning",
                    "fail",
                    f"tier '{t.name}' is underused, {why}",
                    "cause1",
                    subj,
                    utilization_mean=busy.mean,
                    utilization_peak=peak,
                )
            )
        else:
            out.append(
                check(
                    "RV04",
                    "tier.underutilized",
                    st,
                    "warning",
                    "pass",
                    f"tier '{t.name}' runs at {busy.mean:.0%} of its bandwidth on average",
                    "cause1",
                    subj,
                    utilization_mean=busy.mean,
                )
            )
        # RV06: load vs recompute.
        recompute = perf.stages.get(st, StagePerf()).recompute_s
        if st == "prefill" and (
            recompute is None or c.served_tokens is None or r.read_capability_bytes_per_s is None
        ):
            out.append(
                check(
                    "RV06",
                    "tier.load_vs_recompute",
                    st,
                    "warning",
                    "skip",
                    "needs the model and GPU (performance model), the tier's read "
                    "bandwidth and block hashes",
                    "loadrecompute",
                    subj,
                )
            )
        elif st == "prefill":
            p_star, share = r.break_even_tokens, r.below_break_even_share
            bad = share is not None and share > BELOW_BREAK_EVEN_RISK_SHARE
            pe = "never" if p_star is None or math.isinf(p_star) else f"{p_star:,.0f} tokens"
            share_text = "no hits" if share is None else f"{share:.0%} of its hit tokens"
            out.append(
                check(
                    "RV06",
                    "tier.load_vs_recompute",
                    st,
                    "warning",
                    "fail" if bad else "pass",
                    f"loading from '{t.name}' beats recomputing above {pe}; {share_text} come in "
                    "loads that recompute faster",
                    "loadrecompute",
                    subj,
                    break_even_tokens=p_star,
                    below_break_even_share=share,
                )
            )
        # RV08: I/O operations at the engine's chunk size against the tier's IOPS.
        out.append(_iops_check(stage, c, times_s, span_s, window_s))
        # EL08: a disk-like tier needs a bound.
        if t.storage.kind in DISK_KINDS:
            bounded = t.capacity_bytes is not None
            out.append(
                check(
                    "EL08",
                    "tier.ssd_unbounded",
                    st,
                    "error",
                    "pass" if bounded else "fail",
                    f"{t.storage.kind} tier '{t.name}' "
                    + (
                        f"is bounded at {fmt_bytes(t.capacity_bytes)}"
                        if bounded
                        else "has no capacity bound: it grows until the disk is full"
                    ),
                    "ssd_bound",
                    subj,
                    capacity_bytes=t.capacity_bytes,
                )
            )
    return out


def _stage_balance(stages: Sequence[StageReview]) -> list[ReviewCheck]:
    """RV05: one stage idles while the other saturates (DESIGN.md cause 2)."""
    by = {s.stage: s for s in stages}
    if not ("prefill" in by and "decode" in by):
        return []
    p, d = by["prefill"].utilization, by["decode"].utilization
    if None in (p.mean, p.p99, d.mean, d.p99):
        return [
            check(
                "RV05",
                "stage.balance",
                "both",
                "warning",
                "skip",
                "both stages need tiers with known bandwidth",
                "cause2",
            )
        ]
    assert p.mean is not None and p.p99 is not None and d.mean is not None and d.p99 is not None
    idle, busy = (
        ("decode", "prefill")
        if d.mean < UNDERUSED_MEAN_UTILIZATION and p.p99 > SATURATED_P99_UTILIZATION
        else ("prefill", "decode")
        if p.mean < UNDERUSED_MEAN_UTILIZATION and d.p99 > SATURATED_P99_UTILIZATION
        else (None, None)
    )
    ev = dict(prefill_mean=p.mean, prefill_p99=p.p99, decode_mean=d.mean, decode_p99=d.p99)
    if idle is None:
        return [
            check(
                "RV05",
                "stage.balance",
                "both",
                "warning",
                "pass",
                f"prefill storage runs at {p.mean:.0%} mean / {p.p99:.0%} p99, decode at "
                f"{d.mean:.0%} / {d.p99:.0%}",
                "cause2",
                **ev,
            )
        ]
    return [
        check(
            "RV05",
            "stage.balance",
            "both",
            "warning",
            "fail",
            f"{idle} storage sits idle ({by[idle].utilization.mean:.1%} mean) while "
            f"{busy} saturates ({by[busy].utilization.p99:.0%} at p99): size each stage "
            "for its own demand",
            "cause2",
            **ev,
        )
    ]


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
    plan: Plan, replay: TraceReplay, perf: PlanPerf, *, window_s: float = 1.0
) -> PlanReview:
    """Replay ``plan`` against the trace arrays and run every check (pure)."""
    kvb = perf.kv_bytes_per_token
    times = replay.arrival_s - (replay.arrival_s[0] if replay.arrival_s.size else 0.0)
    times = times / plan.traffic_scale
    span = float(times[-1]) if times.size else 0.0
    stage_reviews: list[StageReview] = []
    checks: list[ReviewCheck] = []
    for stage in plan.stages:
        calcs = _stage_tiers(stage, replay, perf, times, span, window_s)
        checks.extend(_tier_checks(stage, calcs, perf, times, span, window_s))
        checks.extend(engine_checks(stage, plan, _device_pool(stage, perf)))
        checks.extend(engine_lint(stage, plan, _device_pool(stage, perf)))
        load = _load_times(calcs, kvb) if stage.stage == "prefill" and calcs else None
        load_p99 = float(np.percentile(load, 99)) if load is not None and load.size else None
        if plan.slo.ttft_p99_s is not None and stage.stage == "prefill":
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
                        f"p99 time to load the cached prefix is {load_p99:.3f} s"
                        " against a TTFT p99 "
                        f"SLO of {plan.slo.ttft_p99_s:.3f} s"
                        + (" before any compute" if bad else ""),
                        "slo",
                        load_time_p99_s=load_p99,
                        ttft_p99_slo_s=plan.slo.ttft_p99_s,
                    )
                )
        tiers = tuple(c.review for c in calcs)
        stage_reviews.append(
            StageReview(
                stage=stage.stage,
                instance=stage.instance,
                count=stage.count,
                tiers=tiers,
                utilization=_stage_utilization(tiers),
                load_time_p99_s=load_p99,
            )
        )
    checks.extend(_stage_balance(stage_reviews))
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


def replay_trace(
    trace: Trace, warmup_fraction: float, simulated: PrefixCacheResult | None = None
) -> tuple[TraceReplay, tuple[str, ...]]:
    """Measure the per-request arrays a review needs, running the exact prefix-cache replay.

    ``simulated`` is that replay when the caller already ran it on this trace with this warm-up
    (``analyze --plan``); it is then not run again.
    """
    notes: list[str] = []
    hit_fn: HitFn | None = None
    warmup = warmup_requests_for(trace.requests, warmup_fraction)
    if trace.has_hashes:
        result = simulated or simulate_prefix_cache(trace, warmup_fraction=warmup_fraction)
        warmup = result.warmup_requests
        if result.exact:
            hit_fn = result.hit_tokens_at
        else:
            notes.append(
                "the trace is large enough that its cache curve was sampled; per-request "
                "hits, and so tier hit ratios and read demand, are not available"
            )
    else:
        notes.append(
            "the trace has no block hashes: prefix reuse is unknown, so tier hit "
            "ratios and read demand are not reported and every prompt token counts as "
            "written (an upper bound)"
        )
    replay = TraceReplay(
        arrival_s=trace.column_np("arrival_s").astype(np.float64),
        input_tokens=trace.column_np("input_tokens").astype(np.int64),
        output_tokens=trace.column_np("output_tokens").astype(np.int64),
        warmup_requests=warmup,
        hit_tokens_at=hit_fn,
    )
    return replay, tuple(notes)


def plan_perf(plan: Plan) -> PlanPerf:
    """KV bytes per token and, per stage, the GPU KV pool and recompute time (perfmodel).

    The KV size comes from the plan when it gives one, else from the model catalog (DESIGN.md's
    formula, distinct bytes as a storage tier keeps them). The device pool is the perfmodel's KV
    budget at vLLM's default memory utilization, for every TP group of the instance.
    """
    m = plan.model
    kvb = m.kv_bytes_per_token
    if kvb is None and m.spec is not None:
        kvb = int(round(kv_size(m.spec, m.kv_dtype, m.tp).total_bytes_per_token))
    if kvb is None:
        raise ConfigError(
            f"{plan.path}: model: KV bytes per token unknown; give a catalog "
            "model name or model.kv_bytes_per_token"
        )
    stages: dict[str, StagePerf] = {}
    for stage in plan.stages:
        if m.spec is None or stage.gpu is None:
            stages[stage.stage] = StagePerf(
                notes=(
                    "no catalog model or GPU for this stage: "
                    "device pool and recompute time unknown",
                )
            )
            continue
        pm = PerfModel.build(
            m.spec, stage.gpu, tp=m.tp, kv_dtype=m.kv_dtype, weight_dtype=m.weight_dtype
        )
        fit = memory_fit(pm, 1.0)
        groups = (stage.gpus_per_instance or m.tp) / m.tp
        pool = fit.kv_capacity_tokens * kvb * groups if fit.weights_fit else 0.0
        stages[stage.stage] = StagePerf(
            device_pool_bytes=pool,
            recompute_s=lambda p, pm=pm: recompute_s(pm, p),
            notes=(
                f"{stage.stage}: {m.spec.name} on {stage.gpu.name} × {m.tp} (TP): modeled KV "
                f"pool {pool / BYTES_PER_GB:,.0f} GB per instance at {fit.utilization:.0%} "
                "GPU memory"
                + (
                    ""
                    if stage.gpu_kv_pool_bytes is None
                    else f"; the plan's gpu_kv_pool of {fmt_bytes(stage.gpu_kv_pool_bytes)} is used"
                ),
            ),
        )
    return PlanPerf(kvb, stages)


def _review_all(
    trace: Trace,
    plans: Sequence[Plan],
    warmup_fraction: float,
    window_s: float,
    simulated: PrefixCacheResult | None = None,
) -> tuple[tuple[PlanReview, ...], tuple[str, ...]]:
    """Replay once, review every plan; the replay's notes apart from each plan's own."""
    perfs = [plan_perf(p) for p in plans]
    replay, notes = replay_trace(trace, warmup_fraction, simulated)
    reviews = tuple(
        replace(
            review_plan(p, replay, perf, window_s=window_s),
            notes=notes + tuple(n for s in perf.stages.values() for n in s.notes),
        )
        for p, perf in zip(plans, perfs, strict=True)
    )
    return reviews, notes


def review_plans(
    trace: Trace,
    plans: Sequence[Plan],
    *,
    warmup_fraction: float = 0.5,
    window_s: float = 1.0,
    simulated: PrefixCacheResult | None = None,
) -> tuple[PlanReview, ...]:
    """Replay the trace once and review every plan against it (notes go to each review).

    ``simulated``: the exact prefix-cache pass over this trace and warm-up, if already run.
    """
    return _review_all(trace, plans, warmup_fraction, window_s, simulated)[0]


def review_trace(
    trace: Trace,
    plans: Sequence[Plan],
    *,
    version: str,
    generated_at: str,
    warmup_fraction: float = 0.5,
    window_s: float = 1.0,
) -> ReviewReport:
    """Replay the trace once and review every plan against it: the `review` command's report."""
    # analysis imports this module (analyze --plan), so its summary comes in at call time.
    from kvadvisor.advise.analysis import summarize_trace

    reviews, notes = _review_all(trace, plans, warmup_fraction, window_s)
    return review_report(
        summarize_trace(trace),
        reviews,
        version=version,
        generated_at=generated_at,
        window_s=window_s,
        warmup_fraction=warmup_fraction,
        notes=notes,
    )
