"""HTML renderer: one self-contained page that explains the recommendation (no CDN, no scripts).

First :func:`build_view` turns the advice model into plain ``HtmlView`` dataclasses holding every
formatted value and chart (coverage.py's HtmlDataGeneration idiom); then the jinja2 template only
places them, with autoescape on. Charts are inline SVG from :mod:`kvadvisor.report.charts`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from kvadvisor.advise.model import (
    AdviceReport,
    CacheReuse,
    IoDemand,
    IoRate,
    PrefixCache,
    Series,
)
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
    "prefix_cache": {
        "hit_ratio",
        "mrc",
        "warmup_fraction",
        "status",
        "note",
        "block_tokens",
        "block_hit_ratio",
        "sampling",
        "curve",
        "tiers",
        "routing",
        "reuse",
        "block_sizes",
    },
    "io": {
        "write",
        "read",
        "window_s",
        "read_known",
        "chunk_tokens",
        "io_unit_bytes",
        "write_io",
        "read_io",
        "write_bytes_per_day",
        "drive_capacity_bytes",
        "drive_writes_per_day",
        "load_vs_recompute",
        "series",
        "notes",
    },
    "stage_split": {
        "source",
        "prefill_s",
        "decode_s",
        "prefill_share",
        "classification",
        "thresholds",
        "latency_prefill_s",
        "latency_decode_s",
        "latency_prefill_share",
        "latency_classification",
        "hits_source",
        "no_reuse_prefill_s",
        "no_reuse_prefill_share",
        "prefill_s_saved_by_reuse",
        "request_classes",
        "per_request",
        "mean_decode_batch",
        "measured_requests",
        "instances",
        "gpu_busy_fraction",
        "calibration",
        "notes",
    },
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
    note: str = ""


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
    notes: tuple[str, ...] = ()  # caveats the producing part attached


@dataclass(frozen=True)
class FindingView:
    """A finding as shown: severity class for styling, evidence as formatted pairs."""

    code: str
    severity: str
    severity_class: str
    stage: str
    message: str
    evidence: tuple[tuple[str, str], ...]
    name: str = ""
    summary: str = ""
    action: str = ""
    candidates: str = ""
    references: tuple[str, ...] = ()


@dataclass(frozen=True)
class VerdictCard:
    """One stage's recommendation card."""

    stage: str
    role: str
    needs: tuple[tuple[str, str], ...]  # measured demand of the stage
    items: tuple[tuple[str, str], ...]  # the recommended configuration (empty: none)
    notes: tuple[str, ...] = ()  # how the figures were derived, what was assumed


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
    top_findings: tuple[FindingView, ...]  # the most severe, shown with the verdict
    findings_missing: str | None
    rules: Section
    alternatives: Section
    inputs: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    report_data: dict[str, Any]


# Findings repeated under the verdict, most severe first.
TOP_FINDINGS = 3

STAGE_ROLES = {
    "prefill": "processes the whole prompt at once: large, bursty KV writes of the prompt "
    "tokens that missed the cache",
    "decode": "one token at a time: small, frequent, latency-sensitive KV reads; prefix hits "
    "are read back instead of recomputed",
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


# Per-request distribution names as a reader says them (others: the name, unit suffix dropped).
_DIST_LABELS = {
    "prefill_gpu_s": "prefill GPU time",
    "decode_gpu_s": "decode GPU time",
    "prefill_share": "prefill share of GPU time",
    "ttft_s": "time to first token",
    "decode_latency_s": "decode time (end-to-end − TTFT)",
}


def _dist_table(caption: str, dists: dict[str, dict[str, float]]) -> Table | None:
    """Per-request distributions (metric -> statistic -> value) as one table."""
    if not dists:
        return None
    stats: list[str] = []
    for d in dists.values():
        stats += [k for k in d if k not in stats]
    return Table(
        caption,
        ("", *stats),
        tuple(
            (
                _DIST_LABELS.get(name, fmt.label(name)),
                *(fmt.value(name, d.get(k)) if k in d else "" for k in stats),
            )
            for name, d in dists.items()
        ),
    )


def _model_rows(report: AdviceReport) -> tuple[tuple[str, str], ...]:
    """The model and GPU the stage times rest on (when the profiler names them)."""
    m = report.model
    if m is None:
        return ()
    name = m.display_name or m.name
    rows = [
        ("model", name + (" (assumed)" if m.assumed else "")),
        ("KV per token (all layers)", fmt.size(m.kv_bytes_per_token)),
    ]
    if m.attention:
        rows.append(("attention", str(m.attention)))
    dep = m.deployment
    if dep is not None:
        gpu = dep.gpu_display_name or dep.gpu
        rows.append(
            (
                "GPU × tensor parallel",
                f"{gpu}{' (assumed)' if dep.gpu_assumed else ''} × {dep.tp}"
                f"{' (assumed)' if dep.tp_assumed else ''}",
            )
        )
        rows.append(("dtypes (KV, weights)", f"{dep.kv_dtype}, {dep.weight_dtype}"))
    mem = m.memory
    if mem is not None:
        rows += [
            ("weights fit in GPU memory", "yes" if mem.weights_fit else "no"),
            ("KV working set (peak) fits", "yes" if mem.kv_working_set_fits else "no"),
            ("KV capacity per GPU", fmt.tokens(mem.kv_capacity_tokens)),
            ("concurrent requests that fit", fmt.number(mem.max_concurrent_requests)),
        ]
    return tuple(rows)


def stage_section(report: AdviceReport) -> Section:
    """Prefill against decode, in GPU time and in latency, and where the numbers come from."""
    s = report.stage_split
    if s is None:
        return Section("stages", "Stage split", missing=summary.why_missing(report, "stage_split"))
    dominant = "prefill" if s.prefill_share >= 0.5 else "decode"
    share = s.prefill_share if dominant == "prefill" else 1 - s.prefill_share
    classification = s.classification
    lead = (
        f"{dominant.capitalize()} takes {fmt.percent(share)} of GPU time on this traffic "
        f"({s.source}{'; ' + classification.replace('_', ' ') if classification else ''}); "
        f"size the {dominant} stage's hardware for that share, not a copied configuration."
    )
    latency_share = s.latency_prefill_share
    if latency_share is not None:
        lead += (
            f" By latency (TTFT against decode time per request) prefill is "
            f"{fmt.percent(latency_share)}: the two splits can point different ways."
        )
    no_reuse = s.no_reuse_prefill_share
    if no_reuse is not None:
        lead += f" Without prefix reuse prefill would take {fmt.percent(no_reuse)} of GPU time."
    rows = [
        ("source", s.source),
        ("prefill GPU time", fmt.duration(s.prefill_s)),
        ("decode GPU time", fmt.duration(s.decode_s)),
        ("prefill share of GPU time", fmt.percent(s.prefill_share)),
    ]
    for name, text in (
        ("classification", classification.replace("_", " ")),
        ("latency: prefill (Σ TTFT)", fmt.duration(s.latency_prefill_s)),
        ("latency: decode (Σ end-to-end − TTFT)", fmt.duration(s.latency_decode_s)),
        ("latency: prefill share", fmt.percent(latency_share)),
        ("latency classification", s.latency_classification.replace("_", " ")),
        ("prefill share without prefix reuse", fmt.percent(no_reuse)),
        ("prefill GPU time saved by reuse", fmt.duration(s.prefill_s_saved_by_reuse)),
        ("prefix hits taken from", s.hits_source or ""),
        ("mean decode batch per instance", fmt.value("batch", s.mean_decode_batch)),
        ("model instances", fmt.value("instances", s.instances)),
        ("GPU busy share", fmt.percent(s.gpu_busy_fraction)),
        ("requests with measured times", fmt.value("requests", s.measured_requests)),
    ):
        if text and text != fmt.NOT_MEASURED:
            rows.append((name, text))
    thresholds = s.thresholds or {}
    if thresholds:
        rows.append(
            (
                "classification thresholds",
                "; ".join(f"{fmt.label(k)} {fmt.percent(v)}" for k, v in thresholds.items()),
            )
        )
    classes = s.request_classes or {}
    if classes:
        rows.append(
            (
                "requests by class",
                ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in classes.items()),
            )
        )
    rows += [r for r in _model_rows(report)]
    rows += list(_extra_rows(s, "stage_split"))
    shares = [("GPU time", s.prefill_share)]
    if latency_share is not None:
        shares.append(("latency", latency_share))
    if no_reuse is not None:
        shares.append(("GPU time, no reuse", no_reuse))
    spec = ChartSpec(
        key="stages-split",
        title="Share of time in each stage",
        x_title="basis of the split",
        y_title="share (%)",
        lines=(
            Line("prefill", tuple(range(len(shares))), tuple(v for _, v in shares), "bar"),
            Line("decode", tuple(range(len(shares))), tuple(1 - v for _, v in shares), "bar"),
        ),
        categories=tuple(name for name, _ in shares),
        y_percent=True,
    )
    charts = (
        Chart(
            spec.key,
            "GPU time charges each request its share of every batched decode step; latency "
            "is what one request waits. Sizing follows GPU time.",
            Markup(render_svg(spec)),
        ),
    )
    tables = []
    per_request = _dist_table("Per request", s.per_request or {})
    if per_request is not None:
        tables.append(per_request)
    cal = s.calibration
    if cal is not None:

        def err(e: Any) -> str:
            mean, median = fmt.percent(e.mape), fmt.percent(e.median_ape)
            return f"{mean} mean, {median} median ({e.rows:,} rows)"

        tables.append(
            Table(
                f"Calibration: fitted on {cal.fit_rows:,} rows, checked on {cal.heldout_rows:,} "
                "held-out rows (absolute percentage error)",
                ("", "before fitting", "after fitting"),
                (
                    ("prefill time", err(cal.prefill_heldout_prior), err(cal.prefill_heldout)),
                    (
                        "decode step time",
                        err(cal.decode_step_heldout_prior),
                        err(cal.decode_step_heldout),
                    ),
                ),
                note="" if cal.converged else "the fit did not converge; priors kept",
            )
        )
    return Section(
        "stages",
        "Stage split",
        lead,
        tuple(rows),
        charts + _extra_charts(s, "stage_split"),
        tuple(tables),
        notes=s.notes + (report.model.notes if report.model else ()),
    )


def _mrc_chart(pc: PrefixCache) -> Chart | None:
    """The hit-ratio curve with each cache tier's capacity marked.

    The whole curve when the model carries it, else the standard capacities.
    """
    curves = [c for c in pc.curve if c.x]
    if curves:
        lines = tuple(
            Line(c.name.replace("token hit ratio ", "").strip("()"), c.x, c.y, "step")
            for c in curves
        )
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
        title="Token hit ratio against cache capacity (LRU)",
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


def _reuse_chart(reuse: CacheReuse) -> Chart | None:
    """Hit tokens by time since their block was last used (log-spaced bins, upper edges)."""
    h = reuse.histogram
    if h is None or len(h.x) < 2:
        return None
    uppers = h.x
    ratio = uppers[1] / uppers[0] if uppers[0] > 0 else 2.0
    lowers = (uppers[0] / ratio, *uppers[:-1])
    spec = ChartSpec(
        key="prefix-reuse",
        title="Time since a hit block was last used",
        x_title="reuse time (s, log scale)",
        y_title=_axis(h.y_label, h.y_unit),
        lines=(
            Line(
                h.y_label,
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


def prefix_section(report: AdviceReport) -> Section:
    """The hit-ratio curve, hits per tier, reuse times, routing and block size."""
    pc = report.prefix_cache
    if pc is None:
        return Section(
            "prefix", "Prefix cache", missing=summary.why_missing(report, "prefix_cache")
        )
    if pc.status == "unknown":
        return Section(
            "prefix",
            "Prefix cache",
            missing=f"{fmt.NOT_MEASURED}: {pc.note or 'prefix reuse is unknown for this trace'}",
        )
    rows = [
        ("token hit ratio, all requests", fmt.percent(pc.hit_ratio.all)),
        ("token hit ratio, steady state", fmt.percent(pc.hit_ratio.steady)),
        ("warm-up (share of requests)", fmt.percent(pc.warmup_fraction)),
        ("curve", pc.status + (f" ({pc.note})" if pc.note else "")),
    ]
    if pc.block_tokens:
        rows.append(("block size simulated", fmt.tokens(pc.block_tokens)))
    if pc.block_hit_ratio is not None:
        rows.append(("block hit ratio, all requests", fmt.percent(pc.block_hit_ratio.all)))
    if pc.sampling is not None:
        smp = pc.sampling
        rows += [
            ("sampling rate (SHARDS)", fmt.percent(smp.rate)),
            ("sampled block accesses", f"{smp.sampled_accesses:,} of {smp.total_accesses:,}"),
            (f"estimated error ({smp.error_method})", fmt.percent(smp.error_estimate)),
        ]
    rows += list(_extra_rows(pc, "prefix_cache"))
    lead = (
        f"With an unbounded cache {fmt.percent(pc.hit_ratio.all)} of prompt tokens could be "
        f"loaded instead of recomputed ({fmt.percent(pc.hit_ratio.steady)} after warm-up). "
        "Read less first: capacity that lifts this ratio pays before faster storage does."
    )
    charts = [c for c in (_mrc_chart(pc),) if c is not None]
    tables = [
        Table(
            "Hit ratio at each capacity",
            ("capacity", "all requests", "steady state"),
            tuple(
                (
                    f"{binary_compact(p.capacity_tokens)} tokens"
                    if p.capacity_tokens is not None
                    else "unbounded",
                    fmt.percent(p.hit_ratio_all),
                    fmt.percent(p.hit_ratio_steady),
                )
                for p in pc.mrc
            ),
        )
    ]
    if pc.tiers is not None:
        t = pc.tiers
        tables.append(
            Table(
                "Hits per tier (inclusive hierarchy, fastest first)",
                ("tier", "capacity", "share of prompt tokens, all", "steady state", "hit KV"),
                tuple(
                    (
                        lv.name,
                        fmt.tokens(lv.effective_capacity_tokens or lv.capacity_tokens),
                        fmt.percent(lv.share_all),
                        fmt.percent(lv.share_steady),
                        fmt.size(lv.hit_bytes_all) if lv.hit_bytes_all is not None else "",
                    )
                    for lv in t.levels
                )
                + (
                    (
                        "miss (recomputed)",
                        "",
                        fmt.percent(t.miss_share_all),
                        fmt.percent(t.miss_share_steady),
                        "",
                    ),
                ),
            )
        )
    if pc.reuse is not None:
        reuse_chart = _reuse_chart(pc.reuse)
        if reuse_chart is not None:
            charts.append(reuse_chart)
        tables.append(
            Table(
                "Retention (TTL) that keeps a share of the hits, and the capacity it needs",
                ("share of hits kept", "TTL", "capacity with TTL", "LRU capacity, same hits"),
                tuple(
                    (
                        fmt.percent(tp.share),
                        fmt.duration(tp.ttl_s),
                        fmt.tokens(tp.capacity_tokens),
                        fmt.tokens(tp.lru_capacity_tokens),
                    )
                    for tp in pc.reuse.ttl
                ),
            )
        )
    if pc.routing is not None and pc.routing.policies:
        r = pc.routing
        caps = [p.capacity_tokens_per_instance for p in r.policies[0].points]
        tables.append(
            Table(
                f"Hit ratio (all requests) with {r.instances} instances: per-instance caches "
                "by routing policy, by capacity per instance",
                ("policy", *(f"{binary_compact(c)}" if c else "unbounded" for c in caps)),
                tuple(
                    (pol.policy, *(fmt.percent(p.hit_ratio_all) for p in pol.points))
                    if pol.unavailable is None
                    else (pol.policy, *("n/a" for _ in caps))
                    for pol in r.policies
                ),
                note="; ".join(
                    f"{p.policy}: {fmt.NOT_MEASURED}, {p.unavailable}"
                    for p in r.policies
                    if p.unavailable is not None
                ),
            )
        )
    if pc.block_sizes:
        tables.append(
            Table(
                "Hit ratio by engine chunk size",
                ("chunk", "partial last chunk saved", "all requests", "steady state"),
                tuple(
                    (
                        fmt.tokens(b.chunk_tokens),
                        "yes" if b.save_unfull_chunk else "no",
                        fmt.percent(b.hit_ratio_all),
                        fmt.percent(b.hit_ratio_steady),
                    )
                    for b in pc.block_sizes
                ),
            )
        )
    return Section(
        "prefix",
        "Prefix cache",
        lead,
        tuple(rows),
        tuple(charts) + _extra_charts(pc, "prefix_cache"),
        tuple(tables),
    )


def _bandwidth_chart(series: Series, rate: IoRate | None, key: str, window_s: float) -> Chart:
    """A bandwidth time series in GB/s with its mean, p99 and peak marked."""
    marks = []
    if rate is not None:
        for label, v in (
            ("mean", rate.mean_bytes_per_s),
            ("p99", rate.p99_bytes_per_s),
            ("peak", rate.peak_bytes_per_s),
        ):
            if v is not None:
                marks.append(Mark("y", v / BYTES_PER_GB, f"{label} {fmt.bandwidth(v)}"))
    spec = ChartSpec(
        key=key,
        title=_title(series),
        x_title=_axis(series.x_label, series.x_unit),
        y_title=f"{series.y_label} (GB/s)",
        lines=(
            Line(series.y_label, series.x, tuple(v / BYTES_PER_GB for v in series.y), series.kind),
        ),
        marks=tuple(marks),
    )
    caption = (
        "Storage sized for the peak runs at the mean most of the time; p99 is the level to "
        "size a tier for, with a buffer for what lies above it."
    )
    step_s = series.x[1] - series.x[0] if len(series.x) > 1 else window_s
    if step_s > 1.5 * window_s:
        # The producer merged windows to keep the chart small: say so, or the line sits
        # visibly below the p99 and peak drawn from the unmerged windows.
        caption += (
            f" Each point averages {fmt.duration(step_s)} of {fmt.duration(window_s)} windows; "
            f"mean, p99 and peak are over the {fmt.duration(window_s)} windows themselves."
        )
    return Chart(key, caption, Markup(render_svg(spec)))


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
                f"{p.ios:,}",
                fmt.number(p.mean_iops),
                fmt.number(p.p99_iops),
                fmt.number(p.peak_iops),
                fmt.size(p.mean_io_bytes),
                fmt.size(p.full_chunk_bytes),
                f"{p.partial_chunk_ios:,}",
                f"{fmt.number(p.write_amplification)}×" if p.write_amplification else "n/a",
            )
            for name, p in patterns
        ),
    )


def io_section(report: AdviceReport) -> Section:
    """KV write and read bandwidth over time (mean, p99, peak marked), I/O sizes and counts."""
    io = report.io
    if io is None:
        return Section("io", "I/O demand", missing=summary.why_missing(report, "io"))
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
        ("drive writes per day", fmt.value("dwpd", io.drive_writes_per_day)),
    ):
        if text != fmt.NOT_MEASURED:
            rows.append((name, text))
    rows += list(_extra_rows(io, "io"))
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
    charts: list[Chart] = []
    series = io.series
    for i, ser in enumerate(series):
        if not ser.x:
            continue
        if ser.y_unit in ("bytes/s", "B/s"):
            rate = io.read if "read" in ser.name.lower() else io.write
            charts.append(_bandwidth_chart(ser, rate, f"io-series-{i}", io.window_s))
        else:
            charts.append(series_chart(ser, f"io-series-{i}"))
    if not any(ser.y_unit in ("bytes/s", "B/s") for ser in series):

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
            title=f"KV bandwidth demand per {fmt.duration(io.window_s)} window",
            x_title="statistic over windows",
            y_title="bandwidth (GB/s)",
            lines=tuple(lines),
            categories=("mean", "p99", "peak"),
        )
        charts.insert(0, Chart(spec.key, "", Markup(render_svg(spec))))
    tables = [t for t in (_io_pattern_table(io),) if t is not None]
    lvr = io.load_vs_recompute
    if lvr:
        tables.append(
            Table(
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
            )
        )
    return Section(
        "io",
        "I/O demand",
        lead,
        tuple(rows),
        tuple(charts),
        tuple(tables),
        notes=io.notes,
    )


def rules_section(report: AdviceReport) -> Section:
    """Every rule evaluated: those that fired, those that stayed quiet, and why."""
    rec = report.recommendation
    if rec is None:
        return Section(
            "rules",
            "Rules fired and rules quiet",
            missing=summary.why_missing(report, "recommendation"),
        )
    fired = [r for r in rec.rules if r.fired]
    quiet = [r for r in rec.rules if not r.fired]
    unevaluated = [r for r in quiet if r.reason.startswith("not evaluated")]
    lead = (
        f"{len(rec.rules)} rules evaluated: {len(fired)} fired, {len(quiet)} stayed quiet"
        + (
            f" ({len(unevaluated)} of them because a fact they need was not measured)"
            if unevaluated
            else ""
        )
        + "."
    )
    tables = []
    if fired:
        tables.append(
            Table(
                "Fired", ("code", "rule", "why"), tuple((r.code, r.name, r.reason) for r in fired)
            )
        )
    if quiet:
        tables.append(
            Table(
                "Quiet", ("code", "rule", "why"), tuple((r.code, r.name, r.reason) for r in quiet)
            )
        )
    if rec.facts:
        facts = tuple((name, fmt.value(name, fact)) for name, fact in sorted(rec.facts.items()))
        tables.append(Table("Facts the rules saw", ("fact", "value"), facts))
    return Section("rules", "Rules fired and rules quiet", lead, tables=tuple(tables))


def alternatives_section(report: AdviceReport) -> Section:
    """The ranked alternatives per stage, with the reason for each rank."""
    rec = report.recommendation
    if rec is None:
        return Section(
            "alternatives",
            "Alternatives compared",
            missing=summary.why_missing(report, "recommendation"),
        )
    tables = []
    for stage in summary.STAGES:
        alts = getattr(rec, stage).alternatives
        if alts:
            tables.append(
                Table(
                    f"{stage.capitalize()}",
                    ("rank", "kind", "option", "feasible", "reason"),
                    tuple(
                        (str(a.rank), a.kind, a.name, "yes" if a.feasible else "no", a.reason)
                        for a in sorted(alts, key=lambda a: (a.kind, a.rank))
                    ),
                )
            )
    if not tables:
        return Section(
            "alternatives",
            "Alternatives compared",
            missing=f"{fmt.NOT_MEASURED}: the advisor ranked no alternatives for this traffic",
        )
    lead = (
        "The options the advisor ranked for each stage; the first is the recommendation. "
        + ("One storage specification was given for both stages." if rec.shared_storage else "")
    ).strip()
    return Section("alternatives", "Alternatives compared", lead, tables=tuple(tables))


def _option_text(name: str, value: Any) -> str:
    if value is None:
        return "not set (default)"
    if isinstance(value, (list, tuple, dict)) and not value:
        return "none"
    return fmt.value(name, value)


def plan_section(report: AdviceReport) -> Section:
    """Deployment plans against the workload (`analyze --plan`): verdict, findings, tiers."""
    reviews = report.plan_reviews
    rows: list[tuple[str, str]] = []
    tables: list[Table] = []
    for plan in reviews:
        errors = sum(c.severity == "error" for c in plan.findings)
        warnings = sum(c.severity == "warning" for c in plan.findings)
        rows.append((f"plan {plan.name}",
                     f"{errors} error(s), {warnings} warning(s) in {len(plan.checks)} checks "
                     f"(traffic ×{fmt.number(plan.traffic_scale)}; {plan.path})"))
        if plan.findings:
            tables.append(Table(
                f"{plan.name}: findings", ("severity", "check", "stage", "finding"),
                tuple((c.severity, f"{c.code} {c.name}", c.stage, c.message)
                      for c in plan.findings)))
        tables.append(Table(
            f"{plan.name}: tiers replayed at the plan's capacities",
            ("stage", "tier", "capacity", "hit ratio (steady)", "write mean / p99 / peak",
             "read mean / p99 / peak", "write util p99", "read util p99"),
            tuple((t.stage, f"{t.tier} ({t.kind})",
                   "unbounded" if t.capacity_bytes is None else fmt.size(t.capacity_bytes),
                   "n/a" if t.stage == "decode" else fmt.percent(t.hit_ratio_steady),
                   " / ".join(fmt.bandwidth(v) for v in (
                       t.write.mean_bytes_per_s, t.write.p99_bytes_per_s,
                       t.write.peak_bytes_per_s)),
                   "n/a" if t.read is None else " / ".join(fmt.bandwidth(v) for v in (
                       t.read.mean_bytes_per_s, t.read.p99_bytes_per_s,
                       t.read.peak_bytes_per_s)),
                   fmt.percent(t.write_utilization.p99),
                   "n/a" if t.read is None else fmt.percent(t.read_utilization.p99))
                  for s in plan.stages for t in s.tiers)))
    lead = ("Each plan replayed against this trace: the hit ratio each tier serves at the plan's "
            "capacities, the write and read demand on it against its bandwidth, and engine lint "
            "(docs/review.md).")
    return Section("plans", "Plan against the workload", lead, tuple(rows), (), tuple(tables))


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
    rows += [(f"option {k}", _option_text(k, v)) for k, v in sorted(report.options.items())]
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
    view = HtmlView(
        title=f"kvadvisor report: {t.path}",
        headline=summary.headline(report),
        version=report.meta.kvadvisor_version,
        generated_at=report.meta.generated_at,
        cards=tuple(
            VerdictCard(
                stage,
                STAGE_ROLES[stage],
                summary.stage_needs(report, stage),
                next((v.items for v in verdicts if v.stage == stage), ()),
                summary.stage_notes(getattr(report.recommendation, stage))
                if report.recommendation
                else (),
            )
            for stage in summary.STAGES
        ),
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
        ) + ((plan_section(report),) if report.plan_reviews else ()),
        findings=tuple(
            FindingView(
                f.code,
                f.severity,
                f"sev-{f.severity}" if f.severity in summary.SEVERITY_RANK else "sev-other",
                f.stage,
                f.message,
                summary.evidence_items(f),
                name=f.name,
                summary=f.summary,
                action=f.action.replace("_", " "),
                candidates=", ".join(f.candidates),
                references=f.references,
            )
            for f in findings
        ),
        top_findings=(),
        findings_missing=None if report.recommendation or findings else no_rules,
        rules=rules_section(report),
        alternatives=alternatives_section(report),
        inputs=inputs_rows(report),
        notes=notes,
        report_data=clean(report.to_dict()),
    )
    return replace(view, top_findings=view.findings[:TOP_FINDINGS])


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
