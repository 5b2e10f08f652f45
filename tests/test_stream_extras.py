"""A streamed trace's cache extras: exact as in memory when its rows fit, else estimated.

References are computed independently of the streamed path: the in-memory extras
(:func:`measure_prefix_cache`) on the same trace, and a hand-worked sample whose members are
found with a pure-Python SplitMix64 (the spatial filter's hash, Steele, Lea and Flood 2014).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import MOONCAKE_HEAD_JSONL_GZ, SAMPLES

from kvadvisor.cache.measure import measure_prefix_cache
from kvadvisor.cache.model import PrefixCacheResult
from kvadvisor.cache.sampledextras import ExtrasCollector
from kvadvisor.cache.shards import HASH_SPACE
from kvadvisor.pipeline.options import AnalyzeOptions
from kvadvisor.pipeline.streamextras import (
    EXTRAS_SAMPLED_BYTES_PER_ACCESS,
    EXTRAS_TARGET_SAMPLED_ACCESSES,
    ExtrasPlan,
    plan_extras,
    sampled_extras,
)
from kvadvisor.pipeline.streaming import analyze_stream, plan_for_stream, replay_bytes
from kvadvisor.sections.prefix import extras_fields, prefix_cache_section
from kvadvisor.trace import read_trace
from kvadvisor.trace.arrays import BlockArrays, RequestArrays
from kvadvisor.trace.stream import stream_trace

GIB = 1024**3
# The replay is not what is compared here; the routing comparison is (8 instances).
OPTIONS = AnalyzeOptions(replay=False)


def _kw() -> dict[str, str]:
    return {"version": "0.0.test", "generated_at": "2026-01-01T00:00:00+00:00"}


@pytest.fixture(scope="module")
def head():
    """The Mooncake conversation head (400 real requests, 512-token blocks)."""
    return read_trace(MOONCAKE_HEAD_JSONL_GZ)


@pytest.fixture(scope="module")
def bailian():
    """The Bailian example (16-token blocks): the only bundled trace with compared chunks."""
    return read_trace(SAMPLES / "bailian_example.jsonl")


def _in_memory(trace, options=OPTIONS):
    measured = measure_prefix_cache(
        RequestArrays.of(trace),
        warmup_fraction=options.warmup_fraction,
        instances=options.cache_instances,
        routing_seed=options.cache_routing_seed,
    )
    assert measured is not None and measured.extras
    return measured


def test_plan_extras_by_hand() -> None:
    """Exact when the rows fit; else the largest rate that fits beside the rest; else why."""
    acc = 10_000_000
    exact = plan_extras(
        block_accesses=acc, exact_curve=True, rows_bytes=3 * GIB, peak_bytes=GIB,
        memory_limit_bytes=4 * GIB,
    )  # fmt: skip
    assert (exact.mode, exact.rate) == ("exact", None)
    # Rows over the limit: room 1 GiB for 200 B per sampled access -> 0.536..., capped by the
    # CPU target 4M / 10M = 0.4.
    sampled = plan_extras(
        block_accesses=acc, exact_curve=True, rows_bytes=5 * GIB, peak_bytes=3 * GIB,
        memory_limit_bytes=4 * GIB,
    )  # fmt: skip
    assert sampled.mode == "sampled" and sampled.rate == 0.4
    assert EXTRAS_TARGET_SAMPLED_ACCESSES / acc == 0.4
    # Room 10 MB: 10e6 / (200 * 1e7) = 0.005.
    tight = plan_extras(
        block_accesses=acc, exact_curve=False, rows_bytes=0, peak_bytes=4 * GIB - 10**7,
        memory_limit_bytes=4 * GIB,
    )  # fmt: skip
    assert EXTRAS_SAMPLED_BYTES_PER_ACCESS == 200 and tight.rate == 0.005
    assert "sampled curve" in tight.reason
    none = plan_extras(
        block_accesses=acc, exact_curve=True, rows_bytes=5 * GIB, peak_bytes=4 * GIB - 10,
        memory_limit_bytes=4 * GIB,
    )  # fmt: skip
    assert none.mode == "none" and "over the memory limit" in none.reason


def test_exact_streamed_extras_equal_in_memory(head) -> None:
    """Rows that fit: routing, reuse, block sizes and sharing figure for figure."""
    stream = stream_trace(head, batch_rows=37)
    limit = plan_for_stream(stream, 64 * GIB).estimated_in_memory_bytes - 1
    plan = plan_for_stream(stream, limit)
    assert plan.exact_curve and plan.extras.mode == "exact"
    assert replay_bytes(plan.requests, plan.block_accesses) <= limit
    plan = dataclasses.replace(plan, stage_profile=True, profile_chunk_rows=stream.requests)
    got = analyze_stream(stream, OPTIONS, plan=plan, **_kw()).prefix_cache
    want = extras_fields(_in_memory(head))
    assert got.routing is not None and got.reuse is not None and got.sharing is not None
    for name, value in want.items():
        assert getattr(got, name) == value, name
    assert got.extras_sampling == ()
    assert "exact" in got.note


def test_sampled_at_rate_one_is_the_exact_figures(head, bailian) -> None:
    """At rate 1 every block is kept: the estimators give the in-memory figures."""
    for trace in (head, bailian):
        measured = _in_memory(trace)
        est = sampled_extras(stream_trace(trace, batch_rows=50), measured.result, OPTIONS, 1.0)
        assert est.reuse == measured.reuse
        assert len(est.block_sizes) == len(measured.block_sizes)
        for a, b in zip(est.block_sizes, measured.block_sizes, strict=True):
            assert (a.chunk_tokens, a.save_unfull_chunk) == (b.chunk_tokens, b.save_unfull_chunk)
            assert a.hit_ratio_all == pytest.approx(b.hit_ratio_all, abs=1e-12)
            assert a.hit_ratio_steady == pytest.approx(b.hit_ratio_steady, abs=1e-12)
        assert est.routing is not None and measured.routing is not None
        for a, b in zip(est.routing.outcomes, measured.routing.outcomes, strict=True):
            assert a.policy == b.policy and a.unavailable == b.unavailable
            for p, q in zip(a.points, b.points, strict=True):
                assert p.capacity_tokens_per_instance == q.capacity_tokens_per_instance
                assert p.hit_ratio_all == pytest.approx(q.hit_ratio_all, abs=1e-12)
                assert p.hit_ratio_steady == pytest.approx(q.hit_ratio_steady, abs=1e-12)
    assert len(measured.block_sizes) == 4  # the bailian trace's 16 and 64, 256, 512


@pytest.fixture(scope="module")
def mooncake_exact(mooncake_path):
    """The whole Mooncake conversation trace (12,031 requests) and its in-memory extras."""
    trace = read_trace(mooncake_path)
    return trace, _in_memory(trace)


def test_sampled_estimates_within_their_error_on_mooncake(mooncake_exact) -> None:
    """At rate 0.1 each estimate is within 3 of its stated standard errors of the exact one."""
    trace, measured = mooncake_exact
    est = sampled_extras(stream_trace(trace), measured.result, OPTIONS, 0.1)
    errors = {e.extra: e for e in est.errors}
    assert set(errors) == {"reuse", "routing"}  # no compared chunk is coarser than 512
    reuse = errors["reuse"]
    assert reuse.rate == pytest.approx(0.1, rel=1e-6) and reuse.unit == "relative"
    assert reuse.total_accesses == measured.result.curve.total_blocks_all
    assert 0.0 < reuse.error < 0.2
    assert est.reuse is not None and measured.reuse is not None
    got = np.array([r.ttl_s for r in est.reuse.ttl])
    want = np.array([r.ttl_s for r in measured.reuse.ttl])
    assert np.mean(np.abs(got - want) / want) <= 3 * reuse.error
    assert est.reuse.hit_tokens == pytest.approx(measured.reuse.hit_tokens, rel=3 * reuse.error)
    routing = errors["routing"]
    assert routing.unit == "ratio" and 0.0 < routing.error < 0.05
    assert est.routing is not None and measured.routing is not None
    diffs = [
        abs(p.hit_ratio_all - q.hit_ratio_all)
        for a, b in zip(est.routing.outcomes, measured.routing.outcomes, strict=True)
        if a.policy.value in ("random", "round_robin")
        for p, q in zip(a.points, b.points, strict=True)
    ]
    assert np.mean(diffs) <= 3 * routing.error
    # 512-token blocks: no compared chunk is coarser, so only the trace's own size (exact).
    assert [b.chunk_tokens for b in est.block_sizes] == [512]


def _splitmix64(x: int) -> int:
    """SplitMix64's finaliser in plain Python (the spatial filter's hash)."""
    m = (1 << 64) - 1
    z = (x + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def _kept(key: int, rate: float) -> bool:
    return (_splitmix64(key) & 0xFFFFFF) < round(rate * HASH_SPACE)


def test_sampled_reuse_times_by_hand() -> None:
    """Four requests, rate 0.5: the sampled gaps, hit tokens and TTLs worked out by hand."""
    rate = 0.5
    kept = [k for k in range(1, 200) if _kept(k, rate)][:2]
    dropped = [k for k in range(1, 200) if not _kept(k, rate)][:2]
    a, b = kept
    x, y = dropped
    # 16-token blocks, full: t=0 [x, a], t=10 [x, a, b], t=12 [y], t=25 [x, a, b].
    # Hits among the sampled blocks: a at 10 (gap 10), a at 25 (gap 15), b at 25 (gap 15).
    offsets = np.array([0, 2, 5, 6, 9], np.int64)
    values = np.array([x, a, x, a, b, y, x, a, b], np.int64)
    inp = np.array([32, 48, 16, 48], np.int64)
    arrival = np.array([0.0, 10.0, 12.0, 25.0])
    collector = ExtrasCollector(block_tokens=16, requests=4, warmup=2, rate=rate, instances=1)
    collector.add(inp[:2], offsets[:3], values[:5], arrival[:2])
    collector.add(inp[2:], offsets[2:] - offsets[2], values[5:], arrival[2:])
    blocks = BlockArrays(offsets, values, 16)
    curve = measure_prefix_cache(RequestArrays(arrival, inp, inp, blocks), instances=1).result
    est = collector.estimate(curve)
    assert isinstance(curve, PrefixCacheResult) and est.routing is None
    reuse = est.reuse
    assert reuse is not None
    # Three sampled hits of 16 tokens, and SHARDS_adj: 9 accesses of 16 tokens expect
    # 0.5 x 144 = 72 sampled tokens, 5 x 16 = 80 were drawn: -8 at the shortest gap.
    assert reuse.hit_tokens == (3 * 16 + (0.5 * 144 - 80)) / rate == 80
    # Token-weighted gaps 10, 15, 15 (48 tokens), less 8 at 10 s: the median's 20 of 40
    # tokens are reached at 15 s (8 of them at 10 s).
    assert dict(reuse.quantiles_s)[0.5] == 15.0
    ttl = {r.share: r for r in reuse.ttl}
    assert ttl[0.5].ttl_s == 15.0 and ttl[0.99].ttl_s == 15.0
    # A 15 s TTL at t=25 holds a and b (last used at 10 and 25): 2 sampled blocks -> 4.
    assert ttl[0.5].peak_blocks == 4 and ttl[0.5].capacity_tokens == 64
    assert sum(reuse.histogram_tokens) == reuse.hit_tokens


def test_streamed_estimate_states_rate_errors_and_what_is_left_out(head) -> None:
    """A plan that samples the extras: the section holds them with their rate and errors."""
    stream = stream_trace(head, batch_rows=64)
    limit = plan_for_stream(stream, 64 * GIB).estimated_in_memory_bytes - 1
    plan = dataclasses.replace(
        plan_for_stream(stream, limit),
        stage_profile=True,
        profile_chunk_rows=stream.requests,
        extras=ExtrasPlan("sampled", 0.5, "the whole trace's rows need 9 GiB > 8 GiB"),
    )
    got = analyze_stream(stream, OPTIONS, plan=plan, **_kw()).prefix_cache
    assert got.reuse is not None and got.routing is not None and got.sharing is None
    assert [e.extra for e in got.extras_sampling] == ["reuse", "routing"]
    for e in got.extras_sampling:
        assert e.rate == 0.5 and e.total_accesses == stream.block_accesses
        assert 0 < e.sampled_accesses < e.total_accesses and e.error_estimate is not None
    assert "9 GiB > 8 GiB" in got.note and "rate 0.5" in got.note
    assert "shared prefixes and the conversation split left out" in got.note


def test_in_memory_above_the_extras_limit_estimates_them(head, monkeypatch) -> None:
    """An in-memory trace over the exact extras' limit gets them estimated, not skipped."""
    import kvadvisor.cache.measure as measure

    want = extras_fields(_in_memory(head))["reuse"]
    monkeypatch.setattr(measure, "EXTRAS_MAX_ACCESSES", 1_000)
    measured = measure.measure_prefix_cache(RequestArrays.of(head))
    assert measured is not None and not measured.extras and measured.estimated is not None
    section = prefix_cache_section(measured)
    assert section.reuse is not None and section.routing is not None
    assert {e.extra for e in section.extras_sampling} == {"reuse", "routing"}
    # 11,349 accesses are under the 4M sampled accesses the rate allows: rate 1, exact figures.
    assert section.extras_sampling[0].rate == 1.0
    assert section.reuse == want
    assert "block accesses: routing, reuse times and block sizes estimated" in section.note


def test_html_summary_states_each_estimate() -> None:
    """The HTML page's prefix-cache rows name each estimate, its rate and its error."""
    from report_fixtures import full_report

    from kvadvisor.report.html.prefix import _summary_rows
    from kvadvisor.results.report import ExtraSampling

    one = ExtraSampling("block_sizes", 0.11, 10, 100, 0.0123, "ratio", "sub-samples")
    pc = dataclasses.replace(full_report().prefix_cache, extras_sampling=(one,))
    assert _summary_rows(pc)[-1] == (
        "block sizes: estimated at rate 0.11, standard error (ratio)",
        "0.0123",
    )
