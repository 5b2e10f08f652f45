"""The I/O demand section: KV write and read bandwidth, I/O sizes and counts."""

from __future__ import annotations

from markupsafe import Markup

from kvadvisor.report import fmt, summary
from kvadvisor.report.charts import ChartSpec, Line, render_svg
from kvadvisor.report.html.chartviews import bandwidth_chart, series_chart
from kvadvisor.report.html.view import Chart, Section, Table
from kvadvisor.results.common import IoRate
from kvadvisor.results.report import AdviceReport, IoDemand, LoadVsRecompute
from kvadvisor.results.series import SeriesKey
from kvadvisor.units import BYTES_PER_GB, Unit

# The series drawn as bandwidths, with their mean, p99 and peak marked.
DEMAND = (SeriesKey.WRITE_DEMAND, SeriesKey.READ_DEMAND)


def _io_pattern_table(io: IoDemand) -> Table | None:
    patterns = [
        (name, p) for name, p in (("write", io.write_io), ("read", io.read_io)) if p is not None
    ]
    if not patterns:
        return None
    chunk = io.chunk_tokens
    unit = io.io_unit_bytes
    return Table(
        f"I/Os at the chunk size ({fmt.tokens(chunk)} per chunk"
        + (f", device I/O unit {fmt.size(unit)}" if unit else "")
        + ")",
        (
            "",
            "I/Os",
            "mean IOPS",
            "p99 IOPS",
            "peak IOPS",
            "mean I/O size",
            "full chunk",
            "partial chunks",
            "write amplification",
        ),
        tuple(
            (
                name,
                fmt.count(p.ios),
                fmt.number(p.mean_iops),
                fmt.number(p.p99_iops),
                fmt.number(p.peak_iops),
                fmt.size(p.mean_io_bytes),
                fmt.size(p.full_chunk_bytes),
                fmt.count(p.partial_chunk_ios),
                fmt.quantity(p.write_amplification, Unit.MULTIPLE)
                if p.write_amplification
                else "n/a",
            )
            for name, p in patterns
        ),
    )


def io_section(report: AdviceReport) -> Section:
    """KV write and read bandwidth over time (mean, p99, peak marked), I/O sizes and counts."""
    io = report.io
    if io is None:
        return Section("io", "KV I/O demand", missing=summary.why_missing(report, "io"))
    charts, other = _series_charts(io)
    tables = [t for t in (_io_pattern_table(io),) if t is not None]
    if io.load_vs_recompute:
        tables.append(_load_vs_recompute_table(io.load_vs_recompute))
    return Section(
        "io",
        "KV I/O demand",
        _io_lead(report, io),
        charts=tuple(charts),
        notes=io.notes,
        more_title="Every I/O figure: rates, sizes, drive writes, load against recompute",
        more_rows=tuple(_io_rows(io)),
        more_tables=tuple(tables),
        more_charts=tuple(other),
    )


def _io_rows(io: IoDemand) -> list[tuple[str, str]]:
    """Every rate figure of both directions, then drive writes (those measured)."""
    read_known = io.read_known
    rows = [("window", fmt.duration(io.window_s))]
    for what, rate, known in (
        ("write (prefill misses)", io.write, True),
        ("read (prefix hits)", io.read, read_known),
    ):
        if not known:
            rows.append((what, f"{fmt.NOT_MEASURED}: prefix hits unknown"))
            continue
        rows += [
            (f"{what}: mean", fmt.bandwidth(rate.mean_bytes_per_s)),
            (f"{what}: p99", fmt.bandwidth(rate.p99_bytes_per_s)),
            (f"{what}: peak", fmt.bandwidth(rate.peak_bytes_per_s)),
        ]
        if rate.p50_bytes_per_s is not None:
            rows.append((f"{what}: p50", fmt.bandwidth(rate.p50_bytes_per_s)))
        if rate.bytes_total is not None:
            rows.append((f"{what}: total", fmt.size(rate.bytes_total)))
    for name, text in (
        ("written per day", fmt.size(io.write_bytes_per_day)),
        ("drive capacity assumed", fmt.size(io.drive_capacity_bytes)),
        ("drive writes per day", fmt.quantity(io.drive_writes_per_day, Unit.DWPD)),
    ):
        if text != fmt.NOT_MEASURED:
            rows.append((name, text))
    return rows


def _io_lead(report: AdviceReport, io: IoDemand) -> str:
    """Peak against mean write demand, the read demand, and what the figures are of."""
    read_known = io.read_known
    mean_w, peak_w = io.write.mean_bytes_per_s, io.write.peak_bytes_per_s
    ratio = f"{fmt.number(peak_w / mean_w)}×" if mean_w and peak_w is not None else "n/a"
    lead = (
        f"Prefill writes average {fmt.bandwidth(mean_w)} but peak at {fmt.bandwidth(peak_w)} "
        f"({ratio} the mean)"
        + (
            f"; prefix hits are read back at {fmt.bandwidth(io.read.mean_bytes_per_s)} on average"
            if read_known
            else "; read demand is unknown without prefix hits"
        )
        + ". Storage sized for the peak runs at the mean."
    )
    if report.replay is not None:
        lead += (
            " These are the whole trace's demand, open loop (no fleet bounds it); the chosen "
            "deployment's replayed rates per node are with its details above."
        )
    return lead


def _series_charts(io: IoDemand) -> tuple[list[Chart], list[Chart]]:
    """The demand charts (a bar summary first when no demand series exists), and the others."""
    charts: list[Chart] = []
    other: list[Chart] = []  # series beside the demand (requests in flight, decode batch)
    series = io.series
    for i, ser in enumerate(series):
        if not ser.x:
            continue
        if ser.key in DEMAND:
            rate = io.read if ser.key is SeriesKey.READ_DEMAND else io.write
            charts.append(bandwidth_chart(ser, rate, f"io-series-{i}", io.window_s))
        else:
            other.append(series_chart(ser, f"io-series-{i}"))
    if not any(ser.key in DEMAND for ser in series):
        charts.insert(0, _summary_chart(io))
    return charts, other


def _summary_chart(io: IoDemand) -> Chart:
    """Mean, p99 and peak bandwidth as bars, for a report without demand series."""
    read_known = io.read_known

    def gbps(rate: IoRate) -> tuple[float, float, float]:
        vals = (rate.mean_bytes_per_s, rate.p99_bytes_per_s, rate.peak_bytes_per_s)
        return tuple((v or 0.0) / BYTES_PER_GB for v in vals)  # type: ignore[return-value]

    # A side whose demand is unknown (null, e.g. no prefix hits known) gets no bars.
    lines = [
        Line(name, (0.0, 1.0, 2.0), gbps(rate), "bar")
        for name, rate, known in (
            ("write (prefill)", io.write, True),
            ("read (prefix hits)", io.read, read_known),
        )
        if known and rate.mean_bytes_per_s is not None
    ]
    spec = ChartSpec(
        key="io-summary",
        title=f"What KV bandwidth must storage sustain per {fmt.duration(io.window_s)} window?",
        x_title="statistic over windows",
        y_title="bandwidth (GB/s)",
        lines=tuple(lines),
        categories=("mean", "p99", "peak"),
    )
    return Chart(spec.key, "", Markup(render_svg(spec)))


def _load_vs_recompute_table(lvr: tuple[LoadVsRecompute, ...]) -> Table:
    """The break-even prefix length per tier, above which loading beats recomputing."""
    return Table(
        "Load against recompute: the prefix length above which loading KV from a tier "
        "beats recomputing it",
        (
            "tier",
            "bandwidth",
            "latency",
            "break-even prefix",
            "hit tokens below it",
            "source",
        ),
        tuple(
            (
                x.tier,
                fmt.bandwidth(x.bandwidth_bytes_per_s),
                fmt.duration(x.latency_s),
                fmt.tokens(x.break_even_tokens)
                if x.break_even_tokens is not None
                else "recompute always wins",
                fmt.percent(x.hit_token_share_below),
                x.source,
            )
            for x in lvr
        ),
        whole=(0,),
    )
