"""Fleet replay: a trace run through a deployment (batching, queues, KV tiers, P/D transfer).

The pure entry point is :func:`replay`: trace arrays, a deployment and its step-time tables in,
the replay model out. :class:`ReplayContext` keeps the routing-independent work (dense block
ids) and every exact LRU pass already run, so replaying many candidate deployments of one
trace pays for each routing's passes once. docs/replay.md states every mechanism as a rule.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvadvisor.fleet.deployment import (
    Deployment,
    KvModel,
    LinkSpec,
    LoadMode,
    Preemption,
    PrefetchPolicy,
    RouterPolicy,
    SchedulerSpec,
    Scope,
    StageSpec,
    TierSpec,
    WritePolicy,
)
from kvadvisor.fleet.engine import ReplayOptions, ReplayRun, run_replay
from kvadvisor.fleet.hits import ReplayContext, TraceArrays
from kvadvisor.fleet.summary import parse_slo, request_columns, slo_percentiles, summarize
from kvadvisor.results.replay import ReplayReport, ReplayResult, TraceInfo

__all__ = [
    "Deployment",
    "KvModel",
    "LinkSpec",
    "LoadMode",
    "PrefetchPolicy",
    "Preemption",
    "ReplayContext",
    "ReplayOptions",
    "ReplayReport",
    "ReplayResult",
    "ReplayRun",
    "RouterPolicy",
    "SchedulerSpec",
    "Scope",
    "StageSpec",
    "TierSpec",
    "TraceArrays",
    "TraceInfo",
    "WritePolicy",
    "parse_slo",
    "replay",
    "request_columns",
    "run_replay",
    "slo_percentiles",
    "summarize",
]


def replay(
    trace: ReplayContext | TraceArrays,
    deployment: Deployment,
    *,
    options: ReplayOptions | None = None,
    slo: Mapping[str, float] | None = None,
) -> ReplayResult:
    """Replay ``trace`` through ``deployment`` and summarise it (pure; no files).

    ``slo`` maps targets such as ``ttft_p90_s`` to seconds. For per-request rows as well,
    call :func:`run_replay` and :func:`request_columns` on its result.
    """
    return summarize(run_replay(trace, deployment, options), slo)
