"""One builder per report chart: the ChartSpec the HTML page draws and ``Report.plot`` returns.

Each chart is titled by the question it answers. The HTML sections add captions and SVG
(report/html/); the notebook draws the same spec as a matplotlib Figure (report/plots.py), so
the two never drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvadvisor.report import deployments, fmt
from kvadvisor.report.charts import HALF_FIG_SIZE_IN, ChartSpec, Line, Mark, PointLabel
from kvadvisor.report.serieslabels import series_labels
from kvadvisor.results.common import IoRate
from kvadvisor.results.replay import ReplayResult, ReplaySeriesKey
from kvadvisor.results.report import AdviceReport, IoDemand, PrefixCache, StageSplit, TraceSummary
from kvadvisor.results.series import Series, SeriesKey
from kvadvisor.units import BYTES_PER_GB

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

# The replay's latency distributions: (series, the metric's name, key suffix, question).
LATENCY_CDFS = (
    (ReplaySeriesKey.TTFT_CDF, "Time to first token", "ttft", "How long until the first token?"),
    (ReplaySeriesKey.TPOT_CDF, "Time per output token", "tpot", "How fast do later tokens come?"),
)

# The legend of the other providers' picks on the answer chart (its caption explains them).
ANOTHER_PICK = "another provider's pick"


def _axis(label: str, unit: str) -> str:
    return f"{label} ({unit})" if unit else label


def title(series: Series) -> str:
    """The question a series' chart answers (its name, capitalised, when none is set)."""
    if series.key in QUESTIONS:
        return QUESTIONS[series.key]
    name = series_labels(series).name
    return name[:1].upper() + name[1:]


def x_title(series: Series) -> str:
    """The x axis title of a series, with its unit."""
    return _axis(series_labels(series).x_label, series.x_unit)


def y_title(series: Series) -> str:
    """The y axis title of a series, with its unit."""
    return _axis(series_labels(series).y_label, series.y_unit)


def binary_compact(value: float) -> str:
    """16384 -> 16K, 1048576 -> 1M: capacities in tokens are quoted in powers of two."""
    for scale, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if value >= scale:
            return f"{fmt.number(value / scale)}{suffix}"
    return fmt.number(value)


def series_spec(series: Series, key: str, **kw: Any) -> ChartSpec:
    """One model ``Series`` drawn as it is (titles and units from the series itself)."""
    return ChartSpec(
        key=key,
        title=title(series),
        x_title=x_title(series),
        y_title=y_title(series),
        lines=(Line(series_labels(series).legend, series.x, series.y, series.kind),),
        y_integer=series.y_unit == "count",
        **kw,
    )


def arrivals_spec(t: TraceSummary) -> ChartSpec | None:
    """Arrivals over time with the mean rate marked (None: no arrival series)."""
    if t.arrivals is None or not t.arrivals.x:
        return None
    marks = ()
    if t.arrival_rate_per_s:
        marks = (Mark("y", t.arrival_rate_per_s, f"mean {fmt.number(t.arrival_rate_per_s)}/s"),)
    return series_spec(t.arrivals, "workload-arrivals", marks=marks)


def histogram_spec(series: Series, key: str) -> ChartSpec:
    """A doubling-bin histogram as labelled bars ("2K" = [2048, 4096)), empty ends trimmed."""
    ys = series.y
    nonzero = [i for i, y in enumerate(ys) if y > 0]
    lo, hi = (nonzero[0], nonzero[-1] + 1) if nonzero else (0, len(ys))
    return ChartSpec(
        key=key,
        title=title(series),
        x_title=x_title(series),
        y_title=y_title(series),
        lines=(Line(series_labels(series).legend, tuple(range(hi - lo)), ys[lo:hi], "bar"),),
        categories=tuple(binary_compact(x) for x in series.x[lo:hi]),
        y_integer=series.y_unit == "count",
        size_in=HALF_FIG_SIZE_IN,
    )


def mrc_spec(pc: PrefixCache) -> ChartSpec | None:
    """The hit-ratio curve with each cache tier's capacity marked (None: nothing to draw).

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
    return ChartSpec(
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
        title=title(series),
        x_title=x_title(series),
        y_title=f"{series_labels(series).y_label} (GB/s)",
        lines=tuple(lines),
        marks=tuple(marks),
    )


def io_spec(io: IoDemand, which: SeriesKey) -> ChartSpec | None:
    """The KV write or read demand chart as the I/O section draws it (None: not measured)."""
    for i, ser in enumerate(io.series):
        if ser.key is which and ser.x:
            rate = io.read if which is SeriesKey.READ_DEMAND else io.write
            return bandwidth_spec(ser, rate, f"io-series-{i}", io.window_s)
    return None


def stage_split_spec(s: StageSplit, replayed: bool) -> ChartSpec:
    """Prefill's and decode's shares of GPU time, of latency and of GPU time without reuse."""
    basis = " (replay)" if replayed else ""
    bound = " (open loop)" if replayed else ""
    shares = [(f"GPU time{basis}", s.prefill_share)]
    if s.latency_prefill_share is not None:
        shares.append((f"latency{bound}", s.latency_prefill_share))
    if s.no_reuse_prefill_share is not None:
        shares.append((f"GPU time, no reuse{bound}", s.no_reuse_prefill_share))
    return ChartSpec(
        key="stages-split",
        title="Which stage takes the time: prefill or decode?",
        x_title="basis of the split",
        y_title="share (%)",
        lines=(
            Line("prefill", tuple(range(len(shares))), tuple(v for _, v in shares), "bar"),
            Line("decode", tuple(range(len(shares))), tuple(1 - v for _, v in shares), "bar"),
        ),
        categories=tuple(name for name, _ in shares),
        y_percent=True,
    )


def slo_targets(report: AdviceReport) -> Mapping[str, float]:
    """The targets the recommended deployment's replay is judged by (the verdict's by default)."""
    if report.replay is not None and report.replay.slo.targets:
        return report.replay.slo.targets
    vs = deployments.verdict_set(report)
    return {} if vs is None else vs.slo.targets


def latency_spec(
    res: ReplayResult, kind: ReplaySeriesKey, prefix: str, targets: Mapping[str, float]
) -> ChartSpec | None:
    """A replayed latency distribution (TTFT or TPOT) over requests, its targets marked.

    None when the metric was not replayed.
    """
    name, key, question = next((n, k, q) for c, n, k, q in LATENCY_CDFS if c is kind)
    s = next((s for s in res.series if s.kind is kind), None)
    if s is None or not s.x:
        return None
    log_x = min(s.x) > 0
    return ChartSpec(
        key=f"{prefix}{key}",
        title=question,
        x_title=f"{key.upper()} (s{', log scale' if log_x else ''})",
        y_title="share of requests at or below",
        lines=(Line(name, s.x, s.y, "step"),),
        # The targets on this metric: where the curve crosses one is the share that meets it.
        marks=tuple(
            Mark("x", v, f"target: {deployments.target_name(k)} {fmt.duration(v)}")
            for k, v in targets.items()
            if k.startswith(f"{key}_")
        ),
        log_x=log_x,
        y_percent=True,
        size_in=HALF_FIG_SIZE_IN,
    )


def _cost(p: deployments.ChartPoint) -> float:
    return p.usd_per_hour


def _cost_line(label: str, points: list[deployments.ChartPoint], kind: str = "points") -> Line:
    """Candidates as markers: TTFT across, $/h up."""
    return Line(label, tuple(p.ttft_s for p in points), tuple(_cost(p) for p in points), kind)


def answer_spec(report: AdviceReport) -> ChartSpec | None:
    """$/h against TTFT at the target's percentile of every priced candidate replayed.

    Log axes: candidates cluster near the target while a few slow ones run far past it. The
    target is a vertical line; the primary's chosen deployment (or, when nothing met the
    targets, the closest miss) is ringed and labelled; other providers' picks are stars.
    None when no priced candidate was replayed.
    """
    vs = deployments.verdict_set(report)
    points = [] if vs is None else deployments.chart_points(vs)
    if vs is None or not points:
        return None
    pct, target = deployments.ttft_target(vs)
    lines = [
        _cost_line(provider, sorted((p for p in points if p.provider == provider), key=_cost))
        for provider in dict.fromkeys(p.provider for p in points)
    ]
    picked = [p for p in points if p.chosen and p.provider != vs.primary]
    if picked:
        lines.append(_cost_line(ANOTHER_PICK, picked, "star"))
    labelled = [p for p in points if p.chosen and p.provider == vs.primary]
    word = "chosen"
    if not labelled:
        labelled = [p for p in points if p.closest and p.provider == (vs.closest or vs.primary)]
        word = "closest miss"
    marks = ()
    if target is not None:
        marks = (Mark("x", target, f"target: TTFT {pct} {fmt.duration(target)}"),)
    return ChartSpec(
        key="deployments-cost-ttft",
        title=f"Which deployment meets TTFT {pct}"
        + (f" ≤ {fmt.duration(target)}" if target is not None else "")
        + " for the least $/h?",
        x_title=f"TTFT {pct} (s, log scale)",
        y_title="on-demand cost ($/h, log scale)",
        lines=tuple(lines),
        marks=marks,
        log_x=True,
        log_y=True,
        point_labels=tuple(
            PointLabel(
                p.ttft_s,
                p.usd_per_hour,
                f"{word}: {p.label}, {deployments.money(p.usd_per_hour)}",
            )
            for p in labelled[:1]
        ),
    )
