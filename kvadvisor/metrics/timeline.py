"""Quantities over time from per-request intervals (in-flight counts, summed sizes), in O(N).

Everything here is built on the *open time* of a set of weighted intervals ``[s_i, e_i)``:
``F(T) = sum_i w_i * |[s_i, e_i) ∩ [0, T)| = R_s(T) - R_e(T)`` with the ramp sums
``R_x(T) = sum_{x_i < T} w_i (T - x_i)``. ``F`` is exact at the edges of a uniform time grid
(two bincounts and a cumulative sum, no sorting); between edges it is interpolated linearly,
which is exact when no interval starts or ends inside the cell. The time-average of the
weighted in-flight sum over any ``[a, b]`` is ``(F(b) - F(a)) / (b - a)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kvadvisor.errors import ConfigError
from kvadvisor.units import Unit, format_value

DEFAULT_CELLS = 1 << 20
# Longest per-window series: 80 MB per float64 array; a week at 0.1 s, two months at 1 s.
MAX_WINDOWS = 10_000_000


@dataclass(frozen=True)
class TimeGrid:
    """A uniform grid of ``cells`` cells of ``width_s`` seconds starting at 0."""

    width_s: float
    cells: int
    edges: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Build the edge times once: every ramp uses them."""
        edges = np.arange(self.cells + 1, dtype=np.float64) * self.width_s
        object.__setattr__(self, "edges", edges)

    @classmethod
    def covering(
        cls, span_s: float, cells: int = DEFAULT_CELLS, min_width_s: float = 1e-6
    ) -> TimeGrid:
        """A grid over ``[0, span_s]`` (the last instant included), cells no finer than needed."""
        span = max(float(span_s), min_width_s)
        width = max(span / cells, min_width_s)
        return cls(width, int(np.floor(span / width)) + 1)

    @property
    def span_s(self) -> float:
        """Time the grid covers, s."""
        return self.cells * self.width_s

    def ramps(self, x: np.ndarray, weights: list[np.ndarray | None]) -> list[np.ndarray]:
        """``R(T_k) = sum_{x_i < T_k} w_i (T_k - x_i)`` at every edge, for each weight array.

        Exact (an edge equal to x_i adds T - x = 0 either way); one binning shared by all.
        """
        x = np.asarray(x, dtype=np.float64)
        # First edge at or after x (edges past the grid are dropped: they add to no edge).
        k = np.clip(np.ceil(x / self.width_s).astype(np.int64), 0, self.cells + 1)
        out = []
        for w in weights:
            cnt = np.bincount(k, weights=w, minlength=self.cells + 2)[: self.cells + 1]
            wx = x if w is None else w * x
            tot = np.bincount(k, weights=wx, minlength=self.cells + 2)[: self.cells + 1]
            out.append(np.cumsum(cnt) * self.edges - np.cumsum(tot))
        return out

    def ramp(self, x: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
        """One ramp sum (see ``ramps``)."""
        return self.ramps(x, [w])[0]

    def open_time(
        self,
        starts: np.ndarray,
        ends: np.ndarray,
        w: np.ndarray | None = None,
    ) -> np.ndarray:
        """``F`` at every edge for intervals ``[starts, ends)`` weighted by ``w``."""
        return self.ramp(starts, w) - self.ramp(ends, w)

    def locate(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cell index and fraction within the cell of each time (for repeated interpolation)."""
        pos = np.clip(np.asarray(t, dtype=np.float64) / self.width_s, 0.0, float(self.cells))
        k = np.minimum(pos.astype(np.int64), self.cells - 1)
        return k, pos - k

    def at(self, f_edges: np.ndarray, t: np.ndarray | tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Linear interpolation of an edge function at times ``t`` (or at ``locate(t)``)."""
        k, frac = t if isinstance(t, tuple) else self.locate(t)
        lo = f_edges[k]
        return lo + (f_edges[k + 1] - lo) * frac

    def mean(
        self,
        f_edges: np.ndarray,
        a: np.ndarray | tuple[np.ndarray, np.ndarray],
        b: np.ndarray | tuple[np.ndarray, np.ndarray],
        duration: np.ndarray,
    ) -> np.ndarray:
        """Time-average over each ``[a, b]`` of length ``duration``; 0 where it is empty."""
        safe = np.where(duration > 0, duration, np.inf)
        return (self.at(f_edges, b) - self.at(f_edges, a)) / safe

    def cell_means(self, f_edges: np.ndarray) -> np.ndarray:
        """Average of the underlying quantity over each cell."""
        return np.diff(f_edges) / self.width_s

    def integrate_cells(self, values: np.ndarray) -> np.ndarray:
        """The edge function (running integral) of a per-cell constant quantity."""
        out = np.zeros(self.cells + 1)
        np.cumsum(values * self.width_s, out=out[1:])
        return out

    def window_peaks(self, cell_values: np.ndarray, window_s: float, windows: int) -> np.ndarray:
        """Largest per-cell value within each window ``[k w, (k+1) w)``."""
        idx = np.minimum(
            (np.arange(self.cells) * self.width_s // window_s).astype(np.int64), windows - 1
        )
        out = np.zeros(windows)
        firsts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
        out[idx[firsts]] = np.maximum.reduceat(cell_values, firsts)
        return out


def inflight_window_means(
    starts: np.ndarray, ends: np.ndarray, window_s: float, count: int
) -> np.ndarray:
    """Mean number of intervals ``[start, end)`` open in each window ``[k w, (k+1) w)``."""
    grid = TimeGrid(window_s, count)
    return grid.cell_means(grid.open_time(starts, ends))


def window_count(
    span_s: float,
    window_s: float,
    cover: str = "the series cover (first arrival to last request end)",
) -> int:
    """Windows of ``window_s`` needed to cover ``[0, span_s]`` (at least one).

    At most MAX_WINDOWS: every per-window series is an array of this length, so a span the
    window divides into more is a ConfigError saying which window would do, before anything
    is allocated. ``cover`` says what the span is, for that message.
    """
    count = np.floor(span_s / window_s) + 1 if window_s > 0 else np.inf
    if not count <= MAX_WINDOWS:
        if not math.isfinite(span_s):
            raise ConfigError(
                f"the time {cover} is too long to hold in a time series (it overflows); "
                "check the arrival times' unit and the traffic scale"
            )
        shortest = span_s / (MAX_WINDOWS - 1)
        step = 10.0 ** (math.floor(math.log10(shortest)) - 1)  # two significant digits, up
        least = f"{math.ceil(shortest / step) * step:.3g}"  # exact: typed back as --window
        raise ConfigError(
            f"--window: windows of {format_value(window_s, Unit.SECONDS)} over the "
            f"{format_value(span_s, Unit.SECONDS)} {cover} make "
            f"{format_value(count, Unit.COUNT)} windows, more than the "
            f"{format_value(MAX_WINDOWS, Unit.COUNT)} a time series may hold; give --window "
            f"{least} or more"
        )
    return max(int(count), 1)
