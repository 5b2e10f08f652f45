"""The replay's public entry points: a Plan in, the replay out (docs/replay.md).

A Plan (:mod:`kvadvisor.plan`) is the one deployment type. Each entry resolves it here through
:func:`kvadvisor.fleet.fromplan.resolve_plan` (every default taken, step tables built, rates
derived) and runs what that made (:mod:`kvadvisor.fleet.resolved`, private to the fleet), so
no caller builds or reads the resolved shapes. The plan's ``traffic.scale`` is the caller's to
apply to the arrivals (``pipeline.replay``, ``pipeline.verify``): it is stated in the notes
there, and the arrays may be shared by plans of different scales.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from kvadvisor.fleet.engine import (
    MIN_DRAIN_S,
    ReplayOptions,
    ReplayRun,
    StageRun,
    run_resolved,
    run_stage,
)
from kvadvisor.fleet.fanout import Tasks
from kvadvisor.fleet.fromplan import resolve_plan
from kvadvisor.fleet.hits import ReplayContext, TraceArrays
from kvadvisor.perfmodel.calibrate import StepCalibration
from kvadvisor.plan.model import Plan

# The prefill stage alone runs its groups on two threads, as the advisor's search always has
# (its candidates are replayed many at a time; more threads per replay would oversubscribe).
ALONE_WORKERS = 2


def run_replay(
    trace: ReplayContext | TraceArrays,
    plan: Plan,
    options: ReplayOptions | None = None,
    *,
    calibration: StepCalibration | None = None,
    step_factor: float = 1.0,
    progress: Callable[[str], None] | None = None,
    executor: Tasks | None = None,
) -> ReplayRun:
    """Replay ``trace`` through ``plan`` (pure; ConfigError when the plan cannot be replayed).

    ``calibration``: step coefficients fitted to the trace's measured requests (a stage on
    their GPU and model replays on them). ``step_factor``: every step this many times as long
    (the advisor's stress). The resolution's notes are the run's ``plan_notes``.
    ``executor``: where the replica groups (or time slices) run (``fleet.fanout``; None: here).
    """
    fleet, notes = resolve_plan(plan, calibration)
    run = run_resolved(trace, fleet.slowed(step_factor), options, progress, executor)
    return replace(run, plan_notes=notes)


def replay_notes(plan: Plan, calibration: StepCalibration | None = None) -> tuple[str, ...]:
    """Which defaults the replay takes for ``plan``; ConfigError when it cannot replay it.

    A check before a replay is handed to another worker (the advisor's search): resolving a
    plan costs about a millisecond, a replay a thousand times that.
    """
    return resolve_plan(plan, calibration)[1]


def run_prefill_alone(
    trace: ReplayContext | TraceArrays,
    plan: Plan,
    options: ReplayOptions | None = None,
    *,
    step_factor: float = 1.0,
) -> StageRun:
    """The plan's first stage alone on every request, at its arrival (the prefill bound).

    Of a disaggregated plan, the prefill stage without the decode stage behind it; its
    ``first_s`` bounds the whole fleet's first tokens from below. The run lasts
    ``options.drain_cap_s`` (else as long as the trace, at least 600 s) past the last arrival.
    """
    options = options or ReplayOptions()
    ctx = ReplayContext(trace) if isinstance(trace, TraceArrays) else trace
    a = ctx.arrays
    span = float(a.arrival_s[-1]) if a.requests else 0.0
    drain = options.drain_cap_s
    stop = span + (drain if drain is not None else max(MIN_DRAIN_S, span))
    fleet = resolve_plan(plan)[0].slowed(step_factor)
    rows = np.arange(a.requests, dtype=np.int64)
    return run_stage(
        ctx, fleet, fleet.stages[0], rows, a.arrival_s, options.window_s, stop, ALONE_WORKERS
    )
