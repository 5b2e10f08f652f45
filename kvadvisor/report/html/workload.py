"""The workload section: arrivals over time and the prompt and output lengths."""

from __future__ import annotations

from kvadvisor.report import chartspecs, fmt
from kvadvisor.report.html.chartviews import chart, histogram_chart
from kvadvisor.report.html.view import Section, Table
from kvadvisor.report.summary import requests_text, span_text
from kvadvisor.results.report import AdviceReport
from kvadvisor.units import Unit


def workload_section(report: AdviceReport) -> Section:
    """Arrivals over time and the input/output length distributions."""
    t = report.trace
    if t.requests == 0:
        return Section("workload", "Workload", missing="not measured: the trace has no requests")
    mean_in = t.input_tokens_total / t.requests
    mean_out = t.output_tokens_total / t.requests
    rows = [
        ("requests", fmt.count(t.requests)),
        ("time span", fmt.duration(t.duration_s) if t.duration_s > 0 else span_text(t)),
        ("mean arrival rate", fmt.quantity(t.arrival_rate_per_s, Unit.PER_S)),
        ("mean input length", f"{fmt.number(mean_in)} tokens"),
        ("mean output length", f"{fmt.number(mean_out)} tokens"),
        ("input : output tokens", f"{fmt.number(mean_in / mean_out) if mean_out else 'n/a'} : 1"),
        ("block size of the hashes", fmt.quantity(t.block_tokens, Unit.TOKENS)),
        ("models in the trace", ", ".join(t.models) or "not recorded"),
    ]
    charts = []
    arrivals = chartspecs.arrivals_spec(t)
    if arrivals is not None:
        charts.append(
            chart(
                arrivals,
                "Arrivals over time: bursts above the mean are what peak-sized storage is bought "
                "for.",
            )
        )
    for key, hist, what in (
        ("workload-input", t.input_tokens_hist, "Prompt lengths: prefill work and KV written"),
        ("workload-output", t.output_tokens_hist, "Output lengths: decode steps per request"),
    ):
        if hist is not None:
            charts.append(histogram_chart(hist, key, what))
    lead = (
        f"{requests_text(t)}; prompts average "
        f"{fmt.number(mean_in)} tokens and outputs {fmt.number(mean_out)} tokens."
    )
    stats = t.input_tokens_stats
    if stats is not None and stats.p50_tokens is not None:
        lead += (
            f" Half the prompts are under {fmt.count(stats.p50_tokens)} tokens: "
            "long prompts pull the mean up."
            if stats.mean_tokens is not None and stats.p50_tokens < 0.8 * stats.mean_tokens
            else f" The median prompt is {fmt.count(stats.p50_tokens)} tokens."
        )
    tables = []
    lengths = [
        (what, s)
        for what, s in (("prompt", t.input_tokens_stats), ("output", t.output_tokens_stats))
        if s is not None and s.mean_tokens is not None
    ]
    if lengths:
        tables.append(
            Table(
                "Lengths in tokens: the mean beside the percentiles (heavy tails)",
                ("", "mean", "p50", "p90", "p99", "max"),
                tuple(
                    (
                        what,
                        *(
                            fmt.count(v)
                            for v in (s.mean_tokens, s.p50_tokens, s.p90_tokens, s.p99_tokens)
                        ),
                        fmt.count(s.max_tokens),
                    )
                    for what, s in lengths
                ),
            )
        )
    return Section(
        "workload",
        "Workload",
        lead,
        tuple(rows),
        tuple(charts),
        tuple(tables),
    )
