"""Workload measurements from a trace: stage times and split, concurrency, KV I/O demand."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kvadvisor.metrics.io import (
    DEFAULT_CHUNK_TOKENS,
    DEFAULT_IO_UNIT_BYTES,
    DEFAULT_WINDOW_S,
    ChunkIo,
    IoProfile,
    RateStats,
    StageIo,
    io_demand,
)
from kvadvisor.metrics.stages import (
    DECODE_DOMINATED_SHARE,
    PREFILL_DOMINATED_SHARE,
    Distribution,
    MeasuredStages,
    SplitSummary,
    StageCostModel,
    StageTimes,
    classify,
    stage_times,
    summarize_split,
)
from kvadvisor.metrics.timeline import TimeGrid, inflight_window_means, window_count
from kvadvisor.trace.model import Trace

__all__ = [
    "DECODE_DOMINATED_SHARE",
    "DEFAULT_CHUNK_TOKENS",
    "DEFAULT_IO_UNIT_BYTES",
    "DEFAULT_WINDOW_S",
    "PREFILL_DOMINATED_SHARE",
    "ChunkIo",
    "Distribution",
    "IoProfile",
    "MeasuredStages",
    "RateStats",
    "SplitSummary",
    "StageCostModel",
    "StageIo",
    "StageTimes",
    "TimeGrid",
    "classify",
    "concurrency_series",
    "io_demand",
    "measured_stages",
    "profile_io",
    "profile_stages",
    "stage_times",
    "summarize_split",
    "trace_hit_tokens",
    "window_count",
]


def _float_column(trace: Trace, name: str) -> np.ndarray:
    if name not in trace.columns:
        return np.full(trace.requests, np.nan)
    return np.asarray(trace.column_np(name), dtype=np.float64)


def measured_stages(trace: Trace) -> MeasuredStages | None:
    """Stage latencies from the trace's TTFT / end-to-end / TPOT / queue columns, or None.

    prefill = TTFT - queueing (queue_s, 0 where absent); decode = end-to-end - TTFT, or
    TPOT x (output_tokens - 1) where only TPOT is known. Rows with ``ok`` false are not used.
    """
    if not trace.has("ttft_s"):
        return None
    ttft = _float_column(trace, "ttft_s")
    queue = np.nan_to_num(_float_column(trace, "queue_s"), nan=0.0)
    e2e = _float_column(trace, "e2e_s")
    tpot = _float_column(trace, "tpot_s")
    steps = np.maximum(np.asarray(trace.column_np("output_tokens"), np.float64) - 1.0, 0.0)
    decode = np.where(np.isfinite(e2e), e2e - ttft, tpot * steps)
    prefill = ttft - queue
    bad = (prefill < 0) | (decode < 0)
    if trace.has("ok"):
        ok = trace.table["ok"].fill_null(True).to_numpy(zero_copy_only=False)
        bad |= ~ok.astype(bool)
    prefill = np.where(bad, np.nan, prefill)
    decode = np.where(bad, np.nan, decode)
    if not (np.isfinite(prefill) & np.isfinite(decode)).any():
        return None
    return MeasuredStages(prefill_s=prefill, decode_s=decode, queue_s=queue)


def trace_hit_tokens(trace: Trace) -> np.ndarray | None:
    """Engine-reported prefix hits (``cached_tokens``; null rows count 0), or None if absent."""
    if not trace.has("cached_tokens"):
        return None
    return np.asarray(trace.table["cached_tokens"].fill_null(0).to_numpy(), dtype=np.float64)


def profile_stages(
    trace: Trace,
    cost: StageCostModel,
    *,
    hit_tokens: np.ndarray | None = None,
    use_measured: bool = True,
    iterations: int = 3,
    instances: int = 1,
    max_batch: float | None = None,
) -> StageTimes:
    """Per-request stage times for a trace.

    Measured rows where the trace has them, the cost model for the rest (``hit_tokens`` None =
    no prefix reuse known).
    """
    return stage_times(
        trace.column_np("arrival_s"),
        trace.column_np("input_tokens"),
        trace.column_np("output_tokens"),
        cost,
        hit_tokens=hit_tokens,
        measured=measured_stages(trace) if use_measured else None,
        iterations=iterations,
        instances=instances,
        max_batch=max_batch,
    )


def profile_io(
    times: StageTimes,
    kv_bytes: Callable[[np.ndarray], np.ndarray],
    *,
    hits_known: bool,
    window_s: float = DEFAULT_WINDOW_S,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    io_unit_bytes: int = DEFAULT_IO_UNIT_BYTES,
    drive_capacity_bytes: float | None = None,
) -> IoProfile:
    """KV I/O demand from stage times: reads at prefill start, writes at prefill end."""
    return io_demand(
        input_tokens=times.input_tokens,
        hit_tokens=times.hit_tokens if hits_known else None,
        read_time_s=times.prefill_start_s,
        write_time_s=times.prefill_end_s,
        kv_bytes=kv_bytes,
        window_s=window_s,
        chunk_tokens=chunk_tokens,
        io_unit_bytes=io_unit_bytes,
        drive_capacity_bytes=drive_capacity_bytes,
        span_s=float(times.end_s.max(initial=0.0)),
    )


def concurrency_series(
    times: StageTimes, window_s: float, windows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per window: (start s, mean requests in flight, peak decode batch).

    In flight = from arrival to completion (queue, prefill and decode).
    """
    return (
        np.arange(windows, dtype=np.float64) * window_s,
        inflight_window_means(times.arrival_s, times.end_s, window_s, windows),
        times.grid.window_peaks(times.decode_batch_cells, window_s, windows),
    )
