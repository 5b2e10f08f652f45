"""Reuse times of prefix hits, and the retention (TTL) that keeps a given share of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvadvisor.cache.model import PrefixCacheResult
from kvadvisor.cache.prefix import (
    are_dense_ids,
    block_token_weights,
    dense_block_ids,
    require_hashes,
)
from kvadvisor.errors import ConfigError
from kvadvisor.trace.model import Trace

DEFAULT_TTL_SHARES = (0.5, 0.8, 0.9, 0.95, 0.99)
DEFAULT_QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class TtlRow:
    """The shortest retention keeping ``share`` of the unbounded cache's hit tokens.

    ``peak_blocks`` is the most blocks such a TTL cache ever holds (its capacity need), in
    tokens ``capacity_tokens``; ``lru_capacity_tokens`` is the LRU capacity that keeps the same
    hit tokens, for comparison.
    """

    share: float
    ttl_s: float
    peak_blocks: int
    capacity_tokens: int
    lru_capacity_tokens: int | None


@dataclass(frozen=True)
class ReuseTimes:
    """Token-weighted distribution of the time since a hit block was last used."""

    hit_tokens: int
    quantiles_s: tuple[tuple[float, float], ...]  # (quantile, seconds)
    histogram_edges_s: tuple[float, ...]
    histogram_tokens: tuple[int, ...]
    ttl: tuple[TtlRow, ...]


def _weighted_quantile(x: np.ndarray, cw: np.ndarray, q: float) -> float:
    """Smallest x whose cumulative weight ``cw`` reaches q of the total (x sorted ascending).

    ``cw`` is ``np.cumsum`` of the weights in x's order, computed once by the caller for all
    the quantiles it asks.
    """
    idx = int(np.searchsorted(cw, q * cw[-1], side="left"))
    return float(x[min(idx, x.shape[0] - 1)])


def reuse_times(
    trace: Trace,
    result: PrefixCacheResult,
    *,
    ttl_shares: Sequence[float] = DEFAULT_TTL_SHARES,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    bins: int = 24,
) -> ReuseTimes:
    """Reuse times of the hits at unbounded capacity and the TTL table.

    For every hit block: the seconds between the request's arrival and the arrival of the last
    request that used the block, weighted by the block's tokens. A cache that keeps each block T
    seconds after its last use keeps block j of a request exactly when every block up to j was
    last used at most T ago (the leading run), so the TTL for a share s is the token-weighted
    s-quantile of that running maximum, and its capacity need is the most blocks last used
    within T at any arrival.
    """
    from kvadvisor.cache import stackdist  # numba only when a curve is computed

    block_tokens = require_hashes(trace)
    if result.leading_distance is None or result.access_offsets is None:
        raise ConfigError("reuse times need the exact pass; the curve was sampled")
    offsets, values = trace.hash_arrays()
    if are_dense_ids(values):
        # Already small ids (Mooncake's): the kernels index with them as they are, no copy.
        ids, bound = values, (int(values.max()) + 1 if values.shape[0] else 0)
    else:
        ids, bound = dense_block_ids(values)
    arrival = np.ascontiguousarray(trace.column_np("arrival_s"), dtype=np.float64)
    # Per-access arrays are dropped as soon as the hits are taken from them: on 14M accesses
    # holding them all at once cost ~0.9 GiB, more than everything else analyze keeps.
    gap = np.empty(ids.shape[0], np.float64)
    lead = np.empty(ids.shape[0], np.float64)
    # Request indices fit int32: the exact pass already caps accesses (and so requests) below 2^31.
    last_req = np.full(max(bound, 1), -1, np.int32)
    stackdist.reuse_gaps(offsets, ids, result.leading_distance, arrival, last_req, gap, lead)
    hit = ~np.isnan(gap)
    g = gap[hit]
    del gap
    lg = lead[hit]
    del lead
    w = block_token_weights(offsets, result.input_tokens, block_tokens)[hit]
    del hit
    total = int(w.sum())
    if total == 0:
        return ReuseTimes(0, (), (), (), ())
    order = np.argsort(g, kind="stable")
    g_sorted, w_g = g[order], w[order]
    del g, order
    cw_g = np.cumsum(w_g)
    qs = tuple((float(q), _weighted_quantile(g_sorted, cw_g, q)) for q in quantiles)
    del cw_g
    top = max(float(g_sorted[-1]), 1.0)
    positive = g_sorted[g_sorted > 0]
    low = max(float(positive[0]) if positive.shape[0] else 1.0, 1e-3)
    del positive
    edges = np.concatenate(([0.0], np.geomspace(low, top * (1 + 1e-9), bins)))
    hist = np.histogram(g_sorted, bins=edges, weights=w_g)[0].astype(np.int64)
    del g_sorted, w_g
    order = np.argsort(lg, kind="stable")
    lg_sorted, cw_l = lg[order], np.cumsum(w[order])
    del lg, w, order
    count = np.zeros(result.requests, np.int64)
    rows = []
    for share in ttl_shares:
        if not 0.0 < share <= 1.0:
            raise ConfigError(f"TTL share {share} is outside (0, 1]")
        ttl = _weighted_quantile(lg_sorted, cw_l, share)
        last_req[:] = -1
        peak = int(stackdist.ttl_peak_blocks(offsets, ids, arrival, ttl, last_req, count))
        rows.append(
            TtlRow(
                share=float(share),
                ttl_s=ttl,
                peak_blocks=peak,
                capacity_tokens=peak * block_tokens,
                lru_capacity_tokens=_lru_capacity_for(result, share),
            )
        )
    return ReuseTimes(
        hit_tokens=total,
        quantiles_s=qs,
        histogram_edges_s=tuple(float(e) for e in edges),
        histogram_tokens=tuple(int(h) for h in hist),
        ttl=tuple(rows),
    )


def _lru_capacity_for(result: PrefixCacheResult, share: float) -> int | None:
    """Smallest LRU capacity (tokens) whose hit tokens reach ``share`` of the unbounded hits."""
    cum = result.curve.hit_tokens_all
    if cum.shape[0] == 0:
        return None
    idx = int(np.searchsorted(cum, share * cum[-1], side="left"))
    return int(result.curve.capacity_blocks[min(idx, cum.shape[0] - 1)]) * result.block_tokens
