"""The HTML report answers first, on one hardware picture, with charts that answer a question.

Judged on real sample traces (tests/report_fixtures.py SAMPLE_CASES) against the report model
the page is built from: the stage split names the deployment the verdict chose, the answer
chart plots the target's percentile, prefix-hit reads sit under prefill alone, and each
abbreviation is expanded where it is first used. The browser checks of the same pages are in
tests/test_report_browser.py.
"""

from __future__ import annotations

import re

from report_fixtures import analysed_sample, full_report

from kvadvisor.report import deployments, fmt, summary
from kvadvisor.report.glossary import GLOSSARY
from kvadvisor.report.html import HtmlRenderer, build_view
from kvadvisor.report.html.view import HtmlView, Section


def _section(view: HtmlView, key: str) -> Section:
    return next(s for s in (*view.sections, *view.evidence, view.rules) if s.id == key)


def test_the_stage_split_is_on_the_chosen_deployment() -> None:
    """With a replay the split's hardware is the verdict's; the profiler's own is labelled."""
    report = analysed_sample("chosen")
    vs = report.recommendation.verdict
    (stage,) = vs.primary_verdict.stages  # the head trace is served aggregated
    assert report.replay is not None and report.stage_split.source == "replay"
    section = _section(build_view(report), "stages")
    assert f"serving {stage.instances} × {stage.instance} ({stage.gpu}), TP {stage.tp}" in (
        section.lead
    )
    shown = dict(section.rows)
    # The profiler's figures are on its own configuration: not beside the verdict's.
    for name in ("GPU busy share", "model instances", "mean decode batch per instance"):
        assert name not in shown
    dep = report.model.deployment
    assert f"× TP {dep.tp}" in section.more_title and "not the chosen deployment" in (
        section.more_title
    )
    assert dict(section.more_rows)["model instances"] == fmt.count(report.stage_split.instances)


def test_without_a_deployment_the_split_says_it_is_assumed() -> None:
    """Nothing chosen: the split's hardware is labelled the assumed configuration."""
    report = analysed_sample("no-deployment")
    assert summary.verdicts(report) == () and report.replay is None
    lead = _section(build_view(report), "stages").lead
    dep = report.model.deployment
    assert "an assumed configuration" in lead and "as no deployment was chosen" in lead
    assert f"TP {dep.tp}" in lead


def test_prefix_hit_reads_are_under_the_stage_that_prefills() -> None:
    """The prefill card shows the KV reads of prefix hits; decode shows no storage I/O."""
    report = analysed_sample("chosen")
    cards = {c.stage: dict(c.needs) for c in build_view(report).cards}
    read = report.io.read
    assert cards["prefill"]["KV reads (prefix hits)"] == (
        f"mean {fmt.bandwidth(read.mean_bytes_per_s)}, p99 {fmt.bandwidth(read.p99_bytes_per_s)}, "
        f"peak {fmt.bandwidth(read.peak_bytes_per_s)}"
    )
    assert cards["prefill"]["prefix hit ratio"] == fmt.percent(report.prefix_cache.hit_ratio.all)
    assert not any("KV reads" in k or "prefix" in k for k in cards["decode"])
    assert cards["decode"]["KV storage I/O"].startswith("none")


def test_no_derivation_note_is_said_twice() -> None:
    """Within a card no note repeats, and notes every stage shares are said once, below."""
    for report in (analysed_sample("chosen"), full_report()):
        view = build_view(report)
        for card in view.cards:
            assert len(card.notes) == len(set(card.notes)), card.notes
            assert not set(card.notes) & set(view.shared_notes)
    # The head trace is served aggregated: the price and topology notes are shared.
    shared = build_view(analysed_sample("chosen")).shared_notes
    assert any(n.startswith("aggregated: ") for n in shared), shared


def test_the_answer_chart_plots_the_target_percentile() -> None:
    """Each point is its candidate's TTFT at the target's percentile (p99 for a p99 target)."""
    report = analysed_sample("chosen")
    vs = report.recommendation.verdict
    assert deployments.ttft_target(vs) == ("p99", vs.slo.targets["ttft_p99_s"])
    points = deployments.chart_points(vs)
    assert points
    # A candidate checked again on the whole trace is listed twice; the chart plots the
    # search's own replay, the first listed (its caption says "the sample's figures").
    by_label: dict = {}
    for v in vs.verdicts:
        for c in v.candidates:
            if c.usd_per_hour is not None and c.ttft_p99_s is not None:
                by_label.setdefault((v.provider, c.label), c)
    for p in points:
        c = by_label[(p.provider, p.label)]
        assert p.ttft_s == c.ttft_p99_s and p.usd_per_hour == c.usd_per_hour
    primary = [p for p in points if p.chosen and p.provider == vs.primary]
    assert len(primary) == 1
    assert primary[0].usd_per_hour == vs.primary_verdict.usd_per_hour


def test_the_closest_miss_is_plotted_when_nothing_is_chosen() -> None:
    """No deployment: the closest miss is a point at what it reached, and no stars are spoken of."""
    report = analysed_sample("no-deployment")
    vs = report.recommendation.verdict
    c = vs.verdict(vs.closest).closest
    (miss,) = [p for p in deployments.chart_points(vs) if p.closest]
    assert (miss.ttft_s, miss.usd_per_hour) == (c.reached["ttft_p99_s"], c.usd_per_hour)
    chart = build_view(report).answer_chart
    assert chart is not None
    assert "closest miss" in chart.caption and "star" not in chart.caption.lower()
    # The label wraps over several <text> lines; read back in order they give it whole.
    lines = " ".join(re.findall(r"<text\b[^>]*>([^<]*)</text>", chart.svg))
    assert f"closest miss: {c.label}, {deployments.money(c.usd_per_hour)}" in lines


def test_the_no_deployment_table_has_no_empty_column() -> None:
    """Nothing chosen: the provider table shows the closest miss's figures, no empty column."""
    for case in ("no-deployment", "no-arrivals"):
        table = _section(build_view(analysed_sample(case)), "deployments").tables[0]
        for i, header in enumerate(table.headers):
            assert any(row[i] not in ("", "—") for row in table.rows), (case, header)
        assert all(cell for row in table.rows for cell in row), case
    (row,) = _section(build_view(analysed_sample("no-deployment")), "deployments").tables[0].rows
    c = analysed_sample("no-deployment").recommendation.verdict.verdicts[0].closest
    assert row[3] == deployments.money(c.usd_per_hour)


def test_no_arrival_times_are_not_told_to_loosen_the_targets() -> None:
    """Without arrival times no target helps: the headline gives the reason alone."""
    report = analysed_sample("no-arrivals")
    text = summary.headline(report)
    assert "arrival times" in text and "loose" not in text and "--slo" not in text
    assert build_view(report).answer_chart is None


def test_each_abbreviation_is_expanded_where_first_used() -> None:
    """The first use of a term in the prose is an <abbr> with its meaning; later ones are not."""
    page = HtmlRenderer().render(analysed_sample("chosen"))
    body = page[page.index("<body") :]
    prose = re.sub(r"<(svg|script|style)\b.*?</\1>", "", body, flags=re.S)
    abbrs = re.findall(r'<abbr title="([^"]+)">([^<]+)</abbr>', prose)
    words = [w for _, w in abbrs]
    for term in ("TTFT", "TPOT", "TP", "SLO", "KV", "GPU", "aggregated"):
        assert term in words, term
        first = re.search(rf"(?<![\w-]){re.escape(term)}(?!\w)", re.sub(r"<[^>]*>", "\0", prose))
        assert first is not None
        # The first occurrence in the text is the one wrapped.
        text_before = re.sub(r"<[^>]*>", "\0", prose)[: first.start()]
        assert text_before.endswith("\0"), term
    assert len(words) == len(set(words))
    meanings = {spelling: meaning for _, sp, meaning in GLOSSARY for spelling in sp}
    for title, word in abbrs:
        assert title == meanings[word].replace("'", "&#x27;")
    # Charts keep plain text: no markup inside an SVG.
    assert not re.search(r"<svg\b(?:(?!</svg>).)*<abbr", body, flags=re.S)


def test_the_glossary_lists_every_term() -> None:
    """The closed glossary holds each term and its meaning."""
    view = build_view(full_report())
    assert [(g.term, g.meaning) for g in view.glossary] == [(t, m) for t, _, m in GLOSSARY]
    page = HtmlRenderer().render(full_report())
    assert '<section id="glossary" class="closed">' in page
    for term in ("TTFT", "TPOT", "TP", "EP", "SLO", "P-to-D", "KV", "MLA", "DWPD"):
        assert f"<dt>{term}</dt>" in page, term
