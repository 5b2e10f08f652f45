"""The I/O demand charts show what the numbers beside them say: the p99 and the peak."""

from __future__ import annotations

import numpy as np
import pytest
from advice_traces import slo_for
from analysis_cache import analysed

from kvadvisor.pipeline.options import AnalyzeOptions
from kvadvisor.report.chartspecs import bandwidth_spec
from kvadvisor.results.series import SeriesKey
from kvadvisor.sections.profile import MAX_SERIES_POINTS, _downsample
from kvadvisor.trace import read_trace
from kvadvisor.units import BYTES_PER_GB


def test_downsample_keeps_each_points_highest_window() -> None:
    """2,500 one-second windows merge three to a point: mean and max of each three, by hand."""
    assert MAX_SERIES_POINTS == 1000
    x = np.arange(2500, dtype=float)
    y = np.zeros(2500)
    y[4] = 9.0  # in the second point (windows 3, 4, 5)
    y[2499] = 6.0  # alone in the last point
    xs, mean, peak = _downsample(x, y, "mean")
    assert len(xs) == 834 and xs[:2] == (0.0, 3.0)
    assert mean[:2] == (0.0, 3.0) and peak[:2] == (0.0, 9.0)
    assert (mean[-1], peak[-1]) == (6.0, 6.0)
    # Merged by max already, or nothing merged: no separate envelope.
    assert _downsample(x, y, "max")[2] == ()
    assert _downsample(x[:10], y[:10], "mean") == (tuple(x[:10]), tuple(y[:10]), ())


@pytest.fixture(scope="module")
def mooncake_io(mooncake_path, tmp_path_factory):
    """The Mooncake report's I/O section (3,537 one-second windows, merged four to a point).

    The I/O section is the profile's, written before the advice and its replay, which read it
    and never write it. The options and clock strings are the round trips' for this trace
    (tests/test_advice_roundtrip.py, tests/test_emit_roundtrip.py): one analysis for the three
    files, which tests/conftest.py sends to one xdist worker.
    """
    options = AnalyzeOptions(slo=slo_for(mooncake_path))
    clock = {"version": "test", "generated_at": "2026-01-01T00:00:00"}
    trace = read_trace(mooncake_path)
    report = analysed(tmp_path_factory, mooncake_path, trace, options, **clock)
    return report.io


@pytest.mark.parametrize("side", ["write", "read"])
def test_plotted_series_reaches_the_reported_p99_and_peak(mooncake_io, side) -> None:
    """The chart's highest plotted value is the reported peak, and points reach the p99.

    The mean over each merged point alone stays far below both (the defect this replaces:
    a 4 s mean topping out near 22 GB/s under a 45.5 GB/s p99 line).
    """
    io = mooncake_io
    rate = getattr(io, side)
    key = SeriesKey.WRITE_DEMAND if side == "write" else SeriesKey.READ_DEMAND
    series = next(s for s in io.series if s.key is key)
    assert len(series.x) <= MAX_SERIES_POINTS < 3537
    spec = bandwidth_spec(series, rate, f"t-{side}", io.window_s)
    plotted = [v * BYTES_PER_GB for line in spec.lines for v in line.y]
    assert max(plotted) == pytest.approx(rate.peak_bytes_per_s, rel=1e-12)
    envelope = spec.lines[0]
    assert envelope.kind == "area"
    above = sum(v * BYTES_PER_GB >= rate.p99_bytes_per_s for v in envelope.y)
    # 1% of 3,537 windows lie at or above the p99: at least 35 windows, spread over points.
    assert above >= 10
    mean_line = spec.lines[1]
    assert max(mean_line.y) * BYTES_PER_GB < rate.p99_bytes_per_s
    # Marks state the same figures the envelope reaches.
    assert [m.label.split()[0] for m in spec.marks] == ["mean", "p99", "peak"]
