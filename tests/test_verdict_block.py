"""The terminal's verdict block on every sample trace: at most ten lines at 80 columns (golden).

``kvadvisor analyze TRACE`` as a user runs it, piped, at ``COLUMNS=80``: the block is the
output up to its first blank line. Each block is compared with its golden file
(``tests/golden/verdict/<trace>.txt``; on a mismatch the actual one is saved beside, in
``tests/golden_actual``), and checked against the JSON report of the same run: the
deployment and its $/h, the margin, the targets, the assumed model; a trace without
arrival times is told what would help, never to loosen the targets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from analysis_cache import analyze_run
from goldtest import compare_golden

from kvadvisor.report.deployments import money
from kvadvisor.report.verdictblock import MAX_LINES

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
TRACE_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".gz", ".zst")
TRACES = sorted(p.name for p in SAMPLES.iterdir() if p.name.endswith(TRACE_SUFFIXES))
WIDTH = 80


def test_every_sample_has_a_case() -> None:
    """A sample trace added to sample_traces/ gets its block checked (one per source format)."""
    assert len(TRACES) >= 10, TRACES


@pytest.mark.parametrize("name", TRACES)
def test_verdict_block(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, name: str
) -> None:
    """At most ten lines of at most 80 columns, equal to the golden file, true to the report."""
    # Once per test run: tests/test_readme_answer.py runs the same command on the Mooncake trace.
    done = analyze_run(tmp_path_factory, f"sample_traces/{name}", WIDTH)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    block = lines[: lines.index("")]
    compare_golden(request, "verdict", f"{name}.txt", "\n".join(block) + "\n")
    assert block[0] == "Verdict"
    assert len(block) <= MAX_LINES, block
    assert max(map(len, block)) <= WIDTH, block
    text = " ".join(block)  # a wrapped sentence read whole

    report = json.loads(done.report.read_text())
    vs = report["recommendation"]["verdict"]
    v = next((x for x in vs["verdicts"] if x["provider"] == vs["primary"]), None)
    if v is not None and v["status"] == "chosen":
        for s in v["stages"]:
            assert f"{s['instances']} × {s['instance']}" in text
        assert money(v["usd_per_hour"]) in text
        assert "margin: TTFT p99" in text and "TPOT p99" in text
        assert "targets: TTFT p99" in text
    if any(c.startswith("no arrival times") for c in report["trace"]["capabilities"]):
        # No load to size for: looser targets or more instance types cannot help.
        assert "--slo" not in text and "loose" not in text
        assert "give a trace with arrival times" in text
    if report["model"]["assumed"]:
        assert f"model: {report['model']['display_name']} (assumed; pass --model)" in text
