"""Round trip: the recommended deployment, written as a plan, passes its own review.

On every trace in ``sample_traces/`` (and the shared real traces when present): analyze,
``--emit plan``, then ``review`` the plan against the same trace. No check may fail with an
error, and none of the capacity, bandwidth or SLO checks may fail at all (RV01 tier hits,
RV02/RV03 bandwidth, RV04 underuse, RV07 TTFT, RV08 IOPS, RV10 SLO and overload), nor the
seed's three causes of underused storage (RV11 sized for the peak, RV12 one storage spec for
both stages, RV13 GPU paging carried to storage). A trace without arrival times has
no deployment to emit: its verdicts abstain, and the emitter says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from advice_traces import CAPACITY_BANDWIDTH_SLO, slo_for, traces
from analysis_cache import analysed

from kvadvisor.emit import emit_all
from kvadvisor.errors import ConfigError
from kvadvisor.pipeline import AnalyzeOptions
from kvadvisor.pipeline.review import review_plans
from kvadvisor.plan import load_plan
from kvadvisor.trace import read_trace

TRACES = traces()


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_the_emitted_plan_passes_its_review(
    path: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Analyze, emit the plan, review it: no error, no capacity, bandwidth or SLO warning.

    The analysis is tests/test_emit_roundtrip.py's (same trace, same options): computed once.
    """
    trace = read_trace(path)
    options = AnalyzeOptions(slo=slo_for(path))
    report = analysed(
        tmp_path_factory, path, trace, options, version="test", generated_at="2026-01-01T00:00:00"
    )
    vs = report.recommendation.verdict
    if not trace.arrivals_measured:
        assert vs.primary is None and vs.missing == ("arrival times",)
        with pytest.raises(ConfigError, match="no arrival times"):
            emit_all(report, ["plan"], "kvadvisor analyze")
        return
    assert vs.primary_verdict is not None and vs.primary_verdict.chosen, vs.primary_why
    for name, text in emit_all(report, ["plan"], f"kvadvisor analyze {path.name}").items():
        (tmp_path / name).write_text(text)
    review = review_plans(trace, [load_plan(tmp_path / "plan.yaml")])[0]
    failed = [
        (c.code, c.severity, c.stage, c.subject, c.message)
        for c in review.checks
        if c.status == "fail" and (c.severity == "error" or c.code in CAPACITY_BANDWIDTH_SLO)
    ]
    assert not failed, failed
    # `review --fail-on warning` passes on the emitted plan (issue 25): no check of severity
    # warning or above fails, whatever its code.
    warned = [
        (c.code, c.severity, c.message)
        for c in review.checks
        if c.status == "fail" and c.severity in ("warning", "error")
    ]
    assert not warned, warned
    # Nor does analyze judge its own pick at warning or above; UT03 (GPUs idle between bursts)
    # restates the verdict's own note about the traffic, with the cheaper p90 fleet beside it.
    findings = [
        (f.code, f.message)
        for f in report.findings
        if f.severity in ("warning", "error") and f.code != "UT03"
    ]
    assert not findings, findings
