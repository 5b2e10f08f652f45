"""The `verify` pipeline: replay the plan closed loop (else open loop), then write the jobs.

The fleet replay (:mod:`kvadvisor.fleet`, docs/replay.md) runs the trace through the plan's
deployment: batching, queues and shared tier bandwidth shape when KV moves, so the demand each
fio job reproduces and its queue depth come from there. A plan the replay cannot run (no
catalog model, a tier without bandwidth) falls back to the review's open-loop flows, and the
notes say why.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from kvadvisor.cache.model import PrefixCacheResult
from kvadvisor.catalog.storage import StorageSpec
from kvadvisor.errors import KvAdvisorError
from kvadvisor.fleet import (
    ReplayContext,
    ReplayOptions,
    ReplayRun,
    TraceArrays,
    replay_notes,
    run_replay,
)
from kvadvisor.fleet.engine import StageRun
from kvadvisor.fleet.summary import request_columns
from kvadvisor.metrics.timeline import inflight_window_means
from kvadvisor.pipeline.replay import scaled_arrays
from kvadvisor.pipeline.review import check_windows, open_loop
from kvadvisor.plan.model import Plan
from kvadvisor.trace.arrays import RequestArrays
from kvadvisor.trace.detect import TraceFormat
from kvadvisor.trace.formats import ColumnMap
from kvadvisor.trace.model import Trace
from kvadvisor.trace.stream import read_trace_path
from kvadvisor.units.format import duration
from kvadvisor.verifyjobs import VerifyOptions, VerifySet, verify_plan
from kvadvisor.verifyjobs.model import ReplayedTier, RoutedShare
from kvadvisor.verifyjobs.share import routed_share
from kvadvisor.vocab import Stage

CLOSED_LOOP = (
    "closed loop: the fleet replay of the plan (`kvadvisor docs replay`), the busiest {unit}"
)


def _unit_of(st: StageRun, scope: str) -> np.ndarray:
    """Each request's tier unit in the stage's numbering (replica, instance, or the pool)."""
    if scope == "replica":
        return st.replica
    if scope == "instance":
        return st.replica // st.spec.replicas_per_instance
    return np.zeros_like(st.replica)


def _stage_tiers(run: ReplayRun, st: StageRun) -> list[ReplayedTier]:
    """Every tier of one replayed stage, as the busiest unit saw it."""
    end_w = max(int(run.end_s / run.window_s) + 1, 1)
    w = run.window_s
    prefills = st.role is not Stage.DECODE
    # In flight on a tier: a prefilling request from admission to its first token (loads and
    # writes happen then), a decoding one from admission to completion.
    start = st.admit_s
    stop = st.first_s if prefills else st.done_s
    ok = np.isfinite(start)
    stop = np.where(np.isfinite(stop), stop, run.end_s)
    out = []
    for k, tier in enumerate(st.spec.tiers):
        rows = [i for i, r in enumerate(st.resources) if r.kind == "tier" and r.tier == k]
        read = st.read_bytes[rows, :end_w] / w
        write = st.write_bytes[rows, :end_w] / w
        busy = np.percentile(read + write, 99, axis=1)
        u = int(np.argmax(busy))
        unit = st.resources[rows[u]].unit
        mine = ok & (_unit_of(st, tier.scope.value) == unit)
        inflight = inflight_window_means(start[mine], stop[mine], w, end_w)
        served = st.tier_hit_tokens[k] if prefills and st.tier_hit_tokens.size else None
        what = "admission to first token" if prefills else "admission to completion"
        out.append(
            ReplayedTier(
                stage=st.role.value,
                tier=tier.name,
                read_bytes_per_s=read[u],
                write_bytes_per_s=write[u],
                window_s=w,
                inflight=inflight,
                inflight_from=(
                    f"p99 over {duration(w)} windows of the replayed requests in flight ({what}) "
                    f"on the busiest {tier.scope.value} of {len(rows)}; one chunk I/O "
                    "outstanding per request per rank"
                ),
                served_tokens=None if served is None else np.asarray(served, dtype=np.float64),
                units=len(rows),
                source=CLOSED_LOOP.format(unit=f"{tier.scope.value} of {len(rows)}"),
            )
        )
    return out


def _share(run: ReplayRun, plan: Plan, requests: int | None) -> RoutedShare:
    """The requests the replay routed to one instance of the stage that takes them."""
    st = next(s for s in run.stages if s.role is not Stage.DECODE)
    stage = plan.stage(st.role)
    return routed_share(
        st.role,
        stage.router if stage is not None else "round_robin",
        st.replica,
        st.spec.replicas_per_instance,
        st.spec.replicas // max(st.spec.replicas_per_instance, 1),
        st.rows,
        request_columns(run),
        requests,
    )


def replayed_tiers(
    arrays: RequestArrays,
    exact: PrefixCacheResult | None,
    plan: Plan,
    window_s: float,
    bench_requests: int | None = None,
) -> tuple[dict[tuple[str, str], ReplayedTier], tuple[str, ...], RoutedShare | None]:
    """The closed-loop demand of every tier and one node's routed share, or none and why.

    ``exact`` is the exact prefix-cache pass over ``arrays``' hashes, whose block ids the
    replay reuses (None: it finds them). None for the share when the plan cannot be replayed.
    """
    try:
        replay_notes(plan)  # a plan the replay cannot resolve falls back; a failed replay fails
    except KvAdvisorError as exc:
        return {}, (f"no closed-loop replay ({exc}): the jobs use the open-loop demand",), None
    ctx = ReplayContext(scaled_arrays(TraceArrays.from_arrays(arrays, exact), plan.traffic_scale))
    run = run_replay(ctx, plan, ReplayOptions(window_s=window_s))
    tiers = {(t.stage, t.tier): t for st in run.stages for t in _stage_tiers(run, st)}
    return tiers, (*run.plan_notes, *run.notes), _share(run, plan, bench_requests)


def verify(
    source: str | Path | Trace,
    plan: Plan,
    storage: Mapping[str, StorageSpec],
    options: VerifyOptions,
    *,
    version: str,
    trace_sha256: str | None = None,
    trace_format: str | TraceFormat | None = None,
    column_map: ColumnMap = None,
    block_tokens: int | None = None,
) -> VerifySet:
    """The one `verify` entry: read the trace whole, replay it, build the jobs for ``plan``.

    ``storage`` is the storage catalog the plan was loaded with (for the tiers' I/O unit and
    GPUDirect support).
    """
    trace = (
        source
        if isinstance(source, Trace)
        else read_trace_path(source, trace_format, column_map=column_map, block_tokens=block_tokens)
    )
    # Taken from the trace once: the open-loop demand and the closed-loop replay share them
    # (and the block ids of the exact pass).
    arrays = RequestArrays.of(trace)
    check_windows(arrays.arrival_s, (plan,), options.window_s)
    replay, notes, exact = open_loop(arrays, options.warmup_fraction)
    replayed, closed_notes, share = replayed_tiers(
        arrays, exact, plan, options.window_s, options.bench_requests
    )
    return verify_plan(
        trace,
        replay,
        plan,
        storage,
        options,
        version=version,
        trace_sha256=trace_sha256,
        replay_notes=(*notes, *closed_notes),
        replayed=replayed,
        share=share,
    )
