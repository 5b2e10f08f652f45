"""A streamed trace's search and replay: the same verdict, profile and replay as in memory."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import MOONCAKE_HEAD_JSONL_GZ

from kvadvisor.advice.inputs import load_advisor_inputs
from kvadvisor.advice.recommend import busiest_window
from kvadvisor.pipeline.analyze import analyze, analyze_large
from kvadvisor.pipeline.options import AnalyzeOptions
from kvadvisor.pipeline.replay import replay_recommendation
from kvadvisor.pipeline.streaming import (
    BASELINE_BYTES,
    SAMPLED_BYTES_PER_ACCESS,
    SAMPLED_BYTES_PER_REQUEST,
    plan_analysis,
    plan_for_stream,
    replay_bytes,
)
from kvadvisor.pipeline.windows import stream_rows
from kvadvisor.trace import read_trace
from kvadvisor.trace.stream import stream_trace
from kvadvisor.units import Unit, format_value

GIB = 1024**3
OPTIONS = AnalyzeOptions(cache_instances=1)


def _kw() -> dict[str, str]:
    return {"version": "0.0.test", "generated_at": "2026-01-01T00:00:00+00:00"}


@pytest.fixture(scope="module")
def mooncake(mooncake_path):
    """The Mooncake conversation trace (12,031 requests), read once."""
    return read_trace(mooncake_path)


def test_stream_rows_are_the_tables_rows(mooncake) -> None:
    """Rows start:stop read from a stream of small batches are those rows of the table."""
    stream = stream_trace(mooncake, batch_rows=700)
    for start, stop in ((0, 5), (699, 701), (3000, 6000), (12000, mooncake.requests)):
        got = stream_rows(stream, start, stop)
        assert got.requests == stop - start
        for name in ("arrival_s", "input_tokens", "output_tokens", "block_hashes"):
            want = mooncake.table[name].slice(start, stop - start).to_pylist()
            assert got.table[name].to_pylist() == want, (name, start)


# What the streamed report cannot have: reuse times need the whole trace in memory (the
# prefix-cache section says so), so these facts, and the capacity the search sizes a tier for
# from the retention figure, are the in-memory run's alone.
REUSE_FACTS = {"retention_capacity_gib", "retention_ttl_s", "reuse_time_p50_s", "reuse_time_p90_s"}


def test_streamed_search_and_replay_equal_in_memory(mooncake) -> None:
    """Forced through the stream by a limit just under the in-memory estimate: same analysis.

    The exact curve, the stage profile, every fact but the reuse times and the search's
    windows equal the in-memory run's; the replay of the streamed verdict equals that verdict
    replayed on the trace in memory. The inherent difference: without reuse times the search
    sizes capacity from the working set, so the verdict itself may differ (see REUSE_FACTS).
    """
    want = analyze(mooncake, OPTIONS, **_kw())
    stream = stream_trace(mooncake, batch_rows=1000)
    estimate = plan_for_stream(stream, 64 * GIB).estimated_in_memory_bytes
    limit = estimate - 1
    plan = plan_for_stream(stream, limit)
    assert plan.mode == "streaming" and plan.exact_curve and plan.stage_profile
    assert replay_bytes(stream.requests, stream.block_accesses) <= limit
    got = analyze_large(stream, OPTIONS, memory_limit_bytes=limit, **_kw())
    assert any("streamed" in n for n in got.trace.notes)
    assert got.prefix_cache.mrc == want.prefix_cache.mrc
    assert got.model == want.model and got.io == want.io
    fw, fg = want.recommendation.facts, got.recommendation.facts
    assert set(fw) - set(fg) <= REUSE_FACTS and REUSE_FACTS <= set(fw)
    assert {k: v for k, v in fw.items() if k not in REUSE_FACTS} == fg
    # The search replayed the same busiest window as in memory.
    sw, sg = want.recommendation.verdict.sample, got.recommendation.verdict.sample
    assert (sg.requests, sg.start_s, sg.span_s, sg.how) == (
        sw.requests,
        sw.start_s,
        sw.span_s,
        sw.how,
    )
    assert sg.requests == 3000 < mooncake.requests
    assert any(v.chosen for v in got.recommendation.verdict.verdicts)
    for key in ("model", "stage_split", "io", "recommendation", "replay"):
        assert key not in got.unavailable, key
    # The streamed verdict replayed on the trace held in memory: the same replay, figure for
    # figure, and the same per-request rows.
    inputs = load_advisor_inputs()
    again = replay_recommendation(
        mooncake, replace(got, replay=None), replace(OPTIONS, advisor_inputs=inputs)
    )
    assert got.replay is not None and got.replay == again.replay
    for name in again.request_rows:
        np.testing.assert_array_equal(got.request_rows[name], again.request_rows[name])


def test_streamed_replay_over_the_limit_says_why() -> None:
    """Room for the search but not the whole-trace replay: the replay names figure and limit.

    On the Mooncake head (400 real requests with block hashes, streamed in batches of 100):
    what is checked is the choice and its message, which the trace's length does not change.
    """
    head = read_trace(MOONCAKE_HEAD_JSONL_GZ)
    stream = stream_trace(head, batch_rows=100)
    need = replay_bytes(stream.requests, stream.block_accesses)
    plan = plan_for_stream(stream, need - 1)
    assert plan.mode == "streaming" and plan.stage_profile
    got = analyze_large(stream, OPTIONS, memory_limit_bytes=need - 1, **_kw())
    assert got.recommendation is not None and got.replay is None
    assert "the trace in memory" not in got.recommendation.verdict.missing
    why = got.unavailable["replay"]
    assert format_value(need, Unit.BYTES) in why and "over the memory limit" in why
    assert len(got.request_rows["arrival_s"]) == head.requests == 400


def test_profile_skip_message_says_what_it_counts(mooncake) -> None:
    """The figure in the skip message is the plan's, with the parts it adds up named."""
    stream = stream_trace(mooncake, batch_rows=4000)
    r = stream.requests
    limit = BASELINE_BYTES + (32 + 300) * r  # a sampled curve fits, the 328 B profile beside not
    plan = plan_for_stream(stream, limit)
    assert plan.mode == "streaming" and not plan.exact_curve and not plan.stage_profile
    want = BASELINE_BYTES + (32 + 256 + 72) * r
    assert plan.profile_bytes == want
    got = analyze_large(stream, OPTIONS, memory_limit_bytes=limit, **_kw())
    why = got.unavailable["stage_split"]
    assert format_value(want, Unit.BYTES) in why
    assert "baseline" in why and "32 B per request kept by the sampled curve" in why
    assert "256 B per request for the stage profile and 72 B" in why
    assert got.unavailable["replay"] == why and got.recommendation is not None


def test_exact_curve_gives_way_to_advice() -> None:
    """A sampled curve with room for the profile is chosen over an exact one without it."""
    req, acc = 20_000_000, 141_802_768  # the 20M-request synth trace of docs/benchmarks.md
    exact = BASELINE_BYTES + 16 * req + 40 * acc
    sampled_need = BASELINE_BYTES + (32 + 256 + 72) * req
    # 7.2 GiB: more than the exact curve alone (6.1 GiB), less than it with the profile.
    assert exact < sampled_need < exact + (256 + 72) * req
    plan = plan_analysis(req, acc, 10**9, 7 * GIB + GIB // 2)
    assert plan.sample_rate is not None and plan.stage_profile
    assert "leaves no room" in plan.reason and plan.profile_bytes == sampled_need
    plan = plan_analysis(req, acc, 10**9, exact)  # the exact curve fits, the profile nowhere
    assert plan.exact_curve and not plan.stage_profile


def test_sampled_stream_still_searches_on_the_busiest_window(mooncake) -> None:
    """A SHARDS-sampled stream: the search runs on the busiest window of the arrivals.

    Inherent differences: the profile has no simulated per-request hits, and the whole-trace
    replay does not fit the small limit and says so.
    """
    stream = stream_trace(mooncake, batch_rows=2000)
    limit = (
        BASELINE_BYTES
        + SAMPLED_BYTES_PER_REQUEST * stream.requests
        + int(SAMPLED_BYTES_PER_ACCESS * 0.25 * stream.block_accesses)
    )
    plan = plan_for_stream(stream, limit)
    assert plan.mode == "streaming" and not plan.exact_curve and plan.stage_profile
    got = analyze_large(stream, OPTIONS, memory_limit_bytes=limit, **_kw())
    assert got.prefix_cache.status == "sampled"
    # Sampled passes keep no per-request hits; the Mooncake trace has no cached_tokens either.
    assert got.stage_split is not None and got.stage_split.hits_source is None
    arrival = mooncake.column_np("arrival_s")
    start, stop = busiest_window(arrival, 3000)
    sample = got.recommendation.verdict.sample
    assert sample.requests == 3000
    assert sample.start_s == float(arrival[start] - arrival[0])
    assert sample.span_s == float(arrival[stop - 1] - arrival[start])
    assert any(v.chosen for v in got.recommendation.verdict.verdicts)
    assert got.replay is None and "over the memory limit" in got.unavailable["replay"]
