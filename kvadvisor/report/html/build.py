"""Build the whole page view from the advice model: verdict, findings, every section."""

from __future__ import annotations

from dataclasses import replace

from kvadvisor.report import fmt, summary
from kvadvisor.report.html.advice import alternatives_section, rules_section
from kvadvisor.report.html.deployments import deployments_section
from kvadvisor.report.html.inputs import inputs_rows
from kvadvisor.report.html.iodemand import io_section
from kvadvisor.report.html.plans import plan_section
from kvadvisor.report.html.prefix import prefix_section
from kvadvisor.report.html.replay import replay_section
from kvadvisor.report.html.stages import stage_section
from kvadvisor.report.html.view import FindingView, HtmlView, VerdictCard
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
    Stage.DECODE: "one token at a time: small, frequent, latency-sensitive KV reads; prefix hits "
    "are read back instead of recomputed",
}


def build_view(report: AdviceReport) -> HtmlView:
    """Compute every value the page shows (formatting, sentences, charts)."""
    verdicts = summary.verdicts(report)
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
        cards=tuple(
            VerdictCard(
                stage,
                STAGE_ROLES[stage],
                summary.stage_needs(report, stage),
                next((v.items for v in verdicts if v.stage == stage), ()),
                summary.stage_notes(report.recommendation.stage(stage))
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
        sections=tuple(s for s in (deployments_section(report),) if s is not None)
        + (
            workload_section(report),
            stage_section(report),
            prefix_section(report),
            io_section(report),
            replay_section(report.replay, report.unavailable.get("replay")),
        )
        + ((plan_section(report),) if report.plan_reviews else ()),
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
        report_data=clean(with_series_labels(report.to_dict())),
    )
    return replace(view, top_findings=view.findings[:TOP_FINDINGS])
