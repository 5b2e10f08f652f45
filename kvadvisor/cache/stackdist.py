"""Compiled kernels: dense-id remap, prefix-aware LRU stack distances (Fenwick tree), curve bins.

This module imports numba at import time; ``kvadvisor.cache`` imports it only inside the
functions that compute a curve, so reading a trace or rendering a report never pays for numba.
Every kernel writes into arrays allocated by the caller (numpy, hence visible to tracemalloc),
so memory use is explicit and measurable.

Stack distance by counting live markers (Bennett and Kruskal, 1975; Almasi et al., 2002): each
block keeps one marker at the stream position of its most recent access; the number of markers
after a block's previous access is the number of distinct blocks used since, i.e. its LRU stack
depth minus one. A Fenwick tree (Fenwick, 1994) over 64-position words of a marker bitmap
answers that count in O(log N).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba import types
from numba.extending import intrinsic

from kvadvisor.firstuse import watch_numba_compiles

# The first compilation of a run is announced (the CLI says it once on a terminal).
watch_numba_compiles()

# Distance of a block that is not in the cache at any capacity (cold, or after a cold block of
# the same request, which breaks the leading run).
COLD = np.int32(np.iinfo(np.int32).max)

_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


# Called only from the compiled functions below: no Python-callable wrapper is compiled for them
# (see ``fleet/kernel.py``'s ``_inner``).
_inner = nb.njit(cache=True, nogil=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)


@_inner
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


@intrinsic
def _popcount(typingctx, x):  # pragma: no cover - compiled
    """Set bits of a uint64 (LLVM's ctpop: one POPCNT instruction where the CPU has it)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen


@_inner
def _markers_through(bits, tree, q):  # pragma: no cover - compiled
    """Live markers at stream positions 0..q (0-based, inclusive)."""
    w = q >> 6
    s = 0
    i = w
    while i > 0:
        s += tree[i]
        i -= i & (-i)
    word = bits[w]
    b = q & 63
    if b < 63:
        word &= (np.uint64(2) << np.uint64(b)) - np.uint64(1)
    return s + np.int64(_popcount(word))


@_inner
def _add_to_word(tree, words, w, delta):  # pragma: no cover - compiled
    """Add ``delta`` markers to word w's count in the Fenwick tree."""
    i = w + 1
    while i <= words:
        tree[i] += delta
        i += i & (-i)


@_inner
def _move_to_top(ids, start, end, first, base, last_pos, bits, tree):  # pragma: no cover
    """Insert or refresh blocks ``ids[start:end]`` in order at stream positions ``first``...

    Positions are 0-based; ``last_pos`` keeps them 1-based, plus ``base``: a value up to
    ``base`` is a block this stream has not seen. Each block's marker moves from its previous
    position to its new one; returns how many blocks were new (no previous position).
    A request's new positions are consecutive, so their markers are set a word at a time, and
    the markers it clears (mostly one earlier request's consecutive positions, for chained
    hashes) are counted out of the tree once per run of the same word: a handful of tree
    walks per request instead of two per block. A block seen twice in the request clears the
    marker its first occurrence set, as moving it twice would.
    """
    words = bits.shape[0]
    last = first + (end - start)
    q = first
    while q < last:
        w = q >> 6
        upto = min(last, (w + 1) << 6)
        n = upto - q
        ones = ~np.uint64(0) if n == 64 else (np.uint64(1) << np.uint64(n)) - np.uint64(1)
        bits[w] |= ones << np.uint64(q & 63)
        _add_to_word(tree, words, w, n)
        q = upto
    new = 0
    word = -1
    delta = 0
    for t in range(start, end):
        k = ids[t]
        p = last_pos[k] - base
        if p <= 0:
            new += 1
        else:
            q = p - 1
            w = q >> 6
            bits[w] &= ~(np.uint64(1) << np.uint64(q & 63))
            if w != word:
                if delta != 0:
                    _add_to_word(tree, words, word, delta)
                word = w
                delta = 0
            delta -= 1
        last_pos[k] = base + first + (t - start) + 1
    if delta != 0:
        _add_to_word(tree, words, word, delta)
    return new


@nb.njit(cache=True, nogil=True)
def prefix_stack_distances(offsets, ids, last_pos, bits, tree, scratch):  # pragma: no cover
    """Replace ``ids`` in place by each access's leading-run LRU distance; return the largest.

    For request r (accesses ``offsets[r]:offsets[r+1]``), every block's distance is measured
    against the cache state at the request's arrival (before any of its own blocks is touched):
    the number of distinct blocks used since the block's last use. The value stored is the
    running maximum over the request's blocks so far, so block j is a hit at capacity C blocks
    exactly when ``value < C``: it and every earlier block of the request are among the C most
    recently used. COLD marks blocks never seen before and every block after one. Then all the
    request's blocks are moved to the top of the stack in order (insert or refresh).

    ``last_pos`` (int32, one per dense id, filled with 0) holds each block's last position,
    1-based. The live markers are one bit per stream position in ``bits`` (uint64, N // 64 + 1
    words, zeros) with a Fenwick tree over the words' counts in ``tree`` (int32, one more than
    the words, zeros): a count is the tree's prefix over whole words plus a popcount of the
    last word, so the tree is 64 times smaller than one over positions (0.9 MB instead of
    58 MB for 14.4M accesses) and stays in cache. ``scratch`` (int32) is as long as the
    longest request.

    The distance falls as the last position p rises (markers after p), so the running maximum
    is the distance of the request's smallest p so far: only a block last used before every
    earlier block of the request needs counting. With chained hashes that is about one count
    per request (a prefix an earlier request sent has consecutive positions), not one per
    block.
    """
    live = 0
    max_finite = -1
    for r in range(offsets.shape[0] - 1):
        start = offsets[r]
        end = offsets[r + 1]
        running = np.int32(0)
        lowest = np.iinfo(np.int32).max
        for t in range(start, end):
            if running == COLD:
                scratch[t - start] = COLD
                continue
            p = last_pos[ids[t]]
            if p == 0:
                running = COLD
            elif p < lowest:
                lowest = p
                # markers at positions <= p (1-based), i.e. 0..p-1
                d = np.int32(live - _markers_through(bits, tree, p - 1))
                if d > running:
                    running = d
                if running > max_finite:
                    max_finite = running
            scratch[t - start] = running
        # np.int64(0), not the literal 0, which would compile a specialisation of its own
        live += _move_to_top(ids, start, end, start, np.int64(0), last_pos, bits, tree)
        for t in range(start, end):
            ids[t] = scratch[t - start]
    return max_finite


def leading_distances(offsets: np.ndarray, ids: np.ndarray, id_bound: int) -> int:
    """Run :func:`prefix_stack_distances` over ``ids`` (int32 dense ids, overwritten in place).

    Allocates its scratch (4 bytes per distinct id, 3 bits per access) and frees it on return;
    returns the largest finite distance (-1 when there is none).
    """
    n = int(ids.shape[0])
    words = n // 64 + 1
    longest = int(np.diff(offsets).max()) if offsets.shape[0] > 1 else 0
    return int(
        prefix_stack_distances(
            offsets,
            ids,
            np.zeros(max(int(id_bound), 1), np.int32),
            np.zeros(words, np.uint64),
            np.zeros(words + 1, np.int32),
            np.empty(max(longest, 1), np.int32),
        )
    )


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


@nb.njit(cache=True, nogil=True)
def instance_hits(
    offsets, ids, rows, input_tokens, block_tokens, warmup, caps, base, last_pos, bits, tree, out
):  # pragma: no cover - compiled
    """Replay the requests ``rows`` (ascending) through one instance's own LRU cache; bin its hits.

    The leading-run distances of :func:`prefix_stack_distances`, with stream positions counted
    within the instance, binned at once at a few capacities: ``caps`` are finite capacities in
    blocks, ascending, and a hit at distance d adds its tokens to ``out[0, k]`` (and
    ``out[1, k]`` for rows from ``warmup`` on), k the number of caps <= d. The hit tokens at
    cap i are then ``out[:, :i + 1]`` summed, and at unbounded capacity all of ``out``. Once a
    request's running distance reaches the largest cap, no later block of it changes its bin:
    they only need to have been seen before, so they are not counted.

    ``last_pos`` (int32, one per dense id) serves every instance in turn without being
    cleared: this instance writes positions above ``base`` (which the caller raises past each
    instance's accesses, and below which every earlier value lies), so any value up to it
    means "not seen here". ``bits`` and ``tree`` are sized for the instance's accesses at
    least (as :func:`leading_distances` sizes them) and zeroed here.
    """
    m = caps.shape[0]
    top = caps[m - 1] if m else 0
    # The bin of distance 0 (caps of 0 blocks hold nothing): where every request starts.
    k0 = 0
    while k0 < m and caps[k0] <= 0:
        k0 += 1
    bits[:] = 0
    tree[:] = 0
    live = 0
    pos = np.int64(0)  # not the literal 0, which would compile one more _move_to_top
    for q in range(rows.shape[0]):
        r = rows[q]
        start = offsets[r]
        end = offsets[r + 1]
        inp = input_tokens[r]
        running = 0
        k = k0
        lowest = np.iinfo(np.int64).max
        for t in range(start, end):
            p = last_pos[ids[t]] - base
            if p <= 0:
                break
            # Only a new smallest p raises the running maximum (see prefix_stack_distances).
            if running < top and p < lowest:
                lowest = p
                d = live - _markers_through(bits, tree, p - 1)
                if d > running:
                    running = d
                    while k < m and caps[k] <= running:
                        k += 1
            j = t - start
            tok = min((j + 1) * block_tokens, inp) - min(j * block_tokens, inp)
            out[0, k] += tok
            if r >= warmup:
                out[1, k] += tok
        live += _move_to_top(ids, start, end, pos, base, last_pos, bits, tree)
        pos += end - start
