"""The workload charts of the trace summary, against counts worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from kvadvisor.report.serieslabels import series_labels
from kvadvisor.sections.workload import arrival_series, arrival_window_s, length_histogram


def test_arrival_window_is_the_smallest_under_240_bins() -> None:
    """1000 s: 1 s gives 1000 windows, 2 s 500, 5 s 200 (< 240): 5 s. 100 s: 1 s."""
    assert arrival_window_s(1000.0) == 5
    assert arrival_window_s(100.0) == 1
    assert arrival_window_s(10 * 86400 * 240.0) == 86400  # past the list: the largest window


def test_arrival_series_by_hand() -> None:
    """Arrivals 0, 0.5, 1.2, 3.9 s over 3.9 s in 1-s windows: 2, 1, 0, 1 requests per second."""
    s = arrival_series(np.array([0.0, 0.5, 1.2, 3.9]), 3.9)
    assert s is not None
    assert s.x == (0.0, 1.0, 2.0, 3.0) and s.y == (2.0, 1.0, 0.0, 1.0)
    assert s.window_s == 1 and s.y_unit == "requests/s"
    assert series_labels(s).name == "arrivals per 1 s window"
    # 1000 s in 5-s windows: 201 windows, the request at 1000 s in the last; rate = count / 5.
    s = arrival_series(np.array([0.0, 4.9, 5.0, 1000.0]), 1000.0)
    assert s is not None and len(s.x) == 201 and s.x[-1] == 1000.0
    assert s.y[:2] == (0.4, 0.2) and s.y[-1] == 0.2 and sum(s.y) * 5 == pytest.approx(4)
    assert arrival_series(np.array([]), 0.0) is None


def test_length_histogram_by_hand() -> None:
    """0 and 1 in bin 0, 2-3 in [2, 4), 4 in [4, 8), 1000 in [512, 1024)."""
    h = length_histogram(np.array([0, 1, 2, 3, 4, 1000]), "input")
    assert h is not None
    assert h.x == (0.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0)
    assert h.y == (2.0, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    assert series_labels(h).name == "input length distribution"
    assert length_histogram(np.array([], dtype=np.int64), "output") is None
