"""The `review` pipeline: replay the trace's prefix cache once, review every plan against it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from kvadvisor.cache import PrefixCacheResult, simulate_prefix_cache
from kvadvisor.cache.prefix import warmup_requests_for
from kvadvisor.plan.model import Plan
from kvadvisor.planreview.demand import HitFn, TraceReplay
from kvadvisor.planreview.perf import plan_perf
from kvadvisor.planreview.review import review_plan, review_report
from kvadvisor.results.review import PlanReview, ReviewReport
from kvadvisor.sections.workload import summarize_trace
from kvadvisor.trace.detect import TraceFormat
from kvadvisor.trace.model import Trace
from kvadvisor.trace.stream import read_trace_path


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


def review(
    source: str | Path | Trace,
    plans: Sequence[Plan],
    *,
    version: str,
    generated_at: str,
    trace_format: str | TraceFormat | None = None,
    column_map: Sequence[str] | None = None,
    block_tokens: int | None = None,
    warmup_fraction: float = 0.5,
    window_s: float = 1.0,
) -> ReviewReport:
    """The one `review` entry: read the trace (a path) whole and review every plan against it.

    The review replays every request, so a path is read whole with the shared trace options;
    a Trace is used as it is.
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
    )
