"""Length percentiles: by hand, against the stdlib, against the traces' published figures."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvadvisor.metrics.lengths import (
    DENSE_MAX_TOKENS,
    LengthCounts,
    LengthStats,
    length_stats,
)
from kvadvisor.trace import read_trace


def test_by_hand() -> None:
    """[1, 2, 3, 4, 100]: p50 = x[2] = 3; p90 at 3.6: 4 + 0.6 × 96; p99 at 3.96: 4 + 0.96 × 96."""
    got = length_stats(np.asarray([4, 100, 1, 3, 2]))
    assert got == LengthStats(
        count=5,
        mean_tokens=22.0,
        p50_tokens=3.0,
        p90_tokens=pytest.approx(61.6),
        p99_tokens=pytest.approx(96.16),
        max_tokens=100,
    )
    assert length_stats(np.zeros(0, np.int64)) == LengthStats(0, None, None, None, None, None)
    assert length_stats(np.asarray([7])) == LengthStats(1, 7.0, 7.0, 7.0, 7.0, 7)


def _stdlib(values: list[int]) -> tuple[float, float, float]:
    """p50, p90, p99 by statistics.quantiles(method="inclusive"): the same type-7 definition."""
    if len(values) == 1:
        return (float(values[0]),) * 3
    qs = statistics.quantiles(values, n=100, method="inclusive")
    return qs[49], qs[89], qs[98]


@given(
    st.lists(st.integers(0, 3 * DENSE_MAX_TOKENS), min_size=1, max_size=300),
    st.lists(st.integers(1, 300), max_size=6),
)
@settings(max_examples=200, deadline=None)
def test_batches_merge_to_the_whole(values: list[int], cuts: list[int]) -> None:
    """Any split into batches gives the stdlib's percentiles of the whole (dense or sparse)."""
    counts = LengthCounts()
    edges = sorted({0, len(values), *(c % (len(values) + 1) for c in cuts)})
    for a, b in zip(edges, edges[1:], strict=False):
        counts.add(np.asarray(values[a:b], dtype=np.int64))
    got = counts.stats()
    p50, p90, p99 = _stdlib(values)
    assert got.count == len(values)
    assert got.mean_tokens == pytest.approx(sum(values) / len(values))
    assert got.max_tokens == max(values)
    assert got.p50_tokens == pytest.approx(p50)
    assert got.p90_tokens == pytest.approx(p90)
    assert got.p99_tokens == pytest.approx(p99)


@pytest.mark.parametrize(
    "fixture, column, published",
    [
        # Published with the traces: mean / p50 / p99 / max.
        ("mooncake_path", "input_tokens", (12_035.1, 6_909, 85_400.4, 126_195)),
        ("mooncake_path", "output_tokens", (342.6, 350, 1_118.5, 2_000)),
        ("azure_code_path", "input_tokens", (2_047.8, 1_469, 7_436, 7_437)),
        ("azure_code_path", "output_tokens", (27.9, 13, 251.5, 1_899)),
    ],
)
def test_real_traces_match_the_published_figures(request, fixture, column, published) -> None:
    """The whole Mooncake and Azure code traces: the figures their README publishes; p90 stdlib."""
    values = read_trace(request.getfixturevalue(fixture)).table[column].to_pylist()
    got = length_stats(np.asarray(values))
    mean, p50, p99, top = published
    assert got.mean_tokens == pytest.approx(mean, abs=0.05)
    assert got.p50_tokens == pytest.approx(p50, abs=0.05)
    assert got.p99_tokens == pytest.approx(p99, abs=0.05)
    assert got.max_tokens == top
    assert got.p90_tokens == pytest.approx(_stdlib(values)[1])
