"""When no deployment meets the SLO, the verdict says so instead of 'no instance chosen'.

The Mooncake conversation head under MLPerf's default targets for Llama-3.1-70B (TTFT p99 2 s):
its long prompts keep every provider's best above 2 s, so the search recommends nothing. The
headline must name that, with the targets, and no empty per-stage table may be drawn.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvadvisor.pipeline import AnalyzeOptions
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.report import summary
from kvadvisor.report.deployments import provider_pairs
from kvadvisor.trace import read_trace

HEAD = Path(__file__).resolve().parents[1] / "sample_traces" / "mooncake_conversation_head.jsonl.gz"


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    """The head trace, Llama-3.1-70B, AWS only, the default (MLPerf) targets."""
    return analyze(
        read_trace(HEAD),
        AnalyzeOptions(model="llama-3.1-70b", providers=("aws",)),
        version="test",
        generated_at="2026-01-01T00:00:00",
    )


def test_headline_says_nothing_met_the_slo(report) -> None:  # type: ignore[no-untyped-def]
    """The headline gives the reason and the targets; the stage table is not drawn."""
    vs = report.recommendation.verdict
    assert not any(v.chosen for v in vs.verdicts)
    text = summary.headline(report)
    assert text.startswith("No deployment recommended: "), text
    assert "TTFT p99 2 s" in text and "--slo" in text
    assert "no instance chosen" not in text
    assert summary.verdicts(report) == ()


def test_aggregated_headline_names_one_fleet() -> None:
    """An aggregated verdict is one fleet: the headline does not list it once per stage.

    Before, "prefill: 6 × p5en.48xlarge ...; decode: 6 × p5en.48xlarge ..." read as twelve.
    """
    report = analyze(
        read_trace(HEAD),
        AnalyzeOptions(model="llama-3.1-70b", providers=("aws",), slo="ttft_p99=10s"),
        version="test",
        generated_at="2026-01-01T00:00:00",
    )
    v = report.recommendation.verdict.primary_verdict
    assert v.chosen
    text = summary.headline(report)
    if v.topology == "aggregated":
        (stage,) = v.stages
        assert text.startswith("Recommended (aggregated"), text
        assert text.count(stage.instance) == 1, text
    else:
        assert "prefill: " in text and "decode: " in text, text


def test_provider_line_states_no_deployment_once(report) -> None:  # type: ignore[no-untyped-def]
    """The terminal's provider line does not say "no deployment" twice in a row.

    Before: "no deployment meets the SLO; no deployment can meet the SLO: even alone ...".
    """
    (pair,) = provider_pairs(report.recommendation.verdict)
    provider, sentence = pair
    assert provider.startswith("aws")
    assert sentence.count("no deployment") == 1, sentence
    assert report.recommendation.verdict.verdicts[0].reason in sentence
