"""The report's trace section: counts, span, columns, models and the workload charts (pure)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow.compute as pc

from kvadvisor.metrics.lengths import LengthStats, length_stats
from kvadvisor.results.common import LengthSummary, TraceSummary
from kvadvisor.results.series import Series, SeriesKey, SeriesKind
from kvadvisor.trace.arrays import RequestArrays
from kvadvisor.trace.describe import capabilities
from kvadvisor.trace.model import Trace

# Candidate arrival-chart windows (s): the smallest that keeps the chart under MAX_ARRIVAL_BINS.
ARRIVAL_WINDOWS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
MAX_ARRIVAL_BINS = 240


def arrival_window_s(duration_s: float) -> int:
    """The smallest of ``ARRIVAL_WINDOWS_S`` giving at most ``MAX_ARRIVAL_BINS`` windows."""
    return next(
        (w for w in ARRIVAL_WINDOWS_S if duration_s / w < MAX_ARRIVAL_BINS), ARRIVAL_WINDOWS_S[-1]
    )


def arrival_counts(arrival_s: np.ndarray, duration_s: float, window_s: int) -> np.ndarray:
    """Requests per window of ``window_s`` from 0 to ``duration_s`` (later arrivals in the last)."""
    bins = int(duration_s // window_s) + 1
    idx = np.minimum((arrival_s // window_s).astype(np.int64), bins - 1)
    return np.bincount(idx, minlength=bins)


def arrival_chart(counts: np.ndarray, window_s: int) -> Series:
    """The arrivals chart from per-window request counts: x each window's start, y requests/s."""
    return Series(
        x_unit="s",
        y_unit="requests/s",
        x=tuple(float(v) for v in np.arange(counts.size) * window_s),
        y=tuple(float(v) for v in counts / window_s),
        kind=SeriesKind.STEP,
        window_s=float(window_s),
        key=SeriesKey.ARRIVALS,
    )


def arrival_series(arrival_s: np.ndarray, duration_s: float) -> Series | None:
    """Requests per second in fixed windows from the first arrival (None for an empty trace).

    The window is the smallest of ``ARRIVAL_WINDOWS_S`` giving at most ``MAX_ARRIVAL_BINS``
    windows; x is each window's start (s), y its request count divided by the window length.
    """
    if arrival_s.size == 0:
        return None
    window_s = arrival_window_s(duration_s)
    return arrival_chart(arrival_counts(arrival_s, duration_s, window_s), window_s)


def log2_bin(tokens: np.ndarray) -> np.ndarray:
    """Power-of-two bin of each length: bin 0 holds 0 and 1, bin k >= 1 holds [2^k, 2^(k+1)).

    Bin 0 takes 0 as well because log2 is undefined there.
    """
    return np.floor(np.log2(np.maximum(tokens, 1).astype(np.float64))).astype(np.int64)


def length_chart(counts: np.ndarray, what: str) -> Series:
    """The length chart from per-bin request counts (``log2_bin``): x each bin's lower edge."""
    ks = np.arange(counts.size)
    return Series(
        x_unit="tokens",
        y_unit="count",
        x=tuple(float(v) for v in np.where(ks == 0, 0.0, 2.0**ks)),
        y=tuple(float(v) for v in counts),
        kind=SeriesKind.BAR,
        key=SeriesKey.INPUT_LENGTHS if what == "input" else SeriesKey.OUTPUT_LENGTHS,
    )


def length_histogram(tokens: np.ndarray, what: str) -> Series | None:
    """Requests per power-of-two token-length bin: [0, 2), [2, 4), [4, 8), ... (None if empty).

    Powers of two because prompt and output lengths are heavy-tailed (spanning 1 to 100k+
    tokens); x is each bin's lower edge in tokens, y the number of requests in it.
    """
    if tokens.size == 0:
        return None
    return length_chart(np.bincount(log2_bin(tokens)), what)


def length_summary(stats: LengthStats) -> LengthSummary:
    """The report's length summary from the measured one (the count is the trace's requests)."""
    return LengthSummary(
        mean_tokens=stats.mean_tokens,
        p50_tokens=stats.p50_tokens,
        p90_tokens=stats.p90_tokens,
        p99_tokens=stats.p99_tokens,
        max_tokens=stats.max_tokens,
    )


MAX_MODELS_LISTED = 20


def listed_models(names: Iterable[object]) -> tuple[str, ...]:
    """Distinct served-model names as the report lists them: sorted, at most MAX_MODELS_LISTED."""
    return tuple(sorted({str(n) for n in names})[:MAX_MODELS_LISTED])


def trace_models(trace: Trace) -> tuple[str, ...]:
    """Distinct non-null values of the ``model`` column, sorted, at most MAX_MODELS_LISTED."""
    if "model" not in trace.table.column_names:
        return ()
    return listed_models(pc.unique(trace.table["model"].drop_null()).to_pylist())


def summarize_trace(
    trace: Trace, sha256: str | None = None, arrays: RequestArrays | None = None
) -> TraceSummary:
    """Counts, span, columns and workload chart data of a trace.

    ``arrays`` are the trace's per-request arrays when the caller already took them.
    """
    arrays = arrays or RequestArrays.of(trace)
    duration = arrays.duration_s
    t = trace.table
    return TraceSummary(
        path=trace.source_path,
        format=trace.source_format,
        requests=trace.requests,
        duration_s=duration,
        block_tokens=trace.block_tokens,
        columns=trace.columns,
        input_tokens_total=int(pc.sum(t["input_tokens"]).as_py() or 0),
        output_tokens_total=int(pc.sum(t["output_tokens"]).as_py() or 0),
        # As Trace.arrival_rate_per_s: None when arrivals were not measured or span no time.
        arrival_rate_per_s=(
            trace.requests / duration if trace.arrivals_measured and duration > 0 else None
        ),
        dropped=dict(trace.dropped),
        notes=trace.notes,
        capabilities=capabilities(trace),
        sha256=sha256,
        models=trace_models(trace),
        arrivals=arrival_series(arrays.arrival_s, duration),
        input_tokens_hist=length_histogram(arrays.input_tokens, "input"),
        output_tokens_hist=length_histogram(arrays.output_tokens, "output"),
        input_tokens_stats=length_summary(length_stats(arrays.input_tokens)),
        output_tokens_stats=length_summary(length_stats(arrays.output_tokens)),
    )
