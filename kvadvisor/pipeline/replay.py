"""The `replay` pipeline: a trace through each plan's deployment, closed loop (docs/replay.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from functools import cached_property, partial
from typing import Any

import numpy as np

from kvadvisor.cache.model import PrefixCacheResult
from kvadvisor.execute import SERIAL, Executor
from kvadvisor.fleet import ReplayContext, ReplayOptions, TraceArrays, run_replay, summarize
from kvadvisor.fleet.fromreport import replay_recommended
from kvadvisor.fleet.steps import STEP_COLUMNS, step_batches
from kvadvisor.fleet.summary import parse_slo, request_columns
from kvadvisor.perfmodel.calibrate import StepCalibration
from kvadvisor.plan import PlanCatalogs
from kvadvisor.plan.model import Plan
from kvadvisor.results.replay import REPLAY_FORMAT_VERSION, ReplayReport, ReplayResult, TraceInfo
from kvadvisor.results.report import AdviceReport
from kvadvisor.trace.arrays import RequestArrays
from kvadvisor.trace.model import Trace
from kvadvisor.units import Unit, format_value, plural
from kvadvisor.units.format import count
from kvadvisor.vocab import SplitSource

# The step log of one replay, in batches of columns (kvadvisor.fleet.steps).
StepSource = Callable[[], Iterator[dict[str, np.ndarray]]]

__all__ = [
    "STEP_COLUMNS",
    "ReplayOptions",
    "ReplaySource",
    "StepSource",
    "parse_slo",
    "plan_targets",
    "replay_in_context",
    "replay_plan",
    "replay_recommendation",
    "scaled_arrays",
]


def plan_targets(plan: Plan, overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """The plan's SLOs as replay targets (``ttft_p99_s`` ...), with the caller's on top."""
    targets: dict[str, float] = {}
    if plan.slo.ttft_p99_s is not None:
        targets["ttft_p99_s"] = plan.slo.ttft_p99_s
    if plan.slo.tpot_p99_s is not None:
        targets["tpot_p99_s"] = plan.slo.tpot_p99_s
    targets.update(overrides or {})
    return targets


class ReplaySource:
    """One trace ready for replays: its replay context, built from the request arrays once.

    Built on first use (a trace `analyze` does not replay costs nothing), then shared by every
    replay of the analysis (the recommended deployment's, each plan's), so the replay's arrays
    are derived once and its LRU passes run once per routing. ``exact`` is the exact
    prefix-cache pass over the arrays' hashes, whose block ids the replay reuses.
    """

    def __init__(self, arrays: RequestArrays, exact: PrefixCacheResult | None = None) -> None:
        self.arrays = arrays
        self.exact = exact

    @cached_property
    def context(self) -> ReplayContext:
        """The replay's context over these arrays."""
        return ReplayContext(TraceArrays.from_arrays(self.arrays, self.exact))


def scaled_arrays(arrays: TraceArrays, scale: float) -> TraceArrays:
    """The same requests arriving ``scale`` times faster (the plan's traffic.scale)."""
    if scale == 1.0:
        return arrays
    return arrays.with_arrivals(np.asarray(arrays.arrival_s) / scale)


def replay_plan(
    trace: Trace | TraceArrays,
    plan: Plan,
    *,
    version: str,
    generated_at: str,
    slo: Mapping[str, float] | None = None,
    options: ReplayOptions | None = None,
    trace_info: TraceInfo | None = None,
    executor: Executor = SERIAL,
) -> tuple[ReplayReport, dict[str, np.ndarray], StepSource | None]:
    """Replay ``trace`` through ``plan``'s deployment: the report, one row per request, steps.

    The third item, with ``options.step_log``, yields the step log in batches
    (:func:`kvadvisor.fleet.steps.step_batches`); None otherwise. ``executor``: where the
    replica groups (or the time slices) replay.
    """
    arrays = trace if isinstance(trace, TraceArrays) else TraceArrays.from_trace(trace)
    if trace_info is None:
        if isinstance(trace, Trace):
            trace_info = TraceInfo(
                trace.source_path,
                trace.source_format,
                trace.requests,
                trace.duration_s,
                trace.block_tokens,
            )
        else:
            span = float(arrays.arrival_s[-1]) if arrays.requests else 0.0
            trace_info = TraceInfo("", "arrays", arrays.requests, span, arrays.block_tokens)
    result, columns, steps = replay_in_context(ReplayContext(arrays), plan, slo, options, executor)
    report = ReplayReport(REPLAY_FORMAT_VERSION, version, generated_at, trace_info, result)
    return report, columns, steps


def replay_in_context(
    ctx: ReplayContext,
    plan: Plan,
    slo: Mapping[str, float] | None = None,
    options: ReplayOptions | None = None,
    executor: Executor = SERIAL,
) -> tuple[ReplayResult, dict[str, np.ndarray], StepSource | None]:
    """One plan replayed on a prepared trace (its LRU passes shared with other plans)."""
    notes: tuple[str, ...] = ()
    if plan.traffic_scale != 1.0:
        ctx = ctx.with_arrivals(ctx.arrays.arrival_s / plan.traffic_scale)
        faster = format_value(plan.traffic_scale, Unit.MULTIPLE)
        notes = (f"arrivals come {faster} faster (traffic.scale)",)
    run = run_replay(ctx, plan, options, executor=executor)
    notes = (*run.plan_notes, *notes)
    result = summarize(run, plan_targets(plan, slo))
    steps = partial(step_batches, run) if run.stages[0].step_log is not None else None
    return replace(result, notes=(*notes, *result.notes)), request_columns(run), steps


def replay_recommendation(
    trace: Trace,
    report: AdviceReport,
    options: Any,
    source: ReplaySource | None = None,
    calibration: StepCalibration | None = None,
) -> AdviceReport:
    """``report`` with its recommended deployment replayed (pure; `analyze`'s last step).

    ``source``: the trace ready for replays when the caller has it (else made here).
    ``calibration``: the step model the profiler fitted to the trace's measured requests; a
    stage on the GPU it was measured on replays with it (``fleet.build.step_model_for``).

    The closed-loop stage split replaces a modeled or calibrated one (a measured split stays:
    it is the engine's own); the open-loop figures are kept in ``open_loop_*`` as a bound.
    ``options`` is the analysis' AnalyzeOptions (``replay``, ``search``, ``replay_max_requests``,
    ``window_s``, ``advisor_inputs``, ``executor``: the replica groups replay as its tasks).
    """
    why = None
    if not options.replay:
        why = "not asked for (--no-replay)"
    elif not options.search:
        why = "no deployment was searched (--no-search)"
    elif trace.requests > options.replay_max_requests:
        why = (
            f"{plural(trace.requests, 'request')} is more than the "
            f"{count(options.replay_max_requests)} "
            "`analyze` replays; run `kvadvisor replay` on the deployment (e.g. `--emit plan`)"
        )
    found = None
    if why is None:
        inputs = options.advisor_inputs
        catalogs = (
            None if inputs is None else PlanCatalogs(inputs.storage, inputs.instances, inputs.perf)
        )
        ctx = (source or ReplaySource(RequestArrays.of(trace))).context
        found, why = replay_recommended(
            ctx,
            report,
            catalogs,
            ReplayOptions(window_s=options.window_s),
            calibration,
            executor=options.executor,
        )
    if found is None:
        return replace(
            report,
            unavailable={**report.unavailable, "replay": why or ""},
            request_rows=trace_rows(trace),
        )
    split = report.stage_split
    res = found.result
    if (
        split is not None
        and split.source != SplitSource.MEASURED
        and res.stage_split.prefill_share is not None
    ):
        split = replace(
            split,
            source=SplitSource.REPLAY,
            prefill_s=res.stage_split.prefill_gpu_s,
            decode_s=res.stage_split.decode_gpu_s,
            prefill_share=res.stage_split.prefill_share,
            open_loop_prefill_s=split.prefill_s,
            open_loop_decode_s=split.decode_s,
            open_loop_prefill_share=split.prefill_share,
            notes=(
                *split.notes,
                "GPU time per stage from the closed-loop replay of the recommended deployment "
                "(the replay section); the open-loop figures (open_loop_*) are a bound",
            ),
        )
    return replace(report, replay=res, stage_split=split, request_rows=found.columns)


def trace_rows(trace: Trace) -> dict[str, np.ndarray]:
    """The trace's own columns of ``report.requests()``: what any in-memory analysis has.

    Named as the replay's first columns (``fleet.summary.request_columns``), so the rows of a
    replayed analysis only add columns to these.
    """
    return {
        "request": np.arange(trace.requests, dtype=np.int64),
        "arrival_s": trace.column_np("arrival_s"),
        "input_tokens": trace.column_np("input_tokens"),
        "output_tokens": trace.column_np("output_tokens"),
    }
