"""Report charts as matplotlib Figures for a notebook: ``Report.plot(name)``.

Each chart answers one question and is titled by it; the specs are drawn by
:func:`kvadvisor.report.charts.draw`, the same code and style as the HTML report's SVG.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING

from kvadvisor.errors import ConfigError
from kvadvisor.report import deployments
from kvadvisor.report.charts import ChartSpec, Line, Mark, draw
from kvadvisor.report.html.chartviews import binary_compact
from kvadvisor.report.serieslabels import series_labels
from kvadvisor.results.replay import ReplaySeriesKey
from kvadvisor.results.report import AdviceReport
from kvadvisor.results.series import Series, SeriesKey
from kvadvisor.units import BYTES_PER_GB

if TYPE_CHECKING:  # matplotlib loads only when a chart is drawn
    from matplotlib.figure import Figure


class NoChartError(ConfigError):
    """The report lacks what a chart draws (the message says why)."""


def _candidates(report: AdviceReport) -> tuple[ChartSpec, tuple[tuple[str, float, float], ...]]:
    """$/h against TTFT at the target's percentile, the target marked, the pick labelled.

    Every provider's chosen candidate is a star; the primary one (or, when none meets the
    targets, the closest miss) carries its label.
    """
    vs = deployments.verdict_set(report)
    if vs is None:
        raise NoChartError(
            "no 'candidates' chart: no deployment search ran "
            f"({report.unavailable.get('recommendation', 'see report.unavailable')})"
        )
    key = next((k for k in vs.slo.targets if k.startswith("ttft_")), "ttft_p99_s")
    pct = "p90" if key == "ttft_p90_s" else "p99"
    lines, labels, stars = [], [], []
    for v in vs.verdicts:
        pts = [
            (getattr(c, f"ttft_{pct}_s"), c.usd_per_hour, c)
            for c in v.candidates
            if c.usd_per_hour is not None and getattr(c, f"ttft_{pct}_s") is not None
        ]
        if not pts:
            continue
        pts.sort(key=lambda p: p[1])
        lines.append(Line(v.provider, tuple(p[0] for p in pts), tuple(p[1] for p in pts), "points"))
        stars += [(x, y) for x, y, c in pts if c.lost is None]
        if v.provider == vs.primary:
            labels += [(f"chosen: {v.provider} {c.label}", x, y) for x, y, c in pts if not c.lost]
        miss = v.closest
        if v.provider == vs.closest and miss is not None and miss.usd_per_hour is not None:
            if (reached := miss.reached.get(key)) is not None:
                labels.append((f"closest: {v.provider} {miss.label}", reached, miss.usd_per_hour))
                stars.append((reached, miss.usd_per_hour))
    if not lines:
        raise NoChartError("no 'candidates' chart: no priced candidate was replayed")
    xs = [x for line in lines for x in line.x]
    marks = ()
    if key in vs.slo.targets:
        marks = (Mark("x", vs.slo.targets[key], f"target {deployments.target_name(key)}"),)
        xs.append(vs.slo.targets[key])
    if stars:
        what = "chosen" if vs.primary is not None else "closest to the targets"
        lines.append(Line(what, tuple(x for x, _ in stars), tuple(y for _, y in stars), "star"))
    spec = ChartSpec(
        key="plot-candidates",
        title=f"Which deployments meet TTFT {pct}, at what cost?",
        x_title=f"TTFT {pct} (s{', log scale' if max(xs) > 20 * min(xs) > 0 else ''})",
        y_title="on-demand cost ($/h)",
        lines=tuple(lines),
        marks=marks,
        log_x=max(xs) > 20 * min(xs) > 0,
    )
    return spec, tuple(labels)


def _cache_curve(report: AdviceReport) -> ChartSpec:
    """Token hit ratio against LRU capacity, each tier's capacity marked."""
    pc = report.prefix_cache
    curves = [c for c in pc.curve if c.x] if pc is not None else []
    if pc is None or not curves:
        why = report.unavailable.get("prefix_cache", "the trace has no block hashes")
        raise NoChartError(f"no 'cache_curve' chart: prefix reuse was not measured ({why})")
    marks = []
    if pc.tiers is not None:
        for tier in pc.tiers.levels:
            cap = tier.effective_capacity_tokens or tier.capacity_tokens
            if cap:
                marks.append(Mark("x", float(cap), f"{tier.name}: {binary_compact(cap)} tokens"))
    if pc.hit_ratio.all is not None:
        marks.append(Mark("y", pc.hit_ratio.all, "unbounded cache, all requests"))
    lo = min(min(c.x) for c in curves)
    hi = max(max(c.x) for c in curves)
    ticks = tuple(float(1 << k) for k in range(10, 41, 2) if lo / 2 <= (1 << k) <= hi * 2)
    return ChartSpec(
        key="plot-cache-curve",
        title="How much prompt reuse does each cache size catch?",
        x_title="LRU cache capacity (tokens, log scale)",
        y_title="token hit ratio (%)",
        lines=tuple(Line(series_labels(c).legend, c.x, c.y, "step") for c in curves),
        marks=tuple(marks),
        log_x=True,
        y_percent=True,
        x_ticks=ticks,
        x_tick_labels=tuple(binary_compact(t) for t in ticks),
    )


def _stage_split(report: AdviceReport) -> ChartSpec:
    """GPU time per stage (GPU-hours), the closed loop beside its open-loop bound."""
    s = report.stage_split
    if s is None:
        why = report.unavailable.get("stage_split", "see report.unavailable")
        raise NoChartError(f"no 'stage_split' chart: the stage split was not computed ({why})")
    hours = 3600.0
    what = "closed-loop replay" if s.source == "replay" else str(s.source)
    lines = [Line(what, (0, 1), (s.prefill_s / hours, s.decode_s / hours), "bar")]
    if s.open_loop_prefill_s is not None and s.open_loop_decode_s is not None:
        lines.append(
            Line(
                "open-loop bound",
                (0, 1),
                (s.open_loop_prefill_s / hours, s.open_loop_decode_s / hours),
                "bar",
            )
        )
    return ChartSpec(
        key="plot-stage-split",
        title="Where does the GPU time go: prefill or decode?",
        x_title="stage",
        y_title="GPU time (GPU-hours)",
        lines=tuple(lines),
        categories=("prefill", "decode"),
    )


def _series_spec(series: Series | None, key: str, title: str, why: str, **kw) -> ChartSpec:
    """One model series drawn as it is, titled by the question it answers."""
    if series is None or not series.x:
        raise NoChartError(f"no '{key}' chart: {why}")
    words = series_labels(series)
    return ChartSpec(
        key=f"plot-{key}",
        title=title,
        x_title=f"{words.x_label} ({series.x_unit})" if series.x_unit else words.x_label,
        y_title=f"{words.y_label} ({series.y_unit})" if series.y_unit else words.y_label,
        lines=(Line(words.legend, series.x, series.y, series.kind.value),),
        y_integer=series.y_unit == "count",
        **kw,
    )


def _arrivals(report: AdviceReport) -> ChartSpec:
    return _series_spec(
        report.trace.arrivals,
        "arrivals",
        "How steady is the load over time?",
        "the trace is empty or has no arrival times",
    )


def _lengths(report: AdviceReport, which: str) -> ChartSpec:
    hist = report.trace.input_tokens_hist if which == "input" else report.trace.output_tokens_hist
    if hist is not None:
        # Empty bins at either end only stretch the axis.
        full = [i for i, y in enumerate(hist.y) if y > 0]
        if full:
            lo, hi = full[0], full[-1] + 1
            hist = dataclasses.replace(hist, x=hist.x[lo:hi], y=hist.y[lo:hi])
    return _series_spec(
        hist,
        f"{which}_lengths",
        f"How long are the {which}s, in tokens?",
        "the trace is empty",
        log_x=True,
    )


def _io(report: AdviceReport, which: str) -> ChartSpec:
    """KV write (prefill misses) or read (prefix hits) demand over time, in GB/s."""
    key = SeriesKey.WRITE_DEMAND if which == "write" else SeriesKey.READ_DEMAND
    io = report.io
    series = next((s for s in io.series if s.key is key), None) if io is not None else None
    if series is None or not series.x:
        # Reads are prefix hits: without block hashes nothing says which prompt tokens hit.
        why = " (reads need prefix hits: the trace has no block hashes)" if which == "read" else ""
        raise NoChartError(f"no 'kv_{which}s' chart: KV {which} demand was not measured{why}")
    rate = io.write if which == "write" else io.read
    marks = tuple(
        Mark("y", v / BYTES_PER_GB, label)
        for label, v in (("mean", rate.mean_bytes_per_s), ("p99", rate.p99_bytes_per_s))
        if v is not None
    )
    return ChartSpec(
        key=f"plot-kv-{which}s",
        title=f"How much KV must storage {'absorb' if which == 'write' else 'serve'} over time?",
        x_title=f"time ({series.x_unit})",
        y_title=f"KV {which} demand (GB/s)",
        lines=(Line(f"{which} demand", series.x, tuple(y / BYTES_PER_GB for y in series.y)),),
        marks=marks,
    )


def _ttft(report: AdviceReport) -> ChartSpec:
    """The replayed TTFT distribution of the recommended deployment, the target marked."""
    res = report.replay
    s = next((s for s in res.series if s.kind is ReplaySeriesKey.TTFT_CDF), None) if res else None
    if s is None or not s.x:
        why = report.unavailable.get("replay", "no TTFT was replayed")
        raise NoChartError(f"no 'ttft' chart: the recommended deployment was not replayed ({why})")
    marks = tuple(
        Mark("x", v, f"target {deployments.target_name(k)}")
        for k, v in res.slo.targets.items()
        if k.startswith("ttft_")
    )
    return ChartSpec(
        key="plot-ttft",
        title="How long do requests wait for their first token?",
        x_title="TTFT (s, log scale)" if min(s.x) > 0 else "TTFT (s)",
        y_title="share of requests at or below",
        lines=(Line("replayed TTFT", s.x, s.y, "step"),),
        marks=marks,
        log_x=min(s.x) > 0,
        y_percent=True,
    )


# name -> what draws it; docs/api.md lists them with the question each answers.
PLOTS: dict[str, Callable[[AdviceReport], ChartSpec]] = {
    "candidates": lambda r: _candidates(r)[0],
    "cache_curve": _cache_curve,
    "stage_split": _stage_split,
    "arrivals": _arrivals,
    "input_lengths": lambda r: _lengths(r, "input"),
    "output_lengths": lambda r: _lengths(r, "output"),
    "kv_writes": lambda r: _io(r, "write"),
    "kv_reads": lambda r: _io(r, "read"),
    "ttft": _ttft,
}


def plot(report: AdviceReport, name: str) -> Figure:
    """The chart ``name`` of ``report`` as a matplotlib Figure (ConfigError: unknown name)."""
    if name not in PLOTS:
        close = difflib.get_close_matches(name, PLOTS, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ConfigError(f"no chart named '{name}'; {hint}the charts are: {', '.join(PLOTS)}")
    if name == "candidates":
        spec, labels = _candidates(report)
        fig = draw(spec)
        ax = fig.axes[0]
        for text, x, y in labels:
            ax.annotate(text, (x, y), xytext=(6, 6), textcoords="offset points", fontsize=8)
        return fig
    return draw(PLOTS[name](report))
