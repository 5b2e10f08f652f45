"""Chart views: model series, histograms and curves turned into captioned inline SVG."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from kvadvisor.report import fmt
from kvadvisor.report.charts import HALF_FIG_SIZE_IN, ChartSpec, Line, Mark, render_svg
from kvadvisor.report.html.view import Chart
from kvadvisor.report.serieslabels import series_labels
from kvadvisor.results.common import IoRate
from kvadvisor.results.report import CacheReuse, PrefixCache
from kvadvisor.results.series import Series, SeriesKey
from kvadvisor.units import BYTES_PER_GB


def _axis(label: str, unit: str) -> str:
    return f"{label} ({unit})" if unit else label


# Each chart is titled by the question it answers; the series' name says what is drawn.
QUESTIONS: dict[SeriesKey, str] = {
    SeriesKey.ARRIVALS: "How bursty is the traffic?",
    SeriesKey.INPUT_LENGTHS: "How long are the prompts?",
    SeriesKey.OUTPUT_LENGTHS: "How long are the outputs?",
    SeriesKey.PREFILL_SHARE: "Which requests are prefill-heavy?",
    SeriesKey.WRITE_DEMAND: "What write bandwidth must the KV tiers absorb?",
    SeriesKey.READ_DEMAND: "What read bandwidth do prefix hits ask of the KV tiers?",
    SeriesKey.REQUESTS_IN_FLIGHT: "How many requests run at once?",
    SeriesKey.PEAK_DECODE_BATCH: "How large does the decode batch get?",
}


def _title(series: Series) -> str:
    if series.key in QUESTIONS:
        return QUESTIONS[series.key]
    name = series_labels(series).name
    return name[:1].upper() + name[1:]


def _x_title(series: Series) -> str:
    return _axis(series_labels(series).x_label, series.x_unit)


def _y_title(series: Series) -> str:
    return _axis(series_labels(series).y_label, series.y_unit)


def series_chart(series: Series, key: str, caption: str = "", **kw: Any) -> Chart:
    """A chart for one model ``Series`` (titles and units from the series itself)."""
    spec = ChartSpec(
        key=key,
        title=_title(series),
        x_title=_x_title(series),
        y_title=_y_title(series),
        lines=(Line(series_labels(series).legend, series.x, series.y, series.kind),),
        y_integer=series.y_unit == "count",
        **kw,
    )
    return Chart(key, caption, Markup(render_svg(spec)))


def binary_compact(value: float) -> str:
    """16384 -> 16K, 1048576 -> 1M: capacities in tokens are quoted in powers of two."""
    for scale, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if value >= scale:
            return f"{fmt.number(value / scale)}{suffix}"
    return fmt.number(value)


def histogram_chart(series: Series, key: str, caption: str) -> Chart:
    """A doubling-bin histogram as labelled bars ("2K" = [2048, 4096)), empty ends trimmed."""
    ys = series.y
    nonzero = [i for i, y in enumerate(ys) if y > 0]
    lo, hi = (nonzero[0], nonzero[-1] + 1) if nonzero else (0, len(ys))
    labels = tuple(binary_compact(x) for x in series.x[lo:hi])
    spec = ChartSpec(
        key=key,
        title=_title(series),
        x_title=_x_title(series),
        y_title=_y_title(series),
        lines=(Line(series_labels(series).legend, tuple(range(hi - lo)), ys[lo:hi], "bar"),),
        categories=labels,
        y_integer=series.y_unit == "count",
        size_in=HALF_FIG_SIZE_IN,
    )
    return Chart(key, caption, Markup(render_svg(spec)), half=True)


def mrc_chart(pc: PrefixCache) -> Chart | None:
    """The hit-ratio curve with each cache tier's capacity marked.

    The whole curve when the model carries it, else the standard capacities.
    """
    curves = [c for c in pc.curve if c.x]
    if curves:
        lines = tuple(Line(series_labels(c).legend, c.x, c.y, "step") for c in curves)
    else:
        bounded = [p for p in pc.mrc if p.capacity_tokens is not None]
        if not bounded or all(p.hit_ratio_all is None for p in bounded):
            return None
        xs = tuple(float(p.capacity_tokens or 0) for p in bounded)
        lines = (
            Line("all requests", xs, tuple(p.hit_ratio_all or 0.0 for p in bounded)),
            Line("steady state", xs, tuple(p.hit_ratio_steady or 0.0 for p in bounded)),
        )
    marks = []
    if pc.tiers is not None:
        for tier in pc.tiers.levels:
            cap = tier.effective_capacity_tokens or tier.capacity_tokens
            if cap:
                marks.append(Mark("x", float(cap), f"{tier.name}: {binary_compact(cap)} tokens"))
    if pc.hit_ratio.all is not None:
        marks.append(Mark("y", pc.hit_ratio.all, "unbounded cache, all requests"))
    ticks = tuple(float(1 << k) for k in range(10, 41, 2))
    lo = min(min(line.x) for line in lines)
    hi = max(max(line.x) for line in lines)
    shown = tuple(t for t in ticks if lo / 2 <= t <= hi * 2)
    spec = ChartSpec(
        key="prefix-mrc",
        title="How much cache capacity does the prefix reuse need?",
        x_title="cache capacity (tokens, log scale)",
        y_title="token hit ratio (%)",
        lines=lines,
        marks=tuple(marks),
        log_x=True,
        y_percent=True,
        x_ticks=shown,
        x_tick_labels=tuple(binary_compact(x) for x in shown),
    )
    caption = "Where the curve flattens, more capacity stops paying."
    if marks and pc.tiers is not None:
        caption += " Vertical lines: the capacity of each cache tier."
    return Chart(spec.key, caption, Markup(render_svg(spec)))


def reuse_chart(reuse: CacheReuse) -> Chart | None:
    """Hit tokens by time since their block was last used (log-spaced bins, upper edges)."""
    h = reuse.histogram
    if h is None or len(h.x) < 2:
        return None
    uppers = h.x
    ratio = uppers[1] / uppers[0] if uppers[0] > 0 else 2.0
    lowers = (uppers[0] / ratio, *uppers[:-1])
    spec = ChartSpec(
        key="prefix-reuse",
        title="How long must a cache keep a block for it to be hit?",
        x_title="reuse time (s, log scale)",
        y_title=_y_title(h),
        lines=(
            Line(
                series_labels(h).legend,
                lowers,
                h.y,
                "bar",
                widths=tuple(u - lo for u, lo in zip(uppers, lowers, strict=True)),
            ),
        ),
        marks=tuple(
            Mark("x", q.seconds, f"p{round(q.quantile * 100)} {fmt.duration(q.seconds)}")
            for q in reuse.quantiles
        ),
        log_x=True,
    )
    return Chart(
        spec.key,
        "A retention (TTL) longer than the reuse time of most hits keeps them; the table "
        "below gives the TTL and capacity for each share of hits.",
        Markup(render_svg(spec)),
    )


def bandwidth_spec(series: Series, rate: IoRate | None, key: str, window_s: float) -> ChartSpec:
    """The chart of a bandwidth series in GB/s with its mean, p99 and peak marked.

    When each point merges several windows, the largest window of each point is drawn first
    as a shaded envelope, so the chart reaches the p99 and the peak its marks state.
    """
    marks = []
    if rate is not None:
        for label, v in (
            ("mean", rate.mean_bytes_per_s),
            ("p99", rate.p99_bytes_per_s),
            ("peak", rate.peak_bytes_per_s),
        ):
            if v is not None:
                marks.append(Mark("y", v / BYTES_PER_GB, f"{label} {fmt.bandwidth(v)}"))
    lines = []
    step_s = series.x[1] - series.x[0] if len(series.x) > 1 else window_s
    if series.y_max:
        lines.append(
            Line(
                f"highest {fmt.duration(window_s)} window in each {fmt.duration(step_s)}",
                series.x,
                tuple(v / BYTES_PER_GB for v in series.y_max),
                "area",
            )
        )
    lines.append(
        Line(
            f"mean over {fmt.duration(step_s)}" if series.y_max else series_labels(series).legend,
            series.x,
            tuple(v / BYTES_PER_GB for v in series.y),
            series.kind,
        )
    )
    return ChartSpec(
        key=key,
        title=_title(series),
        x_title=_x_title(series),
        y_title=f"{series_labels(series).y_label} (GB/s)",
        lines=tuple(lines),
        marks=tuple(marks),
    )


def bandwidth_chart(series: Series, rate: IoRate | None, key: str, window_s: float) -> Chart:
    """A bandwidth time series in GB/s with its mean, p99 and peak marked (see bandwidth_spec)."""
    spec = bandwidth_spec(series, rate, key, window_s)
    caption = (
        "Storage sized for the peak runs at the mean most of the time; p99 is the level to "
        "size a tier for, with a buffer for what lies above it."
    )
    step_s = series.x[1] - series.x[0] if len(series.x) > 1 else window_s
    if series.y_max:
        caption += (
            f" Each point covers {fmt.duration(step_s)}: the line is the mean of its "
            f"{fmt.duration(window_s)} windows, the shaded area the highest of them; mean, p99 "
            f"and peak are over the {fmt.duration(window_s)} windows themselves."
        )
    elif step_s > 1.5 * window_s:
        # Merged windows without their maxima: say so, or the line sits visibly below the
        # p99 and peak drawn from the unmerged windows.
        caption += (
            f" Each point averages {fmt.duration(step_s)} of {fmt.duration(window_s)} windows; "
            f"mean, p99 and peak are over the {fmt.duration(window_s)} windows themselves."
        )
    return Chart(key, caption, Markup(render_svg(spec)))
