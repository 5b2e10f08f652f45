"""Review renderers on a hand-built review: escaping, counts, and the JUnit structure."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from kvadvisor.report.junit import JUnitRenderer
from kvadvisor.report.review_markdown import ReviewMarkdownRenderer, ReviewTextRenderer
from kvadvisor.results.common import IoRate, Meta, TraceSummary, Utilization
from kvadvisor.results.review import PlanReview, ReviewCheck, ReviewReport, StageReview, TierReview

NAME = 'a|b <script>alert("x")</script>'
TIER = TierReview(
    stage="prefill",
    tier="nvme|0",
    kind="ssd",
    shared=False,
    capacity_bytes=2e12,
    capacity_tokens=6.1e6,
    hit_ratio_all=0.25,
    hit_ratio_steady=0.3,
    cumulative_hit_ratio_steady=0.4,
    write=IoRate(1e9, 5e9, 8e9),
    read=None,
    write_capability_bytes_per_s=4e9,
    read_capability_bytes_per_s=None,
    write_utilization=Utilization(0.25, 1.25, 2.0),
    read_utilization=Utilization(None, None, None),
    break_even_tokens=float("inf"),
)
CHECKS = (
    ReviewCheck(
        "RV02",
        "tier.write_bandwidth",
        "prefill",
        "error",
        "fail",
        "p99 | over",
        {"utilization_p99": 1.25, "break_even": float("inf")},
        "DESIGN.md",
        "nvme|0",
    ),
    ReviewCheck(
        "RV04",
        "tier.underutilized",
        "prefill",
        "warning",
        "pass",
        "fine",
        {},
        "DESIGN.md",
        "nvme|0",
    ),
    ReviewCheck(
        "RV06",
        "tier.load_vs_recompute",
        "prefill",
        "warning",
        "skip",
        "no GPU",
        {},
        "DESIGN.md",
        "nvme|0",
    ),
)
REVIEW = ReviewReport(
    meta=Meta(1, "0.1.0", "2026-01-01T00:00:00+00:00"),
    trace=TraceSummary("t.parquet", "parquet", 10, 5.0, 512),
    plans=(
        PlanReview(
            NAME,
            "p.yaml",
            3.0,
            327680,
            (StageReview("prefill", None, 2, (TIER,), Utilization(0.25, 1.25, 2.0)),),
            CHECKS,
        ),
    ),
    window_s=1.0,
    warmup_fraction=0.5,
)


def test_markdown_escapes_table_cells() -> None:
    """Pipes in names and messages cannot break the tables."""
    text = ReviewMarkdownRenderer().render(REVIEW)
    assert '| | `a\\|b <script>alert("x")</script>` |' in text
    assert "| ❌ error | RV02 `tier.write_bandwidth` | prefill | p99 \\| over |" in text
    # 2 TB = 2e12 B = 1.82 TiB: sizes read in binary units everywhere.
    assert "| prefill | nvme\\|0 (ssd) | 1.82 TiB | 30.0% | 1 GB/s / 5 GB/s / 8 GB/s | – |" in text
    assert "| verdict | fails: 1 error(s), 0 warning(s) |" in text
    assert "| traffic scale | 3× |" in text  # a multiple, as Unit.MULTIPLE writes it


def test_junit_structure_and_escaping() -> None:
    """One case per check; failure, skip and pass each as JUnit says; names survive escaping."""
    root = ET.fromstring(JUnitRenderer().render(REVIEW))
    assert root.get("tests") == "3" and root.get("failures") == "1"
    (suite,) = root
    assert suite.get("name") == f"kvadvisor review: {NAME}"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {
        "RV02.prefill.nvme|0 tier.write_bandwidth",
        "RV04.prefill.nvme|0 tier.underutilized",
        "RV06.prefill.nvme|0 tier.load_vs_recompute",
    }
    failure = cases["RV02.prefill.nvme|0 tier.write_bandwidth"].find("failure")
    assert failure is not None and failure.get("type") == "error"
    assert json.loads(failure.text)["evidence"] == {"utilization_p99": 1.25, "break_even": "inf"}
    assert cases["RV06.prefill.nvme|0 tier.load_vs_recompute"].find("skipped") is not None
    passed = cases["RV04.prefill.nvme|0 tier.underutilized"]
    assert passed.find("failure") is None and passed.find("system-out").text == "fine"


def test_text_summary() -> None:
    """The terminal summary: verdict, counts of checks run and skipped, the findings."""
    text = ReviewTextRenderer().render(REVIEW)
    assert f"plan {NAME}: fails: 1 error(s), 0 warning(s) (2 checks run, 1 skipped)" in text
    assert "  error   RV02 prefill p99 | over" in text
