"""What a chart series is called: its caption and axis labels, made from its key and window."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvadvisor.results.series import Series, SeriesKey
from kvadvisor.units.format import number


@dataclass(frozen=True)
class SeriesLabels:
    """A series' words: ``name`` (its caption), its axes' labels, and ``legend``.

    ``legend`` names the series where several share one chart (the two hit-ratio curves);
    elsewhere it is the y label.
    """

    name: str
    x_label: str
    y_label: str
    legend: str


# name, x label, y label; {window} is the series' counting window in seconds.
_WORDS: dict[SeriesKey, tuple[str, str, str]] = {
    SeriesKey.ARRIVALS: (
        "arrivals per {window} s window",
        "time since first request",
        "arrival rate",
    ),
    SeriesKey.INPUT_LENGTHS: (
        "input length distribution",
        "input length, bin lower edge",
        "requests",
    ),
    SeriesKey.OUTPUT_LENGTHS: (
        "output length distribution",
        "output length, bin lower edge",
        "requests",
    ),
    SeriesKey.PREFILL_SHARE: ("requests by prefill share of GPU time", "prefill share", "requests"),
    SeriesKey.WRITE_DEMAND: ("KV write demand", "time", "write bandwidth"),
    SeriesKey.READ_DEMAND: ("KV read demand", "time", "read bandwidth"),
    SeriesKey.REQUESTS_IN_FLIGHT: ("requests in flight", "time", "requests"),
    SeriesKey.PEAK_DECODE_BATCH: ("peak decode batch", "time", "requests"),
    SeriesKey.HIT_RATIO_ALL: (
        "token hit ratio (all requests)",
        "LRU cache capacity",
        "token hit ratio",
    ),
    SeriesKey.HIT_RATIO_STEADY: (
        "token hit ratio (steady state)",
        "LRU cache capacity",
        "token hit ratio",
    ),
    SeriesKey.REUSE_TIMES: (
        "time since a hit block was last used",
        "reuse time (bin upper edge)",
        "hit tokens",
    ),
}
_LEGENDS = {SeriesKey.HIT_RATIO_ALL: "all requests", SeriesKey.HIT_RATIO_STEADY: "steady state"}


def labels_for(key: SeriesKey, window_s: float | None = None) -> SeriesLabels:
    """The words of a series measuring ``key`` (``window_s``: its counting window, if any)."""
    name, x_label, y_label = _WORDS[key]
    if window_s is not None:
        name = name.format(window=number(window_s))
    return SeriesLabels(name, x_label, y_label, _LEGENDS.get(key, y_label))


def series_labels(series: Series) -> SeriesLabels:
    """The words of ``series``."""
    return labels_for(series.key, series.window_s)


def with_series_labels(doc: Any) -> Any:
    """A report's plain form (``to_dict()``) with each series' name and axis labels added.

    The JSON contract carries them beside the numbers; the model carries only the key.
    """
    if isinstance(doc, dict):
        out = {k: with_series_labels(v) for k, v in doc.items()}
        key = doc.get("key")
        if isinstance(key, SeriesKey) and "x" in doc and "y" in doc:
            words = labels_for(key, doc.get("window_s"))
            out |= {"name": words.name, "x_label": words.x_label, "y_label": words.y_label}
        return out
    if isinstance(doc, (list, tuple)):
        return type(doc)(with_series_labels(v) for v in doc)
    return doc
