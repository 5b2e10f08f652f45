"""Reuse times, block sizes and routing estimated on a spatial hash sample (SHARDS), with errors.

A trace whose rows do not fit memory cannot run the exact extras (:mod:`kvadvisor.cache.measure`).
One pass over its batches keeps every access to the blocks whose hash falls under the rate R
(the SHARDS filter of :mod:`kvadvisor.cache.shards`), so reuse among sampled blocks is exact:

- reuse times and TTL: a sampled block's gaps are those of the whole trace, and the sampled
  blocks are an unbiased sample of all blocks, so the token-weighted quantiles of the sampled
  gaps estimate the whole trace's; hit tokens, histogram and TTL peaks scale by 1/R, and
  SHARDS_adj's difference (expected less sampled block tokens: a hot block drawn or missed)
  is credited at the shortest gap, as the curve credits its first bucket;
- block sizes: each chunk size's coarsened ids (the hash of the chunk's last block) are sampled
  by their own hash, and the hit ratio at unbounded capacity is SHARDS's (with SHARDS_adj);
- routing: each request is routed from its own row (round robin, random, session), exactly as in
  memory; each instance's LRU runs on its sampled requests' blocks, distances scaled by 1/R,
  with SHARDS_adj from the instance's own totals (:func:`kvadvisor.cache.shards.sub_stream_curve`);
  the pooled cache is the trace's curve.

The error of each: the sampled keys fall into 4 disjoint sub-samples by independent hash bits
(as the curve's error estimate); the spread of the 4 sub-sample estimates over √4 is a standard
error. Shared prefixes and the conversation split need every block of a request (the tree's
nodes), so they are not estimated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from kvadvisor.cache.coarsen import coarsen_blocks
from kvadvisor.cache.measure import COMPARED_CHUNK_TOKENS, BlockSizeRatio
from kvadvisor.cache.model import STANDARD_CAPACITIES_TOKENS, PrefixCacheResult
from kvadvisor.cache.prefix import dense_block_ids, read_only, warmup_requests_for
from kvadvisor.cache.reuse import (
    DEFAULT_QUANTILES,
    DEFAULT_TTL_SHARES,
    ReuseTimes,
    TtlRow,
    gap_histogram,
    lru_capacity_for,
    weighted_quantiles,
)
from kvadvisor.cache.routing import (
    RoutingComparison,
    RoutingOutcome,
    RoutingPoint,
    RoutingPolicy,
    session_instances,
)
from kvadvisor.cache.shards import (
    BATCH_ROWS,
    HASH_SPACE,
    SUBSAMPLES,
    Sample,
    collect_sample,
    join_samples,
    sub_stream_curve,
)
from kvadvisor.trace.arrays import BlockArrays, RequestArrays, SessionKeys

LOCAL_POLICIES = (RoutingPolicy.RANDOM, RoutingPolicy.ROUND_ROBIN, RoutingPolicy.SESSION)
# The estimates' CPU grows with the sampled accesses (the routing comparison runs an LRU per
# instance and per sub-sample on them): past this many sampled accesses the rate is lowered,
# whatever the memory allows. 4M keeps the estimate to seconds and the standard errors small.
EXTRAS_TARGET_SAMPLED_ACCESSES = 4_000_000


@dataclass(frozen=True)
class SampledError:
    """One extra's sampling rate, sample size and standard error (see the module)."""

    extra: str
    rate: float
    sampled_accesses: int
    total_accesses: int
    error: float | None
    unit: str
    method: str


@dataclass(frozen=True)
class SampledExtras:
    """The estimated extras and the error of each."""

    reuse: ReuseTimes | None
    block_sizes: tuple[BlockSizeRatio, ...]
    routing: RoutingComparison | None
    errors: tuple[SampledError, ...]


@dataclass
class ExtrasCollector:
    """The spatial sample the extras are estimated on, filled batch by batch in trace order.

    ``requests`` and ``warmup`` are the trace's; ``rate`` the SHARDS rate; ``instances`` and
    ``seed`` the routing comparison's (1: none); ``sessions``: the trace has a session column.
    """

    block_tokens: int
    requests: int
    warmup: int
    rate: float
    instances: int = 8
    seed: int = 0
    save_unfull_chunk: bool = False
    sessions: bool = False
    rows: int = 0
    input_all: int = 0
    input_steady: int = 0
    _fine: list[Sample] = field(default_factory=list)
    _arrival: list[np.ndarray] = field(default_factory=list)
    _coarse: dict[int, list[Sample]] = field(default_factory=dict)
    _routes: dict[RoutingPolicy, list[np.ndarray]] = field(default_factory=dict)
    # Per local policy, each instance's (accesses, steady accesses, block tokens, steady block
    # tokens) over all of its requests: SHARDS_adj for its own curve.
    _block_totals: dict[RoutingPolicy, np.ndarray] = field(default_factory=dict)
    _rng: np.random.Generator | None = None

    def __post_init__(self) -> None:
        b = self.block_tokens
        self._coarse = {c: [] for c in COMPARED_CHUNK_TOKENS if c > b and c % b == 0}
        if self.instances > 1:
            self._routes = {p: [] for p in LOCAL_POLICIES}
            self._block_totals = {p: np.zeros((4, self.instances)) for p in LOCAL_POLICIES}
            # One generator drawn batch by batch: the same draws as assign_instances' one call.
            self._rng = np.random.default_rng(self.seed)

    def add(
        self,
        input_tokens: np.ndarray,
        offsets: np.ndarray,
        values: np.ndarray,
        arrival_s: np.ndarray,
        session_ids: pa.Array | pa.ChunkedArray | None = None,
    ) -> None:
        """One batch of consecutive requests: tokens, hash offsets (from 0), hashes, arrivals."""
        r0, n = self.rows, int(input_tokens.shape[0])
        inp = np.asarray(input_tokens, np.int64)
        steady_from = min(max(self.warmup - r0, 0), n)
        self.input_all += int(inp.sum())
        self.input_steady += int(inp[steady_from:].sum())
        fine = self._sample((inp, offsets, values), self.block_tokens, r0)
        self._fine.append(fine)
        self._arrival.append(np.asarray(arrival_s, np.float64)[fine.req - r0])
        blocks = BlockArrays(offsets, values, self.block_tokens)
        for chunk, parts in self._coarse.items():
            coarse = coarsen_blocks(blocks, inp, chunk, save_unfull_chunk=self.save_unfull_chunk)
            parts.append(self._sample((inp, coarse.offsets, coarse.values), chunk, r0))
        if self._routes:
            assert self._rng is not None
            routed = {
                RoutingPolicy.RANDOM: self._rng.integers(0, self.instances, n),
                RoutingPolicy.ROUND_ROBIN: (r0 + np.arange(n, dtype=np.int64)) % self.instances,
            }
            if session_ids is not None:
                column = (
                    session_ids
                    if isinstance(session_ids, pa.ChunkedArray)
                    else pa.chunked_array([session_ids])
                )
                keys = SessionKeys.of_column(column)
                routed[RoutingPolicy.SESSION] = session_instances(
                    keys, self.instances, self.seed, first_row=r0
                )
            per_request = _block_counts(inp, offsets, self.block_tokens, steady_from)
            for policy, inst in routed.items():
                self._routes[policy].append(inst[fine.req - r0])
                for row in range(4):
                    self._block_totals[policy][row] += np.bincount(
                        inst, weights=per_request[row], minlength=self.instances
                    )
        self.rows += n

    def _sample(self, batch: tuple[np.ndarray, ...], block_tokens: int, r0: int) -> Sample:
        inp, offsets, values = batch
        got = collect_sample(
            [(inp, offsets, values)],
            block_tokens=block_tokens,
            rate=self.rate,
            warmup=self.warmup,
            first_request=r0,
        )
        got.input_tokens = np.zeros(0, np.int64)  # the totals are kept as sums instead
        return got

    def estimate(self, result: PrefixCacheResult) -> SampledExtras:
        """The extras from the sample; ``result`` is the trace's own curve (exact or sampled)."""
        fine = join_samples(self._fine)
        arrival = np.concatenate(self._arrival) if self._arrival else np.zeros(0)
        rate = effective_rate(self.rate)
        errors: list[SampledError] = []
        reuse, err = _reuse(fine, arrival, rate, result, self.block_tokens)
        errors.append(self._error("reuse", fine, err, "relative", _REUSE_METHOD))
        sizes, err = self._block_sizes(result, rate)
        if self._coarse:
            coarse_n = sum(sum(s.keys.shape[0] for s in v) for v in self._coarse.values())
            total = sum(sum(s.total_accesses for s in v) for v in self._coarse.values())
            errors.append(
                SampledError("block_sizes", rate, coarse_n, total, err, "ratio", _RATIO_METHOD)
            )
        routing = None
        if self._routes:
            routing, err = self._routing(fine, result, rate)
            errors.append(self._error("routing", fine, err, "ratio", _ROUTING_METHOD))
        return SampledExtras(reuse, sizes, routing, tuple(errors))

    def _error(
        self, extra: str, sample: Sample, err: float | None, unit: str, method: str
    ) -> SampledError:
        n = int(sample.keys.shape[0])
        return SampledError(
            extra, effective_rate(self.rate), n, sample.total_accesses, err, unit, method
        )

    def _block_sizes(
        self, result: PrefixCacheResult, rate: float
    ) -> tuple[tuple[BlockSizeRatio, ...], float | None]:
        """Each compared chunk's hit ratio; the trace's own size is ``result``'s."""
        own_all, own_steady = result.token_hit_ratio
        points = [BlockSizeRatio(self.block_tokens, True, own_all, own_steady)]
        spreads: list[float] = []
        for chunk, parts in self._coarse.items():
            sample = join_samples(parts)
            (all_, steady), se = _unbounded_ratio(
                sample, rate, self.warmup, (self.input_all, self.input_steady)
            )
            points.append(BlockSizeRatio(chunk, self.save_unfull_chunk, all_, steady))
            if se is not None:
                spreads.append(se)
        return tuple(points), float(np.mean(spreads)) if spreads else None

    def _routing(
        self, fine: Sample, result: PrefixCacheResult, rate: float
    ) -> tuple[RoutingComparison, float | None]:
        """Local LRUs per instance on the sample against the pooled cache (the trace's curve)."""
        caps = list(STANDARD_CAPACITIES_TOKENS)
        totals = (self.input_all, self.input_steady)
        outcomes: list[RoutingOutcome] = []
        spreads: list[float] = []
        for policy in LOCAL_POLICIES:
            parts = self._routes[policy]
            if not parts:
                outcomes.append(
                    RoutingOutcome(policy, (), unavailable="the trace has no session_id column")
                )
                continue
            inst = np.concatenate(parts)
            blocks = self._block_totals[policy]
            hits = _local_hits(fine, inst, rate, self.warmup, self.block_tokens, caps, totals,
                               blocks)  # fmt: skip
            subs = [
                _local_hits(
                    fine, inst, rate / SUBSAMPLES, self.warmup, self.block_tokens, caps, totals,
                    blocks, only=fine.label == k,
                )
                for k in range(SUBSAMPLES)
            ]  # fmt: skip
            ratios = np.stack([s[0] for s in subs]) / max(self.input_all, 1)
            spreads.append(float(np.mean(np.std(ratios, axis=0, ddof=1) / np.sqrt(SUBSAMPLES))))
            outcomes.append(RoutingOutcome(policy, _points(caps, hits, totals)))
        pooled_caps = np.asarray([np.inf if c is None else c for c in caps], np.float64)
        pooled = result.curve.hit_tokens_at(pooled_caps * self.instances)
        outcomes.append(RoutingOutcome(RoutingPolicy.PREFIX_AWARE, _points(caps, pooled, totals)))
        order = {p: i for i, p in enumerate(RoutingPolicy)}
        outcomes.sort(key=lambda o: order[o.policy])
        err = float(np.mean(spreads)) if spreads else None
        return RoutingComparison(self.instances, self.seed, tuple(outcomes)), err


def estimate_in_memory(
    arrays: RequestArrays,
    blocks: BlockArrays,
    result: PrefixCacheResult,
    *,
    warmup_fraction: float,
    instances: int,
    seed: int,
    save_unfull_chunk: bool,
) -> SampledExtras:
    """The estimates for a trace held in memory whose extras are too large to run exactly.

    ``blocks`` are the hashes ``result`` simulated; the rate keeps at most
    :data:`EXTRAS_TARGET_SAMPLED_ACCESSES` sampled accesses.
    """
    n = arrays.requests
    collector = ExtrasCollector(
        block_tokens=blocks.block_tokens,
        requests=n,
        warmup=warmup_requests_for(n, warmup_fraction),
        rate=min(1.0, EXTRAS_TARGET_SAMPLED_ACCESSES / max(blocks.accesses, 1)),
        instances=instances,
        seed=seed,
        save_unfull_chunk=save_unfull_chunk,
        sessions=arrays.session_ids is not None,
    )
    offsets = blocks.offsets
    for r0 in range(0, n, BATCH_ROWS):
        r1 = min(r0 + BATCH_ROWS, n)
        lo, hi = int(offsets[r0]), int(offsets[r1])
        sessions = None if arrays.session_ids is None else arrays.session_ids.slice(r0, r1 - r0)
        collector.add(
            arrays.input_tokens[r0:r1],
            offsets[r0 : r1 + 1] - lo,
            blocks.values[lo:hi],
            arrays.arrival_s[r0:r1],
            sessions,
        )
    return collector.estimate(result)


_REUSE_METHOD = (
    f"standard error of the mean of {SUBSAMPLES} disjoint hash sub-samples' TTLs, relative to "
    "the TTL, averaged over the TTL rows"
)
_RATIO_METHOD = (
    f"standard error of the mean of {SUBSAMPLES} disjoint hash sub-samples' hit ratios at "
    "unbounded capacity, averaged over the compared chunk sizes"
)
_ROUTING_METHOD = (
    f"standard error of the mean of {SUBSAMPLES} disjoint hash sub-samples' hit ratios, "
    "averaged over the local policies and capacities"
)


def effective_rate(rate: float) -> float:
    """The rate the spatial filter applies (its threshold in the 2^24 hash space)."""
    return max(1, int(round(rate * HASH_SPACE))) / HASH_SPACE


def _block_counts(
    inp: np.ndarray, offsets: np.ndarray, block_tokens: int, steady_from: int
) -> np.ndarray:
    """Per request: accesses, steady accesses, block tokens, steady block tokens (4 × n).

    A request's blocks carry ``min(blocks × B, I)`` tokens (the per-block rule summed).
    """
    accesses = np.diff(offsets).astype(np.float64)
    tokens = np.minimum(accesses * block_tokens, inp).astype(np.float64)
    steady = np.arange(inp.shape[0]) >= steady_from
    return np.vstack([accesses, accesses * steady, tokens, tokens * steady])


def _adjusted_quantiles(
    values: np.ndarray, weights: np.ndarray, shares: Sequence[float], adj: float
) -> list[float]:
    """Weighted quantiles with ``adj`` more weight at the smallest value (less, if negative).

    The q-quantile of the adjusted weights is the original's at the share
    ``(q·(W + adj) − adj) / W``, W the original total; at or below 0, the smallest value.
    """
    total = float(weights.sum())
    smallest = float(values.min())
    out = []
    for q in shares:
        shifted = min((q * (total + adj) - adj) / total, 1.0)
        out.append(smallest if shifted <= 0 else weighted_quantiles(values, weights, [shifted])[0])
    return out


def _groups(req: np.ndarray) -> np.ndarray:
    """Offsets of the runs of equal request indices (the sub-stream's requests)."""
    n = int(req.shape[0])
    if n == 0:
        return np.zeros(1, np.int64)
    starts = np.flatnonzero(np.diff(req)) + 1
    return np.concatenate(([0], starts, [n])).astype(np.int64)


def _leading(keys: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Dense ids of ``keys``, their leading distances on the sub-stream, and the id bound."""
    from kvadvisor.cache import stackdist

    ids, bound = dense_block_ids(keys)
    dist = ids.copy()
    stackdist.leading_distances(offsets, dist, bound)
    return ids, dist, bound


def _unbounded_ratio(
    sample: Sample, rate: float, warmup: int, input_totals: tuple[int, int]
) -> tuple[tuple[float | None, float | None], float | None]:
    """SHARDS's token hit ratio at unbounded capacity (all, steady) and its standard error."""
    from kvadvisor.cache import stackdist

    offsets = _groups(sample.req)
    _, dist, _ = _leading(sample.keys, offsets)
    hit = dist != stackdist.COLD
    steady = sample.req >= warmup
    tok = sample.tok
    # SHARDS_adj: the expected less the sampled block tokens, credited as hits (hot blocks).
    adj_all = rate * sample.block_tokens_all - float(tok.sum())
    adj_steady = rate * sample.block_tokens_steady - float(tok[steady].sum())
    est_all = (float(tok[hit].sum()) + adj_all) / rate
    est_steady = (float(tok[hit & steady].sum()) + adj_steady) / rate
    all_tot, steady_tot = input_totals

    def ratio(x: float, total: int) -> float | None:
        return min(max(x / total, 0.0), 1.0) if total else None

    subs = [
        float(tok[hit & (sample.label == k)].sum()) / (rate / SUBSAMPLES) for k in range(SUBSAMPLES)
    ]
    se = float(np.std(subs, ddof=1) / np.sqrt(SUBSAMPLES) / all_tot) if all_tot else None
    return (ratio(est_all, all_tot), ratio(est_steady, steady_tot)), se


def _local_hits(
    fine: Sample,
    inst: np.ndarray,
    rate: float,
    warmup: int,
    block_tokens: int,
    caps: Sequence[int | None],
    totals: tuple[int, int],
    block_totals: np.ndarray,
    only: np.ndarray | None = None,
) -> np.ndarray:
    """Hit tokens (row 0 all, row 1 steady) at ``caps`` per instance, summed over instances.

    ``block_totals`` (4 × instances): each instance's counts for SHARDS_adj.
    """
    out = np.zeros((2, len(caps)), np.float64)
    cap = np.asarray([np.inf if c is None else c for c in caps], np.float64)
    for k in np.unique(inst):
        sel = inst == k if only is None else (inst == k) & only
        if not sel.any():
            continue
        curve = sub_stream_curve(
            fine.keys[sel],
            fine.req[sel],
            fine.tok[sel],
            rate=rate,
            warmup=warmup,
            block_tokens=block_tokens,
            input_totals=totals,
            block_totals=tuple(int(round(x)) for x in block_totals[:, k]),  # type: ignore[arg-type]
        )
        out += curve.hit_tokens_at(cap)
    return np.minimum(out, np.asarray(totals, np.float64)[:, None])


def _points(
    caps: Sequence[int | None], hits: np.ndarray, totals: tuple[int, int]
) -> tuple[RoutingPoint, ...]:
    all_, steady = totals
    return tuple(
        RoutingPoint(
            caps[j],
            float(hits[0, j]) / all_ if all_ > 0 else None,
            float(hits[1, j]) / steady if steady > 0 else None,
        )
        for j in range(len(caps))
    )


def _reuse(
    fine: Sample,
    arrival: np.ndarray,
    rate: float,
    result: PrefixCacheResult,
    block_tokens: int,
    ttl_shares: Sequence[float] = DEFAULT_TTL_SHARES,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    bins: int = 24,
) -> tuple[ReuseTimes | None, float | None]:
    """Reuse times and the TTL table from the sample, and the TTLs' relative standard error."""
    from kvadvisor.cache import reusekernels as rk
    from kvadvisor.cache import sampledkernels as sk

    offsets = _groups(fine.req)
    ids, dist, bound = _leading(fine.keys, offsets)
    group_arrival = np.ascontiguousarray(arrival[offsets[:-1]], np.float64)
    n = int(fine.keys.shape[0])
    gap, lead = np.empty(n, np.float64), np.empty(n, np.float64)
    tokens, where = np.empty(n, np.int64), np.empty(n, np.int64)
    last_req = np.full(max(bound, 1), -1, np.int32)
    k = sk.sampled_reuse_hits(
        offsets, ids, dist, group_arrival, fine.tok, last_req, gap, lead, tokens, where
    )
    gap, lead, tokens, label = gap[:k], lead[:k], tokens[:k], fine.label[where[:k]]
    sampled_total = int(tokens.sum())
    if sampled_total == 0:
        return ReuseTimes(0, (), (), (), ()), None
    # SHARDS_adj: the expected less the sampled block tokens come mostly from a few hot blocks
    # drawn or missed (a prompt's shared first block), reused at the shortest gaps: credited
    # there, as the curve credits them to its first bucket.
    adj = max(rate * fine.block_tokens_all - float(fine.tok.sum()), -0.5 * sampled_total)
    qs = tuple(zip(quantiles, _adjusted_quantiles(gap, tokens, quantiles, adj), strict=True))
    edges, hist = gap_histogram(gap, tokens, bins)
    scaled = hist / rate
    if adj >= 0:
        scaled[0] += adj / rate
    else:  # taken from the shortest gaps up
        below = np.concatenate(([0.0], np.cumsum(scaled)[:-1]))
        scaled -= np.clip(-adj / rate - below, 0.0, scaled)
    ttls = np.array(_adjusted_quantiles(lead, tokens, ttl_shares, adj), np.float64)
    subs = []
    for s in range(SUBSAMPLES):
        sel = label == s
        if int(tokens[sel].sum()) == 0:
            break
        subs.append(weighted_quantiles(lead[sel], tokens[sel], ttl_shares))
    err = None
    if len(subs) == SUBSAMPLES:
        se = np.std(np.asarray(subs), axis=0, ddof=1) / np.sqrt(SUBSAMPLES)
        err = float(np.mean(se / np.maximum(ttls, 1e-9)))
    peaks = np.zeros(ttls.shape[0], np.int64)
    groups = offsets.shape[0] - 1
    rk.ttl_peaks(
        offsets,
        read_only(ids),
        read_only(group_arrival),
        ttls,
        last_req,
        np.zeros(groups, np.int64),
        peaks,
    )
    rows = tuple(
        TtlRow(
            share=float(share),
            ttl_s=float(ttl),
            peak_blocks=round(int(peak) / rate),
            capacity_tokens=round(int(peak) / rate) * block_tokens,
            lru_capacity_tokens=lru_capacity_for(result, share),
        )
        for share, ttl, peak in zip(ttl_shares, ttls, peaks, strict=True)
    )
    reuse = ReuseTimes(
        hit_tokens=round((sampled_total + adj) / rate),
        quantiles_s=tuple((float(q), float(s)) for q, s in qs),
        histogram_edges_s=tuple(float(e) for e in edges),
        histogram_tokens=tuple(round(float(h)) for h in scaled),
        ttl=rows,
    )
    return reuse, err
