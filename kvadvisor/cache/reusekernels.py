"""Compiled kernels for reuse times: the hits' gaps, TTL peaks, exact weighted quantiles.

Imported only inside :func:`kvadvisor.cache.reuse.reuse_times`, so numba loads only when a
curve is computed. Every kernel writes into arrays allocated by the caller.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from kvadvisor.cache.stackdist import COLD
from kvadvisor.firstuse import watch_numba_compiles

# The first compilation of a run is announced (the CLI says it once on a terminal).
watch_numba_compiles()

# Radix select over the 64-bit keys, 16 bits per level: 65,536 buckets (512 KiB) per pass.
RADIX_BITS = 16
RADIX_SHIFTS = (48, 32, 16, 0)


@nb.njit(cache=True, nogil=True)
def reuse_hits(
    offsets, ids, dist, arrival_s, input_tokens, block_tokens, last_req, gap_s, lead_s, tokens
):  # pragma: no cover - compiled
    """Write each hit's gap, running-max gap and tokens, packed; return the number of hits.

    A hit is an access with a finite leading distance (a hit at unbounded capacity). Its gap
    is the seconds since the arrival of the last request that used the block; ``lead_s`` is
    the running maximum of the gaps within the request, so a cache that keeps every block T
    seconds after its last use keeps the hit exactly when ``lead_s <= T`` (the leading run).
    Its tokens are ``min((j+1)·B, I) − min(j·B, I)`` for block j of a request with I input
    tokens. ``last_req`` (int32 per dense id, filled with -1) is scratch.
    """
    k = 0
    for r in range(offsets.shape[0] - 1):
        running = 0.0
        start = offsets[r]
        inp = input_tokens[r]
        for t in range(start, offsets[r + 1]):
            p = last_req[ids[t]]
            if p >= 0 and dist[t] != COLD:
                g = arrival_s[r] - arrival_s[p]
                if g > running:
                    running = g
                gap_s[k] = g
                lead_s[k] = running
                j = t - start
                tokens[k] = min((j + 1) * block_tokens, inp) - min(j * block_tokens, inp)
                k += 1
        for t in range(start, offsets[r + 1]):
            last_req[ids[t]] = r
    return k


@nb.njit(cache=True, nogil=True)
def ttl_peaks(offsets, ids, arrival_s, ttl_s, last_req, count, peak):  # pragma: no cover
    """Peak number of blocks a TTL cache holds, for every TTL in ``ttl_s`` in one sweep.

    A TTL cache holds the blocks last used at most T seconds ago. ``count[q]`` is how many
    blocks have request q as their latest use, the same for every T; ``held[s]`` sums
    ``count`` over the requests no older than ``ttl_s[s]``. ``last_req`` (int32 per dense
    id) and ``count`` (int64 per request) are scratch, reset here; ``peak`` receives the
    peaks.
    """
    last_req[:] = -1
    count[:] = 0
    m = ttl_s.shape[0]
    lo = np.zeros(m, np.int64)
    held = np.zeros(m, np.int64)
    peak[:] = 0
    for r in range(offsets.shape[0] - 1):
        now = arrival_s[r]
        for s in range(m):
            while arrival_s[lo[s]] < now - ttl_s[s]:
                held[s] -= count[lo[s]]
                lo[s] += 1
        for t in range(offsets[r], offsets[r + 1]):
            b = ids[t]
            p = last_req[b]
            if p == r:
                continue
            if p >= 0:
                count[p] -= 1
                for s in range(m):
                    if p >= lo[s]:
                        held[s] -= 1
            count[r] += 1
            for s in range(m):
                held[s] += 1
            last_req[b] = r
        for s in range(m):
            if held[s] > peak[s]:
                peak[s] = held[s]


@nb.njit(cache=True, nogil=True)
def radix_histogram(keys, weights, shift, hist):  # pragma: no cover - compiled
    """Add each key's weight to ``hist[(key >> shift) & 0xFFFF]`` (zeroed by the caller)."""
    for i in range(keys.shape[0]):
        hist[(keys[i] >> shift) & 0xFFFF] += weights[i]


@nb.njit(cache=True, nogil=True)
def radix_gather(keys, weights, shift, bucket, out_keys, out_weights):  # pragma: no cover
    """Copy the keys and weights whose 16-bit digit at ``shift`` is ``bucket``; return how many."""
    k = 0
    for i in range(keys.shape[0]):
        if (keys[i] >> shift) & 0xFFFF == bucket:
            out_keys[k] = keys[i]
            out_weights[k] = weights[i]
            k += 1
    return k


@nb.njit(cache=True, nogil=True)
def weighted_histogram(values, weights, edges, out):  # pragma: no cover - compiled
    """``np.histogram(values, bins=edges, weights=weights)``: bins [e_i, e_i+1), the last closed.

    Values outside [edges[0], edges[-1]] are left out, as numpy does. ``out`` (int64, one per
    bin) is zeroed by the caller.
    """
    nb_bins = edges.shape[0] - 1
    first = edges[0]
    last = edges[nb_bins]
    for i in range(values.shape[0]):
        x = values[i]
        if x < first or x > last:
            continue
        # the bin is the number of edges <= x, less one (binary search over the edges)
        lo = 0
        hi = nb_bins + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if edges[mid] <= x:
                lo = mid + 1
            else:
                hi = mid
        b = lo - 1
        if b == nb_bins:
            b = nb_bins - 1
        out[b] += weights[i]
