"""Reuse times of prefix hits, and the retention (TTL) that keeps a given share of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvadvisor.cache.model import PrefixCacheResult
from kvadvisor.cache.prefix import pass_block_ids, read_only
from kvadvisor.errors import ConfigError
from kvadvisor.trace.arrays import BlockArrays

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


def weighted_quantiles(
    values: np.ndarray, weights: np.ndarray, shares: Sequence[float]
) -> list[float]:
    """For each share q, the smallest value v with (weight of values <= v) >= q × total weight.

    Exact, in linear time: a radix select over the float64 bit patterns, which sort as
    integers for non-negative values (every gap here is >= 0). Each level adds the weights
    into 65,536 buckets of the next 16 bits and keeps the bucket where the cumulative weight
    reaches the target, so four levels pin all 64 bits. Sorting 10M weighted gaps (argsort,
    then gathering the weights) cost about 0.2 s per distribution; this costs one pass per
    share plus one shared histogram. Ties and zero weights give the same answer as the
    sorted cumulative sum: the first position reaching the target holds the same value.
    """
    from kvadvisor.cache import reusekernels as rk

    keys = np.ascontiguousarray(values, dtype=np.float64).view(np.int64)
    weights = np.ascontiguousarray(weights)
    top = np.zeros(1 << rk.RADIX_BITS, np.int64)
    rk.radix_histogram(keys, weights, np.int64(rk.RADIX_SHIFTS[0]), top)
    top_cum = np.cumsum(top)
    total = int(top_cum[-1])
    buf_keys = np.empty(keys.shape[0], np.int64)
    buf_weights = np.empty(keys.shape[0], weights.dtype)
    out = []
    for share in shares:
        target = share * total
        sub_keys, sub_weights, hist, cum, before = keys, weights, top, top_cum, 0
        for level, shift in enumerate(rk.RADIX_SHIFTS):
            if level:
                hist = np.zeros(1 << rk.RADIX_BITS, np.int64)
                rk.radix_histogram(sub_keys, sub_weights, np.int64(shift), hist)
                cum = before + np.cumsum(hist)
            bucket = min(int(np.searchsorted(cum, target, side="left")), hist.shape[0] - 1)
            before = int(cum[bucket] - hist[bucket])
            # In place after the first level: the write index never passes the read index.
            n = rk.radix_gather(
                sub_keys, sub_weights, np.int64(shift), np.int64(bucket), buf_keys, buf_weights
            )
            sub_keys, sub_weights = buf_keys[:n], buf_weights[:n]
        out.append(float(sub_keys[:1].view(np.float64)[0]))
    return out


def gap_histogram(gap: np.ndarray, tokens: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens by reuse gap: ``bins`` log-spaced bins from the shortest positive gap, and [0, it).

    Returns (edges in seconds, token counts per bin).
    """
    from kvadvisor.cache import reusekernels as rk  # numba only when a curve is computed

    top = max(float(gap.max()), 1.0)
    positive_min = float(np.min(gap, initial=np.inf, where=gap > 0))
    low = max(positive_min if np.isfinite(positive_min) else 1.0, 1e-3)
    edges = np.concatenate(([0.0], np.geomspace(low, top * (1 + 1e-9), bins)))
    hist = np.zeros(edges.shape[0] - 1, np.int64)
    rk.weighted_histogram(gap, tokens, edges, hist)
    return edges, hist


def reuse_times(
    blocks: BlockArrays,
    arrival_s: np.ndarray,
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
    within T at any arrival. ``blocks`` are the hashes ``result`` replayed, ``arrival_s`` the
    requests' arrival times.
    """
    from kvadvisor.cache import reusekernels as rk  # numba only when a curve is computed

    block_tokens = blocks.block_tokens
    if result.leading_distance is None or result.access_offsets is None:
        raise ConfigError("reuse times need the exact pass; the curve was sampled")
    for share in ttl_shares:
        if not 0.0 < share <= 1.0:
            raise ConfigError(f"TTL share {share} is outside (0, 1]")
    offsets, values = blocks.offsets, blocks.values
    # Mooncake's small ids index the kernels as they are (no copy); other hashes take the ids
    # the exact pass kept.
    ids, bound = pass_block_ids(result, values)
    arrival = np.ascontiguousarray(arrival_s, dtype=np.float64)
    # Only the hits are kept, packed (20 bytes each): holding a gap and a running maximum for
    # every access, then masking, cost ~0.9 GiB and a second copy on 14M accesses.
    hits = int(np.count_nonzero(result.leading_distance != rk.COLD))
    gap = np.empty(hits, np.float64)
    lead = np.empty(hits, np.float64)
    tokens = np.empty(hits, np.int32)
    # Request indices fit int32: the exact pass already caps accesses (and so requests) below 2^31.
    last_req = np.full(max(bound, 1), -1, np.int32)
    k = rk.reuse_hits(
        offsets,
        read_only(ids),
        result.leading_distance,
        read_only(arrival),
        read_only(np.ascontiguousarray(result.input_tokens, dtype=np.int64)),
        np.int64(block_tokens),
        last_req,
        gap,
        lead,
        tokens,
    )
    gap, lead, tokens = gap[:k], lead[:k], tokens[:k]
    total = int(tokens.sum(dtype=np.int64))
    if total == 0:
        return ReuseTimes(0, (), (), (), ())
    qs = tuple(
        zip((float(q) for q in quantiles), weighted_quantiles(gap, tokens, quantiles), strict=True)
    )
    edges, hist = gap_histogram(gap, tokens, bins)
    del gap
    ttls = np.array(weighted_quantiles(lead, tokens, ttl_shares), np.float64)
    del lead, tokens
    peaks = np.zeros(ttls.shape[0], np.int64)
    rk.ttl_peaks(
        offsets,
        read_only(ids),
        read_only(arrival),
        ttls,
        last_req,
        np.zeros(result.requests, np.int64),
        peaks,
    )
    rows = tuple(
        TtlRow(
            share=float(share),
            ttl_s=float(ttl),
            peak_blocks=int(peak),
            capacity_tokens=int(peak) * block_tokens,
            lru_capacity_tokens=lru_capacity_for(result, share),
        )
        for share, ttl, peak in zip(ttl_shares, ttls, peaks, strict=True)
    )
    return ReuseTimes(
        hit_tokens=total,
        quantiles_s=qs,
        histogram_edges_s=tuple(float(e) for e in edges),
        histogram_tokens=tuple(int(h) for h in hist),
        ttl=rows,
    )


def lru_capacity_for(result: PrefixCacheResult, share: float) -> int | None:
    """Smallest LRU capacity (tokens) whose hit tokens reach ``share`` of the unbounded hits."""
    cum = result.curve.hit_tokens_all
    if cum.shape[0] == 0:
        return None
    idx = int(np.searchsorted(cum, share * cum[-1], side="left"))
    return int(result.curve.capacity_blocks[min(idx, cum.shape[0] - 1)]) * result.block_tokens
