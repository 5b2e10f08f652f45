"""Build the whole page view from the advice model: verdict, findings, every section."""

from __future__ import annotations

from dataclasses import replace

from kvadvisor.report import chartspecs, fmt, summary
from kvadvisor.report.glossary import GLOSSARY
from kvadvisor.report.html.advice import alternatives_section, rules_section
from kvadvisor.report.html.deployments import answer_chart, chart_missing, deployments_section
from kvadvisor.report.html.inputs import inputs_rows
from kvadvisor.report.html.iodemand import io_section
from kvadvisor.report.html.plans import plan_section
from kvadvisor.report.html.prefix import prefix_section
from kvadvisor.report.html.replay import replay_section
from kvadvisor.report.html.stages import stage_section
from kvadvisor.report.html.view import (
    FindingView,
    GlossaryEntry,
    HtmlView,
    Section,
    VerdictCard,
)
from kvadvisor.report.html.workload import workload_section
from kvadvisor.report.jsonreport import clean
from kvadvisor.report.serieslabels import with_series_labels
from kvadvisor.results.report import AdviceReport
from kvadvisor.vocab import Stage

# Findings repeated under the verdict, most severe first.
TOP_FINDINGS = 3

STAGE_ROLES = {
    Stage.PREFILL: "processes the whole prompt at once: large, bursty KV writes of the prompt "
    "tokens that missed the cache",
    Stage.DECODE: "one token at a time, latency-sensitive: each step reads the KV of every "
    "running request from GPU memory",
}


def _closed(s: Section) -> Section:
    """A section of the evidence: drawn closed, its first sentence beside the title."""
    first = (s.missing or s.lead).split(". ")[0].rstrip(".")
    return replace(s, collapsed=True, summary=s.summary or first)


def _cards(report: AdviceReport) -> tuple[tuple[VerdictCard, ...], tuple[str, ...]]:
    """The stage cards, and the derivation notes every card shares (said once, below them)."""
    verdicts = summary.verdicts(report)
    rec = report.recommendation
    notes = {
        stage: tuple(dict.fromkeys(summary.stage_notes(rec.stage(stage)))) if rec else ()
        for stage in summary.STAGES
    }
    shared = tuple(n for n in notes[summary.STAGES[0]] if all(n in v for v in notes.values()))
    cards = tuple(
        VerdictCard(
            stage,
            STAGE_ROLES[stage],
            summary.stage_needs(report, stage),
            next((v.items for v in verdicts if v.stage == stage), ()),
            tuple(n for n in notes[stage] if n not in shared),
        )
        for stage in summary.STAGES
    )
    return cards, shared


def build_view(report: AdviceReport) -> HtmlView:
    """Compute every value the page shows (formatting, sentences, charts)."""
    verdicts = summary.verdicts(report)
    cards, shared = _cards(report)
    chart = answer_chart(report)
    findings = summary.sorted_findings(report)
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.severity] = counts.get(f.severity, 0) + 1
    t = report.trace
    notes = tuple(t.notes) + tuple(
        f"{fmt.count(n)} rows dropped: {why}" for why, n in sorted(t.dropped.items())
    )
    no_rules = summary.why_missing(report, "recommendation")
    view = HtmlView(
        title=f"kvadvisor report: {t.path}",
        headline=summary.headline(report),
        verdict_lines=summary.verdict_lines(report),
        lead_number=summary.headline_number(report),
        version=report.meta.kvadvisor_version,
        generated_at=report.meta.generated_at,
        cards=cards,
        shared_notes=shared,
        answer_chart=chart,
        answer_chart_missing=None if chart else chart_missing(report),
        verdict_missing=None
        if verdicts
        else (
            "none: no deployment was chosen (the verdict above says why)"
            if report.recommendation is not None
            else no_rules
        ),
        key_numbers=summary.key_numbers(report),
        finding_counts=tuple(
            sorted(counts.items(), key=lambda kv: summary.SEVERITY_RANK.get(kv[0], 9))
        ),
        # The answer first: the deployments and what else was weighed, then where the GPU
        # time and the KV I/O go; the evidence behind them follows, closed.
        sections=tuple(s for s in (deployments_section(report),) if s is not None)
        + (_closed(alternatives_section(report)),)
        + ((plan_section(report),) if report.plan_reviews else ())
        + (stage_section(report), io_section(report)),
        evidence=(
            _closed(workload_section(report)),
            _closed(prefix_section(report)),
            _closed(
                replay_section(
                    report.replay,
                    report.unavailable.get("replay"),
                    chartspecs.slo_targets(report),
                )
            ),
        ),
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
        rules=_closed(rules_section(report)),
        inputs=inputs_rows(report),
        notes=notes,
        glossary=tuple(GlossaryEntry(term, meaning) for term, _, meaning in GLOSSARY),
        report_data=clean(with_series_labels(report.to_dict())),
    )
    return replace(view, top_findings=view.findings[:TOP_FINDINGS])
