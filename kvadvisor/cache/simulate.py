"""The prefix-cache simulation's one entry: the exact pass, or the SHARDS estimate beyond it."""

from __future__ import annotations

import numpy as np

from kvadvisor.cache.model import PrefixCacheResult
from kvadvisor.cache.prefix import simulate_arrays, warmup_requests_for
from kvadvisor.cache.shards import block_parts, estimate_prefix_curve
from kvadvisor.trace.arrays import BlockArrays
from kvadvisor.trace.model import Trace

# Above this many block accesses the exact pass (about 30 bytes per access) is replaced by the
# SHARDS estimate unless the caller insists; 100M accesses is about 3 GB for the exact pass.
SAMPLE_ABOVE_ACCESSES = 100_000_000
DEFAULT_SAMPLE_RATE = 0.01


def simulate_blocks(
    blocks: BlockArrays,
    input_tokens: np.ndarray,
    *,
    warmup_fraction: float = 0.5,
    sample_rate: float | None = None,
    sample_above_accesses: int = SAMPLE_ABOVE_ACCESSES,
    sample_salt: int = 0,
) -> PrefixCacheResult:
    """Replay the requests' block hashes through an LRU prefix cache at every capacity at once.

    DESIGN.md's prefix hit: requests in arrival order; a request's hit is the longest leading run
    of its blocks present at arrival; hit tokens = min(hit blocks × block_tokens, input_tokens);
    then every block of the request is inserted or refreshed. Capacity counts whole blocks.
    Exact (O(N log N) in block accesses N) unless ``sample_rate`` is given or N exceeds
    ``sample_above_accesses``, in which case the curve is a SHARDS estimate at ``sample_rate``
    (default 0.01) and the result states the rate and an error estimate.
    """
    requests = int(input_tokens.shape[0])
    warmup = warmup_requests_for(requests, warmup_fraction)
    if sample_rate is not None or blocks.accesses > sample_above_accesses:
        return estimate_prefix_curve(
            block_parts(blocks, input_tokens),
            block_tokens=blocks.block_tokens,
            total_requests=requests,
            warmup_fraction=warmup_fraction,
            rate=DEFAULT_SAMPLE_RATE if sample_rate is None else sample_rate,
            salt=sample_salt,
        )
    return simulate_arrays(
        blocks.offsets,
        blocks.values,
        input_tokens,
        blocks.block_tokens,
        warmup_requests=warmup,
        warmup_fraction=warmup_fraction,
        keep_ids=True,
    )


def simulate_prefix_cache(
    trace: Trace,
    *,
    warmup_fraction: float = 0.5,
    sample_rate: float | None = None,
    sample_above_accesses: int = SAMPLE_ABOVE_ACCESSES,
    sample_salt: int = 0,
) -> PrefixCacheResult:
    """:func:`simulate_blocks` on a trace's own hashes (an error when it has none)."""
    return simulate_blocks(
        BlockArrays.of(trace),
        trace.column_np("input_tokens"),
        warmup_fraction=warmup_fraction,
        sample_rate=sample_rate,
        sample_above_accesses=sample_above_accesses,
        sample_salt=sample_salt,
    )
