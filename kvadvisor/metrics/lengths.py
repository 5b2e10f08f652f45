"""Token-length percentiles (p50/p90/p99 beside the mean), exact in memory and when streamed.

Prompt and output lengths are heavy-tailed: on the Mooncake conversation trace the mean prompt
is 12,035 tokens and the median 6,909, so a mean alone misleads. Lengths are integers, so their
distribution is held as (value, count) pairs; a streamed trace merges the pairs batch by batch
and the percentiles come out exactly as from the whole column.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Percentiles every length summary carries.
LENGTH_QUANTILES = (0.5, 0.9, 0.99)
# Below this largest value, counts are a dense bincount (8 bytes per possible length);
# above it, the distinct values are sorted (np.unique).
DENSE_MAX_TOKENS = 1 << 22


@dataclass(frozen=True)
class LengthStats:
    """Mean, median, p90, p99 and max of a token-length column (tokens; None when empty).

    Percentiles interpolate linearly between order statistics: with the n values sorted as
    x[0..n-1], the q-quantile is x[i] + f × (x[i+1] − x[i]) where i + f = q × (n − 1) (numpy's
    default "linear" method, Hyndman & Fan type 7).
    """

    count: int
    mean_tokens: float | None
    p50_tokens: float | None
    p90_tokens: float | None
    p99_tokens: float | None
    max_tokens: int | None


def _counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values (sorted, int64) and how many times each occurs."""
    v = np.asarray(values, dtype=np.int64)
    if v.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo, hi = int(v.min()), int(v.max())
    if lo >= 0 and hi < DENSE_MAX_TOKENS:
        dense = np.bincount(v)
        seen = np.flatnonzero(dense)
        return seen.astype(np.int64), dense[seen].astype(np.int64)
    uniq, counts = np.unique(v, return_counts=True)
    return uniq.astype(np.int64), counts.astype(np.int64)


class LengthCounts:
    """A token-length distribution as (value, count) pairs, built from one or many batches."""

    def __init__(self) -> None:
        self.values = np.zeros(0, np.int64)
        self.counts = np.zeros(0, np.int64)

    def add(self, values: np.ndarray) -> LengthCounts:
        """Merge one batch of lengths in; returns self."""
        v, c = _counts(values)
        if v.size == 0:
            return self
        if self.values.size == 0:
            self.values, self.counts = v, c
            return self
        merged, where = np.unique(np.concatenate([self.values, v]), return_inverse=True)
        counts = np.zeros(merged.size, np.int64)
        np.add.at(counts, where, np.concatenate([self.counts, c]))
        self.values, self.counts = merged, counts
        return self

    def merge(self, other: LengthCounts) -> LengthCounts:
        """Merge another distribution in (a batch counted elsewhere); returns self."""
        if other.values.size == 0:
            return self
        if self.values.size == 0:
            self.values, self.counts = other.values.copy(), other.counts.copy()
            return self
        merged, where = np.unique(np.concatenate([self.values, other.values]), return_inverse=True)
        counts = np.zeros(merged.size, np.int64)
        np.add.at(counts, where, np.concatenate([self.counts, other.counts]))
        self.values, self.counts = merged, counts
        return self

    def quantile(self, q: float) -> float:
        """The linearly interpolated q-quantile (type 7) of the lengths added so far."""
        n = int(self.counts.sum())
        if n == 0:
            raise ValueError("no lengths added")
        h = q * (n - 1)
        below = int(np.floor(h))
        frac = h - below
        # ends[k] = number of values <= values[k]; order statistic i sits at the first k with
        # ends[k] > i.
        ends = np.cumsum(self.counts)
        lo = float(self.values[int(np.searchsorted(ends, below, side="right"))])
        if frac == 0.0:
            return lo
        hi = float(self.values[int(np.searchsorted(ends, below + 1, side="right"))])
        return lo + frac * (hi - lo)

    def stats(self) -> LengthStats:
        """The summary: count, mean, p50, p90, p99, max (all None but count when empty)."""
        n = int(self.counts.sum())
        if n == 0:
            return LengthStats(0, None, None, None, None, None)
        total = int(np.dot(self.values, self.counts))
        p50, p90, p99 = (self.quantile(q) for q in LENGTH_QUANTILES)
        return LengthStats(n, total / n, p50, p90, p99, int(self.values[-1]))


def length_stats(values: np.ndarray) -> LengthStats:
    """Mean, p50, p90, p99 and max of one length column (see :class:`LengthStats`)."""
    return LengthCounts().add(values).stats()
