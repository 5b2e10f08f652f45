"""What every renderer says first: the headline number, lengths beside means, shared prefixes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from report_fixtures import bare_report, full_report

from kvadvisor.report import summary
from kvadvisor.report.console import ConsoleRenderer
from kvadvisor.report.html.build import build_view
from kvadvisor.report.html.inputs import inputs_rows
from kvadvisor.report.html.view import HtmlView, Section
from kvadvisor.report.markdown import MarkdownRenderer
from kvadvisor.results.common import LengthSummary
from kvadvisor.results.report import Alternative
from kvadvisor.vocab import Stage

# The Mooncake trace's published prompt lengths: mean 12,035.1, p50 6,909, p99 85,400.4,
# max 126,195 (p90 27,367 by statistics.quantiles).
MOONCAKE_INPUT = LengthSummary(12_035.1, 6_909.0, 27_367.0, 85_400.4, 126_195)


def _section(view: HtmlView, key: str) -> Section:
    """A section of the page by its id, in the answer or in the closed evidence."""
    return next(s for s in (*view.sections, *view.evidence, view.rules) if s.id == key)


def test_headline_number_is_the_reusable_share_first() -> None:
    """With a hit ratio, the headline is it; without, the prefill share; else the requests."""
    full = full_report()
    lead = summary.headline_number(full)
    assert lead.value == "42.0%"
    assert "of prompt tokens repeat a prefix" in lead.text
    assert "40 requests over 29.2 s" in lead.text
    no_cache = replace(full, prefix_cache=None)
    lead = summary.headline_number(no_cache)
    assert (lead.value, lead.text.split(" (")[0]) == ("76.6%", "of GPU time goes to prefill")
    bare = bare_report()
    assert summary.headline_number(bare).value == "40"


def test_every_renderer_leads_with_the_answer() -> None:
    """The terminal shows the verdict and its targets first, then the headline number.

    Markdown and HTML show the number before the stage table.
    """
    report = full_report()
    text = ConsoleRenderer(100).render(report)
    verdict = text.index("Verdict")
    assert verdict < text.index("targets: TTFT p99 4 s") < text.index("42.0% of prompt tokens")
    assert text[:verdict].count("\n") <= 3  # version, trace, blank
    md = MarkdownRenderer().render(report)
    assert md.index("**42.0%**") < md.index("| instance |")
    view = build_view(report)
    assert view.lead_number.value == "42.0%"


def test_lengths_beside_the_mean() -> None:
    """Percentiles rounded to whole tokens, in the key numbers and the workload table."""
    report = full_report()
    # 40 requests averaging 12,035.1 tokens.
    trace = replace(report.trace, input_tokens_stats=MOONCAKE_INPUT, input_tokens_total=481_404)
    report = replace(report, trace=trace)
    keys = {k.name: k for k in summary.key_numbers(report)}
    assert keys["prompt length"].value == "mean 12,035"
    assert keys["prompt length"].note == "p50 6,909, p90 27,367, p99 85,400, max 126,195 tokens"
    workload = _section(build_view(report), "workload")
    lengths = next(t for t in workload.tables if t.caption.startswith("Lengths"))
    assert lengths.rows[0] == ("prompt", "12,035", "6,909", "27,367", "85,400", "126,195")
    # The median far under the mean is said in words.
    assert "Half the prompts are under 6,909 tokens" in workload.lead


def test_shared_prefixes_and_conversations_are_shown() -> None:
    """The fixture's top prefix (1,024 tokens, 14 requests, 9.07%) and the 31% / 11% split."""
    report = full_report()
    keys = {k.name: k for k in summary.key_numbers(report)}
    assert keys["most reused prefix"].value == "1,024 tokens, 14 requests"
    assert keys["most reused prefix"].note.startswith("9.1% of prompt tokens; 14 shared")
    assert keys["reuse within conversations"].value == "31.0%"
    assert "across conversations 11.0%" in keys["reuse within conversations"].note
    prefix = _section(build_view(report), "prefix")
    tables = {t.caption.split(" (")[0]: t for t in prefix.tables}
    by_count = tables["Top shared prefixes by requests"]
    assert by_count.rows[1] == ("512 tokens", "3", "1,024 tokens", "0.7%", "12.8 s")
    conv = tables["Where the reuse comes from: the same conversation or another one"]
    assert conv.rows == (
        ("the same conversation", "31.0%", "37.0%"),
        ("another conversation", "11.0%", "13.0%"),
    )
    assert "upper bound" in conv.note  # inferred without session ids


def test_alternatives_are_ranked_per_kind() -> None:
    """Instances and storage each get their own ranked table; no shared "kind" column."""
    report = full_report()
    rec = report.recommendation
    pre = rec.prefill
    instances = (
        Alternative("instance", "p5e.48xlarge", 1, "fits the KV working set", True),
        Alternative("instance", "p4d.24xlarge", 2, "KV does not fit", False),
    )
    report = replace(
        report,
        recommendation=replace(
            rec, prefill=replace(pre, alternatives=pre.alternatives + instances)
        ),
    )
    section = _section(build_view(report), "alternatives")
    tables = {t.caption: t for t in section.tables}
    assert list(tables) == ["Prefill: GPU instances", "Prefill: storage"]
    assert tables["Prefill: GPU instances"].headers == ("rank", "option", "feasible", "reason")
    assert [r[:2] for r in tables["Prefill: GPU instances"].rows] == [
        ("1", "p5e.48xlarge"),
        ("2", "p4d.24xlarge"),
    ]
    assert [r[1] for r in tables["Prefill: storage"].rows] == ["local NVMe Gen5", "cloud block"]


def test_a_trace_without_arrival_spread_is_not_over_0_s() -> None:
    """A benchmark result with no start times has no span: the reports say why, not "0 s"."""
    report = full_report()
    flat = replace(report, trace=replace(report.trace, duration_s=0.0, arrival_rate_per_s=None))
    assert "40 requests, arrival times unknown" in summary.headline_number(flat).text
    keys = {k.name: k for k in summary.key_numbers(flat)}
    assert keys["requests"].note == "arrival times unknown"
    workload = _section(build_view(flat), "workload")
    assert workload.lead.startswith("40 requests, arrival times unknown;")
    one = replace(flat, trace=replace(flat.trace, requests=1), prefix_cache=None, stage_split=None)
    assert (summary.headline_number(one).value, summary.headline_number(one).text) == (
        "1",
        "request",
    )
    # A measured span keeps its figure.
    assert keys != {k.name: k for k in summary.key_numbers(report)}
    assert "40 requests over 29.2 s" in summary.headline_number(report).text


def test_options_are_shown_as_given() -> None:
    """An option is a value as typed, not a measured figure ("iterations 300.0%" was one)."""
    report = full_report()
    report = replace(
        report,
        options={"iterations": 3, "warmup_fraction": 0.5, "no_replay": False, "gpu": None},
    )
    rows = dict(inputs_rows(report))
    assert rows["option iterations"] == "3"
    assert rows["option warmup_fraction"] == "0.5"
    assert rows["option no_replay"] == "no"
    assert rows["option gpu"] == "not set (default)"


def test_unmeasured_hit_ratio_says_why() -> None:
    """A trace without block hashes: the key number gives the section's reason, not a cache."""
    report = full_report()
    pc = report.prefix_cache
    why = "prefix reuse unknown: the trace has no block hashes, so no hit ratio can be measured"
    unknown = replace(pc, hit_ratio=replace(pc.hit_ratio, all=None, steady=None), note=why)
    keys = {k.name: k for k in summary.key_numbers(replace(report, prefix_cache=unknown))}
    assert (keys["prefix hit ratio"].value, keys["prefix hit ratio"].note) == ("not measured", why)
    keys = {k.name: k for k in summary.key_numbers(report)}
    assert keys["prefix hit ratio"].note.endswith("; unbounded cache")


def test_no_deployment_is_said_in_one_sentence() -> None:
    """No instance for either stage: the headline says so with the advisor's reason."""
    report = full_report()
    rec = report.recommendation
    why = "no provider has a deployment that meets the SLO"
    empty = {
        stage: replace(
            rec.stage(stage),
            instance=None,
            instance_count=None,
            notes=(f"no deployment: {why}",),
        )
        for stage in (Stage.PREFILL, Stage.DECODE)
    }
    none = replace(report, recommendation=replace(rec, **empty))
    assert summary.headline(none) == f"No deployment recommended: {why}."
    assert summary.headline(report).startswith("Recommended prefill: ")
    text = ConsoleRenderer(100).render(none)
    assert "none chosen" in text and "no instance chosen with" not in text


def test_recommendation_stage_by_meaning() -> None:
    """Recommendation.stage gives each stage's own field; a stage it has no field for is refused."""
    rec = full_report().recommendation
    assert rec.stage(Stage.PREFILL) is rec.prefill
    assert rec.stage(Stage.DECODE) is rec.decode
    with pytest.raises(ValueError, match="not serving"):
        rec.stage(Stage.SERVING)
