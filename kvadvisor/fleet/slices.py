"""Long traces in time slices: each replayed alone after a warm-up, then stitched together.

``ReplayOptions.slice_s`` = L and ``slice_warmup_s`` = W cut the trace at 0, L, 2L, ...:
slice k counts the requests arriving in [kL, (k+1)L) (the last one: every later request)
and replays them after the requests of [kL - W, kL), which warm its caches, queues and
routing but are not counted (the previous slice counts them). Slices share nothing, so they
run as tasks on an executor's workers, each sent only its own rows. The stitched run has:

- per request: the figures of the slice that counts it;
- per demand window (tier reads and writes, queues): the slice whose counted time range holds
  the window's start, so the drain of slice k's requests past (k+1)L is slice k+1's view of it
  (those requests are its warm-up);
- per replica busy and occupied time, and the loop's counters: each slice's share of them,
  in proportion to the GPU time of the requests it counts (they are not kept per request).

Every slice replays with the whole trace's demand window and stop time, so one slice that
covers the trace is the whole replay, figure for figure. docs/replay.md ("Time slices")
measures what a warm-up of W costs against the whole replay.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from kvadvisor.fleet.engine import (
    MIN_DRAIN_S,
    ReplayOptions,
    ReplayRun,
    StageRun,
    _choose_window,
    _merge_logs,
    run_resolved,
)
from kvadvisor.fleet.fanout import Tasks
from kvadvisor.fleet.hits import ReplayContext, TraceArrays
from kvadvisor.fleet.resolved import ResolvedFleet, Stage
from kvadvisor.units import Unit, format_value

# Per-request fields of a StageRun, stitched from the slice that counts each request.
PER_REQUEST = (
    "replica",
    "admit_s",
    "ready_s",
    "first_s",
    "done_s",
    "preemptions",
    "recomputed_tokens",
    "loaded_tokens",
    "hit_tokens",
    "prefill_gpu_s",
    "decode_gpu_s",
)
# Per demand window: stitched by the slice that owns the window's start.
SERIES = (
    "read_bytes",
    "read_ios",
    "write_bytes",
    "read_demand_bytes",
    "write_demand_bytes",
    "waiting",
    "running",
)


@dataclass(frozen=True)
class Slice:
    """The requests one slice replays (``rows``: warm-up, then counted) and its time range."""

    start_s: float  # counts requests arriving from here
    end_s: float  # to here (inf: the last slice)
    rows: np.ndarray  # trace rows replayed, ascending


def plan_slices(arrival_s: np.ndarray, slice_s: float, warmup_s: float) -> list[Slice]:
    """The slices of a trace whose arrivals (ascending, from 0 s) are ``arrival_s``.

    A slice that no request arrives in is joined to the one before (it would count nothing),
    so every slice counts at least one request and the ranges still tile time.
    """
    span = float(arrival_s[-1]) if arrival_s.size else 0.0
    starts = slice_s * np.arange(int(span // slice_s) + 1)
    first = np.searchsorted(arrival_s, starts, side="left")
    ends = np.append(first[1:], arrival_s.size)
    keep = ends > first
    keep[0] = True  # time starts at 0 even when the first slice is empty (an empty trace)
    starts = starts[keep]
    bounds = [*starts[1:], math.inf]
    out = []
    for start, end in zip(starts, bounds, strict=True):
        lo = int(np.searchsorted(arrival_s, start - warmup_s, side="left"))
        hi = int(np.searchsorted(arrival_s, end, side="left"))
        out.append(Slice(float(start), float(end), np.arange(lo, hi, dtype=np.int64)))
    return out


def slice_task(arrays: TraceArrays, dep: ResolvedFleet, options: ReplayOptions) -> ReplayRun:
    """One slice's replay (on a worker: its own rows only, its own LRU passes)."""
    return run_resolved(ReplayContext(arrays), dep, options)


def _series_rows(dep: ResolvedFleet) -> int:
    """Demand-series rows the replay keeps (``engine.run_resolved`` widens its window on them)."""
    return sum(s.replicas * (len(s.tiers) + 2) + s.instances for s in dep.stages)


def run_sliced(
    ctx: ReplayContext,
    dep: ResolvedFleet,
    options: ReplayOptions,
    progress: Callable[[str], None] | None = None,
    executor: Tasks | None = None,
) -> ReplayRun:
    """The replay of ``ctx`` in time slices (``options.slice_s``), stitched (module docstring)."""
    assert options.slice_s is not None
    arrays = ctx.arrays
    arrival = np.asarray(arrays.arrival_s)
    span = float(arrival[-1]) if arrival.size else 0.0
    drain = options.drain_cap_s if options.drain_cap_s is not None else max(MIN_DRAIN_S, span)
    stop = span + drain
    window = _choose_window(options, stop, _series_rows(dep))
    slices = plan_slices(arrival, options.slice_s, options.slice_warmup_s)
    parallel = executor is not None and executor.parallel and len(slices) > 1
    pending = []
    for i, sl in enumerate(slices, 1):
        sub = arrays.take(sl.rows)
        last = float(arrival[sl.rows[-1]]) if sl.rows.size else 0.0
        # The whole trace's window and stop: the series line up, and one slice is the whole.
        opts = replace(
            options, slice_s=None, slice_warmup_s=0.0, window_s=window, drain_cap_s=stop - last
        )
        if parallel:
            assert executor is not None
            pending.append(executor.submit(slice_task, sub, dep, opts))
        else:
            if progress:
                progress(f"replaying time slice {i} of {len(slices)}")
            pending.append(run_resolved(ReplayContext(sub), dep, opts, executor=executor))
    runs = [p.result() if parallel else p for p in pending]
    stages = tuple(
        _stitch(arrival, slices, [r.stages[k] for r in runs], window)
        for k in range(len(dep.stages))
    )
    notes = list(runs[0].notes)
    if window > options.window_s:
        notes.insert(
            0,
            f"the demand window was widened from {format_value(options.window_s, Unit.SECONDS)} "
            f"to {format_value(window, Unit.SECONDS)} to keep the time series within memory",
        )
    if len(slices) > 1:
        notes.append(
            f"replayed in {len(slices)} time slices of "
            f"{format_value(options.slice_s, Unit.SECONDS)}, each after a warm-up of "
            f"{format_value(options.slice_warmup_s, Unit.SECONDS)} of requests replayed but "
            "not counted (docs/replay.md, time slices)"
        )
    return ReplayRun(
        deployment=dep,
        arrays=arrays,
        stages=stages,
        window_s=window,
        drain_cap_s=drain,
        stop_s=stop,
        end_s=max(r.end_s for r in runs),
        notes=tuple(notes),
    )


def _gpu_by_replica(st: StageRun, keep: np.ndarray | None, reps: int) -> np.ndarray:
    """GPU-seconds charged per replica, by all the slice's requests or those in ``keep``."""
    on = st.replica >= 0 if keep is None else (st.replica >= 0) & keep
    gpu = st.prefill_gpu_s + st.decode_gpu_s
    return np.bincount(st.replica[on], weights=gpu[on], minlength=reps)


def _share(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """``part / whole``, 0 where ``whole`` is 0."""
    return np.divide(part, whole, out=np.zeros_like(whole, dtype=float), where=whole > 0)


def _stitch(
    trace_arrival: np.ndarray, slices: list[Slice], parts: list[StageRun], window_s: float
) -> StageRun:
    """One stage's run from its slices' runs (module docstring: what comes from where)."""
    first = parts[0]
    reps = first.busy_s.size
    n_win = first.waiting.size
    t = np.arange(n_win) * window_s
    picked: dict[str, list[np.ndarray]] = {k: [] for k in (*PER_REQUEST, "rows", "arrival_s")}
    tier_hits, logs = [], []
    series = {k: np.zeros_like(getattr(first, k)) for k in SERIES}
    busy, occupied = np.zeros(reps), np.zeros(reps)
    counters: dict[str, float] = {}
    for sl, st in zip(slices, parts, strict=True):
        rows = sl.rows[st.rows]
        born = trace_arrival[rows]  # ownership by the trace's arrival, in every stage
        keep = (born >= sl.start_s) & (born < sl.end_s)
        picked["rows"].append(rows[keep])
        picked["arrival_s"].append(st.arrival_s[keep])
        for key in PER_REQUEST:
            picked[key].append(getattr(st, key)[keep])
        tier_hits.append(st.tier_hit_tokens[:, keep])
        own = (t >= sl.start_s) & (t < sl.end_s)
        for key in SERIES:
            series[key] += np.where(own, getattr(st, key), 0.0)
        gpu_all = _gpu_by_replica(st, None, reps)
        gpu_kept = _gpu_by_replica(st, keep, reps)
        per_replica = _share(gpu_kept, gpu_all)
        busy += st.busy_s * per_replica
        occupied += st.occupied_s * per_replica
        whole = float(gpu_all.sum())
        # A slice that charged no GPU time (none can, with requests) counts by requests.
        frac = (
            float(gpu_kept.sum()) / whole if whole > 0 else float(np.mean(keep) if keep.size else 0)
        )
        for name, value in st.counters.items():
            if name == "end_s":
                counters[name] = max(counters.get(name, 0.0), value)
            else:
                counters[name] = counters.get(name, 0.0) + value * frac
        if st.step_log is not None:
            from kvadvisor.fleet import kernel

            start = st.step_log[:, kernel.L_START]
            logs.append(st.step_log[(start >= sl.start_s) & (start < sl.end_s)])
    joined = {k: np.concatenate(v) for k, v in picked.items()}
    # The first stage serves requests in trace order; decode in the order prefill ended.
    key = joined["rows"] if first.role is not Stage.DECODE else joined["arrival_s"]
    order = np.argsort(key, kind="stable")
    per_request = {k: v[order] for k, v in joined.items()}
    return replace(
        first,
        **per_request,
        tier_hit_tokens=np.ascontiguousarray(np.concatenate(tier_hits, axis=1)[:, order]),
        **series,
        busy_s=busy,
        occupied_s=occupied,
        counters=counters,
        step_log=_merge_logs(logs) if first.step_log is not None else None,
    )
