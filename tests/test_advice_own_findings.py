"""Findings never contradict the verdict (issue 25, part 7).

The advisor's own pick, with and without ``--storage``, fires no finding of severity warning or
above in ``analyze``, and its emitted plan passes ``review --fail-on warning``. Before, with
``--storage`` a cloud block volume got ST08 (drive writes per day: a block volume has no
endurance rating the buyer spends) and UT01 ("sized for the peak") on a tier the search had
sized for its p99 writes at 80%.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvadvisor.emit import emit_all
from kvadvisor.pipeline import AnalyzeOptions
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.pipeline.review import review_plans
from kvadvisor.plan import load_plan
from kvadvisor.trace import read_trace
from kvadvisor.vocab import Severity, Stage

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
HEAD = SAMPLES / "mooncake_conversation_head.jsonl.gz"
# The 400-request head's reuse fits the GPU pools, so a forced tier is bought (and judged)
# only on the whole sample (12,031 requests, 5.5 TiB worth keeping).
WHOLE = SAMPLES / "mooncake_conversation.parquet"
SLO = "ttft_p99=10s,tpot_p99=200ms"
AT_LEAST_WARNING = (Severity.WARNING, Severity.ERROR)

# case: (trace, options, the forced tier is bought). The targets keep each case what it tests
# since the dense GEMM refit's faster steps: at 12 s GCP's fleet is small enough that its host
# memory does not hold the reuse, so the forced tier serves hits (at 6 s it served 0.6% and
# review's RV01 called it shadowed); at 4 s Azure's fleet keeps a host tier whose p99 writes the
# forced disk is then asked to take (at 6 s its GPU pools held the reuse: no tier at all).
CASES = {
    "no storage": (HEAD, dict(providers=("aws", "gcp")), None),
    "gcp block volume": (
        WHOLE,
        dict(
            providers=("gcp",), storage="gcp-hyperdisk-balanced", slo="ttft_p99=12s,tpot_p99=200ms"
        ),
        True,
    ),
    # Azure's H200 VM reaches 612 MB/s of disks: the tier cannot take 8 GB/s of p99 writes.
    "azure block volume behind a disk cap": (
        WHOLE,
        dict(
            providers=("azure",), storage="azure-premium-ssd-v2", slo="ttft_p99=4s,tpot_p99=200ms"
        ),
        False,
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_no_warning_on_its_own_pick_and_its_plan_passes_review(case: str, tmp_path: Path) -> None:
    """Analyze (the case's options), no warning; --emit plan; review fails nothing at warning."""
    path, given, bought = CASES[case]
    trace = read_trace(path)
    options = AnalyzeOptions(**{"model": "llama-3.1-70b", "slo": SLO, **given})  # type: ignore[arg-type]
    report = analyze(trace, options, version="test", generated_at="2026-01-01T00:00:00")
    primary = report.recommendation.verdict.primary_verdict
    assert primary is not None and primary.chosen, report.recommendation.verdict.primary_why
    storage = given.get("storage")
    tiers = {t.storage for s in primary.stages for t in s.tiers}
    if bought:  # the forced tier was bought, so the findings judge it
        assert storage in tiers, primary.notes
    elif storage is not None:  # said and priced, and the GPU fleet is not grown for it
        (note,) = [n for n in primary.notes if n.startswith(f"--storage {storage} was not bought")]
        assert "it cannot keep up with the new-KV writes" in note
        assert "the GPU fleet is not grown for a storage tier" in note
        assert storage not in tiers and primary.serves(Stage.PREFILL).instances < 10
    loud = [(f.code, f.message) for f in report.findings if f.severity in AT_LEAST_WARNING]
    assert not loud, loud
    for name, text in emit_all(report, ["plan"], "kvadvisor analyze").items():
        (tmp_path / name).write_text(text)
    review = review_plans(trace, [load_plan(tmp_path / "plan.yaml")])[0]
    failed = [
        (c.code, c.stage, c.subject, c.message)
        for c in review.checks
        if c.status == "fail" and c.severity in AT_LEAST_WARNING
    ]
    assert not failed, failed
