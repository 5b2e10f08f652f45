"""Fleet replay: a trace run through a Plan (batching, queues, KV tiers, P/D transfer).

The pure entry point is :func:`replay`: trace arrays and a Plan in, the replay model out. The
plan is resolved inside the package (:mod:`kvadvisor.fleet.fromplan`: step tables, GPU pools,
tier rates) into shapes no caller sees (:mod:`kvadvisor.fleet.resolved`). :class:`ReplayContext`
keeps the routing-independent work (dense block ids) and every exact LRU pass already run, so
replaying many candidate plans of one trace pays for each routing's passes once. docs/replay.md
states every mechanism as a rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from kvadvisor.fleet.engine import ReplayOptions, ReplayRun
from kvadvisor.fleet.entry import replay_notes, run_prefill_alone, run_replay
from kvadvisor.fleet.hits import ReplayContext, TraceArrays
from kvadvisor.fleet.summary import parse_slo, request_columns, slo_percentiles, summarize
from kvadvisor.plan.model import Plan
from kvadvisor.results.replay import ReplayReport, ReplayResult, TraceInfo

__all__ = [
    "ReplayContext",
    "ReplayOptions",
    "ReplayReport",
    "ReplayResult",
    "ReplayRun",
    "TraceArrays",
    "TraceInfo",
    "parse_slo",
    "replay",
    "replay_notes",
    "request_columns",
    "run_prefill_alone",
    "run_replay",
    "slo_percentiles",
    "summarize",
]


def replay(
    trace: ReplayContext | TraceArrays,
    plan: Plan,
    *,
    options: ReplayOptions | None = None,
    slo: Mapping[str, float] | None = None,
) -> ReplayResult:
    """Replay ``trace`` through ``plan`` and summarise it (pure; no files).

    ``slo`` maps targets such as ``ttft_p90_s`` to seconds. For per-request rows as well,
    call :func:`run_replay` and :func:`request_columns` on its result. The plan's resolution
    notes (which defaults it took) lead the summary's notes.
    """
    run = run_replay(trace, plan, options)
    result = summarize(run, slo)
    return replace(result, notes=(*run.plan_notes, *result.notes))
