"""A streamed trace's search and replay: the same verdict, profile and replay as in memory."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import MOONCAKE_HEAD_JSONL_GZ

from kvadvisor.advice.inputs import load_advisor_inputs
from kvadvisor.advice.recommend import SEARCH_REQUESTS, busiest_window
from kvadvisor.pipeline.analyze import analyze
from kvadvisor.pipeline.options import AnalyzeOptions
from kvadvisor.pipeline.replay import replay_recommendation
from kvadvisor.pipeline.streaming import (
    BASELINE_BYTES,
    CHUNK_BYTES_PER_ROW,
    MAX_PROFILE_CHUNK_ROWS,
    MIN_PROFILE_CHUNK_ROWS,
    SAMPLED_BYTES_PER_ACCESS,
    SAMPLED_BYTES_PER_REQUEST,
    advice_fixed_bytes,
    analyze_stream,
    plan_analysis,
    plan_for_stream,
    replay_bytes,
)
from kvadvisor.pipeline.windows import _busiest_pass, stream_rows
from kvadvisor.trace import read_trace
from kvadvisor.trace.stream import stream_trace
from kvadvisor.units import Unit, format_value

GIB = 1024**3
# One routing instance and one provider's search: what is compared is the streamed path against
# the in-memory one, which each provider's search takes alike (its windows, replays, checks).
OPTIONS = AnalyzeOptions(cache_instances=1, providers=("aws",))


def _kw() -> dict[str, str]:
    return {"version": "0.0.test", "generated_at": "2026-01-01T00:00:00+00:00"}


@pytest.fixture(scope="module")
def mooncake(mooncake_path):
    """The Mooncake conversation trace (12,031 requests), read once."""
    return read_trace(mooncake_path)


# The search replays the busiest window of SEARCH_REQUESTS (3,000) requests and verifies its
# picks on the whole trace: the first 4,000 requests are a trace with a window to find (a
# quarter of it left out) at a third of the whole trace's verification, profile and replays.
FIRST_REQUESTS = 4000


@pytest.fixture(scope="module")
def mooncake_first(mooncake):
    """The first FIRST_REQUESTS of the Mooncake trace (real requests with their hashes)."""
    return replace(mooncake, table=mooncake.table.slice(0, FIRST_REQUESTS))


def test_stream_rows_are_the_tables_rows(mooncake) -> None:
    """Rows start:stop read from a stream of small batches are those rows of the table."""
    stream = stream_trace(mooncake, batch_rows=700)
    for start, stop in ((0, 5), (699, 701), (3000, 6000), (12000, mooncake.requests)):
        got = stream_rows(stream, start, stop)
        assert got.requests == stop - start
        for name in ("arrival_s", "input_tokens", "output_tokens", "block_hashes"):
            want = mooncake.table[name].slice(start, stop - start).to_pylist()
            assert got.table[name].to_pylist() == want, (name, start)


def test_busiest_window_in_one_pass(mooncake) -> None:
    """The pass over streamed arrivals finds busiest_window's rows, whatever the batch size."""
    arrival = mooncake.column_np("arrival_s")
    for batch_rows in (100, 1000, 5000):
        stream = stream_trace(mooncake, batch_rows=batch_rows)
        for size in (1, 7, 3000, mooncake.requests, 20_000):
            start, stop, first, t_start, t_last = _busiest_pass(stream, size)
            assert (start, stop) == busiest_window(arrival, size), (batch_rows, size)
            assert (first, t_start, t_last) == (arrival[0], arrival[start], arrival[stop - 1])


# The reuse-time facts: a streamed trace whose rows fit gets them exactly as in memory (its
# cache extras run on the whole rows, pipeline/streamextras.py), so the search sizes the same
# tiers from the same retention figure.
REUSE_FACTS = {"retention_capacity_gib", "retention_ttl_s", "reuse_time_p50_s", "reuse_time_p90_s"}


def test_streamed_search_and_replay_equal_in_memory(mooncake_first) -> None:
    """Forced through the stream by a limit just under the in-memory estimate: same analysis.

    The exact curve, the stage profile, every fact (the reuse times too: the rows fit, so the
    extras are exact) and the search's windows equal the in-memory run's; the replay of the
    streamed verdict equals that verdict replayed on the trace in memory.
    On the trace's first 4,000 requests: what is compared is the streamed path against the
    in-memory one, not a figure of the whole trace, and the search still replays a window.
    """
    mooncake = mooncake_first
    want = analyze(mooncake, OPTIONS, **_kw())
    stream = stream_trace(mooncake, batch_rows=1000)
    estimate = plan_for_stream(stream, 64 * GIB).estimated_in_memory_bytes
    limit = estimate - 1
    plan = plan_for_stream(stream, limit)
    assert plan.mode == "streaming" and plan.exact_curve
    assert replay_bytes(stream.requests, stream.block_accesses) <= limit
    # The plan's bounded advice parts (the search's and the replay's windows at the in-memory
    # figures per row) are more than this small trace's whole analysis is: the profile in one
    # chunk is given here, as a larger limit would read the trace in memory.
    plan = replace(plan, stage_profile=True, profile_chunk_rows=stream.requests)
    got = analyze_stream(stream, OPTIONS, plan=plan, **_kw())
    assert any("streamed" in n for n in got.trace.notes)
    assert got.prefix_cache.mrc == want.prefix_cache.mrc
    assert got.model == want.model and got.io == want.io
    fw, fg = want.recommendation.facts, got.recommendation.facts
    assert REUSE_FACTS <= set(fg) and fw == fg
    assert got.prefix_cache.reuse == want.prefix_cache.reuse
    # The search replayed the same busiest window as in memory.
    sw, sg = want.recommendation.verdict.sample, got.recommendation.verdict.sample
    assert (sg.requests, sg.start_s, sg.span_s, sg.how) == (
        sw.requests,
        sw.start_s,
        sw.span_s,
        sw.how,
    )
    assert sg.requests == SEARCH_REQUESTS < mooncake.requests
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


def test_streamed_replay_on_the_busiest_window() -> None:
    """More requests than `analyze` replays whole: the verdict replayed on the busiest window.

    On the Mooncake head (400 real requests with block hashes, streamed in batches of 100)
    with --replay-max-requests 100: the replay is the verdict replayed on those 100 rows held
    in memory, figure for figure, its notes say what it covers, and the request rows are the
    window's, numbered as in the trace.
    """
    head = read_trace(MOONCAKE_HEAD_JSONL_GZ)
    stream = stream_trace(head, batch_rows=100)
    options = replace(OPTIONS, replay_max_requests=100)
    plan = plan_for_stream(stream, replay_bytes(stream.requests, stream.block_accesses) - 1)
    assert plan.mode == "streaming"
    plan = replace(plan, stage_profile=True, profile_chunk_rows=stream.requests)
    got = analyze_stream(stream, options, plan=plan, **_kw())
    assert got.replay is not None and "replay" not in got.unavailable
    start, stop = busiest_window(head.column_np("arrival_s"), 100)
    assert any(
        f"busiest window of 100 consecutive requests (rows {start} to {stop - 1}" in n
        and "more than `analyze` replays whole (100" in n
        for n in got.replay.notes
    )
    window = stream_rows(stream, start, stop)
    inputs = load_advisor_inputs()
    again = replay_recommendation(
        window, replace(got, replay=None), replace(options, advisor_inputs=inputs)
    )
    assert replace(got.replay, notes=()) == replace(again.replay, notes=())
    np.testing.assert_array_equal(got.request_rows["request"], np.arange(start, stop))
    np.testing.assert_array_equal(got.request_rows["ttft_s"], again.request_rows["ttft_s"])


def test_profile_skip_message_says_what_it_counts(mooncake) -> None:
    """The figure in the skip message is the plan's, with the parts it adds up named."""
    stream = stream_trace(mooncake, batch_rows=4000)
    r, n = stream.requests, stream.block_accesses
    fixed = advice_fixed_bytes(r, n / r, stream.duration_s)
    least = fixed + CHUNK_BYTES_PER_ROW * min(r, MIN_PROFILE_CHUNK_ROWS)
    exact = BASELINE_BYTES + 16 * r + 40 * n
    limit = exact - 1  # a sampled curve fits, a profile chunk beside it not
    assert BASELINE_BYTES + 32 * r + least > limit
    # Planned as a trace too large to read in memory (this one is small enough at any limit
    # that leaves the profile out).
    plan = plan_analysis(r, n, 10 * GIB, limit, stream.duration_s)
    assert plan.mode == "streaming" and not plan.exact_curve and not plan.stage_profile
    want = BASELINE_BYTES + 32 * r + least
    assert plan.profile_bytes == want
    got = analyze_stream(stream, OPTIONS, plan=plan, **_kw())
    why = got.unavailable["stage_split"]
    assert format_value(want, Unit.BYTES) in why
    assert "baseline" in why and "32 B per request kept by the sampled curve" in why
    assert f"{CHUNK_BYTES_PER_ROW} B per request of a profile chunk" in why
    assert format_value(fixed, Unit.BYTES) in why
    assert got.unavailable["replay"] == why and got.recommendation is not None


def test_exact_curve_gives_way_to_advice() -> None:
    """A sampled curve with room for the profile is chosen over an exact one without it."""
    req, acc, span = 20_000_000, 141_802_768, 20_000.0  # the 20M synth of docs/benchmarks.md
    exact = BASELINE_BYTES + 16 * req + 40 * acc
    least = advice_fixed_bytes(req, acc / req, span) + CHUNK_BYTES_PER_ROW * MIN_PROFILE_CHUNK_ROWS
    plan = plan_analysis(req, acc, 10**9, exact, span)  # the exact curve fits, a chunk not
    assert plan.sample_rate is not None and plan.stage_profile
    assert "leaves no room" in plan.reason
    # The largest chunk that fits (at most 1M requests), and the peak planned with it.
    assert plan.profile_chunk_rows == MAX_PROFILE_CHUNK_ROWS
    assert BASELINE_BYTES + 32 * req + least < plan.profile_bytes <= exact
    plan = plan_analysis(req, acc, 10**9, exact + least, span)
    assert plan.exact_curve and plan.stage_profile and plan.profile_bytes == exact + least
    assert plan.profile_chunk_rows == MIN_PROFILE_CHUNK_ROWS


def test_the_100m_request_plan_fits_4gib() -> None:
    """The issue's run: 100M synth requests (docs/benchmarks.md 3) get the whole advice at 4 GiB.

    Sizes from that file's footers: 709,161,659 block accesses over about 100,000 s.
    """
    req, acc, span = 100_000_000, 709_161_659, 100_000.0
    plan = plan_analysis(req, acc, 5 * 10**9, 4 * GIB, span)
    assert plan.mode == "streaming" and plan.sample_rate is not None and plan.stage_profile
    assert plan.profile_bytes <= 4 * GIB
    assert MIN_PROFILE_CHUNK_ROWS <= plan.profile_chunk_rows < req
    assert plan.sample_rate >= 1e-3


def test_sampled_stream_still_searches_on_the_busiest_window(mooncake_first) -> None:
    """A SHARDS-sampled stream profiled in chunks: the search runs on the busiest window.

    Inherent difference: the profile has no simulated per-request hits. The whole trace is
    fewer requests than `analyze` replays, and is replayed. On the trace's first 4,000
    requests (the search's window a part of them), in chunks of 1,500.
    """
    mooncake = mooncake_first
    stream = stream_trace(mooncake, batch_rows=700)
    limit = (
        BASELINE_BYTES
        + SAMPLED_BYTES_PER_REQUEST * stream.requests
        + int(SAMPLED_BYTES_PER_ACCESS * 0.25 * stream.block_accesses)
    )
    plan = plan_for_stream(stream, limit)
    assert plan.mode == "streaming" and not plan.exact_curve
    # In chunks of 1,500 requests: the search reads no per-request column.
    plan = replace(plan, stage_profile=True, profile_chunk_rows=1500)
    got = analyze_stream(stream, OPTIONS, plan=plan, **_kw())
    assert got.prefix_cache.status == "sampled"
    # Sampled passes keep no per-request hits; the Mooncake trace has no cached_tokens either.
    assert got.stage_split is not None and got.stage_split.hits_source is None
    arrival = mooncake.column_np("arrival_s")
    start, stop = busiest_window(arrival, SEARCH_REQUESTS)
    sample = got.recommendation.verdict.sample
    assert sample.requests == SEARCH_REQUESTS < mooncake.requests
    assert sample.start_s == float(arrival[start] - arrival[0])
    assert sample.span_s == float(arrival[stop - 1] - arrival[start])
    assert any(v.chosen for v in got.recommendation.verdict.verdicts)
    assert any("profiled in 3 chunks" in n for n in got.stage_split.notes)
    assert got.replay is not None and "replay" not in got.unavailable
