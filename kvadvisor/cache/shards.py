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

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvadvisor.cache.model import MissRatioCurve, PrefixCacheResult, SamplingInfo
from kvadvisor.cache.prefix import block_token_weights, dense_block_ids, warmup_requests_for
from kvadvisor.errors import ConfigError
from kvadvisor.trace.model import Trace

HASH_SPACE = 1 << 24
SUBSAMPLES = 4
ERROR_GRID_POINTS = 64
BATCH_ROWS = 65_536


def trace_batches(trace: Trace, batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The trace's input tokens and block hashes as record batches of ``batch_rows`` rows."""
    table = trace.table.select(["input_tokens", "block_hashes"])
    yield from table.to_batches(max_chunksize=batch_rows)


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
class _Sample:
    """The sampled sub-stream and the exact totals of the whole stream."""

    keys: np.ndarray
    req: np.ndarray
    tok: np.ndarray
    label: np.ndarray
    input_tokens: np.ndarray
    total_accesses: int
    accesses_steady: int
    block_tokens_all: int
    block_tokens_steady: int


def _collect(
    batches: Iterable[pa.RecordBatch], block_tokens: int, threshold: int, salt: int, warmup: int
) -> _Sample:
    from kvadvisor.cache import stackdist  # numba only when a curve is computed

    keys, reqs, toks, labels, inputs = [], [], [], [], []
    total = steady_n = tok_all = tok_steady = 0
    r0 = 0
    for batch in batches:
        inp = batch.column("input_tokens").to_numpy(zero_copy_only=False).astype(np.int64)
        offsets, values = _flatten(batch.column("block_hashes"))
        counts = np.diff(offsets)
        tok = block_token_weights(offsets, inp, block_tokens)
        req = np.repeat(np.arange(r0, r0 + inp.shape[0], dtype=np.int64), counts)
        steady = req >= warmup
        total += int(values.shape[0])
        steady_n += int(steady.sum())
        tok_all += int(tok.sum())
        tok_steady += int(tok[steady].sum())
        lab = np.empty(values.shape[0], np.int8)
        stackdist.hash_sample(values, np.int64(threshold), np.uint64(salt), np.int64(SUBSAMPLES), lab)
        keep = lab >= 0
        keys.append(values[keep])
        reqs.append(req[keep])
        toks.append(tok[keep])
        labels.append(lab[keep])
        inputs.append(inp)
        r0 += inp.shape[0]

    def cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    return _Sample(
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
    sample: _Sample,
    block_tokens: int,
    count_correction: bool,
) -> MissRatioCurve:
    """Exact prefix distances on the sampled sub-stream, scaled by 1/rate, with SHARDS_adj."""
    from kvadvisor.cache import stackdist

    n = int(keys.shape[0])
    starts = np.flatnonzero(np.diff(req)) + 1 if n else np.zeros(0, np.int64)
    offsets = np.concatenate(([0], starts, [n])).astype(np.int64) if n else np.zeros(1, np.int64)
    ids, bound = dense_block_ids(keys)
    longest = int(np.diff(offsets).max()) if n else 1
    stackdist.prefix_stack_distances(
        offsets,
        ids,
        np.zeros(max(bound, 1), np.int32),
        np.zeros(n + 1, np.int32),
        np.empty(max(longest, 1), np.int32),
    )
    hit = ids != stackdist.COLD
    dist = ids[hit].astype(np.int64)
    w = tok[hit]
    steady = req[hit] >= warmup
    steps, inverse = np.unique(dist, return_inverse=True)

    def binned(weights: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        wts = weights if mask is None else np.where(mask, weights, 0)
        return np.cumsum(np.bincount(inverse, weights=wts, minlength=steps.shape[0]))

    ones = np.ones(dist.shape[0], np.float64)
    sampled_steady = req >= warmup
    # SHARDS_adj: expected minus actual sampled weight, credited to the first bucket.
    adj_tok_all = rate * sample.block_tokens_all - float(tok.sum())
    adj_tok_steady = rate * sample.block_tokens_steady - float(tok[sampled_steady].sum())
    adj_blk_all = rate * sample.total_accesses - float(n)
    adj_blk_steady = rate * sample.accesses_steady - float(sampled_steady.sum())
    if not count_correction:
        adj_tok_all = adj_tok_steady = adj_blk_all = adj_blk_steady = 0.0
    total_steady_tokens = int(sample.input_tokens[warmup:].sum())
    total_tokens = int(sample.input_tokens.sum())

    def scaled(cum: np.ndarray, adj: float, cap: float) -> np.ndarray:
        return np.clip((cum + adj) / rate, 0.0, float(cap))

    return MissRatioCurve(
        block_tokens=block_tokens,
        # scaled distance d / R; a hit once the cache holds more blocks than that
        capacity_blocks=np.floor(steps / rate).astype(np.int64) + 1,
        hit_tokens_all=scaled(binned(w), adj_tok_all, total_tokens),
        hit_tokens_steady=scaled(binned(w, steady), adj_tok_steady, total_steady_tokens),
        hit_blocks_all=scaled(binned(ones), adj_blk_all, sample.total_accesses),
        hit_blocks_steady=scaled(binned(ones, steady), adj_blk_steady, sample.accesses_steady),
        total_tokens_all=total_tokens,
        total_tokens_steady=total_steady_tokens,
        total_blocks_all=sample.total_accesses,
        total_blocks_steady=sample.accesses_steady,
    )


def estimate_prefix_curve(
    batches: Iterable[pa.RecordBatch],
    *,
    block_tokens: int,
    total_requests: int,
    warmup_fraction: float,
    rate: float,
    salt: int = 0,
    count_correction: bool = True,
) -> PrefixCacheResult:
    """SHARDS estimate of the prefix-cache curve from batches with input_tokens, block_hashes.

    Memory holds only the sampled accesses (about ``rate`` of them) plus one int64 per request.
    The error estimate: the sampled keys are split by independent hash bits into 4 disjoint
    sub-samples (rate R/4 each); the standard deviation of their token hit ratios, divided by
    √4, is averaged over 64 log-spaced capacities (the standard error of the mean of the four).
    """
    if not 0.0 < rate <= 1.0:
        raise ConfigError(f"sampling rate {rate} is outside (0, 1]; give e.g. 0.01")
    threshold = max(1, int(round(rate * HASH_SPACE)))
    eff_rate = threshold / HASH_SPACE
    warmup = warmup_requests_for(total_requests, warmup_fraction)
    sample = _collect(batches, block_tokens, threshold, salt, warmup)
    if sample.keys.shape[0] == 0 and sample.total_accesses > 0:
        raise ConfigError(
            f"sampling rate {rate} drew no block of {sample.total_accesses} accesses; "
            "raise --cache-sample-rate or use the exact pass"
        )
    curve = _scaled_curve(
        sample.keys, sample.req, sample.tok, eff_rate, warmup, sample, block_tokens, count_correction
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
    sample: _Sample,
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
