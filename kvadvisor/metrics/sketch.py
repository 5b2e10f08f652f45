"""A fixed-size quantile sketch: log-spaced buckets with a stated relative error (DDSketch's).

The stage profile of a trace too large to hold per request summarises its per-request values
(latencies, GPU times, shares) with one of these: memory is a few thousand counters whatever
the number of values, and a quantile is within ``RELATIVE_ERROR`` of a value at that rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kvadvisor.metrics.stages import Distribution

# Each bucket [g^(k-1), g^k) is answered by its midpoint 2 g^k / (g + 1), within ALPHA of every
# value in it (Masson et al., "DDSketch", VLDB 2019). 0.5% keeps a quantile within the rounding
# the report prints for most figures, at 5,000 buckets (40 KB) for 1e-9 .. 1e12.
RELATIVE_ERROR = 0.005
_GAMMA = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)
_LOG_GAMMA = math.log(_GAMMA)
SMALLEST = 1e-9  # values at or below it (zero included) are counted as exactly 0
_LARGEST = 1e12
_K0 = math.ceil(math.log(SMALLEST) / _LOG_GAMMA)
_BUCKETS = math.ceil(math.log(_LARGEST) / _LOG_GAMMA) - _K0 + 2


@dataclass
class QuantileSketch:
    """Count, sum, max and log buckets of non-negative values, added batch by batch."""

    count: int = 0
    total: float = 0.0
    largest: float = 0.0
    smallest: float = np.inf
    zeros: int = 0
    buckets: np.ndarray = field(default_factory=lambda: np.zeros(_BUCKETS, np.int64))

    def add(self, values: np.ndarray) -> None:
        """Add finite values (NaN and inf are skipped, as Distribution.of skips them)."""
        v = np.asarray(values, dtype=np.float64)
        v = v[np.isfinite(v)]
        if v.size == 0:
            return
        self.count += int(v.size)
        self.total += float(v.sum())
        self.largest = max(self.largest, float(v.max()))
        self.smallest = min(self.smallest, float(v.min()))
        pos = v[v > SMALLEST]
        self.zeros += int(v.size - pos.size)
        k = np.ceil(np.log(np.minimum(pos, _LARGEST)) / _LOG_GAMMA).astype(np.int64) - _K0
        self.buckets += np.bincount(np.clip(k, 0, _BUCKETS - 1), minlength=_BUCKETS)

    def quantile(self, q: float) -> float:
        """The value at rank ``q (count - 1)`` (lower rank), within RELATIVE_ERROR of it.

        Kept within the exact smallest and largest values, so a constant is exact.
        """
        if self.count == 0:
            return 0.0
        rank = int(math.floor(q * (self.count - 1)))
        if rank < self.zeros:
            return max(0.0, min(self.smallest, SMALLEST))
        k = int(np.searchsorted(np.cumsum(self.buckets), rank - self.zeros + 1))
        value = 2.0 * _GAMMA ** (k + _K0) / (_GAMMA + 1.0)
        return min(max(value, self.smallest), self.largest)

    def distribution(self) -> Distribution:
        """As :meth:`Distribution.of` would give: mean and max exact, quantiles sketched."""
        if self.count == 0:
            return Distribution(0.0, 0.0, 0.0, 0.0, 0.0)
        return Distribution(
            self.total / self.count,
            self.quantile(0.50),
            self.quantile(0.90),
            self.quantile(0.99),
            self.largest,
        )
