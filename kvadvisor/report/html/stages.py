"""The stage-split section: prefill against decode, in GPU time and in latency."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from kvadvisor.report import fmt, summary
from kvadvisor.report.charts import ChartSpec, Line, render_svg
from kvadvisor.report.html.chartviews import series_chart
from kvadvisor.report.html.view import Chart, Section, Table
from kvadvisor.results.report import PER_REQUEST_UNITS, AdviceReport
from kvadvisor.units import Unit

# Per-request distribution names as a reader says them.
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
                _DIST_LABELS[name],
                *(fmt.quantity(d[k], PER_REQUEST_UNITS[name]) if k in d else "" for k in stats),
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
        if dep.step_model_reason:
            rows.append(("step times from", dep.step_model_reason))
    mem = m.memory
    if mem is not None:
        rows += [
            ("weights fit in GPU memory", fmt.yes_no(mem.weights_fit)),
            ("KV working set (peak) fits", fmt.yes_no(mem.kv_working_set_fits)),
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
        ("mean decode batch per instance", fmt.quantity(s.mean_decode_batch, Unit.COUNT)),
        ("model instances", fmt.quantity(s.instances, Unit.COUNT)),
        ("GPU busy share", fmt.percent(s.gpu_busy_fraction)),
        ("requests with measured times", fmt.quantity(s.measured_requests, Unit.COUNT)),
    ):
        if text and text != fmt.NOT_MEASURED:
            rows.append((name, text))
    thresholds = s.thresholds or {}
    if thresholds:
        rows.append(
            (
                "classification thresholds",
                "; ".join(f"{k.replace('_', ' ')} {fmt.percent(v)}" for k, v in thresholds.items()),
            )
        )
    classes = s.request_classes or {}
    if classes:
        rows.append(
            (
                "requests by class",
                ", ".join(f"{k.replace('_', ' ')} {fmt.count(v)}" for k, v in classes.items()),
            )
        )
    rows += _model_rows(report)
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
            return f"{mean} mean, {median} median ({fmt.count(e.rows)} rows)"

        replay = cal.method == "replay"
        tables.append(
            Table(
                f"Calibration{' through the replay' if replay else ''}: fitted on "
                f"{fmt.count(cal.fit_rows)} rows, checked on {fmt.count(cal.heldout_rows)} "
                "held-out rows (absolute percentage error)",
                ("", "before fitting", "after fitting"),
                (
                    (
                        "TTFT (replayed)" if replay else "prefill time",
                        err(cal.prefill_heldout_prior),
                        err(cal.prefill_heldout),
                    ),
                    (
                        "time per output token (replayed)" if replay else "decode step time",
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
        charts
        + tuple(
            series_chart(series, f"stage_split-series-{i}")
            for i, series in enumerate(s.series)
            if series.x
        ),
        tuple(tables),
        notes=s.notes + (report.model.notes if report.model else ()),
    )
