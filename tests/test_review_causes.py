"""The seed's three causes of underused storage, each caught by a rule on a shipped example.

`examples/plans/cause*.yaml` are realistic plans for the Mooncake conversation sample, each
with one of the seed note's causes (docs/review.md, "The checks"). Reviewed against the sample
trace, each fires its cause's rule, and the other cause rules stay quiet on it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import kvadvisor
from kvadvisor.vocab import Severity

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "mooncake_conversation.parquet"
PLANS = REPO / "examples" / "plans"
CAUSES = {
    "cause1-sized-for-peak": "RV11",
    "cause2-one-spec-both-stages": "RV12",
    "cause3-paged-io": "RV13",
}


@pytest.fixture(scope="module")
def reviews():
    """The three plans reviewed against the sample, replayed closed loop (one trace read)."""
    review = kvadvisor.review(SAMPLE, [PLANS / f"{name}.yaml" for name in CAUSES], generated_at="t")
    return {p.name: p for p in review.plans}


@pytest.mark.parametrize(("plan", "code"), CAUSES.items())
def test_each_cause_fires_its_rule(reviews, plan: str, code: str) -> None:
    """The cause's rule fails, as a warning, and the other two causes' rules do not."""
    review = reviews[plan]
    failed = {c.code: c for c in review.findings}
    assert code in failed, [(c.code, c.message) for c in review.findings]
    assert failed[code].severity is Severity.WARNING
    for other in set(CAUSES.values()) - {code}:
        assert other not in failed, failed[other].message
    assert not any("not replayed" in n for n in review.notes), review.notes


def test_cause1_devices(reviews) -> None:
    """Eight drives per node where the p99 needs three at 80% and the capacity two."""
    (rv11,) = [c for c in reviews["cause1-sized-for-peak"].findings if c.code == "RV11"]
    ev = rv11.evidence
    assert ev["tier_devices"] == 8 and ev["tier_devices_for_capacity"] == 2
    assert ev["tier_devices_for_peak"] > ev["tier_devices_needed"] >= ev["tier_devices_for_p99"]
    assert 0.5 <= ev["tier_utilization_peak"] <= 1.0


def test_cause2_decode_writes_nothing(reviews) -> None:
    """Decode keeps no KV for the next turn: its copy of the prefill drives sees no I/O."""
    (rv12,) = [c for c in reviews["cause2-one-spec-both-stages"].findings if c.code == "RV12"]
    assert rv12.evidence["plan_decode_storage_demand_bytes_per_s_p99"] == 0
    assert rv12.evidence["plan_prefill_storage_demand_bytes_per_s_p99"] > 1e9


def test_cause3_io_size(reviews) -> None:
    """16-token chunks stored layer by layer: 16 x 512 B per I/O on each of 8 ranks."""
    (rv13,) = [c for c in reviews["cause3-paged-io"].findings if c.code == "RV13"]
    assert rv13.evidence["tier_io_bytes"] == 16 * 512
    assert rv13.evidence["tier_io_bandwidth_share"] == pytest.approx(170_000 * 8192 / 4.2e9)
    checks = {c.test_id for c in reviews["cause3-paged-io"].checks}
    assert "RV13.prefill.nvme" in checks and "RV13.prefill.host-dram" not in checks  # DRAM
