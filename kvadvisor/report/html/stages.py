"""The stage-split section: prefill against decode, in GPU time and in latency."""

from __future__ import annotations

from typing import Any

from kvadvisor.report import chartspecs, fmt, summary
from kvadvisor.report.html.chartviews import chart, series_chart
from kvadvisor.report.html.view import Section, Table
from kvadvisor.results.report import (
    PER_REQUEST_UNITS,
    AdviceReport,
    CalibrationSummary,
    StageSplit,
)
from kvadvisor.units import Unit, plural
from kvadvisor.vocab import SplitSource

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
    """The model the stage times rest on (when the profiler names it)."""
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
    return tuple(rows)


def _profiled_rows(report: AdviceReport) -> tuple[tuple[str, str], ...]:
    """The GPU, parallelism and memory the open-loop profiler modelled."""
    m = report.model
    if m is None:
        return ()
    rows = []
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


def profiled_hardware(report: AdviceReport) -> str:
    """The configuration the open-loop profiler modelled, in words ("1 instance of H200 × TP 2")."""
    s = report.stage_split
    dep = report.model.deployment if report.model else None
    n = s.instances if s is not None else 1
    if dep is None:
        return f"{plural(n, 'model instance')}"
    gpu = dep.gpu_display_name or dep.gpu
    assumed = " (assumed)" if dep.gpu_assumed or dep.tp_assumed else ""
    return f"{plural(n, 'instance')} of {gpu} × TP {dep.tp}{assumed}"


def replayed_hardware(report: AdviceReport) -> str:
    """The chosen deployment as the replay ran it, one clause per stage ("" when not replayed)."""
    r = report.replay
    if r is None:
        return ""
    return " + ".join(
        f"{st.role.value} {st.instances} × {st.instance or st.gpu} ({st.gpu}), "
        f"TP {st.gpus_per_replica}, {plural(st.replicas, 'replica')}"
        for st in r.stages
    )


def stage_section(report: AdviceReport) -> Section:
    """Prefill against decode, in GPU time and in latency, on the hardware the verdict chose.

    With a replay the split is the chosen deployment's, and the open-loop profiler's figures
    (its own assumed GPU, TP and instance count: a bound, not the verdict's hardware) go under
    a closed heading that names that configuration; without one the section says up front
    that it models an assumed configuration.
    """
    s = report.stage_split
    if s is None:
        return Section("stages", "Stage split", missing=summary.why_missing(report, "stage_split"))
    replayed = s.source == SplitSource.REPLAY and report.replay is not None
    assumed = profiled_hardware(report)
    hardware = _hardware_words(report, s, replayed, assumed)
    lead = _lead(s, hardware)
    rows = [
        ("source", s.source),
        ("prefill GPU time", fmt.duration(s.prefill_s)),
        ("decode GPU time", fmt.duration(s.decode_s)),
        ("prefill share of GPU time", fmt.percent(s.prefill_share)),
    ]
    profiled = _split_figures(s)
    rows += _model_rows(report)
    profiled += _profiled_rows(report)
    charts = (
        chart(
            chartspecs.stage_split_spec(s, replayed),
            "GPU time charges each request its share of every batched decode step; latency "
            "is what one request waits. Sizing follows GPU time.",
        ),
    )
    tables = []
    per_request = _dist_table("Per request", s.per_request or {})
    if per_request is not None:
        tables.append(per_request)
    if s.calibration is not None:
        tables.append(_calibration_table(s.calibration))
    model_notes = report.model.notes if report.model else ()
    # The replay appends its own note last (pipeline/replay.py); the profiler's notes before it
    # and the model's (its assumed GPU and TP) speak of the profiler's configuration, so with a
    # replay they go with its figures.
    if replayed:
        shown, profiler_notes = s.notes[-1:], s.notes[:-1] + model_notes
    else:
        shown, profiler_notes = s.notes + model_notes, ()
    series = tuple(
        series_chart(series, f"stage_split-series-{i}")
        for i, series in enumerate(s.series)
        if series.x
    )
    return Section(
        "stages",
        "Stage split",
        lead,
        tuple(rows),
        charts,
        () if replayed else tuple(tables),
        notes=shown,
        more_title=(
            f"Open-loop bound on the profiler's configuration, {assumed}: not the chosen "
            "deployment; per-request figures and the model's fit on it"
            if replayed
            else f"Every figure of the split, on {assumed}"
        ),
        more_rows=tuple(profiled),
        more_tables=tuple(tables) if replayed else (),
        more_notes=profiler_notes,
        more_charts=series,
    )


def _hardware_words(report: AdviceReport, s: StageSplit, replayed: bool, assumed: str) -> str:
    """The hardware of the split: the replayed deployment, the served one or an assumed one."""
    if replayed:
        return f"the chosen deployment as replayed: {replayed_hardware(report)}"
    if s.source == SplitSource.MEASURED:
        return "the hardware that served the trace (stage times measured from it)"
    if summary.verdicts(report):
        why = report.unavailable.get("replay") or "no replay ran"
        return f"the profiler's assumed configuration, {assumed}, not the chosen deployment ({why})"
    return f"an assumed configuration, {assumed}, as no deployment was chosen"


def _lead(s: StageSplit, hardware: str) -> str:
    """Which stage dominates GPU time on that hardware, and how latency and no reuse would split."""
    dominant = "prefill" if s.prefill_share >= 0.5 else "decode"
    share = s.prefill_share if dominant == "prefill" else 1 - s.prefill_share
    lead = (
        f"{dominant.capitalize()} takes {fmt.percent(share)} of GPU time ({s.source}) on "
        f"{hardware}; size the {dominant} stage's hardware for that share, not a copied "
        "configuration."
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
    return lead


def _split_figures(s: StageSplit) -> list[tuple[str, str]]:
    """The split's own figures on the profiler's configuration, those not measured left out."""
    # Figures of the profiler's own configuration: beside the replay they are a bound on
    # other hardware ("GPU busy share 510%" on 1 instance while the verdict buys 7).
    profiled: list[tuple[str, str]] = []
    for name, text in (
        ("classification", s.classification.replace("_", " ")),
        ("latency: prefill (Σ TTFT)", fmt.duration(s.latency_prefill_s)),
        ("latency: decode (Σ end-to-end − TTFT)", fmt.duration(s.latency_decode_s)),
        ("latency: prefill share", fmt.percent(s.latency_prefill_share)),
        ("latency classification", s.latency_classification.replace("_", " ")),
        ("prefill share without prefix reuse", fmt.percent(s.no_reuse_prefill_share)),
        ("prefill GPU time saved by reuse", fmt.duration(s.prefill_s_saved_by_reuse)),
        ("prefix hits taken from", s.hits_source or ""),
        ("open-loop prefill GPU time", fmt.duration(s.open_loop_prefill_s)),
        ("open-loop decode GPU time", fmt.duration(s.open_loop_decode_s)),
        ("open-loop prefill share", fmt.percent(s.open_loop_prefill_share)),
        ("mean decode batch per instance", fmt.quantity(s.mean_decode_batch, Unit.COUNT)),
        ("model instances", fmt.quantity(s.instances, Unit.COUNT)),
        ("GPU busy share", fmt.percent(s.gpu_busy_fraction)),
        ("requests with measured times", fmt.quantity(s.measured_requests, Unit.COUNT)),
    ):
        if text and text != fmt.NOT_MEASURED:
            profiled.append((name, text))
    thresholds = s.thresholds or {}
    if thresholds:
        profiled.append(
            (
                "classification thresholds",
                "; ".join(f"{k.replace('_', ' ')} {fmt.percent(v)}" for k, v in thresholds.items()),
            )
        )
    classes = s.request_classes or {}
    if classes:
        profiled.append(
            (
                "requests by class",
                ", ".join(f"{k.replace('_', ' ')} {fmt.count(v)}" for k, v in classes.items()),
            )
        )
    return profiled


def _calibration_table(cal: CalibrationSummary) -> Table:
    """The model's error before and after fitting, on the held-out rows."""

    def err(e: Any) -> str:
        mean, median = fmt.percent(e.mape), fmt.percent(e.median_ape)
        return f"{mean} mean, {median} median ({fmt.count(e.rows)} rows)"

    replay = cal.method == "replay"
    return Table(
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
