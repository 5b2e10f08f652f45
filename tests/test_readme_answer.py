"""The README's main command answers the question in the terminal's first ten lines.

``kvadvisor analyze sample_traces/mooncake_conversation.parquet`` with every default (the
length-aware MLPerf targets, all providers, on-demand rates first): within ten lines at 80
columns, a recommended deployment naming its KV tiers, what the tiers are worth in dollars, and
the margin on each target; the targets line says which default applied. The figures are
checked against the verdict they come from, not against fixed numbers.
"""

from __future__ import annotations

import json

import pytest
from analysis_cache import analyze_run

from kvadvisor.report.deployments import money


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict]:  # type: ignore[type-arg]
    """The README's command, as a user runs it (JSON beside the terminal text).

    Once per test run: tests/test_verdict_block.py runs the same command on the same trace.
    """
    done = analyze_run(tmp_path_factory, "sample_traces/mooncake_conversation.parquet", 80)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines(), json.loads(done.report.read_text())


def test_the_first_ten_lines_hold_the_answer(run) -> None:  # type: ignore[no-untyped-def]
    """Deployment with its KV tiers, each tier's dollar value, the margin on each target."""
    lines, report = run
    vs = report["recommendation"]["verdict"]
    v = next(x for x in vs["verdicts"] if x["provider"] == vs["primary"])
    assert v["status"] == "chosen"
    (stage,) = v["stages"]  # aggregated on the sample
    assert max(len(line) for line in lines[:10]) <= 80
    head = " ".join(lines[:10])  # words wrapped at 80 columns read as one text
    assert "Recommended" in head and f"{stage['instances']} × {stage['instance']}" in head
    values = stage["tier_values"]
    # The KV tiers it names: the GPU pool, then each tier below it by what holds it.
    held_by = {t["tier"]: t["storage"] for t in values}
    below = [held_by[t["name"]] for t in stage["tiers"]]
    assert f"KV tiers: {' + '.join(['GPU memory', *below]) if below else 'GPU memory only'}" in head
    assert [t["tier"] for t in values] == ["prefix_cache"] + [t["name"] for t in stage["tiers"]]
    for value in values:
        # Each tier by what holds it (host memory: the instance's DRAM), with its dollar value.
        if value["tier"] != "prefix_cache":
            assert f"{value['storage']}: saves" in head or f"{value['storage']}: costs" in head
        assert money(abs(value["usd_per_hour_saved"])) in head
    margins = v["robustness"]["margins"]
    assert {m["target"] for m in margins} == set(vs["slo"]["targets"])
    assert "margin: TTFT p99" in head and "TPOT p99" in head
    # The targets line says which default applied and why.
    assert "MLPerf long-context TTFT: p99 prompt 85,400 > 1,024 tokens" in " ".join(lines[:14])
