"""SHARDS: the miss-ratio curve estimated from a spatial hash sample, streamed in record batches.

Waldspurger, Park, Garthwaite and Ahmad, "Efficient MRC Construction with SHARDS", FAST'15:
keep every access to the blocks whose hash falls under a threshold (rate R), compute exact stack
distances on that sub-stream and scale them by 1/R; SHARDS_adj adds the difference between the
expected (R × all) and the actual sampled count to the first (smallest-distance) bucket, because
that difference comes mostly from a few hot blocks that were or were not drawn. Here the counts
are token-weighted and the prefix rule (leading run) is applied within each request's sampled
blocks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvadvisor.cache.model import MissRatioCurve, PrefixCacheResult, SamplingInfo
from kvadvisor.cache.prefix import dense_block_ids, read_only, warmup_requests_for
from kvadvisor.errors import ConfigError
from kvadvisor.trace.arrays import BlockArrays

HASH_SPACE = 1 << 24
SUBSAMPLES = 4
ERROR_GRID_POINTS = 64
BATCH_ROWS = 65_536
# Sampled distances below SPREAD_BELOW are spread over SPREAD sub-steps (see _scaled_curve).
SPREAD_BELOW = 16
SPREAD = 16


# One batch of the stream: (input tokens per request, offsets from 0, flattened hashes).
BlockBatch = tuple[np.ndarray, np.ndarray, np.ndarray]


def readable_rate(rate: float) -> float:
    """``rate`` to two significant digits, rounded down: a readable rate that still fits."""
    digits = 1 - math.floor(math.log10(rate))
    return min(1.0, math.floor(rate * 10**digits) / 10**digits)


def record_parts(batches: Iterable[pa.RecordBatch]) -> Iterator[BlockBatch]:
    """Record batches with ``input_tokens`` and ``block_hashes`` as the estimator's batches."""
    for batch in batches:
        inp = batch.column("input_tokens").to_numpy(zero_copy_only=False).astype(np.int64)
        yield (inp, *_flatten(batch.column("block_hashes")))


def block_parts(
    blocks: BlockArrays, input_tokens: np.ndarray, batch_rows: int = BATCH_ROWS
) -> Iterator[BlockBatch]:
    """Flattened hashes already in memory as the estimator's batches of ``batch_rows`` rows."""
    inp = np.asarray(input_tokens, dtype=np.int64)
    offsets = blocks.offsets
    for r0 in range(0, inp.shape[0], batch_rows):
        r1 = min(r0 + batch_rows, inp.shape[0])
        lo, hi = int(offsets[r0]), int(offsets[r1])
        yield inp[r0:r1], offsets[r0 : r1 + 1] - lo, blocks.values[lo:hi]


def _flatten(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A list<int64> array as (offsets from 0, values), nulls as empty lists."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if col.null_count:
        col = pc.fill_null(col, pa.scalar([], col.type))
    offsets = col.offsets.to_numpy().astype(np.int64)
    values = col.values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return offsets - offsets[0], values[offsets[0] : offsets[-1]]


@dataclass
class Sample:
    """The sampled sub-stream and the exact totals of the whole stream (or of a run of it)."""

    keys: np.ndarray
    req: np.ndarray
    tok: np.ndarray
    label: np.ndarray
    input_tokens: np.ndarray
    total_accesses: int
    accesses_steady: int
    block_tokens_all: int
    block_tokens_steady: int


def _threshold(rate: float) -> int:
    """The spatial filter's threshold in the 2^24 hash space (the effective rate's numerator)."""
    if not 0.0 < rate <= 1.0:
        raise ConfigError(f"sampling rate {rate} is outside (0, 1]; give e.g. 0.01")
    return max(1, int(round(rate * HASH_SPACE)))


def collect_sample(
    batches: Iterable[BlockBatch],
    *,
    block_tokens: int,
    rate: float,
    warmup: int,
    first_request: int = 0,
    salt: int = 0,
) -> Sample:
    """The spatial filter over ``batches``, whose first request is ``first_request`` of the trace.

    The filter is a pure function of each hash, and a request's warm-up state of its index in
    the trace: the samples of consecutive runs of requests, each collected from its own first
    request (on different workers), joined in order by :func:`join_samples`, are the sample of
    the whole stream.
    """
    return _collect(batches, block_tokens, _threshold(rate), salt, warmup, first_request)


def join_samples(parts: Sequence[Sample]) -> Sample:
    """The samples of consecutive runs of requests, in trace order, as one."""

    def cat(name: str, dtype: type) -> np.ndarray:
        arrays = [getattr(p, name) for p in parts]
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype)

    return Sample(
        keys=cat("keys", np.int64),
        req=cat("req", np.int64),
        tok=cat("tok", np.int64),
        label=cat("label", np.int8),
        input_tokens=cat("input_tokens", np.int64),
        total_accesses=sum(p.total_accesses for p in parts),
        accesses_steady=sum(p.accesses_steady for p in parts),
        block_tokens_all=sum(p.block_tokens_all for p in parts),
        block_tokens_steady=sum(p.block_tokens_steady for p in parts),
    )


def _collect(
    batches: Iterable[BlockBatch],
    block_tokens: int,
    threshold: int,
    salt: int,
    warmup: int,
    r0: int = 0,
) -> Sample:
    from kvadvisor.cache import stackdist  # numba only when a curve is computed

    keys, reqs, toks, labels, inputs = [], [], [], [], []
    totals = np.zeros(4, np.int64)
    for inp, offsets, values in batches:
        n = values.shape[0]
        out_keys = np.empty(n, np.int64)
        out_req = np.empty(n, np.int64)
        out_tok = np.empty(n, np.int64)
        out_label = np.empty(n, np.int8)
        k = stackdist.sample_batch(
            offsets, read_only(values), read_only(inp), np.int64(block_tokens), np.int64(r0),
            np.int64(warmup), np.int64(threshold), np.uint64(salt), np.int64(SUBSAMPLES),
            out_keys, out_req, out_tok, out_label, totals,
        )  # fmt: skip
        keys.append(out_keys[:k].copy())
        reqs.append(out_req[:k].copy())
        toks.append(out_tok[:k].copy())
        labels.append(out_label[:k].copy())
        inputs.append(inp)
        r0 += inp.shape[0]
    total, steady_n, tok_all, tok_steady = (int(x) for x in totals)

    def cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    return Sample(
        keys=cat(keys, np.int64),
        req=cat(reqs, np.int64),
        tok=cat(toks, np.int64),
        label=cat(labels, np.int8),
        input_tokens=cat(inputs, np.int64),
        total_accesses=total,
        accesses_steady=steady_n,
        block_tokens_all=tok_all,
        block_tokens_steady=tok_steady,
    )


def _scaled_curve(
    keys: np.ndarray,
    req: np.ndarray,
    tok: np.ndarray,
    rate: float,
    warmup: int,
    sample: Sample,
    block_tokens: int,
    count_correction: bool,
    input_totals: tuple[int, int] | None = None,
) -> MissRatioCurve:
    """Exact prefix distances on the sampled sub-stream, scaled by 1/rate, with SHARDS_adj.

    ``input_totals``: the (all, steady) input tokens, when ``sample`` does not hold them.
    """
    from kvadvisor.cache import stackdist

    n = int(keys.shape[0])
    starts = np.flatnonzero(np.diff(req)) + 1 if n else np.zeros(0, np.int64)
    offsets = np.concatenate(([0], starts, [n])).astype(np.int64) if n else np.zeros(1, np.int64)
    ids, bound = dense_block_ids(keys)
    stackdist.leading_distances(offsets, ids, bound)
    hit = ids != stackdist.COLD
    dist = ids[hit].astype(np.int64)
    w = tok[hit]
    steady = req[hit] >= warmup
    steps, inverse = np.unique(dist, return_inverse=True)
    if steps.shape[0] == 0 or steps[0] > 0:
        # SHARDS_adj credits the first bucket, distance 0 (capacity one block), even when no
        # sampled access landed there.
        steps = np.concatenate(([0], steps))
        inverse = inverse + 1

    ones = np.ones(dist.shape[0], np.float64)
    sampled_steady = req >= warmup
    # SHARDS_adj: expected minus actual sampled weight, credited to the first bucket.
    adjust = {
        "tok_all": rate * sample.block_tokens_all - float(tok.sum()),
        "tok_steady": rate * sample.block_tokens_steady - float(tok[sampled_steady].sum()),
        "blk_all": rate * sample.total_accesses - float(n),
        "blk_steady": rate * sample.accesses_steady - float(sampled_steady.sum()),
    }
    weights = {
        "tok_all": w.astype(np.float64),
        "tok_steady": np.where(steady, w, 0).astype(np.float64),
        "blk_all": ones,
        "blk_steady": np.where(steady, 1.0, 0.0),
    }
    # A sampled distance d stands for true distances in [d/R, (d+1)/R): spread the weight of
    # the small distances, where that range is wide against the capacity, evenly over it in
    # SPREAD sub-steps; larger distances take the middle of their range. At R = 1 every
    # sub-step falls on d + 1 blocks, so the exact curve is returned.
    spread = np.where(steps < SPREAD_BELOW, SPREAD, 1)
    sub = np.concatenate([np.arange(k) for k in spread]) if steps.shape[0] else np.zeros(0)
    owner = np.repeat(np.arange(steps.shape[0]), spread)
    position = (steps[owner] + (sub + 0.5) / spread[owner]) / rate
    capacity = np.floor(position).astype(np.int64) + 1
    capacities, slot = np.unique(capacity, return_inverse=True)
    tok_all, tok_steady = input_totals or (
        int(sample.input_tokens.sum()),
        int(sample.input_tokens[warmup:].sum()),
    )
    totals = {
        "tok_all": tok_all,
        "tok_steady": tok_steady,
        "blk_all": sample.total_accesses,
        "blk_steady": sample.accesses_steady,
    }
    curves = {}
    for key, wts in weights.items():
        per_step = np.bincount(inverse, weights=wts, minlength=steps.shape[0])
        if count_correction:
            per_step[0] += adjust[key]
        per_sub = per_step[owner] / spread[owner]
        cum = np.cumsum(np.bincount(slot, weights=per_sub, minlength=capacities.shape[0]))
        curves[key] = np.clip(cum / rate, 0.0, float(totals[key]))
    return MissRatioCurve(
        block_tokens=block_tokens,
        capacity_blocks=capacities,
        hit_tokens_all=curves["tok_all"],
        hit_tokens_steady=curves["tok_steady"],
        hit_blocks_all=curves["blk_all"],
        hit_blocks_steady=curves["blk_steady"],
        total_tokens_all=totals["tok_all"],
        total_tokens_steady=totals["tok_steady"],
        total_blocks_all=totals["blk_all"],
        total_blocks_steady=totals["blk_steady"],
    )


def sub_stream_curve(
    keys: np.ndarray,
    req: np.ndarray,
    tok: np.ndarray,
    *,
    rate: float,
    warmup: int,
    block_tokens: int,
    input_totals: tuple[int, int],
    block_totals: tuple[int, int, int, int],
) -> MissRatioCurve:
    """The SHARDS curve, with SHARDS_adj, of part of a sample (one instance's requests).

    ``block_totals``: the part's (accesses, steady accesses, block tokens, steady block tokens)
    over all of its requests, for SHARDS_adj; the hit tokens are clipped at ``input_totals``
    (all, steady).
    """
    none = np.zeros(0, np.int64)
    part = Sample(none, none, none, none, none, *block_totals)
    return _scaled_curve(
        keys, req, tok, rate, warmup, part, block_tokens, True, input_totals=input_totals
    )


def estimate_prefix_curve(
    batches: Iterable[BlockBatch],
    *,
    block_tokens: int,
    total_requests: int,
    warmup_fraction: float,
    rate: float,
    salt: int = 0,
    count_correction: bool = True,
) -> PrefixCacheResult:
    """SHARDS estimate of the prefix-cache curve from batches of requests and their hashes.

    ``batches`` come from record batches (:func:`record_parts`, a streamed trace) or from
    hashes in memory (:func:`block_parts`); how the requests are cut does not change the result.

    Memory holds only the sampled accesses (about ``rate`` of them) plus one int64 per request.
    The error estimate: the sampled keys are split by independent hash bits into 4 disjoint
    sub-samples (rate R/4 each); the standard deviation of their token hit ratios, divided by
    √4, is averaged over 64 log-spaced capacities (the standard error of the mean of the four).
    """
    threshold = _threshold(rate)
    warmup = warmup_requests_for(total_requests, warmup_fraction)
    sample = _collect(batches, block_tokens, threshold, salt, warmup)
    return sampled_curve(
        sample,
        block_tokens=block_tokens,
        warmup_fraction=warmup_fraction,
        warmup=warmup,
        rate=rate,
        salt=salt,
        count_correction=count_correction,
    )


def sampled_curve(
    sample: Sample,
    *,
    block_tokens: int,
    warmup_fraction: float,
    warmup: int,
    rate: float,
    salt: int = 0,
    count_correction: bool = True,
) -> PrefixCacheResult:
    """The SHARDS curve and its error estimate from the whole stream's sample.

    ``rate``, ``salt`` and ``warmup`` (requests) are those the sample was collected with.
    """
    eff_rate = _threshold(rate) / HASH_SPACE
    if sample.keys.shape[0] == 0 and sample.total_accesses > 0:
        raise ConfigError(
            f"sampling rate {rate} drew no block of {sample.total_accesses} accesses; "
            "raise --cache-sample-rate or use the exact pass"
        )
    curve = _scaled_curve(
        sample.keys,
        sample.req,
        sample.tok,
        eff_rate,
        warmup,
        sample,
        block_tokens,
        count_correction,
    )
    error = _error_estimate(sample, curve, eff_rate, warmup, block_tokens, count_correction)
    info = SamplingInfo(
        rate=eff_rate,
        sampled_accesses=int(sample.keys.shape[0]),
        total_accesses=sample.total_accesses,
        salt=salt,
        error_estimate=error,
        error_method=(
            f"standard error of the mean of {SUBSAMPLES} disjoint hash sub-samples, "
            f"averaged over {ERROR_GRID_POINTS} log-spaced capacities"
        ),
    )
    return PrefixCacheResult(
        block_tokens=block_tokens,
        warmup_fraction=warmup_fraction,
        warmup_requests=warmup,
        input_tokens=sample.input_tokens,
        curve=curve,
        hit_tokens=None,
        access_offsets=None,
        leading_distance=None,
        sampling=info,
    )


def _error_estimate(
    sample: Sample,
    curve: MissRatioCurve,
    rate: float,
    warmup: int,
    block_tokens: int,
    count_correction: bool,
) -> float:
    """Mean over a capacity grid of the spread of disjoint sub-sample curves (see above)."""
    top = int(curve.capacity_blocks[-1]) if curve.capacity_blocks.shape[0] else 1
    grid = np.geomspace(1, max(top, 2), ERROR_GRID_POINTS) * block_tokens
    rows = []
    for k in range(SUBSAMPLES):
        sel = sample.label == k
        if not sel.any():
            return float("nan")
        sub = _scaled_curve(
            sample.keys[sel],
            sample.req[sel],
            sample.tok[sel],
            rate / SUBSAMPLES,
            warmup,
            sample,
            block_tokens,
            count_correction,
        )
        rows.append(sub.ratios_on_grid(grid)[0])
    spread = np.std(np.vstack(rows), axis=0, ddof=1) / np.sqrt(SUBSAMPLES)
    return float(spread.mean())
