"""Chart views: the shared chart specs (report/chartspecs.py) as captioned inline SVG."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from kvadvisor.report import chartspecs, fmt
from kvadvisor.report.charts import HALF_FIG_SIZE_IN, ChartSpec, Line, Mark, render_svg
from kvadvisor.report.html.view import Chart
from kvadvisor.report.serieslabels import series_labels
from kvadvisor.results.common import IoRate
from kvadvisor.results.report import CacheReuse, PrefixCache
from kvadvisor.results.series import Series


def chart(spec: ChartSpec, caption: str = "") -> Chart:
    """A spec drawn as inline SVG under its caption; half width when the spec is."""
    return Chart(spec.key, caption, Markup(render_svg(spec)), half=spec.size_in == HALF_FIG_SIZE_IN)


def series_chart(series: Series, key: str, caption: str = "", **kw: Any) -> Chart:
    """A chart for one model ``Series`` (titles and units from the series itself)."""
    return chart(chartspecs.series_spec(series, key, **kw), caption)


def histogram_chart(series: Series, key: str, caption: str) -> Chart:
    """A doubling-bin histogram as labelled bars ("2K" = [2048, 4096)), empty ends trimmed."""
    return chart(chartspecs.histogram_spec(series, key), caption)


def mrc_chart(pc: PrefixCache) -> Chart | None:
    """The hit-ratio curve with each cache tier's capacity marked (None: no curve)."""
    spec = chartspecs.mrc_spec(pc)
    if spec is None:
        return None
    caption = "Where the curve flattens, more capacity stops paying."
    if any(m.axis == "x" for m in spec.marks):
        caption += " Vertical lines: the capacity of each cache tier."
    return chart(spec, caption)


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
        y_title=chartspecs.y_title(h),
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
    return chart(
        spec,
        "A retention (TTL) longer than the reuse time of most hits keeps them; the table "
        "below gives the TTL and capacity for each share of hits.",
    )


def bandwidth_chart(series: Series, rate: IoRate | None, key: str, window_s: float) -> Chart:
    """A bandwidth time series in GB/s with its mean, p99 and peak marked (see bandwidth_spec)."""
    spec = chartspecs.bandwidth_spec(series, rate, key, window_s)
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
    return chart(spec, caption)
