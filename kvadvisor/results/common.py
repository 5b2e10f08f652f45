"""What both reports carry: provenance, the trace summary, rates and utilizations."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvadvisor.results.series import Series


@dataclass(frozen=True)
class Meta:
    """Report provenance; the clock and the version are inputs so output is deterministic."""

    format_version: int
    kvadvisor_version: str
    generated_at: str


@dataclass(frozen=True)
class LengthSummary:
    """A token-length column's mean beside its median, p90, p99 and max (tokens).

    Percentiles interpolate linearly between order statistics (numpy's default, type 7);
    every figure is None when the trace is empty.
    """

    mean_tokens: float | None
    p50_tokens: float | None
    p90_tokens: float | None
    p99_tokens: float | None
    max_tokens: int | None


@dataclass(frozen=True)
class TraceSummary:
    """What was read: source, size, time span, columns, and every row dropped or change made."""

    path: str
    format: str
    requests: int
    duration_s: float
    block_tokens: int | None
    columns: tuple[str, ...] = ()
    input_tokens_total: int = 0
    output_tokens_total: int = 0
    arrival_rate_per_s: float | None = None
    dropped: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    # sha256 of the trace file as read (hex); None when the trace did not come from one file.
    sha256: str | None = None
    # Distinct served-model names in the trace's `model` column (sorted, at most 20).
    models: tuple[str, ...] = ()
    # Chart data for the workload section (None when the trace is empty).
    arrivals: Series | None = None
    input_tokens_hist: Series | None = None
    output_tokens_hist: Series | None = None
    # Prompt and output lengths: the mean misleads on heavy tails, so the percentiles beside it.
    input_tokens_stats: LengthSummary | None = None
    output_tokens_stats: LengthSummary | None = None


@dataclass(frozen=True)
class IoRate:
    """A bandwidth time series reduced to mean, p99 and peak (bytes per second); None = unknown."""

    mean_bytes_per_s: float | None
    p99_bytes_per_s: float | None
    peak_bytes_per_s: float | None
    p50_bytes_per_s: float | None = None
    peak_to_mean: float | None = None
    bytes_total: float | None = None


@dataclass(frozen=True)
class Utilization:
    """Demand over capability of the chosen tier, at mean, p99 and peak (None = unknown)."""

    mean: float | None
    p99: float | None
    peak: float | None
    basis: str = ""
