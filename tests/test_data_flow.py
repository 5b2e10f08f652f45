"""Data flows down: `analyze`, `review` and `verify` take each array from the trace once."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest
from conftest import MOONCAKE_HEAD_JSONL_GZ
from report_fixtures import small_trace
from test_cache_reference import make_trace

import kvadvisor.sections.profile as profile
import kvadvisor.sections.workload as workload
from kvadvisor.cache import simulate_prefix_cache
from kvadvisor.fleet import TraceArrays
from kvadvisor.pipeline.inmemory import analyze_trace
from kvadvisor.pipeline.options import AnalyzeOptions
from kvadvisor.pipeline.review import review_trace
from kvadvisor.plan import load_plan
from kvadvisor.trace import read_trace
from kvadvisor.trace.arrays import RequestArrays, SessionKeys
from kvadvisor.trace.model import Trace

REPO = Path(__file__).resolve().parents[1]
PLAN = REPO / "examples" / "plans" / "good-p5e-prefill-p5-decode.yaml"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> collections.Counter:
    """Every read of the trace's table for arrays, counted by what was read."""
    counts: collections.Counter = collections.Counter()
    column_np, hash_arrays = Trace.column_np, Trace.hash_arrays
    of_column, measured = SessionKeys.of_column.__func__, profile.measured_stages

    def count_column(self: Trace, name: str) -> np.ndarray:
        counts[name] += 1
        return column_np(self, name)

    def count_hashes(self: Trace) -> tuple[np.ndarray, np.ndarray]:
        counts["block_hashes"] += 1
        return hash_arrays(self)

    def count_sessions(cls: type, column: object) -> SessionKeys:
        counts["session_id"] += 1
        return of_column(cls, column)

    def count_measured(trace: Trace) -> object:
        counts["measured stage times"] += 1
        return measured(trace)

    monkeypatch.setattr(Trace, "column_np", count_column)
    monkeypatch.setattr(Trace, "hash_arrays", count_hashes)
    monkeypatch.setattr(SessionKeys, "of_column", classmethod(count_sessions))
    monkeypatch.setattr(profile, "measured_stages", count_measured)
    return counts


def test_analyze_with_plans_reads_each_array_once(reads) -> None:
    """The summary, the cache pass and its extras, the profile and the review share one read.

    On the Mooncake head (400 real requests with block hashes): what is counted is how often
    each array is read, which the trace's length does not change.
    """
    trace = read_trace(MOONCAKE_HEAD_JSONL_GZ)
    reads.clear()
    options = AnalyzeOptions(plans=(load_plan(PLAN),))
    report = analyze_trace(trace, options, version="t", generated_at="t")
    # The extras ran (they read hashes, lengths and arrivals too) and the review replayed.
    assert report.prefix_cache.reuse is not None and report.prefix_cache.routing is not None
    assert report.plan_reviews
    assert max(reads.values()) == 1, reads
    assert {"arrival_s", "input_tokens", "output_tokens", "block_hashes"} <= set(reads)


def test_the_profile_reads_the_model_names_the_summary_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The served-model names are read from the table once: the profiler uses the summary's.

    The summary's reader is made to answer another model than the table holds: the profile
    must name that one, which it can only have from the summary.
    """
    trace = small_trace(model="qwen3-32b")
    calls: collections.Counter = collections.Counter()

    def names(t: Trace) -> tuple[str, ...]:
        calls["model names"] += 1
        return ("qwen2.5-7b",)

    monkeypatch.setattr(workload, "trace_models", names)
    monkeypatch.setattr(profile, "trace_models", names)
    report = analyze_trace(trace, AnalyzeOptions(), version="t", generated_at="t")
    assert calls == {"model names": 1}, calls
    assert report.trace.models == ("qwen2.5-7b",)
    assert report.model.name == "qwen2.5-7b" and not report.model.assumed


def test_sessions_are_encoded_once_for_routing_and_conversations(reads) -> None:
    """Session-sticky routing and the conversation split share one encoding of session_id."""
    sessions = ["a", "b", "a", None, "b", "a", "c", "c"]
    hashes = [[1, 2], [3], [1, 2, 4], [5], [3, 6], [1, 2, 4, 7], [8], [8, 9]]
    trace = make_trace(hashes, [8, 4, 12, 4, 8, 16, 4, 8], 4, session_id=sessions)
    reads.clear()
    report = analyze_trace(trace, AnalyzeOptions(cache_instances=2), version="t", generated_at="t")
    policies = {p.policy: p for p in report.prefix_cache.routing.policies}
    assert policies["session"].unavailable is None and policies["session"].points
    assert report.prefix_cache.conversations.basis == "session"
    assert reads["session_id"] == 1 and max(reads.values()) == 1, reads


def test_review_reads_each_array_once(mooncake_path, reads) -> None:
    """`review`: the summary, the open-loop demand and the closed-loop replay share one read."""
    trace = read_trace(mooncake_path)
    reads.clear()
    review = review_trace(trace, [load_plan(PLAN)], version="t", generated_at="t")
    assert review.plans
    assert max(reads.values()) == 1, reads


def test_the_replay_takes_the_exact_pass_ids(mooncake_path, monkeypatch) -> None:
    """The replay's dense block ids are the exact pass's: no second remap of the hashes.

    The hashes are scattered over 64-bit values, so finding their ids needs the hash map; with
    the pass given, a second remap fails the test, and the ids equal those found afresh.
    """
    import kvadvisor.cache.prefix as prefix

    trace = read_trace(mooncake_path)
    arrays = RequestArrays.of(trace)
    assert arrays.blocks is not None
    scattered = arrays.blocks.values * np.int64(0x9E3779B97F4A7C15 & 0x7FFFFFFFFFFFFFFF) + 12345
    blocks = type(arrays.blocks)(arrays.blocks.offsets, scattered, arrays.blocks.block_tokens)
    arrays = RequestArrays(arrays.arrival_s, arrays.input_tokens, arrays.output_tokens, blocks)
    fresh = TraceArrays.from_arrays(arrays)
    from kvadvisor.cache.simulate import simulate_blocks

    result = simulate_blocks(blocks, arrays.input_tokens)
    assert result.block_ids is not None

    def _no_second_remap(values: np.ndarray) -> tuple[np.ndarray, int]:
        raise AssertionError("the hashes were remapped again")

    monkeypatch.setattr(prefix, "_remap", _no_second_remap)
    reused = TraceArrays.from_arrays(arrays, result)
    np.testing.assert_array_equal(reused.block_ids, fresh.block_ids)
    assert reused.id_bound == fresh.id_bound
    np.testing.assert_array_equal(reused.offsets, fresh.offsets)


def test_trace_arrays_from_a_trace_equal_those_from_columns(mooncake_path) -> None:
    """TraceArrays.from_trace (one derivation) equals TraceArrays.of on the plain columns."""
    trace = read_trace(mooncake_path)
    offsets, hashes = trace.hash_arrays()
    plain = TraceArrays.of(
        trace.column_np("arrival_s"),
        trace.column_np("input_tokens"),
        trace.column_np("output_tokens"),
        offsets=offsets,
        hashes=hashes,
        block_tokens=trace.block_tokens,
    )
    derived = TraceArrays.from_arrays(RequestArrays.of(trace), simulate_prefix_cache(trace))
    for name in ("arrival_s", "input_tokens", "output_tokens", "offsets", "block_ids"):
        np.testing.assert_array_equal(getattr(derived, name), getattr(plain, name))
    assert (derived.block_tokens, derived.id_bound, derived.clamped) == (
        plain.block_tokens,
        plain.id_bound,
        plain.clamped,
    )
