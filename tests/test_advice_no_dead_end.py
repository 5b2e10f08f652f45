"""Never a bare "no": on every sample trace with arrivals, a verdict or a priced closest miss.

Held to targets no GPU can meet (TTFT p99 50 ms, TPOT p99 5 ms: a 70B model's prefill of a
few thousand tokens alone takes longer), every provider that has a GPU the model fits must
still show its closest deployment: priced (or its GPUs counted when unpriced), what it reaches,
and the ``--slo`` that accepts it, each offered target at least the figure reached. The
headline names the nearest. (The default targets recommend a deployment on every one of these
traces: ``tests/test_advice_roundtrip.py``.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvadvisor.fleet import parse_slo
from kvadvisor.pipeline import AnalyzeOptions
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.report import summary
from kvadvisor.results.verdict import VerdictStatus
from kvadvisor.trace import read_trace

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
TRACES = sorted(p for p in SAMPLES.iterdir() if p.suffix not in (".py", ".md"))
UNREACHABLE = "ttft_p99=50ms,tpot_p99=5ms"


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_a_priced_closest_miss_never_a_bare_no(path: Path) -> None:
    """Each provider's verdict: chosen, abstained with its reason, or a priced closest miss."""
    trace = read_trace(path)
    report = analyze(
        trace, AnalyzeOptions(slo=UNREACHABLE), version="test", generated_at="2026-01-01T00:00:00"
    )
    vs = report.recommendation.verdict
    if not trace.arrivals_measured:
        assert vs.primary is None and vs.missing == ("arrival times",)
        return
    targets = parse_slo(UNREACHABLE)
    misses = [v for v in vs.verdicts if v.status is VerdictStatus.NO_DEPLOYMENT_MEETS_SLO]
    assert misses, [v.reason for v in vs.verdicts]
    for v in misses:
        c = v.closest
        assert c is not None, (v.provider, v.reason)
        assert c.usd_per_hour is not None or c.price_basis == "unpriced"
        assert c.gpus > 0 and c.reached.keys() == targets.keys()
        if c.loosest is None:
            assert not c.slo_text and c.why_not
            continue
        assert parse_slo(c.slo_text) == pytest.approx(c.loosest)
        for key, target in targets.items():
            got = c.reached[key]
            assert got is not None and c.loosest[key] >= max(got, target)
    for v in vs.verdicts:
        if v.status is VerdictStatus.ABSTAINED:
            assert v.reason and v.closest is None
    assert not any(v.chosen for v in vs.verdicts)
    assert vs.closest is not None
    headline = summary.headline(report)
    assert headline.startswith("No deployment meets the SLO"), headline
    assert f"Nearest: {vs.closest} " in headline and "would accept it" in headline
