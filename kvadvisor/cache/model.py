"""Results of the prefix-cache simulation: the exact miss-ratio curve and per-request hits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The capacities DESIGN.md's JSON contract reports, in tokens (None = unbounded).
STANDARD_CAPACITIES_TOKENS: tuple[int | None, ...] = (
    16_384,
    65_536,
    262_144,
    1_048_576,
    4_194_304,
    16_777_216,
    None,
)


def _ratio(num: float, den: float) -> float | None:
    return float(num) / float(den) if den > 0 else None


@dataclass(frozen=True, eq=False)
class MissRatioCurve:
    """Hit tokens and hit blocks as a step function of LRU capacity, over all and steady requests.

    The curve steps up at ``capacity_blocks`` (ascending): at any capacity C blocks, hits are
    the cumulative value at the last step ``<= C`` (zero below the first step). At unbounded
    capacity hits equal the last value. Totals are the denominators of the ratios.
    """

    block_tokens: int
    capacity_blocks: np.ndarray
    hit_tokens_all: np.ndarray
    hit_tokens_steady: np.ndarray
    hit_blocks_all: np.ndarray
    hit_blocks_steady: np.ndarray
    total_tokens_all: int
    total_tokens_steady: int
    total_blocks_all: int
    total_blocks_steady: int

    def _at(self, cumulative: np.ndarray, capacity_blocks: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(self.capacity_blocks, capacity_blocks, side="right")
        padded = np.concatenate(([0], cumulative)).astype(np.float64)
        return padded[idx]

    def capacity_blocks_for(self, capacity_tokens: float | None) -> float:
        """Whole blocks that fit in ``capacity_tokens`` (inf for unbounded)."""
        if capacity_tokens is None:
            return float("inf")
        return float(np.floor(capacity_tokens / self.block_tokens))

    def hit_tokens_at(self, capacity_tokens: np.ndarray | float | None) -> np.ndarray:
        """Hit tokens (row 0: all requests, row 1: steady) at capacities in tokens (None = inf)."""
        if capacity_tokens is None:
            cap = np.array([np.inf])
        else:
            cap = np.floor(
                np.atleast_1d(np.asarray(capacity_tokens, np.float64)) / self.block_tokens
            )
        return np.vstack(
            [self._at(self.hit_tokens_all, cap), self._at(self.hit_tokens_steady, cap)]
        )

    def token_hit_ratio_at(
        self, capacity_tokens: float | None
    ) -> tuple[float | None, float | None]:
        """Token hit ratio (all, steady) at one capacity in tokens (None = unbounded)."""
        hits = self.hit_tokens_at(capacity_tokens)
        return (
            _ratio(hits[0, 0], self.total_tokens_all),
            _ratio(hits[1, 0], self.total_tokens_steady),
        )

    def block_hit_ratio_at(
        self, capacity_tokens: float | None
    ) -> tuple[float | None, float | None]:
        """Block hit ratio (all, steady) at one capacity in tokens (None = unbounded)."""
        cap = np.asarray([self.capacity_blocks_for(capacity_tokens)])
        return (
            _ratio(self._at(self.hit_blocks_all, cap)[0], self.total_blocks_all),
            _ratio(self._at(self.hit_blocks_steady, cap)[0], self.total_blocks_steady),
        )

    def ratios_on_grid(self, capacity_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token hit ratios (all, steady) on a grid of capacities in tokens (vectorised)."""
        cap = np.floor(np.asarray(capacity_tokens, dtype=np.float64) / self.block_tokens)
        all_ = self._at(self.hit_tokens_all, cap) / max(self.total_tokens_all, 1)
        steady = self._at(self.hit_tokens_steady, cap) / max(self.total_tokens_steady, 1)
        return all_, steady


@dataclass(frozen=True)
class SamplingInfo:
    """How a sampled (SHARDS) curve was estimated and how far off it is likely to be."""

    rate: float
    sampled_accesses: int
    total_accesses: int
    salt: int
    error_estimate: float
    error_method: str


@dataclass(frozen=True, eq=False)
class PrefixCacheResult:
    """Outcome of replaying a trace through an LRU prefix cache at every capacity at once.

    ``hit_tokens`` are per request (trace row order) at unbounded capacity; ``leading_distance``
    holds, per block access (``access_offsets`` splits them by request), the running maximum of
    the LRU distances within the request, so block j of a request is a hit at C blocks exactly
    when its value is below C (COLD = never). Sampled results (``sampling`` set) are estimates of
    the curve only and carry no per-request hits (``hit_tokens`` and ``leading_distance`` None).
    ``id_bound`` bounds the dense block ids the exact pass indexed by, and ``block_ids`` holds
    them when the hashes had to be remapped (kept on request); ``id_bound`` without
    ``block_ids``: the hashes are the ids themselves. ``id_bound`` None: nothing is known (a
    sampled result, or remapped ids not kept). See ``prefix.pass_block_ids``.
    """

    block_tokens: int
    warmup_fraction: float
    warmup_requests: int
    input_tokens: np.ndarray
    curve: MissRatioCurve
    hit_tokens: np.ndarray | None
    access_offsets: np.ndarray | None
    leading_distance: np.ndarray | None
    sampling: SamplingInfo | None = None
    id_bound: int | None = None
    block_ids: np.ndarray | None = None

    @property
    def requests(self) -> int:
        """Number of requests replayed."""
        return int(self.input_tokens.shape[0])

    @property
    def exact(self) -> bool:
        """Whether the curve is exact (not sampled)."""
        return self.sampling is None

    @property
    def token_hit_ratio(self) -> tuple[float | None, float | None]:
        """Token hit ratio (all, steady) at unbounded capacity."""
        return self.curve.token_hit_ratio_at(None)

    def hit_blocks_at(self, capacity_tokens: float | None) -> np.ndarray:
        """Per-request leading hit blocks at an LRU capacity in tokens (None = unbounded)."""
        if self.leading_distance is None or self.access_offsets is None:
            raise ValueError("a sampled curve has no per-request hits; use the curve instead")
        from kvadvisor.cache import stackdist  # numba only when per-request hits are computed

        cap = self.curve.capacity_blocks_for(capacity_tokens)
        cap_i = np.int64(min(cap, float(np.iinfo(np.int64).max)))
        out = np.zeros(self.requests, np.int64)
        stackdist.leading_hits_at(self.access_offsets, self.leading_distance, cap_i, out)
        return out

    def hit_tokens_at(self, capacity_tokens: float | None) -> np.ndarray:
        """Per-request hit tokens (int64, trace row order) at an LRU capacity in tokens.

        ``min(hit blocks × block_tokens, input_tokens)``; None means unbounded.
        """
        if capacity_tokens is None and self.hit_tokens is not None:
            return self.hit_tokens
        blocks = self.hit_blocks_at(capacity_tokens)
        return np.minimum(blocks * self.block_tokens, self.input_tokens)
