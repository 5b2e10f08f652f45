"""A tier's demand for the jobs: the review's rates, burst phases by hand, depth, latency target."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from verify_fixtures import DISK_PLAN, MODEL_PLAN, SERVING_PLAN, write_bursty_trace

import kvadvisor
from kvadvisor.perfmodel.transfer import tier_efficiency
from kvadvisor.pipeline.review import replay_trace, review_plans
from kvadvisor.pipeline.verify import verify
from kvadvisor.plan import PlanCatalogs, load_plan
from kvadvisor.planreview.demand import plan_times, stage_tiers
from kvadvisor.planreview.perf import plan_perf
from kvadvisor.trace import read_trace
from kvadvisor.verifyjobs import VerifyOptions
from kvadvisor.verifyjobs.demand import burst_profile

CATALOGS = PlanCatalogs.packaged()


def test_burst_profile_by_hand() -> None:
    """Mean 3.75: on windows 1, 2 and 6 (runs of 2 and 1), off runs of 1, 3 and 1."""
    b = burst_profile(np.array([0, 10, 10, 0, 0, 0, 10, 0], dtype=float), 2.0)
    assert b is not None
    assert b.threshold_bytes_per_s == pytest.approx(3.75)
    assert b.on_bytes_per_s == 10 and b.off_bytes_per_s == 0
    assert b.on_s == pytest.approx(1.5 * 2.0)
    assert b.off_s == pytest.approx(5 / 3 * 2.0)
    assert b.on_fraction == pytest.approx(3 / 8)


@pytest.mark.parametrize("series", [[5.0, 5.0, 5.0], [0.0, 0.0], []])
def test_no_burst_profile_when_steady_or_idle(series: list[float]) -> None:
    """A series with no window above its mean, or no demand, has no on/off phases."""
    assert burst_profile(np.array(series), 1.0) is None


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory):
    """The bursty trace and the disk plan, read."""
    base = tmp_path_factory.mktemp("demand")
    trace = read_trace(write_bursty_trace(base / "t.jsonl"))
    plan_path = base / "p.yaml"
    plan_path.write_text(DISK_PLAN)
    plan = load_plan(plan_path, CATALOGS)
    return trace, plan


def test_rates_are_the_reviews(disk) -> None:
    """Mean, p99 and peak per direction equal the review's figures for the same tier."""
    trace, plan = disk
    written = verify(trace, plan, CATALOGS.storage, VerifyOptions(), version="t")
    (tier,) = written.tiers
    (review,) = review_plans(trace, [plan])
    reviewed = review.stages[0].tiers[0]
    for mine, theirs in ((tier.write, reviewed.write), (tier.read, reviewed.read)):
        assert mine is not None and theirs is not None
        assert mine.mean_bytes_per_s == pytest.approx(theirs.mean_bytes_per_s)
        assert mine.p99_bytes_per_s == pytest.approx(theirs.p99_bytes_per_s)
        assert mine.peak_bytes_per_s == pytest.approx(theirs.peak_bytes_per_s)


def test_latency_target_fits_the_p99_request_in_the_slo(disk) -> None:
    """Read target = 2 s SLO x depth 1 / the p99 request's 256-token chunk reads."""
    trace, plan = disk
    written = verify(trace, plan, CATALOGS.storage, VerifyOptions(), version="t")
    (tier,) = written.tiers
    replay, _ = replay_trace(trace, 0.5)
    times, span = plan_times(plan, replay)
    (flow,) = stage_tiers(plan.stages[0], replay, plan_perf(plan), times, span, 1.0)
    served = flow.served_tokens
    assert served is not None
    ios = np.ceil(served[served > 0] / 256)
    assert tier.iodepth == 1 and "concurrency cannot be modeled" in tier.iodepth_from
    assert tier.read is not None
    assert tier.read.latency_target_s == pytest.approx(2.0 * 1 / np.percentile(ios, 99))
    assert tier.write is not None and tier.write.latency_target_s is None


def test_queue_depth_from_the_stage_model(tmp_path: Path) -> None:
    """With a catalog model and GPU the depth comes from the modeled prefills in flight."""
    trace = read_trace(write_bursty_trace(tmp_path / "t.jsonl"))
    path = tmp_path / "p.yaml"
    path.write_text(MODEL_PLAN)
    plan = load_plan(path, CATALOGS)
    written = verify(trace, plan, CATALOGS.storage, VerifyOptions(), version="t")
    (tier,) = written.tiers
    assert tier.iodepth >= 1 and "open-loop stage model" in tier.iodepth_from
    assert tier.gds and tier.shape.writers == 1
    # Llama-3.1-8B: 2 x 32 x 8 x 128 x 2 B = 131,072 B/token; LMCache 256 tokens = 32 MiB.
    assert tier.shape.io_bytes == 256 * 131_072
    assert math.isclose(plan_perf(plan).kv_bytes_per_token, 131_072)


def test_closed_loop_demand_is_the_replays(tmp_path: Path) -> None:
    """A plan the fleet replay runs: the job's rates are the replay's own for the tier."""
    trace = read_trace(write_bursty_trace(tmp_path / "t.jsonl"))
    path = tmp_path / "p.yaml"
    path.write_text(SERVING_PLAN)
    plan = load_plan(path, CATALOGS)
    written = verify(trace, plan, CATALOGS.storage, VerifyOptions(), version="t")
    (tier,) = written.tiers
    assert tier.demand_from.startswith("closed loop: the fleet replay")
    assert "replayed requests in flight" in tier.iodepth_from and tier.iodepth >= 1
    (replayed,) = kvadvisor.replay(trace, plan).replay.tiers
    for mine, theirs in (
        (tier.write, replayed.write_bytes_per_s),
        (tier.read, replayed.read_bytes_per_s),
    ):
        assert mine is not None
        assert mine.mean_bytes_per_s == pytest.approx(theirs.mean)
        assert mine.p99_bytes_per_s == pytest.approx(theirs.p99)
        assert mine.peak_bytes_per_s == pytest.approx(theirs.peak)
    assert not any("no closed-loop replay" in n for n in written.notes)


def test_open_loop_when_the_replay_cannot_run(disk) -> None:
    """No catalog model: the replay cannot run the plan, the notes say so, open loop is used."""
    trace, plan = disk
    written = verify(trace, plan, CATALOGS.storage, VerifyOptions(), version="t")
    assert any(n.startswith("no closed-loop replay") for n in written.notes)
    assert written.tiers[0].demand_from.startswith("open loop")


def test_a_saturated_tier_says_what_the_traffic_asks() -> None:
    """The cloud-disk example: the jobs test the disk at the capability the replay holds it to.

    The job file states the open-loop demand beside it, which is higher.
    """
    repo = Path(__file__).resolve().parents[1]
    trace = read_trace(repo / "sample_traces" / "mooncake_conversation_head.jsonl.gz")
    plan = load_plan(repo / "examples" / "plans" / "bad-h20-cloud-disk.yaml", CATALOGS)
    written = verify(trace, plan, CATALOGS.storage, VerifyOptions(), version="t")
    (disk,) = [t for t in written.tiers if t.skipped is None]
    assert disk.demand_from.startswith("closed loop")
    # The rated figure at the block-storage share the replay moves KV at (docs/replay.md).
    cap = disk.capability_bytes_per_s["write"]
    assert cap == pytest.approx(350e6 * tier_efficiency("block"))
    assert disk.write is not None and disk.write.p99_bytes_per_s >= 0.95 * cap
    assert disk.write.peak_bytes_per_s <= cap * 1.001  # the replay cannot ask for more
    assert disk.open_loop["write"][0] > cap  # the traffic would
    assert any("saturates in the replay" in n for n in written.notes)
    (job,) = [j for j in written.jobs if not j.gds]
    assert "without queueing (open loop) the traffic would ask" in job.text
