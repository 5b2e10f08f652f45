"""The report's prefix_cache section, built from the cache engine's results (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace

import numpy as np
import pyarrow.compute as pc

from kvadvisor.cache import STANDARD_CAPACITIES_TOKENS, PrefixCacheResult, curve_grid
from kvadvisor.cache import simulate_prefix_cache as _simulate
from kvadvisor.cache.coarsen import coarsen_trace
from kvadvisor.cache.prefix import pass_block_ids
from kvadvisor.cache.reuse import reuse_times
from kvadvisor.cache.routing import compare_routing
from kvadvisor.cache.sharing import (
    PrefixSharing,
    PrefixTree,
    ReuseSplit,
    SharedPrefix,
    reuse_split,
    shared_prefixes,
)
from kvadvisor.cache.tiers import TierSpec, split_tiers
from kvadvisor.results.report import (
    BlockSizePoint,
    CacheReuse,
    CacheRouting,
    CacheSampling,
    CacheSharing,
    CacheTier,
    CacheTiers,
    ConversationReuse,
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
from kvadvisor.results.vocab import CacheStatus
from kvadvisor.trace.model import Trace

UNKNOWN_NOTE = (
    "prefix reuse unknown: the trace has no block hashes, so no hit ratio can be measured"
)
# Engine chunk sizes compared when the trace's blocks are fine enough (LMCache's default is
# 256, vLLM/SGLang pages 16-64, Mooncake 512; research/field.md).
COMPARED_CHUNK_TOKENS = (64, 256, 512)
# Routing, reuse times and block sizes replay the trace again (routing once per instance) and
# reuse times hold about 60 bytes per block access; above this many accesses they are skipped.
EXTRAS_MAX_ACCESSES = 20_000_000


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
            name=f"token hit ratio ({label})",
            x_label="LRU cache capacity",
            x_unit="tokens",
            y_label="token hit ratio",
            y_unit="ratio",
            x=x,
            y=tuple(float(v) for v in ys),
            kind=SeriesKind.STEP,
            key=key,
        )
        for key, label, ys in (
            (SeriesKey.HIT_RATIO_ALL, "all requests", all_),
            (SeriesKey.HIT_RATIO_STEADY, "steady state", steady),
        )
    )


def _tiers(
    result: PrefixCacheResult, tiers: Sequence[TierSpec], kv_bytes_per_token: int | None
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


def _routing(
    trace: Trace,
    instances: int,
    warmup_fraction: float,
    seed: int,
    pooled: PrefixCacheResult | None = None,
) -> CacheRouting:
    cmp = compare_routing(
        trace,
        instances=instances,
        capacities_tokens=STANDARD_CAPACITIES_TOKENS,
        warmup_fraction=warmup_fraction,
        seed=seed,
        pooled=pooled,
    )
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


def _reuse(trace: Trace, result: PrefixCacheResult) -> CacheReuse:
    rt = reuse_times(trace, result)
    hist = None
    if rt.histogram_tokens:
        hist = Series(
            name="time since a hit block was last used",
            x_label="reuse time (bin upper edge)",
            x_unit="s",
            y_label="hit tokens",
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


def session_codes(trace: Trace) -> np.ndarray | None:
    """One integer per request naming its session (-1: none), or None without sessions."""
    if not trace.has("session_id"):
        return None
    encoded = pc.dictionary_encode(trace.table["session_id"]).combine_chunks()
    return pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def _sharing(
    trace: Trace, result: PrefixCacheResult
) -> tuple[CacheSharing | None, ConversationReuse | None, str | None]:
    """Shared prefixes and the conversation split, or why they cannot be told."""
    offsets, values = trace.hash_arrays()
    ids, _ = pass_block_ids(result, values)
    tree = PrefixTree(offsets, ids)
    if tree.problem is not None:
        return None, None, tree.problem
    block_tokens = int(trace.block_tokens or 0)
    inp = trace.column_np("input_tokens")
    sharing = shared_prefixes(tree, inp, block_tokens)
    split = reuse_split(
        tree,
        inp,
        block_tokens,
        warmup_requests=result.warmup_requests,
        session=session_codes(trace),
    )
    return (
        _sharing_section(sharing, int(inp.sum()), trace.column_np("arrival_s")),
        _conversation_section(split),
        None,
    )


def _block_sizes(
    trace: Trace,
    warmup_fraction: float,
    save_unfull_chunk: bool,
    own_ratio: tuple[float, float] | None = None,
) -> tuple[BlockSizePoint, ...]:
    """Hit ratio with the hashes regrouped to each compared engine chunk size.

    ``own_ratio`` is the (all, steady) token hit ratio already simulated at the trace's own
    block size, which then is not simulated again.
    """
    block_tokens = int(trace.block_tokens or 0)
    sizes = sorted(
        {block_tokens}
        | {c for c in COMPARED_CHUNK_TOKENS if c > block_tokens and c % block_tokens == 0}
    )
    points = []
    for chunk in sizes:
        if chunk == block_tokens and own_ratio is not None:
            all_, steady = own_ratio
        else:
            coarse = coarsen_trace(
                trace, chunk, save_unfull_chunk=save_unfull_chunk or chunk == block_tokens
            )
            all_, steady = _simulate(coarse, warmup_fraction=warmup_fraction).token_hit_ratio
        points.append(
            BlockSizePoint(chunk, save_unfull_chunk or chunk == block_tokens, _f(all_), _f(steady))
        )
    return tuple(points)


def result_section(
    result: PrefixCacheResult,
    *,
    warmup_fraction: float,
    tiers: Sequence[TierSpec] = (),
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


def simulate_section_cache(
    trace: Trace,
    *,
    warmup_fraction: float = 0.5,
    chunk_tokens: int | None = None,
    save_unfull_chunk: bool = False,
    sample_rate: float | None = None,
) -> tuple[Trace, PrefixCacheResult]:
    """The one simulation the report's cache section rests on: (trace as simulated, result).

    The trace is coarsened to ``chunk_tokens`` first when that differs from its block size.
    """
    if chunk_tokens is not None and chunk_tokens != trace.block_tokens:
        trace = coarsen_trace(trace, chunk_tokens, save_unfull_chunk=save_unfull_chunk)
    return trace, _simulate(trace, warmup_fraction=warmup_fraction, sample_rate=sample_rate)


def prefix_cache_section(
    trace: Trace,
    simulated: tuple[Trace, PrefixCacheResult] | None,
    *,
    warmup_fraction: float = 0.5,
    tiers: Sequence[TierSpec] = (),
    instances: int = 8,
    routing_seed: int = 0,
    save_unfull_chunk: bool = False,
    kv_bytes_per_token: int | None = None,
) -> PrefixCache:
    """Summarise the prefix-cache simulation of ``trace`` for the report.

    ``simulated`` is the (trace as simulated, result) of :func:`simulate_section_cache` with
    the same warm-up (coarsened to the engine chunk size when one was given); None when the
    trace has no block hashes, and the section then says "prefix reuse unknown" with every
    ratio null. Routing, reuse times and the block-size comparison need the exact pass; a
    sampled curve omits them.
    """
    if simulated is None:
        return unknown_prefix_cache(warmup_fraction)
    original = trace
    trace, result = simulated
    exact = result.exact
    extras = exact and result.curve.total_blocks_all <= EXTRAS_MAX_ACCESSES
    note = None
    if not exact:
        note = "curve estimated by spatial hash sampling (SHARDS); see sampling"
    elif not extras:
        note = (
            f"routing, reuse times, block sizes and shared prefixes skipped: more than "
            f"{EXTRAS_MAX_ACCESSES} block accesses"
        )
    all_, steady = result.token_hit_ratio
    sharing, conversations, why = _sharing(trace, result) if extras else (None, None, None)
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
        routing=(
            _routing(trace, instances, warmup_fraction, routing_seed, pooled=result)
            if extras and instances > 1
            else None
        ),
        reuse=_reuse(trace, result) if extras else None,
        block_sizes=(
            _block_sizes(
                original,
                warmup_fraction,
                save_unfull_chunk,
                # The section's own pass is the trace at its own block size unless coarsened.
                own_ratio=(all_, steady) if trace is original else None,
            )
            if extras
            else ()
        ),
        sharing=sharing,
        conversations=conversations,
    )
