"""Open-time function on a time grid against brute-force interval sums."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvadvisor.metrics.timeline import TimeGrid, inflight_window_means, window_count

intervals = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 15), st.integers(1, 5)), min_size=1, max_size=25
)


def _brute_open_time(starts, ends, weights, t: float) -> float:
    pairs = zip(starts, ends, weights, strict=True)
    return sum(w * max(0.0, min(e, t) - min(s, t)) for s, e, w in pairs)


def _scaled(items, unit_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hypothesis' (start, duration, weight) integers as (starts, ends, weights), times x unit."""
    starts = np.asarray([s * unit_s for s, _, _ in items])
    ends = starts + np.asarray([d * unit_s for _, d, _ in items])
    return starts, ends, np.asarray([float(x) for _, _, x in items])


@settings(max_examples=60, deadline=None)
@given(intervals)
def test_open_time_exact_at_edges(items) -> None:
    """F(T) equals the brute-force sum of weighted overlaps at every grid edge."""
    starts, ends, w = _scaled(items, 0.25)
    grid = TimeGrid(0.25, 70)
    f = grid.open_time(starts, ends, w)
    for k in range(0, 71, 7):
        assert f[k] == pytest.approx(_brute_open_time(starts, ends, w, k * 0.25), abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(intervals)
def test_interval_means_with_unaligned_grid(items) -> None:
    """Mean in-flight weight over each interval matches brute force on a fine default grid."""
    starts, ends, w = _scaled(items, 0.37)
    grid = TimeGrid.covering(float(ends.max()))
    f = grid.open_time(starts, ends, w)
    got = grid.mean(f, starts, ends, ends - starts)
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        if e > s:
            brute = _brute_open_time(starts, ends, w, e) - _brute_open_time(starts, ends, w, s)
            assert got[i] == pytest.approx(brute / (e - s), rel=1e-4)


def test_inflight_window_means_by_hand() -> None:
    """[0, 1.5) and [0.5, 3) over 1 s windows: means 1.5, 1.5, 1.0."""
    got = inflight_window_means(np.asarray([0.0, 0.5]), np.asarray([1.5, 3.0]), 1.0, 3)
    assert got == pytest.approx([1.5, 1.5, 1.0])


def test_window_peaks_and_count() -> None:
    """Peak of per-cell values per window; windows cover the last instant."""
    grid = TimeGrid(0.5, 6)
    peaks = grid.window_peaks(np.asarray([1.0, 3.0, 2.0, 0.0, 5.0, 4.0]), 1.0, 3)
    assert peaks == pytest.approx([3.0, 2.0, 5.0])
    assert window_count(2.0, 1.0) == 3
    assert window_count(0.0, 1.0) == 1
