"""When no deployment meets the SLO, the verdict says so, and still prices the nearest one.

The Mooncake conversation head under MLPerf's flat llama2-70b targets (TTFT p99 2 s, set on
prompts of at most 1,024 tokens): its long prompts keep every provider's best above 2 s, so the
search recommends nothing. The headline must name that, with the targets, price the closest
deployment and give the ``--slo`` that accepts it (no dead end); no empty per-stage table may be
drawn. Re-run with that ``--slo``, the search must then recommend a deployment no dearer.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kvadvisor.pipeline import AnalyzeOptions
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.report import summary
from kvadvisor.report.deployments import provider_pairs
from kvadvisor.trace import read_trace

HEAD = Path(__file__).resolve().parents[1] / "sample_traces" / "mooncake_conversation_head.jsonl.gz"
FLAT = "ttft_p99=2s,tpot_p99=200ms"


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    """The head trace, Llama-3.1-70B, AWS only, MLPerf's flat llama2-70b targets."""
    return analyze(
        read_trace(HEAD),
        AnalyzeOptions(model="llama-3.1-70b", providers=("aws",), slo=FLAT),
        version="test",
        generated_at="2026-01-01T00:00:00",
    )


def test_headline_says_nothing_met_the_slo(report) -> None:  # type: ignore[no-untyped-def]
    """The headline gives the targets and the nearest deployment priced; no stage table."""
    vs = report.recommendation.verdict
    assert not any(v.chosen for v in vs.verdicts)
    text = summary.headline(report)
    assert text.startswith("No deployment meets the SLO (TTFT p99 2 s, TPOT p99 200 ms)"), text
    (v,) = vs.verdicts
    c = v.closest
    assert vs.closest == "aws" and c is not None
    assert c.usd_per_hour is not None and "$" in text
    assert f"--slo {c.slo_text} would accept it" in text
    assert "no instance chosen" not in text
    assert summary.verdicts(report) == ()


def test_closest_miss_offers_the_targets_it_reaches(report) -> None:  # type: ignore[no-untyped-def]
    """Each offered target is what the closest reached, rounded up to two digits.

    Or the target itself when met; the figures are the replay's own percentiles.
    """
    (v,) = report.recommendation.verdict.verdicts
    c = v.closest
    assert c is not None and c.loosest is not None
    for key, target in {"ttft_p99_s": 2.0, "tpot_p99_s": 0.2}.items():
        got = c.reached[key]
        assert got is not None
        if got <= target:
            assert c.loosest[key] == target
        else:
            # Two significant digits, rounded up: by hand, the next multiple of 10^(e-1).
            step = 10.0 ** (math.floor(math.log10(got)) - 1)
            assert c.loosest[key] == pytest.approx(math.ceil(got / step) * step)
            assert got <= c.loosest[key] < got + step
    assert c.reached["ttft_p99_s"] > 2.0  # the miss the headline speaks of


def test_offered_slo_accepts_a_deployment_no_dearer(report) -> None:  # type: ignore[no-untyped-def]
    """Run again with the offered --slo: a deployment is chosen, at most the closest's $/h."""
    (v,) = report.recommendation.verdict.verdicts
    c = v.closest
    assert c is not None and c.slo_text
    again = analyze(
        read_trace(HEAD),
        AnalyzeOptions(model="llama-3.1-70b", providers=("aws",), slo=c.slo_text),
        version="test",
        generated_at="2026-01-01T00:00:00",
    )
    chosen = again.recommendation.verdict.primary_verdict
    assert chosen is not None and chosen.chosen, chosen
    assert chosen.usd_per_hour is not None and c.usd_per_hour is not None
    assert chosen.usd_per_hour <= c.usd_per_hour + 1e-9


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
