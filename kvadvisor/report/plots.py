"""Report charts as matplotlib Figures for a notebook: ``Report.plot(name)``.

Each chart is the HTML report's own (one builder per chart, report/chartspecs.py), drawn by
:func:`kvadvisor.report.charts.draw`, the code that draws the HTML's SVG; a chart the report
lacks the data for raises a ValueError that says why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kvadvisor.checker import did_you_mean
from kvadvisor.errors import ConfigError
from kvadvisor.report import chartspecs, deployments
from kvadvisor.report.charts import ChartSpec, draw
from kvadvisor.results.replay import ReplaySeriesKey
from kvadvisor.results.report import AdviceReport
from kvadvisor.results.series import SeriesKey
from kvadvisor.vocab import SplitSource

if TYPE_CHECKING:  # matplotlib loads only when a chart is drawn
    from matplotlib.figure import Figure


class NoChartError(ConfigError):
    """The report lacks what a chart draws (the message says why)."""


def _candidates(report: AdviceReport) -> ChartSpec:
    spec = chartspecs.answer_spec(report)
    if spec is not None:
        return spec
    if deployments.verdict_set(report) is None:
        raise NoChartError(
            "no 'candidates' chart: no deployment search ran "
            f"({report.unavailable.get('recommendation', 'see report.unavailable')})"
        )
    raise NoChartError("no 'candidates' chart: no priced candidate was replayed")


def _cache_curve(report: AdviceReport) -> ChartSpec:
    pc = report.prefix_cache
    spec = chartspecs.mrc_spec(pc) if pc is not None else None
    if spec is None:
        why = report.unavailable.get("prefix_cache", "the trace has no block hashes")
        raise NoChartError(f"no 'cache_curve' chart: prefix reuse was not measured ({why})")
    return spec


def _stage_split(report: AdviceReport) -> ChartSpec:
    s = report.stage_split
    if s is None:
        why = report.unavailable.get("stage_split", "see report.unavailable")
        raise NoChartError(f"no 'stage_split' chart: the stage split was not computed ({why})")
    # As the HTML's stage section: the replay's split when the chosen deployment was replayed.
    return chartspecs.stage_split_spec(
        s, s.source == SplitSource.REPLAY and report.replay is not None
    )


def _arrivals(report: AdviceReport) -> ChartSpec:
    spec = chartspecs.arrivals_spec(report.trace)
    if spec is None:
        raise NoChartError("no 'arrivals' chart: the trace is empty or has no arrival times")
    return spec


def _lengths(report: AdviceReport, which: str) -> ChartSpec:
    t = report.trace
    hist = t.input_tokens_hist if which == "input" else t.output_tokens_hist
    if hist is None or not hist.x:
        raise NoChartError(f"no '{which}_lengths' chart: the trace is empty")
    return chartspecs.histogram_spec(hist, f"workload-{which}")


def _io(report: AdviceReport, which: str) -> ChartSpec:
    key = SeriesKey.WRITE_DEMAND if which == "write" else SeriesKey.READ_DEMAND
    spec = chartspecs.io_spec(report.io, key) if report.io is not None else None
    if spec is None:
        # Reads are prefix hits: without block hashes nothing says which prompt tokens hit.
        why = " (reads need prefix hits: the trace has no block hashes)" if which == "read" else ""
        raise NoChartError(f"no 'kv_{which}s' chart: KV {which} demand was not measured{why}")
    return spec


def _ttft(report: AdviceReport) -> ChartSpec:
    res = report.replay
    spec = None
    if res is not None:
        targets = chartspecs.slo_targets(report)
        spec = chartspecs.latency_spec(res, ReplaySeriesKey.TTFT_CDF, "replay-", targets)
    if spec is None:
        why = report.unavailable.get("replay", "no TTFT was replayed")
        raise NoChartError(f"no 'ttft' chart: the recommended deployment was not replayed ({why})")
    return spec


# name -> what draws it; docs/api.md lists them with the question each answers.
PLOTS: dict[str, Callable[[AdviceReport], ChartSpec]] = {
    "candidates": _candidates,
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
        hint = did_you_mean(name, PLOTS)
        raise ConfigError(
            f"no chart named '{name}'; {hint + ' ' if hint else ''}the charts are: "
            f"{', '.join(PLOTS)}"
        )
    return draw(PLOTS[name](report))
