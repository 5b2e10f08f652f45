"""Notebook views: a report, its verdicts and a replay as a few lines and a compact HTML table.

What ``repr`` and Jupyter's ``_repr_html_`` show: the answer in a few lines, not the whole
model (``to_text()``/``to_html()`` give that). Views are plain data built first; the text joins
them and one autoescaped template draws them, so nothing from a trace reaches HTML unescaped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from jinja2 import Environment, PackageLoader, StrictUndefined

from kvadvisor.report import deployments, fmt, summary
from kvadvisor.results.replay import Percentiles, ReplayReport
from kvadvisor.results.report import AdviceReport
from kvadvisor.results.verdict import VerdictSet
from kvadvisor.units import plural
from kvadvisor.vocab import Severity

_ENV = Environment(
    loader=PackageLoader("kvadvisor", "report/templates"),
    autoescape=True,
    undefined=StrictUndefined,
    keep_trailing_newline=True,
)


@dataclass(frozen=True)
class NotebookView:
    """A title, a few summary lines and a two-column table of (label, value) rows."""

    title: str
    lines: tuple[str, ...]
    rows: tuple[tuple[str, str], ...] = ()
    hint: str = ""


def text(view: NotebookView) -> str:
    """The view as ``repr`` shows it: the title and the summary lines (no table)."""
    return "\n".join((f"<{view.title}>", *(f"  {line}" for line in view.lines)))


def html(view: NotebookView) -> str:
    """The view as one autoescaped HTML fragment (Jupyter's ``_repr_html_``)."""
    return _ENV.get_template("notebook.html.j2").render(view=view)


def _findings_line(report: AdviceReport) -> str:
    """How many findings of each severity, most severe first, with the first codes."""
    if not report.findings:
        return "findings: none"
    counts = [
        f"{n} {s.value}" if s is Severity.INFO else plural(n, s.value)
        for s in sorted(Severity, key=lambda s: summary.SEVERITY_RANK[s])
        if (n := sum(f.severity is s for f in report.findings))
    ]
    codes = ", ".join(f.code for f in summary.sorted_findings(report)[:4])
    more = ", ..." if len(report.findings) > 4 else ""
    return f"findings: {', '.join(counts)} ({codes}{more})"


def report_view(report: AdviceReport) -> NotebookView:
    """The report: the trace, the headline, the verdict's margin and targets, the findings."""
    t = report.trace
    name = os.path.basename(t.path) or t.format
    lines = (summary.headline(report), summary.targets_line(report), _findings_line(report))
    rows = tuple(
        (k.name, f"{k.value} ({k.note})" if k.note else k.value)
        for k in summary.key_numbers(report)
    )
    return NotebookView(
        f"kvadvisor report: {name}, {summary.requests_text(t)}",
        tuple(line for line in lines if line),
        rows,
        "to_text() or to_html() for the whole report, requests() per request, "
        "plot(name) for a chart",
    )


def verdict_view(vs: VerdictSet) -> NotebookView:
    """The deployment verdicts: the targets, and each provider's pick or closest miss."""
    pairs = deployments.provider_pairs(vs)
    targets = ", ".join(
        f"{deployments.target_name(k)} {fmt.duration(v)}" for k, v in vs.slo.targets.items()
    )
    lines = [f"targets: {targets}" + (f" ({vs.slo.rule})" if vs.slo.rule else "")]
    v = vs.primary_verdict
    if v is not None and v.chosen:
        lines.append(
            f"primary: {v.provider}, {deployments.deployment_text(v)}, "
            f"{deployments.money(v.usd_per_hour)}"
        )
    else:
        lines.append(f"no primary: {vs.primary_why}")
    return NotebookView(
        f"kvadvisor verdict: {plural(len(vs.verdicts), 'provider')}, "
        f"{plural(vs.replayed, 'replay')} of {plural(vs.enumerated, 'configuration')}",
        tuple(lines),
        tuple((p, s) for p, s in pairs),
    )


def _p(p: Percentiles | None) -> str:
    if p is None:
        return "-"
    return f"p50 {fmt.duration(p.p50)}, p90 {fmt.duration(p.p90)}, p99 {fmt.duration(p.p99)}"


def replay_view(report: ReplayReport) -> NotebookView:
    """The replay: what ran, how many finished, TTFT and TPOT, and whether it kept up."""
    res = report.replay
    r, s = res.requests, res.stage_split
    kept_up = (
        f"overloaded: {res.overload.reason}" if res.overload.overloaded else "kept up with arrivals"
    )
    slo = ", ".join(
        f"{deployments.target_name(k)} {'met' if res.slo.met.get(k) else 'missed'}"
        for k in res.slo.targets
    )
    lines = (
        f"{fmt.count(r.completed)} of {fmt.count(r.count)} requests finished; {kept_up}",
        f"TTFT {_p(r.ttft_s)}; TPOT {_p(r.tpot_s)}",
        f"SLO: {slo}" if slo else "",
    )
    rows = [
        (
            f"{st.role.value}",
            f"{st.instances} × {st.instance or st.gpu}, {plural(st.replicas, 'replica')}, "
            f"busy {fmt.percent(st.busy_fraction)}",
        )
        for st in res.stages
    ]
    rows += [
        ("queueing", _p(r.queue_s)),
        (
            "GPU time",
            f"prefill {fmt.duration(s.prefill_gpu_s)}, decode {fmt.duration(s.decode_gpu_s)} "
            f"(prefill share {fmt.percent(s.prefill_share)})",
        ),
    ]
    if res.hit_ratio is not None:
        rows.append(("prompt tokens from a cache", fmt.percent(res.hit_ratio)))
    name = os.path.basename(report.trace.path) or report.trace.format
    return NotebookView(
        f"kvadvisor replay of {name} through {res.deployment.name} ({res.deployment.topology})",
        tuple(line for line in lines if line),
        tuple(rows),
        "to_text() for the whole summary, requests() per request",
    )
