"""Compiled kernels: dense-id remap, prefix-aware LRU stack distances (Fenwick tree), curve bins.

This module imports numba at import time; ``kvadvisor.cache`` imports it only inside the
functions that compute a curve, so reading a trace or rendering a report never pays for numba.
Every kernel writes into arrays allocated by the caller (numpy, hence visible to tracemalloc),
so memory use is explicit and measurable.

Stack distance by counting live markers (Bennett and Kruskal, 1975; Almasi et al., 2002): each
block keeps one marker at the stream position of its most recent access; the number of markers
after a block's previous access is the number of distinct blocks used since, i.e. its LRU stack
depth minus one. A Fenwick tree (Fenwick, 1994) answers that count in O(log N).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from kvadvisor.firstuse import watch_numba_compiles

# The first compilation of a run is announced (the CLI says it once on a terminal).
watch_numba_compiles()

# Distance of a block that is not in the cache at any capacity (cold, or after a cold block of
# the same request, which breaks the leading run).
COLD = np.int32(np.iinfo(np.int32).max)

_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@nb.njit(cache=True, nogil=True)
def _splitmix64(x: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    """SplitMix64 finaliser (Steele, Lea and Flood, 2014): a fast, well-mixed 64-bit hash."""
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@nb.njit(cache=True, nogil=True)
def remap_dense(values, table, out):  # pragma: no cover - compiled
    """Map arbitrary int64 keys to dense ids 0..U-1 in order of first appearance; return U.

    Open addressing with linear probing over ``table`` (int64, 2 × slots, zero-filled): slot
    s keeps its key at 2s and its id + 1 at 2s + 1 (0 = empty, so a freshly calloc'ed table
    needs no fill pass), and a probe touches one cache line. The slot count need not be a
    power of two: the hash's top 32 bits are scaled onto it (Lemire's multiply-shift range
    reduction), so the table is sized to the load it needs.
    """
    slots = np.uint64(table.shape[0] // 2)
    n_unique = 0
    for i in range(values.shape[0]):
        key = values[i]
        s = np.int64(((_splitmix64(np.uint64(key)) >> np.uint64(32)) * slots) >> np.uint64(32))
        while True:
            found = table[2 * s + 1]
            if found == 0:
                table[2 * s] = key
                n_unique += 1
                table[2 * s + 1] = n_unique
                out[i] = n_unique - 1
                break
            if table[2 * s] == key:
                out[i] = found - 1
                break
            s += 1
            if s == np.int64(slots):
                s = 0
    return n_unique


@nb.njit(cache=True, nogil=True)
def prefix_stack_distances(offsets, ids, last_pos, tree, scratch):  # pragma: no cover - compiled
    """Replace ``ids`` in place by each access's leading-run LRU distance; return the largest.

    For request r (accesses ``offsets[r]:offsets[r+1]``), every block's distance is measured
    against the cache state at the request's arrival (before any of its own blocks is touched):
    the number of distinct blocks used since the block's last use. The value stored is the
    running maximum over the request's blocks so far, so block j is a hit at capacity C blocks
    exactly when ``value < C``: it and every earlier block of the request are among the C most
    recently used. COLD marks blocks never seen before and every block after one. Then all the
    request's blocks are moved to the top of the stack in order (insert or refresh).

    ``last_pos`` (int32, one per dense id, filled with 0) holds each block's last position,
    1-based; ``tree`` (int32, N + 1 zeros) is the Fenwick tree of live markers; ``scratch``
    (int32) is as long as the longest request.
    """
    n = ids.shape[0]
    live = 0
    max_finite = -1
    for r in range(offsets.shape[0] - 1):
        start = offsets[r]
        end = offsets[r + 1]
        running = np.int32(0)
        for t in range(start, end):
            if running == COLD:
                scratch[t - start] = COLD
                continue
            p = last_pos[ids[t]]
            if p == 0:
                running = COLD
            else:
                # markers at positions <= p
                s = 0
                i = p
                while i > 0:
                    s += tree[i]
                    i -= i & (-i)
                d = np.int32(live - s)
                if d > running:
                    running = d
                if running > max_finite:
                    max_finite = running
            scratch[t - start] = running
        for t in range(start, end):
            k = ids[t]
            p = last_pos[k]
            if p == 0:
                live += 1
            else:
                i = p
                while i <= n:
                    tree[i] -= 1
                    i += i & (-i)
            i = t + 1
            while i <= n:
                tree[i] += 1
                i += i & (-i)
            last_pos[k] = t + 1
        for t in range(start, end):
            ids[t] = scratch[t - start]
    return max_finite


@nb.njit(cache=True, nogil=True)
def curve_bins(
    offsets, dist, input_tokens, block_tokens, steady_from, tok_all, tok_steady, blk_all, blk_steady
):  # pragma: no cover - compiled
    """Histogram hit tokens and hit blocks by leading-run distance, over all and steady requests.

    A block at position j of a request with I input tokens carries
    ``min((j+1)·B, I) − min(j·B, I)`` tokens, so the tokens of a request's first k blocks sum to
    ``min(k·B, I)`` (DESIGN.md's hit-token cap). Requests with index >= ``steady_from`` are
    steady state. Returns per-request hit tokens at unbounded capacity (int64).
    """
    n_req = offsets.shape[0] - 1
    hit = np.zeros(n_req, np.int64)
    for r in range(n_req):
        start = offsets[r]
        end = offsets[r + 1]
        inp = input_tokens[r]
        steady = r >= steady_from
        for t in range(start, end):
            d = dist[t]
            if d == COLD:
                break
            j = t - start
            lo = min(j * block_tokens, inp)
            hi = min((j + 1) * block_tokens, inp)
            tok = hi - lo
            tok_all[d] += tok
            blk_all[d] += 1
            hit[r] += tok
            if steady:
                tok_steady[d] += tok
                blk_steady[d] += 1
    return hit


@nb.njit(cache=True, nogil=True)
def leading_hits_at(offsets, dist, capacity_blocks, out):  # pragma: no cover - compiled
    """Per request, the number of leading blocks whose distance is below ``capacity_blocks``."""
    for r in range(offsets.shape[0] - 1):
        k = 0
        for t in range(offsets[r], offsets[r + 1]):
            if dist[t] >= capacity_blocks:
                break
            k += 1
        out[r] = k


@nb.njit(cache=True, nogil=True)
def sample_batch(
    offsets,
    values,
    input_tokens,
    block_tokens,
    r0,
    warmup,
    threshold,
    salt,
    subsamples,
    out_keys,
    out_req,
    out_tok,
    out_label,
    totals,
):  # pragma: no cover - compiled
    """One record batch through the SHARDS spatial filter, fused with the exact totals.

    SHARDS (Waldspurger et al., FAST'15) samples a key by its hash, not by time: a key is kept
    when ``splitmix64(key ^ salt) mod 2^24 < threshold``, and then every access of it is kept,
    so reuse among sampled keys is exact. Higher hash bits give the key's sub-sample label in
    ``[0, subsamples)``, independent of the sampling bits, used to estimate the error.
    Appends each sampled access's key, global request index (``r0`` + row), tokens
    ``min((j+1)·B, I) − min(j·B, I)`` and sub-sample label to the ``out_*`` arrays, and adds
    to ``totals`` = [accesses, steady accesses, block tokens, steady block tokens]. Returns the
    number of sampled accesses.
    """
    k = 0
    for r in range(offsets.shape[0] - 1):
        inp = input_tokens[r]
        steady = r0 + r >= warmup
        start = offsets[r]
        for t in range(start, offsets[r + 1]):
            j = t - start
            tok = min((j + 1) * block_tokens, inp) - min(j * block_tokens, inp)
            totals[0] += 1
            totals[2] += tok
            if steady:
                totals[1] += 1
                totals[3] += tok
            h = _splitmix64(np.uint64(values[t]) ^ salt)
            if np.int64(h & np.uint64(0xFFFFFF)) < threshold:
                out_keys[k] = values[t]
                out_req[k] = r0 + r
                out_tok[k] = tok
                out_label[k] = np.int8(np.int64(h >> np.uint64(40)) % subsamples)
                k += 1
    return k
