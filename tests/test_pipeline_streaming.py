"""Streaming analysis: exact where exact, the memory budget's switch to sampling, size parsing."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from analysis_cache import analysed
from conftest import MOONCAKE_HEAD_JSONL_GZ, SAMPLES
from typer.testing import CliRunner

from kvadvisor.cli import app
from kvadvisor.errors import ConfigError
from kvadvisor.pipeline.analyze import analyze, analyze_large
from kvadvisor.pipeline.options import AnalyzeOptions
from kvadvisor.pipeline.streaming import (
    BASELINE_BYTES,
    CHUNK_BYTES_PER_ROW,
    SAMPLED_BYTES_PER_ACCESS,
    SAMPLED_BYTES_PER_REQUEST,
    advice_fixed_bytes,
    analyze_stream,
    parse_memory_limit,
    physical_memory_bytes,
    plan_analysis,
    plan_for_stream,
)
from kvadvisor.trace import read_trace
from kvadvisor.trace.model import META_BLOCK_TOKENS, META_SOURCE_FORMAT
from kvadvisor.trace.schema import build_trace
from kvadvisor.trace.stream import open_trace_stream, stream_trace

GIB = 1024**3
# Routing and block-size comparisons are in-memory extras; keep the reference run lean.
# analyze replays only a trace held in memory: the in-memory reference is not replayed either.
OPTIONS = AnalyzeOptions(cache_instances=1, replay=False)


def _kw() -> dict[str, str]:
    return {"version": "0.0.test", "generated_at": "2026-01-01T00:00:00+00:00"}


@pytest.fixture(scope="module")
def mooncake():
    """The Mooncake conversation head (400 real requests over 141 s, 11,349 block accesses).

    What is checked here is that streaming gives the in-memory result exactly, and that the
    budget picks the plan and the sampling rate it should: properties of the streamed path on
    any trace with hashes, not figures of the whole 12,031-request trace. The batches and the
    hive files are sized to the head so that every stream still crosses many batch and file
    boundaries (the whole trace took about 140 CPU-s here; the head takes a few).
    """
    return read_trace(MOONCAKE_HEAD_JSONL_GZ)


@pytest.fixture(scope="module")
def reference(mooncake, tmp_path_factory):
    """The in-memory report every streamed one is compared with."""
    return analysed(tmp_path_factory, MOONCAKE_HEAD_JSONL_GZ, mooncake, OPTIONS, **_kw())


def test_parse_memory_limit() -> None:
    """Sizes with units and percentages parse; anything else is a ConfigError."""
    assert parse_memory_limit("8GiB") == 8 * GIB
    assert parse_memory_limit("512 MB") == 512 * 10**6
    assert parse_memory_limit("1.5g") == 1_500_000_000
    assert parse_memory_limit("2e9") == 2 * 10**9
    assert parse_memory_limit("25%") == physical_memory_bytes() // 4
    for bad in ("lots", "0", "8 parsecs", "150%"):
        with pytest.raises(ConfigError, match="--memory-limit"):
            parse_memory_limit(bad)


def test_plan_by_hand() -> None:
    """Each plan is chosen at the budget computed by hand from the documented estimates."""
    req, acc, table = 1_000_000, 20_000_000, 100 * 2**20
    in_memory = BASELINE_BYTES + table + 96 * req + 120 * acc
    exact = BASELINE_BYTES + 16 * req + 40 * acc
    assert plan_analysis(req, acc, table, in_memory).mode == "in_memory"
    p = plan_analysis(req, acc, table, in_memory - 1)
    assert (p.mode, p.sample_rate) == ("streaming", None)
    assert p.estimated_exact_stream_bytes == exact
    # Room for 120 B per sampled access at rate 0.1234 -> 0.12 (two digits, rounded down).
    limit = BASELINE_BYTES + SAMPLED_BYTES_PER_REQUEST * req + int(120 * 0.1234 * acc)
    p = plan_analysis(req, acc, table, limit)
    assert p.mode == "streaming" and p.sample_rate == pytest.approx(0.12)
    assert "SHARDS" in p.reason
    with pytest.raises(ConfigError, match="too small"):
        plan_analysis(req, acc, table, BASELINE_BYTES)
    # Beside a sampled curve (32 B per request), the advice needs its bounded parts and a
    # profile chunk of at least 32,768 requests (400 B each): it fits 1 MB over that, not 1 MB
    # under, nor at 100 MB.
    least = advice_fixed_bytes(req, acc / req, 0.0) + CHUNK_BYTES_PER_ROW * 32_768
    room = BASELINE_BYTES + SAMPLED_BYTES_PER_REQUEST * req + least
    fits = plan_analysis(req, acc, table, room + 10**6)
    assert fits.sample_rate is not None and fits.stage_profile
    assert fits.profile_chunk_rows == 32_768 + 10**6 // CHUNK_BYTES_PER_ROW
    assert not plan_analysis(req, acc, table, room - 10**6).stage_profile
    small = plan_analysis(req, acc, table, BASELINE_BYTES + 100 * 10**6)
    assert small.sample_rate == pytest.approx(0.028) and not small.stage_profile


def test_a_too_small_limit_suggests_one_that_is_enough() -> None:
    """The "give at least" size, typed back as --memory-limit, plans a sampled analysis."""
    req, acc, table = 1_000_000, 20_000_000, 100 * 2**20
    with pytest.raises(ConfigError) as err:
        plan_analysis(req, acc, table, BASELINE_BYTES)
    message = str(err.value)
    # The limit is said as a size (512 MiB), the counts with their nouns.
    assert message.startswith("--memory-limit 512 MiB is too small for 1,000,000 requests and ")
    assert "20,000,000 block accesses even sampling at rate 0.0001" in message
    least = message.split("give at least ")[1]
    p = plan_analysis(req, acc, table, parse_memory_limit(least))
    assert p.mode == "streaming" and p.sample_rate is not None and p.sample_rate >= 1e-4


def test_stream_footers_count_block_accesses(mooncake, tmp_path) -> None:
    """Footer value counts bound the block accesses from above, tightly."""
    path = _hive(mooncake, tmp_path)
    stream = open_trace_stream(path)
    offsets, values = mooncake.hash_arrays()
    assert stream.requests == mooncake.requests
    assert stream.block_accesses >= len(values)  # an upper bound from the footers
    assert stream.block_accesses <= len(values) + mooncake.requests


def _hive(trace, tmp_path):
    table = trace.table.replace_schema_metadata(
        {META_BLOCK_TOKENS: b"512", META_SOURCE_FORMAT: b"mooncake"}
    )
    # 20-s windows: the head's 141 s lie in eight hive partitions of row groups of 50.
    part = pc.cast(pc.floor(pc.divide(table["arrival_s"], 20.0)), pa.int64())
    ds.write_dataset(
        table.append_column("window", part),
        tmp_path / "hive",
        format="parquet",
        partitioning=["window"],
        partitioning_flavor="hive",
        max_rows_per_group=50,
        preserve_order=True,
    )
    return tmp_path / "hive"


def _exact_plan(stream):
    # Streamed with the exact curve just under the in-memory estimate; the profile in one chunk
    # (the plan's bounded advice parts are more than this small trace's whole analysis).
    limit = plan_for_stream(stream, 64 * GIB).estimated_in_memory_bytes - 1
    plan = plan_for_stream(stream, limit)
    assert plan.mode == "streaming" and plan.exact_curve
    return dataclasses.replace(plan, stage_profile=True, profile_chunk_rows=stream.requests)


@pytest.mark.parametrize("source", ["memory", "hive"])
def test_streaming_exact_equals_in_memory(mooncake, reference, tmp_path, source) -> None:
    """Streaming exact gives the in-memory curve, summary and charts exactly."""
    stream = (
        stream_trace(mooncake, batch_rows=37)
        if source == "memory"
        else open_trace_stream(_hive(mooncake, tmp_path), batch_rows=29)
    )
    got = analyze_stream(stream, OPTIONS, plan=_exact_plan(stream), **_kw())
    want = reference.prefix_cache
    assert got.prefix_cache.status == "exact"
    assert got.prefix_cache.hit_ratio == want.hit_ratio
    assert got.prefix_cache.block_hit_ratio == want.block_hit_ratio
    assert got.prefix_cache.mrc == want.mrc
    assert got.prefix_cache.curve == want.curve
    assert got.unavailable.keys() == reference.unavailable.keys()
    assert got.options == reference.options
    for name in (
        "requests",
        "duration_s",
        "input_tokens_total",
        "output_tokens_total",
        "arrival_rate_per_s",
        "block_tokens",
        "models",
        "arrivals",
        "input_tokens_hist",
        "output_tokens_hist",
        "input_tokens_stats",
        "output_tokens_stats",
        "dropped",
        "columns",
        "capabilities",
    ):
        assert getattr(got.trace, name) == getattr(reference.trace, name), name


def test_small_budget_switches_to_sampling(mooncake, reference) -> None:
    """A small budget samples at the rate that fits, states it, and stays close."""
    stream = stream_trace(mooncake, batch_rows=64)
    limit = (
        BASELINE_BYTES
        + SAMPLED_BYTES_PER_REQUEST * stream.requests
        + int(SAMPLED_BYTES_PER_ACCESS * 0.25 * stream.block_accesses)
    )
    report = analyze_large(stream, OPTIONS, memory_limit_bytes=limit, **_kw())
    pc_ = report.prefix_cache
    assert pc_.status == "sampled"
    assert pc_.sampling.rate == pytest.approx(0.25, rel=0.01)
    assert pc_.sampling.total_accesses == stream.block_accesses
    assert pc_.sampling.error_estimate is not None and pc_.sampling.error_estimate > 0
    assert "SHARDS" in pc_.note and "0.25" in pc_.note
    want = reference.prefix_cache.mrc
    diffs = [abs(a.hit_ratio_all - b.hit_ratio_all) for a, b in zip(pc_.mrc, want, strict=True)]
    assert np.mean(diffs) < 0.03
    assert report.trace.requests == mooncake.requests


def test_profile_left_out_when_over_budget_says_why(mooncake) -> None:
    """A plan without room for the stage profile leaves it out and names the limit."""
    stream = stream_trace(mooncake, batch_rows=128)
    plan = dataclasses.replace(_exact_plan(stream), stage_profile=False)
    report = analyze_stream(stream, OPTIONS, plan=plan, **_kw())
    assert report.stage_split is None and report.prefix_cache.status == "exact"
    assert "over the memory limit" in report.unavailable["stage_split"]


def test_large_budget_runs_everything_in_memory(mooncake, reference) -> None:
    """A large budget gives exactly the in-memory report."""
    report = analyze_large(
        stream_trace(mooncake, batch_rows=50), OPTIONS, memory_limit_bytes=64 * GIB, **_kw()
    )
    assert report == reference


def test_no_hashes_stream_says_unknown() -> None:
    """Without hashes: prefix reuse unknown; counts and charts by hand."""
    table = pa.table(
        {
            "arrival_s": [0.0, 1.0, 3.0],
            "input_tokens": [5, 6, 0],
            "output_tokens": [1, 2, 70],
            "model": ["m2", "m1", None],
        }
    )
    stream = stream_trace(build_trace(table, path="t", source_format="t", block_tokens=None))
    plan = plan_analysis(3, 0, 0, BASELINE_BYTES)
    report = analyze_stream(stream, OPTIONS, plan=plan, **_kw())
    assert report.prefix_cache.status == "unknown"
    assert report.trace.input_tokens_total == 11
    assert report.trace.models == ("m1", "m2")
    # Power-of-two bins by hand: inputs 5, 6 in [4, 8), 0 in bin 0; outputs 1, 2, 70.
    assert report.trace.input_tokens_hist.y == (1.0, 0.0, 2.0)
    assert report.trace.output_tokens_hist.y == (1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    assert report.trace.arrivals.y == (1.0, 1.0, 0.0, 1.0)  # 1-s windows over 3 s


def test_streamed_summary_states_columns_and_capabilities() -> None:
    """Unread columns and failed requests reach the streamed summary as in memory.

    The pass reads neither TTFT nor sessions, yet the summary's columns and capabilities
    state them as the in-memory summary does.
    """
    from kvadvisor.trace.describe import capabilities

    table = pa.table(
        {
            "arrival_s": [0.0, 1.0, 3.0],
            "input_tokens": [5, 6, 0],
            "output_tokens": [1, 2, 70],
            "ttft_s": [0.1, 0.2, 0.3],
            "session_id": ["a", "b", "a"],
            "ok": [True, False, False],
        }
    )
    trace = build_trace(table, path="t", source_format="t", block_tokens=None)
    plan = plan_analysis(3, 0, 0, BASELINE_BYTES)
    report = analyze_stream(stream_trace(trace), OPTIONS, plan=plan, **_kw())
    assert report.trace.columns == trace.columns
    assert report.trace.capabilities == capabilities(trace)
    assert "2 failed requests: kept, and excluded where a metric needs a successful request" in (
        report.trace.capabilities
    )
    assert "TTFT present: stage times will be measured, not modeled" in report.trace.capabilities


def test_cli_memory_limit_streams_a_directory(tmp_path) -> None:
    """The analyze command on a directory samples by the budget; a bad size is exit 2.

    On the Mooncake head (400 real requests with block hashes): what is checked is the
    option's way to the plan and the sampled section, not a figure of the whole trace.
    """
    head = read_trace(MOONCAKE_HEAD_JSONL_GZ)
    hive = _hive(head, tmp_path)
    out = tmp_path / "r.json"
    accesses = open_trace_stream(hive).block_accesses
    limit = (
        BASELINE_BYTES
        + SAMPLED_BYTES_PER_REQUEST * head.requests
        + int(SAMPLED_BYTES_PER_ACCESS * 0.25 * accesses)
    )
    res = CliRunner().invoke(
        app,
        [
            "analyze",
            str(hive),
            "--memory-limit",
            str(limit),
            "--cache-instances",
            "1",
            "--format",
            "json",
            "-o",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    body = json.loads(out.read_text())
    assert body["trace"]["requests"] == head.requests == 400
    assert body["prefix_cache"]["status"] == "sampled"
    assert body["prefix_cache"]["sampling"]["rate"] == pytest.approx(0.25, abs=0.01)
    bad = CliRunner().invoke(app, ["analyze", str(hive), "--memory-limit", "lots"])
    assert bad.exit_code == 2 and "--memory-limit 'lots'" in bad.output


def test_streamed_profile_knows_arrivals_were_not_measured() -> None:
    """A benchmark trace without start times: no replay of placeholder arrivals, streamed too."""
    trace = read_trace(SAMPLES / "llmperf_individual_responses.json")
    assert not trace.arrivals_measured and trace.has("ttft_s")
    stream = stream_trace(trace)
    plan = plan_analysis(trace.requests, 0, 0, GIB)
    assert plan.stage_profile
    got = analyze_stream(stream, OPTIONS, plan=plan, **_kw()).stage_split
    want = analyze(trace, OPTIONS, **_kw()).stage_split
    unknown = "arrival times unknown: calibrated open loop (queueing read as prefill)"
    assert unknown in want.notes and unknown in got.notes
    assert got.calibration == want.calibration


def test_a_streamed_no_search_reads_no_rows_and_says_why(mooncake, monkeypatch) -> None:
    """--no-search on a streamed trace: verdicts abstain, the replay names it, no row is read.

    The whole trace's rows are the replay's input; with no deployment searched there is
    nothing to replay, so reading them (the trace's largest read after the scan) is skipped.
    (The exact cache extras read them too: left out here, as a plan too small for them does.)
    """
    import kvadvisor.pipeline.streaming as streaming
    from kvadvisor.pipeline.streamextras import ExtrasPlan

    read: list[int] = []
    whole = streaming.whole_source

    def counted(*args, **kwargs):
        rows = whole(*args, **kwargs)

        def read_rows():
            read.append(1)
            return rows()

        return read_rows

    monkeypatch.setattr(streaming, "whole_source", counted)
    stream = stream_trace(mooncake, batch_rows=64)
    options = dataclasses.replace(OPTIONS, replay=True, search=False)
    plan = dataclasses.replace(_exact_plan(stream), extras=ExtrasPlan("none", None, "not here"))
    report = analyze_stream(stream, options, plan=plan, **_kw())
    assert report.replay is None
    assert report.unavailable["replay"] == "no deployment was searched (--no-search)"
    verdicts = report.recommendation.verdict
    assert verdicts.primary is None and verdicts.replayed == 0
    assert all("--no-search" in v.reason for v in verdicts.verdicts)
    assert read == []
