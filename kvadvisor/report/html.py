"""HTML renderer: one self-contained page that explains the recommendation (no CDN, no scripts).

First :func:`build_view` turns the advice model into plain ``HtmlView`` dataclasses holding every
formatted value and chart (coverage.py's HtmlDataGeneration idiom); then the jinja2 template only
places them, with autoescape on. Charts are inline SVG from :mod:`kvadvisor.report.charts`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from kvadvisor.advise.model import AdviceReport, IoRate, Series
from kvadvisor.report import fmt, summary
from kvadvisor.report.charts import HALF_FIG_SIZE_IN, ChartSpec, Line, Mark, render_svg
from kvadvisor.report.jsonreport import clean
from kvadvisor.units import BYTES_PER_GB

# Fields shown by a dedicated part of a section, not in its generic list of numbers.
_HANDLED = {
    "trace": {
        "path",
        "format",
        "columns",
        "dropped",
        "notes",
        "capabilities",
        "sha256",
        "requests",
        "duration_s",
        "block_tokens",
        "input_tokens_total",
        "output_tokens_total",
        "arrival_rate_per_s",
        "arrivals",
        "input_tokens_hist",
        "output_tokens_hist",
        "models",
    },
    "prefix_cache": {"hit_ratio", "mrc", "warmup_fraction"},
    "io": {"write", "read", "window_s"},
    "stage_split": {"source", "prefill_s", "decode_s", "prefill_share"},
}


@dataclass(frozen=True)
class Chart:
    """One rendered chart: an id for the page, a caption, and the SVG markup."""

    key: str
    caption: str
    svg: Markup
    half: bool = False  # shown side by side with the next half-width chart


@dataclass(frozen=True)
class Table:
    """A small table of already formatted cells."""

    caption: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Section:
    """One report section: a lead sentence, numbers, charts and tables, or why it is missing."""

    id: str
    title: str
    lead: str = ""
    rows: tuple[tuple[str, str], ...] = ()
    charts: tuple[Chart, ...] = ()
    tables: tuple[Table, ...] = ()
    missing: str | None = None


@dataclass(frozen=True)
class FindingView:
    """A finding as shown: severity class for styling, evidence as formatted pairs."""

    code: str
    severity: str
    severity_class: str
    stage: str
    message: str
    evidence: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class VerdictCard:
    """One stage's recommendation card."""

    stage: str
    role: str
    items: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class HtmlView:
    """Everything the template shows, formatted; the template does no arithmetic."""

    title: str
    headline: str
    version: str
    generated_at: str
    cards: tuple[VerdictCard, ...]
    verdict_missing: str | None
    key_numbers: tuple[summary.KeyNumber, ...]
    finding_counts: tuple[tuple[str, int], ...]
    sections: tuple[Section, ...]
    findings: tuple[FindingView, ...]
    findings_missing: str | None
    rules: Section
    alternatives: Section
    inputs: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    report_data: dict[str, Any]


STAGE_ROLES = {
    "prefill": "processes the whole prompt at once: large, bursty KV writes",
    "decode": "one token at a time: small, frequent, latency-sensitive KV reads",
}


def _axis(label: str, unit: str) -> str:
    return f"{label} ({unit})" if unit else label


def _title(series: Series) -> str:
    return series.name[:1].upper() + series.name[1:]


def series_chart(series: Series, key: str, caption: str = "", **kw: Any) -> Chart:
    """A chart for one model ``Series`` (titles and units from the series itself)."""
    spec = ChartSpec(
        key=key,
        title=_title(series),
        x_title=_axis(series.x_label, series.x_unit),
        y_title=_axis(series.y_label, series.y_unit),
        lines=(Line(series.y_label, series.x, series.y, series.kind),),
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
        x_title=_axis(series.x_label, series.x_unit),
        y_title=_axis(series.y_label, series.y_unit),
        lines=(Line(series.y_label, tuple(range(hi - lo)), ys[lo:hi], "bar"),),
        categories=labels,
        y_integer=series.y_unit == "count",
        size_in=HALF_FIG_SIZE_IN,
    )
    return Chart(key, caption, Markup(render_svg(spec)), half=True)


def _extra_rows(section: Any, name: str) -> tuple[tuple[str, str], ...]:
    """Scalar fields of a section not shown elsewhere, formatted by their unit suffix."""
    rows = []
    for f in dataclasses.fields(section):
        val = getattr(section, f.name)
        if f.name in _HANDLED.get(name, set()) or val is None:
            continue
        if isinstance(val, (int, float, str, bool)):
            rows.append((fmt.label(f.name), fmt.value(f.name, val)))
    return tuple(rows)


def _extra_charts(section: Any, name: str) -> tuple[Chart, ...]:
    """Every ``Series`` a section carries (single or in a tuple), drawn as it declares."""
    charts = []
    for f in dataclasses.fields(section):
        if f.name in _HANDLED.get(name, set()):
            continue
        val = getattr(section, f.name)
        items = val if isinstance(val, tuple) else (val,)
        for i, item in enumerate(items):
            if isinstance(item, Series) and item.x:
                charts.append(series_chart(item, f"{name}-{f.name}-{i}"))
    return tuple(charts)


def workload_section(report: AdviceReport) -> Section:
    """Arrivals over time and the input/output length distributions."""
    t = report.trace
    if t.requests == 0:
        return Section("workload", "Workload", missing="not measured: the trace has no requests")
    mean_in = t.input_tokens_total / t.requests
    mean_out = t.output_tokens_total / t.requests
    rows = [
        ("requests", f"{t.requests:,}"),
        ("time span", fmt.duration(t.duration_s)),
        ("mean arrival rate", fmt.value("arrival_rate_per_s", t.arrival_rate_per_s)),
        ("mean input length", f"{fmt.number(mean_in)} tokens"),
        ("mean output length", f"{fmt.number(mean_out)} tokens"),
        ("input : output tokens", f"{fmt.number(mean_in / mean_out) if mean_out else 'n/a'} : 1"),
        ("block size of the hashes", fmt.value("block_tokens", t.block_tokens)),
        ("models in the trace", ", ".join(t.models) or "not recorded"),
    ]
    charts = []
    if t.arrivals is not None:
        marks = ()
        if t.arrival_rate_per_s:
            marks = (Mark("y", t.arrival_rate_per_s, f"mean {fmt.number(t.arrival_rate_per_s)}/s"),)
        charts.append(
            series_chart(
                t.arrivals,
                "workload-arrivals",
                "Arrivals over time: bursts above the mean are what peak-sized storage is bought "
                "for.",
                marks=marks,
            )
        )
    for key, hist, what in (
        ("workload-input", t.input_tokens_hist, "Prompt lengths: prefill work and KV written"),
        ("workload-output", t.output_tokens_hist, "Output lengths: decode steps per request"),
    ):
        if hist is not None:
            charts.append(histogram_chart(hist, key, what))
    lead = (
        f"{t.requests:,} requests over {fmt.duration(t.duration_s)}; prompts average "
        f"{fmt.number(mean_in)} tokens and outputs {fmt.number(mean_out)} tokens."
    )
    rows += list(_extra_rows(t, "trace"))
    return Section(
        "workload", "Workload", lead, tuple(rows), tuple(charts) + _extra_charts(t, "trace")
    )


def stage_section(report: AdviceReport) -> Section:
    """Prefill against decode GPU time, and where the numbers come from."""
    s = report.stage_split
    if s is None:
        return Section("stages", "Stage split", missing=summary.why_missing(report, "stage_split"))
    dominant = "prefill" if s.prefill_share >= 0.5 else "decode"
    share = s.prefill_share if dominant == "prefill" else 1 - s.prefill_share
    lead = (
        f"{dominant.capitalize()} takes {fmt.percent(share)} of GPU time on this traffic "
        f"({s.source}); size the {dominant} stage's hardware for that share, not a copied "
        "configuration."
    )
    rows = (
        ("source", s.source),
        ("prefill GPU time", fmt.duration(s.prefill_s)),
        ("decode GPU time", fmt.duration(s.decode_s)),
        ("prefill share of GPU time", fmt.percent(s.prefill_share)),
    ) + _extra_rows(s, "stage_split")
    spec = ChartSpec(
        key="stages-total",
        title="GPU time per stage over the trace",
        x_title="stage",
        y_title="GPU time (s)",
        lines=(Line("GPU time", (0.0, 1.0), (s.prefill_s, s.decode_s), "bar"),),
        categories=("prefill", "decode"),
    )
    charts = (Chart(spec.key, spec.title, Markup(render_svg(spec))),)
    return Section("stages", "Stage split", lead, rows, charts + _extra_charts(s, "stage_split"))


def prefix_section(report: AdviceReport) -> Section:
    """The hit-ratio curve over cache capacity and the hit ratio at unbounded capacity."""
    pc = report.prefix_cache
    if pc is None:
        return Section(
            "prefix", "Prefix cache", missing=summary.why_missing(report, "prefix_cache")
        )
    rows = (
        ("token hit ratio, all requests", fmt.percent(pc.hit_ratio.all)),
        ("token hit ratio, steady state", fmt.percent(pc.hit_ratio.steady)),
        ("warm-up (share of requests)", fmt.percent(pc.warmup_fraction)),
    ) + _extra_rows(pc, "prefix_cache")
    lead = (
        f"With an unbounded cache {fmt.percent(pc.hit_ratio.all)} of prompt tokens could be "
        f"loaded instead of recomputed ({fmt.percent(pc.hit_ratio.steady)} after warm-up). "
        "Read less first: capacity that lifts this ratio pays before faster storage does."
    )
    bounded = [p for p in pc.mrc if p.capacity_tokens is not None]
    charts: list[Chart] = []
    if bounded and any(p.hit_ratio_all is not None for p in bounded):
        xs = tuple(float(p.capacity_tokens or 0) for p in bounded)
        lines = [
            Line("all requests", xs, tuple(p.hit_ratio_all or 0.0 for p in bounded)),
            Line("steady state", xs, tuple(p.hit_ratio_steady or 0.0 for p in bounded)),
        ]
        marks = ()
        if pc.hit_ratio.all is not None:
            marks = (Mark("y", pc.hit_ratio.all, "unbounded cache, all requests"),)
        spec = ChartSpec(
            key="prefix-mrc",
            title="Token hit ratio against cache capacity (LRU)",
            x_title="cache capacity (tokens, log scale)",
            y_title="token hit ratio (%)",
            lines=tuple(lines),
            marks=marks,
            log_x=True,
            y_percent=True,
            x_ticks=xs,
            x_tick_labels=tuple(binary_compact(x) for x in xs),
        )
        charts.append(
            Chart(
                spec.key,
                "The hit-ratio curve: where it flattens, more capacity stops paying.",
                Markup(render_svg(spec)),
            )
        )
    table = Table(
        "Hit ratio at each capacity",
        ("capacity", "all requests", "steady state"),
        tuple(
            (
                fmt.tokens(p.capacity_tokens) if p.capacity_tokens is not None else "unbounded",
                fmt.percent(p.hit_ratio_all),
                fmt.percent(p.hit_ratio_steady),
            )
            for p in pc.mrc
        ),
    )
    return Section(
        "prefix",
        "Prefix cache",
        lead,
        rows,
        tuple(charts) + _extra_charts(pc, "prefix_cache"),
        (table,),
    )


def io_section(report: AdviceReport) -> Section:
    """KV write and read bandwidth demand: mean, p99 and peak per window."""
    io = report.io
    if io is None:
        return Section("io", "I/O demand", missing=summary.why_missing(report, "io"))

    def gbps(rate: IoRate) -> tuple[float, float, float]:
        return tuple(  # type: ignore[return-value]
            v / BYTES_PER_GB
            for v in (rate.mean_bytes_per_s, rate.p99_bytes_per_s, rate.peak_bytes_per_s)
        )

    rows = (
        ("window", fmt.duration(io.window_s)),
        ("write (prefill misses): mean", fmt.bandwidth(io.write.mean_bytes_per_s)),
        ("write: p99", fmt.bandwidth(io.write.p99_bytes_per_s)),
        ("write: peak", fmt.bandwidth(io.write.peak_bytes_per_s)),
        ("read (prefix hits): mean", fmt.bandwidth(io.read.mean_bytes_per_s)),
        ("read: p99", fmt.bandwidth(io.read.p99_bytes_per_s)),
        ("read: peak", fmt.bandwidth(io.read.peak_bytes_per_s)),
    ) + _extra_rows(io, "io")
    mean_w = io.write.mean_bytes_per_s
    ratio = f"{fmt.number(io.write.peak_bytes_per_s / mean_w)}×" if mean_w else "n/a"
    lead = (
        f"Prefill writes average {fmt.bandwidth(mean_w)} but peak at "
        f"{fmt.bandwidth(io.write.peak_bytes_per_s)} ({ratio} the mean); decode-side reads average "
        f"{fmt.bandwidth(io.read.mean_bytes_per_s)}. Storage sized for the peak runs at the mean."
    )
    spec = ChartSpec(
        key="io-summary",
        title=f"KV bandwidth demand per {fmt.duration(io.window_s)} window",
        x_title="statistic over windows",
        y_title="bandwidth (GB/s)",
        # A side whose demand is unknown (null, e.g. no prefix hits known) gets no bars.
        lines=tuple(
            Line(name, (0.0, 1.0, 2.0), gbps(rate), "bar")
            for name, rate in (("write (prefill)", io.write), ("read (prefix hits)", io.read))
            if rate.mean_bytes_per_s is not None
        ),
        categories=("mean", "p99", "peak"),
    )
    charts = (Chart(spec.key, spec.title, Markup(render_svg(spec))),)
    return Section("io", "I/O demand", lead, rows, charts + _extra_charts(io, "io"))


def inputs_rows(report: AdviceReport) -> tuple[tuple[str, str], ...]:
    """Provenance: what was read, with which options and data versions, by which kvadvisor."""
    t = report.trace
    rows = [
        ("trace", t.path),
        ("trace format", t.format),
        ("trace sha256", t.sha256 or "not recorded"),
        ("columns", ", ".join(t.columns) or "none"),
        ("kvadvisor version", report.meta.kvadvisor_version),
        ("report format version", str(report.meta.format_version)),
        ("generated at", report.meta.generated_at),
    ]
    rows += [(f"option {k}", fmt.value(k, v)) for k, v in sorted(report.options.items())]
    rows += [(f"{k} version", v) for k, v in sorted(report.versions.items())]
    if not report.versions:
        rows.append(("catalog and rule versions", "not recorded: the advisor did not run"))
    return tuple(rows)


def build_view(report: AdviceReport) -> HtmlView:
    """Compute every value the page shows (formatting, sentences, charts)."""
    verdicts = summary.verdicts(report)
    findings = summary.sorted_findings(report)
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.severity] = counts.get(f.severity, 0) + 1
    t = report.trace
    notes = tuple(t.notes) + tuple(
        f"{n:,} rows dropped: {why}" for why, n in sorted(t.dropped.items())
    )
    no_rules = summary.why_missing(report, "recommendation")
    return HtmlView(
        title=f"kvadvisor report: {t.path}",
        headline=summary.headline(report),
        version=report.meta.kvadvisor_version,
        generated_at=report.meta.generated_at,
        cards=tuple(VerdictCard(v.stage, STAGE_ROLES[v.stage], v.items) for v in verdicts),
        verdict_missing=None if verdicts else no_rules,
        key_numbers=summary.key_numbers(report),
        finding_counts=tuple(
            sorted(counts.items(), key=lambda kv: summary.SEVERITY_RANK.get(kv[0], 9))
        ),
        sections=(
            workload_section(report),
            stage_section(report),
            prefix_section(report),
            io_section(report),
        ),
        findings=tuple(
            FindingView(
                f.code,
                f.severity,
                f"sev-{f.severity}" if f.severity in summary.SEVERITY_RANK else "sev-other",
                f.stage,
                f.message,
                summary.evidence_items(f),
            )
            for f in findings
        ),
        findings_missing=None if report.recommendation or findings else no_rules,
        rules=Section("rules", "Rules fired and rules quiet", missing=no_rules),
        alternatives=Section("alternatives", "Alternatives compared", missing=no_rules),
        inputs=inputs_rows(report),
        notes=notes,
        report_data=clean(report.to_dict()),
    )


_ENV = Environment(
    loader=PackageLoader("kvadvisor", "report/templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


class HtmlRenderer:
    """Render the self-contained HTML report."""

    name = "html"
    file_extension = ".html"

    def render(self, report: AdviceReport) -> str:
        """Return the page as one string."""
        return _ENV.get_template("report.html.j2").render(view=build_view(report))
