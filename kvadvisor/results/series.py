"""Chart data: one series a producer attaches to its section and a renderer draws."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvadvisor.vocab import Vocab


class SeriesKey(Vocab):
    """What a series measures: code finds a series by this, never by its caption."""

    ARRIVALS = "arrivals"
    INPUT_LENGTHS = "input_lengths"
    OUTPUT_LENGTHS = "output_lengths"
    PREFILL_SHARE = "prefill_share"  # requests by their prefill share of GPU time
    WRITE_DEMAND = "write_demand"
    READ_DEMAND = "read_demand"
    REQUESTS_IN_FLIGHT = "requests_in_flight"
    PEAK_DECODE_BATCH = "peak_decode_batch"
    HIT_RATIO_ALL = "hit_ratio_all"  # the LRU curve over all requests
    HIT_RATIO_STEADY = "hit_ratio_steady"  # the LRU curve after the warm-up
    REUSE_TIMES = "reuse_times"


class SeriesKind(Vocab):
    """How a series is drawn."""

    LINE = "line"
    STEP = "step"
    BAR = "bar"


@dataclass(frozen=True)
class Series:
    """One chart-ready series (x and y of equal length) in its units, keyed by what it measures.

    Producers attach these to their sections; renderers draw them and never compute them, and
    make its caption and axis labels from ``key`` (``report.serieslabels``). When each point
    merges several consecutive windows (a long series kept small), ``y`` is their mean and
    ``y_max`` their largest value, so a chart can show the peaks the merge would hide; ``y_max``
    is empty when each point is one window. ``window_s`` is the window a series of per-window
    counts counts over (the arrivals), None for the others.
    """

    x_unit: str
    y_unit: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    kind: SeriesKind = SeriesKind.LINE
    y_max: tuple[float, ...] = ()
    window_s: float | None = None
    key: SeriesKey = field(kw_only=True)
