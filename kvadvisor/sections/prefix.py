"""The report's prefix_cache section, built from the cache engine's results (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from kvadvisor.cache import STANDARD_CAPACITIES_TOKENS, PrefixCacheResult, curve_grid
from kvadvisor.cache.measure import EXTRAS_MAX_ACCESSES, BlockSizeRatio, PrefixMeasurements
from kvadvisor.cache.reuse import ReuseTimes
from kvadvisor.cache.routing import RoutingComparison
from kvadvisor.cache.sampledextras import SampledExtras
from kvadvisor.cache.sharing import PrefixSharing, ReuseSplit, SharedPrefix
from kvadvisor.cache.tiers import CacheTierSpec, split_tiers
from kvadvisor.results.report import (
    BlockSizePoint,
    CacheReuse,
    CacheRouting,
    CacheSampling,
    CacheSharing,
    CacheTier,
    CacheTiers,
    ConversationReuse,
    ExtraSampling,
    HitRatio,
    MrcPoint,
    PrefixCache,
    ReuseQuantile,
    RoutingPointSummary,
    RoutingPolicySummary,
    SharedPrefixSummary,
    TtlPoint,
)
from kvadvisor.results.series import Series, SeriesKey, SeriesKind
from kvadvisor.units.format import count, number, percent
from kvadvisor.vocab import CacheStatus

UNKNOWN_NOTE = (
    "prefix reuse unknown: the trace has no block hashes, so no hit ratio can be measured"
)


def _f(x: float | None) -> float | None:
    return None if x is None else float(x)


def unknown_prefix_cache(warmup_fraction: float) -> PrefixCache:
    """The section for a trace without hashes: every ratio null, and a note saying so."""
    return PrefixCache(
        warmup_fraction=warmup_fraction,
        hit_ratio=HitRatio(None, None),
        mrc=tuple(MrcPoint(c, None, None) for c in STANDARD_CAPACITIES_TOKENS),
        status=CacheStatus.UNKNOWN,
        note=UNKNOWN_NOTE,
    )


def _mrc(result: PrefixCacheResult, kv_bytes_per_token: int | None) -> tuple[MrcPoint, ...]:
    points = []
    for cap in STANDARD_CAPACITIES_TOKENS:
        all_, steady = result.curve.token_hit_ratio_at(cap)
        cap_bytes = None if cap is None or kv_bytes_per_token is None else cap * kv_bytes_per_token
        points.append(MrcPoint(cap, _f(all_), _f(steady), cap_bytes))
    return tuple(points)


def _curve_series(result: PrefixCacheResult) -> tuple[Series, ...]:
    grid = curve_grid(result.curve)
    all_, steady = result.curve.ratios_on_grid(grid)
    x = tuple(float(g) for g in grid)
    return tuple(
        Series(
            x_unit="tokens",
            y_unit="ratio",
            x=x,
            y=tuple(float(v) for v in ys),
            kind=SeriesKind.STEP,
            key=key,
        )
        for key, ys in ((SeriesKey.HIT_RATIO_ALL, all_), (SeriesKey.HIT_RATIO_STEADY, steady))
    )


def _tiers(
    result: PrefixCacheResult, tiers: Sequence[CacheTierSpec], kv_bytes_per_token: int | None
) -> CacheTiers:
    b = split_tiers(result, tiers)
    return CacheTiers(
        levels=tuple(
            # The report's tier is the engine's TierShare (field for field) plus its bytes.
            CacheTier(
                **asdict(t),
                hit_bytes_all=(
                    None if kv_bytes_per_token is None else t.hit_tokens_all * kv_bytes_per_token
                ),
            )
            for t in b.tiers
        ),
        miss_tokens_all=b.miss_tokens_all,
        miss_share_all=b.miss_share_all,
        miss_share_steady=b.miss_share_steady,
    )


def _routing(cmp: RoutingComparison) -> CacheRouting:
    return CacheRouting(
        instances=cmp.instances,
        seed=cmp.seed,
        policies=tuple(
            RoutingPolicySummary(
                policy=o.policy.value,
                points=tuple(
                    RoutingPointSummary(
                        p.capacity_tokens_per_instance, _f(p.hit_ratio_all), _f(p.hit_ratio_steady)
                    )
                    for p in o.points
                ),
                unavailable=o.unavailable,
            )
            for o in cmp.outcomes
        ),
    )


def _reuse(rt: ReuseTimes) -> CacheReuse:
    hist = None
    if rt.histogram_tokens:
        hist = Series(
            x_unit="s",
            y_unit="tokens",
            x=rt.histogram_edges_s[1:],
            y=tuple(float(v) for v in rt.histogram_tokens),
            kind=SeriesKind.BAR,
            key=SeriesKey.REUSE_TIMES,
        )
    return CacheReuse(
        hit_tokens=rt.hit_tokens,
        quantiles=tuple(ReuseQuantile(q, s) for q, s in rt.quantiles_s),
        histogram=hist,
        ttl=tuple(
            TtlPoint(r.share, r.ttl_s, r.capacity_tokens, r.lru_capacity_tokens) for r in rt.ttl
        ),
    )


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _sharing_section(sharing: PrefixSharing, input_total: int, arrival: np.ndarray) -> CacheSharing:
    def row(p: SharedPrefix) -> SharedPrefixSummary:
        return SharedPrefixSummary(
            prefix_tokens=p.prefix_tokens,
            blocks=p.blocks,
            requests=p.requests,
            reusable_tokens=p.reusable_tokens,
            reusable_share=p.reusable_tokens / input_total if input_total else 0.0,
            first_arrival_s=float(arrival[p.first_request]),
        )

    return CacheSharing(
        groups=sharing.groups,
        requests_sharing=sharing.requests_sharing,
        top_by_count=tuple(row(p) for p in sharing.top_by_count),
        top_by_volume=tuple(row(p) for p in sharing.top_by_volume),
    )


def _conversation_section(split: ReuseSplit) -> ConversationReuse:
    return ConversationReuse(
        basis=split.basis,
        conversations=split.conversations,
        within_share_all=_share(split.within_tokens_all, split.input_tokens_all),
        across_share_all=_share(split.across_tokens_all, split.input_tokens_all),
        within_share_steady=_share(split.within_tokens_steady, split.input_tokens_steady),
        across_share_steady=_share(split.across_tokens_steady, split.input_tokens_steady),
        within_tokens_all=split.within_tokens_all,
        across_tokens_all=split.across_tokens_all,
    )


def result_section(
    result: PrefixCacheResult,
    *,
    warmup_fraction: float,
    tiers: Sequence[CacheTierSpec] = (),
    kv_bytes_per_token: int | None = None,
    note: str | None = None,
) -> PrefixCache:
    """The section's parts that one simulation result gives on its own (in memory or streamed).

    Routing, reuse times and block sizes need the trace itself; callers add them.
    """
    all_, steady = result.token_hit_ratio
    blk_all, blk_steady = result.curve.block_hit_ratio_at(None)
    sampling = None
    if result.sampling is not None:
        err = result.sampling.error_estimate
        sampling = CacheSampling(
            rate=result.sampling.rate,
            sampled_accesses=result.sampling.sampled_accesses,
            total_accesses=result.sampling.total_accesses,
            error_estimate=float(err) if np.isfinite(err) else None,
            error_method=result.sampling.error_method,
        )
    return PrefixCache(
        warmup_fraction=warmup_fraction,
        hit_ratio=HitRatio(_f(all_), _f(steady)),
        mrc=_mrc(result, kv_bytes_per_token),
        status=CacheStatus.EXACT if result.exact else CacheStatus.SAMPLED,
        note=note,
        block_tokens=result.block_tokens,
        block_hit_ratio=HitRatio(_f(blk_all), _f(blk_steady)),
        sampling=sampling,
        curve=_curve_series(result),
        tiers=_tiers(result, tiers, kv_bytes_per_token) if tiers else None,
    )


def prefix_cache_section(
    measured: PrefixMeasurements | None,
    *,
    warmup_fraction: float = 0.5,
    tiers: Sequence[CacheTierSpec] = (),
    kv_bytes_per_token: int | None = None,
) -> PrefixCache:
    """The report's prefix-cache section from the trace's measurements.

    ``measured`` is :func:`kvadvisor.cache.measure.measure_prefix_cache`'s result with the same
    warm-up; None when the trace has no block hashes, and the section then says "prefix reuse
    unknown" with every ratio null. Routing, reuse times and the block-size comparison need
    the exact pass; a sampled curve omits them.
    """
    if measured is None:
        return unknown_prefix_cache(warmup_fraction)
    result = measured.result
    note = None
    if not result.exact:
        note = "curve estimated by spatial hash sampling (SHARDS); see sampling"
    estimated = measured.estimated
    if estimated is not None:
        why = "" if not result.exact else f"more than {count(EXTRAS_MAX_ACCESSES)} block accesses: "
        note = f"{note}; {why}" if note else why
        note = f"{note}{estimated_note(estimated)}"
    elif result.exact and not measured.extras:
        note = (
            f"routing, reuse times, block sizes and shared prefixes skipped: more than "
            f"{EXTRAS_MAX_ACCESSES} block accesses"
        )
    why = measured.tree_problem
    if why is not None:
        note = why if note is None else f"{note}; {why}"
    return replace(
        result_section(
            result,
            warmup_fraction=warmup_fraction,
            tiers=tiers,
            kv_bytes_per_token=kv_bytes_per_token,
            note=note,
        ),
        **(extras_fields(measured) if estimated is None else estimated_fields(estimated)),
    )


def extras_fields(measured: PrefixMeasurements) -> dict[str, Any]:
    """The section's fields the extras fill (routing, reuse, block sizes, sharing), measured."""
    arrays = measured.arrays
    return dict(
        routing=None if measured.routing is None else _routing(measured.routing),
        reuse=None if measured.reuse is None else _reuse(measured.reuse),
        block_sizes=block_size_points(measured.block_sizes),
        sharing=(
            None
            if measured.sharing is None
            else _sharing_section(
                measured.sharing, int(arrays.input_tokens.sum()), arrays.arrival_s
            )
        ),
        conversations=(
            None
            if measured.conversations is None
            else _conversation_section(measured.conversations)
        ),
    )


def estimated_fields(est: SampledExtras) -> dict[str, Any]:
    """The section's fields from extras estimated on a hash sample, with their errors."""
    return dict(
        routing=None if est.routing is None else _routing(est.routing),
        reuse=None if est.reuse is None else _reuse(est.reuse),
        block_sizes=block_size_points(est.block_sizes),
        extras_sampling=tuple(
            ExtraSampling(
                e.extra, e.rate, e.sampled_accesses, e.total_accesses, e.error, e.unit, e.method
            )
            for e in est.errors
        ),
    )


def estimated_note(est: SampledExtras) -> str:
    """What was estimated, at which rate and with which standard errors, and what was not."""
    errors = "; ".join(
        f"{e.extra} ±{_error_text(e.error, e.unit)}" for e in est.errors if e.error is not None
    )
    rate = est.errors[0].rate if est.errors else 0.0
    return (
        f"routing, reuse times and block sizes estimated on a spatial hash sample at rate "
        f"{number(rate)} (standard errors: {errors or 'not estimable'}); shared prefixes and the "
        "conversation split left out: they need every block of each request's prefix (the "
        "tree's nodes), which a sample of blocks does not keep"
    )


def _error_text(error: float, unit: str) -> str:
    return f"{percent(error)} of the TTL" if unit == "relative" else number(error)


def block_size_points(points: Sequence[BlockSizeRatio]) -> tuple[BlockSizePoint, ...]:
    """The block-size comparison as the report's points."""
    return tuple(
        BlockSizePoint(
            b.chunk_tokens, b.save_unfull_chunk, _f(b.hit_ratio_all), _f(b.hit_ratio_steady)
        )
        for b in points
    )
