"""The same number reads the same everywhere a report shows it (issue 17's property).

Random facts go through the real advisor and every built-in rule; each number a finding's
message quotes must be the string its evidence shows, the string the HTML report's evidence
and facts tables show, and what the Markdown and terminal renderers print. A report analysed
for real checks the numbers the summary repeats from the sections.
"""

from __future__ import annotations

import math
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from report_fixtures import analysed_small, full_report

from kvadvisor.advice.advisor import advise
from kvadvisor.advice.inputs import load_advisor_inputs
from kvadvisor.facts.registry import FACT_SPECS, FACTS, collect
from kvadvisor.report import summary
from kvadvisor.report.console import ConsoleRenderer
from kvadvisor.report.html import build_view
from kvadvisor.report.markdown import MarkdownRenderer
from kvadvisor.results.report import AdviceReport, Finding, Recommendation
from kvadvisor.rules import RuleScope
from kvadvisor.units import Unit, format_value

INPUTS = load_advisor_inputs()
RULES = {r.code: r for r in INPUTS.rules}
CONFIG_SOURCE = "advisor (chosen configuration)"


def _log_uniform(lo: float, hi: float) -> st.SearchStrategy[float]:
    return st.floats(math.log10(lo), math.log10(hi)).map(lambda e: 10.0**e)


# Values in the ranges real traffic gives, spread over orders of magnitude so every unit's
# scale changes (KiB to TiB, ms to h, MB/s to GB/s) come up.
BY_UNIT: dict[Unit, st.SearchStrategy[object]] = {
    Unit.RATIO: st.floats(0.0, 1.0),
    Unit.MULTIPLE: _log_uniform(0.05, 50.0),
    Unit.BYTES: _log_uniform(1e3, 1e13),
    Unit.GIB: _log_uniform(1e-2, 1e5),
    Unit.BYTES_PER_S: _log_uniform(1e5, 1e11),
    Unit.GBPS: _log_uniform(0.1, 1e4),
    Unit.TOKENS: _log_uniform(16, 1e8),
    Unit.REQUESTS: _log_uniform(1, 1e7),
    Unit.COUNT: _log_uniform(1, 1e3),
    Unit.PER_S: _log_uniform(1e-2, 1e4),
    Unit.IOPS: _log_uniform(1, 1e7),
    Unit.SECONDS: _log_uniform(1e-3, 1e6),
    Unit.US: _log_uniform(1, 1e5),
    Unit.TFLOPS: _log_uniform(10, 5e3),
    Unit.DWPD: _log_uniform(1e-3, 50),
    Unit.BOOL: st.booleans(),
}
WORKLOAD = st.fixed_dictionaries(
    {
        s.name: BY_UNIT[s.unit]
        for s in FACT_SPECS
        if s.source != CONFIG_SOURCE and s.scope is RuleScope.WORKLOAD
    }
)


def _quoted(template: str) -> set[str]:
    """Facts a message template quotes with their unit (``{fact}``, no format spec)."""
    return {name for _, name, spec, _ in string.Formatter().parse(template) if name and not spec}


def _report_with(
    advice_findings: tuple[Finding, ...], recommendation: Recommendation
) -> AdviceReport:
    base = full_report()
    return AdviceReport(
        meta=base.meta,
        trace=base.trace,
        recommendation=recommendation,
        findings=advice_findings,
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(WORKLOAD)
def test_a_quoted_number_reads_the_same_in_message_evidence_and_every_renderer(values) -> None:
    """Message, evidence, HTML evidence and facts tables, Markdown and text: one string."""
    advice = advise(
        collect(values.items()), None, INPUTS.storage, INPUTS.instances, tuple(RULES.values()), None
    )
    report = _report_with(advice.findings, advice.recommendation)
    view = build_view(report)
    facts_table = {
        row[0]: row[1]
        for table in view.rules.tables
        if table.caption == "Facts the rules saw"
        for row in table.rows
    }
    markdown = MarkdownRenderer().render(report)
    text = ConsoleRenderer(100_000).render(report)  # wide enough that no message wraps
    for finding, shown in zip(summary.sorted_findings(report), view.findings, strict=True):
        assert shown.code == finding.code and shown.message == finding.message
        quoted = _quoted(RULES[finding.code].message)
        for name, evidence in finding.evidence.items():
            number = format_value(evidence.value, Unit(evidence.unit))
            assert evidence.text == number, (finding.code, name)
            assert dict(shown.evidence)[name] == number, (finding.code, name)
            assert facts_table[name] == number, (finding.code, name)
            if name in quoted:
                # The message, and the Markdown and terminal reports printing it, quote it so.
                assert number in finding.message, (finding.code, name, number)
                assert number in markdown and number in text, (finding.code, name, number)
        assert finding.message in text


def test_the_summary_repeats_a_section_number_as_the_section_shows_it() -> None:
    """Key numbers and verdict cards quote the sections' figures as the sections print them."""
    for report in (full_report(), analysed_small()):
        view = build_view(report)
        key = {k.name: k for k in view.key_numbers}
        sections = {s.id: dict(s.rows) for s in view.sections}
        split = report.stage_split
        if split is not None:
            stages = sections["stages"]
            assert stages["prefill share of GPU time"] == key["prefill share of GPU time"].value
            note = key["prefill share of GPU time"].note
            assert f"prefill {stages['prefill GPU time']}" in note
            assert f"decode {stages['decode GPU time']}" in note
            needs = dict(next(c for c in view.cards if c.stage == "prefill").needs)
            assert needs["share of GPU time"].startswith(stages["prefill share of GPU time"])
        if report.prefix_cache is not None and report.prefix_cache.hit_ratio.all is not None:
            ratio = format_value(report.prefix_cache.hit_ratio.all, Unit.RATIO)
            assert key["prefix hit ratio"].value == ratio
            # Prefix hits are read before prefill: the stage that prefills shows them.
            prefill_needs = dict(next(c for c in view.cards if c.stage == "prefill").needs)
            assert prefill_needs["prefix hit ratio"] == ratio


def test_every_fact_renders_in_its_declared_unit() -> None:
    """A fact's unit comes from the registry, never from its name: IOPS facts say IOPS."""
    assert FACTS["write_iops_p99"].unit is Unit.IOPS
    assert FACTS["arrival_rate_per_s"].unit is Unit.PER_S
    assert format_value(2500, FACTS["read_iops_p99"].unit) == "2,500 IOPS"
