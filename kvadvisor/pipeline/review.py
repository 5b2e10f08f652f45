"""The `review` pipeline: replay the trace's prefix cache once, review every plan against it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from kvadvisor.cache import PrefixCacheResult
from kvadvisor.cache.prefix import warmup_requests_for
from kvadvisor.cache.simulate import simulate_blocks
from kvadvisor.errors import ConfigError
from kvadvisor.fleet import ReplayContext
from kvadvisor.metrics.timeline import window_count
from kvadvisor.pipeline.replay import ReplayOptions, ReplaySource, replay_in_context
from kvadvisor.plan.model import Plan
from kvadvisor.planreview.closedloop import Replayed
from kvadvisor.planreview.demand import HitFn, TraceReplay
from kvadvisor.planreview.perf import plan_perf
from kvadvisor.planreview.review import review_plan, review_report
from kvadvisor.results.review import PlanReview, ReviewReport
from kvadvisor.rules import Rule
from kvadvisor.sections.workload import summarize_trace
from kvadvisor.trace.arrays import RequestArrays
from kvadvisor.trace.detect import TraceFormat
from kvadvisor.trace.formats import ColumnMap
from kvadvisor.trace.model import Trace
from kvadvisor.trace.stream import read_trace_path
from kvadvisor.units import Unit, format_value


def open_loop(
    arrays: RequestArrays, warmup_fraction: float, simulated: PrefixCacheResult | None = None
) -> tuple[TraceReplay, tuple[str, ...], PrefixCacheResult | None]:
    """The review's per-request arrays, their notes, and the exact pass they rest on (or None)."""
    notes: list[str] = []
    hit_fn: HitFn | None = None
    exact: PrefixCacheResult | None = None
    warmup = warmup_requests_for(arrays.requests, warmup_fraction)
    if arrays.blocks is not None:
        result = simulated or simulate_blocks(
            arrays.blocks, arrays.input_tokens, warmup_fraction=warmup_fraction
        )
        warmup = result.warmup_requests
        if result.exact:
            hit_fn, exact = result.hit_tokens_at, result
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
        arrival_s=arrays.arrival_s.astype(np.float64),
        input_tokens=arrays.input_tokens.astype(np.int64),
        output_tokens=arrays.output_tokens.astype(np.int64),
        warmup_requests=warmup,
        hit_tokens_at=hit_fn,
    )
    return replay, tuple(notes), exact


def replay_trace(
    trace: Trace,
    warmup_fraction: float,
    simulated: PrefixCacheResult | None = None,
    arrays: RequestArrays | None = None,
) -> tuple[TraceReplay, tuple[str, ...]]:
    """Measure the per-request arrays a review needs, running the exact prefix-cache replay.

    ``simulated`` is that replay when the caller already ran it on this trace with this warm-up
    (``analyze --plan``); it is then not run again. ``arrays``: the trace's per-request arrays
    when the caller already took them.
    """
    replay, notes, _ = open_loop(arrays or RequestArrays.of(trace), warmup_fraction, simulated)
    return replay, notes


def closed_loop(
    ctx: ReplayContext, plan: Plan, window_s: float
) -> tuple[Replayed | None, str | None, tuple[str, ...]]:
    """The plan's replay for its review, or why it cannot run (and the notes to show)."""
    try:
        result, cols, _ = replay_in_context(ctx, plan, options=ReplayOptions(window_s=window_s))
    except ConfigError as exc:
        why = str(exc).removeprefix(f"{plan.path}: ")
        return None, why, (f"not replayed (open-loop figures kept): {why}",)
    # TTFT includes the load, so the SLO check counts every admitted request (0 for those
    # that loaded nothing); one never admitted has no load to count.
    admitted = np.isfinite(cols["queue_s"])
    load = np.nan_to_num(cols["load_s"][admitted], nan=0.0)
    load_p99 = float(np.percentile(load, 99)) if load.size else 0.0
    r = result.requests
    share = result.stage_split.prefill_share or 0.0
    headline = (
        f"closed-loop replay ({result.deployment.topology}): TTFT p99 "
        f"{'-' if r.ttft_s is None else format_value(r.ttft_s.p99, Unit.SECONDS)}, TPOT p99 "
        f"{'-' if r.tpot_s is None else format_value(r.tpot_s.p99, Unit.SECONDS)}, prefill "
        f"{format_value(share, Unit.RATIO)} of GPU time; {result.overload.reason}"
    )
    return Replayed(result, load_p99), None, (headline,)


def check_windows(arrival_s: np.ndarray, plans: Sequence[Plan], window_s: float) -> None:
    """Each plan's demand series fits in a time series, before any is allocated (ConfigError).

    A plan's arrivals span the trace's divided by its traffic scale: a tiny scale or a trace
    spanning decades would make a per-window array of billions of cells.
    """
    span_s = float(arrival_s[-1] - arrival_s[0]) if arrival_s.size else 0.0
    for plan in plans:
        cover = "the trace's arrivals cover"
        if plan.traffic_scale != 1.0:
            scale = f"{plan.traffic_scale:g}"  # exact: as the plan spells it
            cover += f" at {plan.path}'s traffic.scale {scale}"
        window_count(span_s / plan.traffic_scale, window_s, cover)


def _review_all(
    trace: Trace,
    plans: Sequence[Plan],
    warmup_fraction: float,
    window_s: float,
    simulated: PrefixCacheResult | None = None,
    arrays: RequestArrays | None = None,
    source: ReplaySource | None = None,
    rules: Sequence[Rule] | None = None,
) -> tuple[tuple[PlanReview, ...], tuple[str, ...]]:
    """Replay once, review every plan; the replay's notes apart from each plan's own."""
    perfs = [plan_perf(p) for p in plans]
    arrays = arrays or RequestArrays.of(trace)
    check_windows(arrays.arrival_s, plans, window_s)
    replay, notes, exact = open_loop(arrays, warmup_fraction, simulated)
    # The closed loop reads the same arrays, with the block ids the exact pass already made.
    ctx = (source or ReplaySource(arrays, exact)).context
    reviews = []
    for p, perf in zip(plans, perfs, strict=True):
        replayed, why, loop_notes = closed_loop(ctx, p, window_s)
        review = review_plan(
            p, replay, perf, rules=rules, window_s=window_s, replayed=replayed, not_replayed=why
        )
        own = tuple(n for s in perf.stages.values() for n in s.notes)
        reviews.append(replace(review, notes=notes + own + loop_notes))
    return tuple(reviews), notes


def review_plans(
    trace: Trace,
    plans: Sequence[Plan],
    *,
    warmup_fraction: float = 0.5,
    window_s: float = 1.0,
    simulated: PrefixCacheResult | None = None,
    arrays: RequestArrays | None = None,
    source: ReplaySource | None = None,
    rules: Sequence[Rule] | None = None,
) -> tuple[PlanReview, ...]:
    """Replay the trace once and review every plan against it (notes go to each review).

    ``simulated``: the exact prefix-cache pass over this trace and warm-up, if already run;
    ``arrays``: the trace's per-request arrays, if already taken; ``source``: the trace ready
    for replays, shared with the caller's other replays; ``rules``: the rule set (its review
    rules run; None: the built-in ones).
    """
    return _review_all(trace, plans, warmup_fraction, window_s, simulated, arrays, source, rules)[0]


def review_trace(
    trace: Trace,
    plans: Sequence[Plan],
    *,
    version: str,
    generated_at: str,
    warmup_fraction: float = 0.5,
    window_s: float = 1.0,
    rules: Sequence[Rule] | None = None,
) -> ReviewReport:
    """Replay the trace once and review every plan against it: the `review` command's report."""
    arrays = RequestArrays.of(trace)
    reviews, notes = _review_all(
        trace, plans, warmup_fraction, window_s, arrays=arrays, rules=rules
    )
    return review_report(
        summarize_trace(trace, arrays=arrays),
        reviews,
        version=version,
        generated_at=generated_at,
        window_s=window_s,
        warmup_fraction=warmup_fraction,
        notes=notes,
    )


def review(
    source: str | Path | Trace,
    plans: Sequence[Plan],
    *,
    version: str,
    generated_at: str,
    trace_format: str | TraceFormat | None = None,
    column_map: ColumnMap = None,
    block_tokens: int | None = None,
    warmup_fraction: float = 0.5,
    window_s: float = 1.0,
    rules: Sequence[Rule] | None = None,
) -> ReviewReport:
    """The one `review` entry: read the trace (a path) whole and review every plan against it.

    The review replays every request, so a path is read whole with the shared trace options;
    a Trace is used as it is. ``rules``: the rule set, selected (None: the built-in rules).
    """
    trace = (
        source
        if isinstance(source, Trace)
        else read_trace_path(source, trace_format, column_map=column_map, block_tokens=block_tokens)
    )
    return review_trace(
        trace,
        plans,
        version=version,
        generated_at=generated_at,
        warmup_fraction=warmup_fraction,
        window_s=window_s,
        rules=rules,
    )
