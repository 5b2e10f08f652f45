"""Compiled kernels for shared prefixes: the prefix tree's nodes, maximal groups, the split.

Imported only inside :func:`kvadvisor.cache.sharing.measure_sharing`, so numba loads only when
a curve is computed. Every kernel writes into arrays allocated by the caller. Per block id the
caller holds four int32 arrays and one byte of flags (17 bytes per id), per access nothing:
the numpy version this replaces built a request index, a position and several masks per access
(about 1 GiB above the trace on 14.4M accesses).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from kvadvisor.cache.stackdist import _splitmix64
from kvadvisor.firstuse import watch_numba_compiles

# The first compilation of a run is announced (the CLI says it once on a terminal).
watch_numba_compiles()

# Bits of the per-id flags.
BAD_POSITION = np.uint8(1)  # seen at two positions
BAD_PARENT = np.uint8(2)  # seen after two different blocks
ENDS_PROMPT = np.uint8(4)  # an earlier request's whole-block prompt ends with it
KEPT_WHOLE = np.uint8(8)  # a child keeps all its requests (so it is not maximal)

# Slots of the totals the tree pass returns.
T_BAD_POSITION = 0
T_BAD_PARENT = 1
T_WITHIN_ALL = 2
T_ACROSS_ALL = 3
T_WITHIN_STEADY = 4
T_ACROSS_STEADY = 5
T_STARTS = 6  # requests that continue no earlier one (the inferred conversations)
TOTALS = 7


# Called only from the compiled functions below: no Python-callable wrapper is compiled for it
# (see ``fleet/kernel.py``'s ``_inner``).
_inner = nb.njit(cache=True, nogil=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)


@_inner
def _slot(key, slots):  # pragma: no cover - compiled
    """The first slot to probe for ``key`` (Lemire's multiply-shift range reduction)."""
    return np.int64(((_splitmix64(np.uint64(key)) >> np.uint64(32)) * slots) >> np.uint64(32))


@nb.njit(cache=True, nogil=True)
def tree_pass(
    offsets,
    ids,
    input_tokens,
    block_tokens,
    warmup,
    session,
    bound,
    table,
    first_req,
    depth,
    parent,
    count,
    flags,
    totals,
):  # pragma: no cover - compiled
    """One pass over the requests in order: the tree's nodes and the within/across split.

    Per id (scratch, filled by the caller: ``first_req`` -1, the rest 0): the request of its
    first access, its depth (position + 1) and parent (the id before it, -1 at the root) as
    that access saw them, and its access count; ``flags`` marks ids later seen at another
    position or after another block (``totals`` counts each such id once, per kind).

    A request's hit run is its leading run of blocks an earlier request used. Its within run:
    with sessions (``session``, one code per request, -1 none; empty for none at all), the
    leading run an earlier request of its own session used, through the open-addressing set
    ``table`` (int64 keys ``code × bound + id``, -1 empty, at most 0.8 full); without them,
    the deepest position before its last block where an earlier request's whole-block prompt
    (``min(I // B, blocks)`` blocks) ended. Hit and within tokens are ``min(run × B, I)``
    (within capped at the hit run); their sums over all requests and from request ``warmup``
    on go into ``totals``.
    """
    use_sessions = session.shape[0] > 0
    slots = np.uint64(table.shape[0])
    for r in range(offsets.shape[0] - 1):
        start = offsets[r]
        end = offsets[r + 1]
        blocks = end - start
        inp = input_tokens[r]
        code = session[r] if use_sessions else -1
        hit_run = 0
        hit_open = True
        own_run = 0
        own_open = code >= 0
        deepest = 0
        prev = -1
        for t in range(start, end):
            b = ids[t]
            j = t - start
            f = first_req[b]
            if f < 0:
                first_req[b] = r
                depth[b] = j + 1
                parent[b] = prev
            else:
                if depth[b] != j + 1 and (flags[b] & BAD_POSITION) == 0:
                    flags[b] |= BAD_POSITION
                    totals[T_BAD_POSITION] += 1
                if parent[b] != prev and (flags[b] & BAD_PARENT) == 0:
                    flags[b] |= BAD_PARENT
                    totals[T_BAD_PARENT] += 1
            count[b] += 1
            if hit_open:
                if 0 <= f < r:
                    hit_run += 1
                else:
                    hit_open = False
            if use_sessions:
                if own_open:
                    key = code * bound + b
                    s = _slot(key, slots)
                    while table[s] != key and table[s] != -1:
                        s += 1
                        if s == np.int64(slots):
                            s = 0
                    if table[s] == key:
                        own_run += 1
                    else:
                        own_open = False
            elif (flags[b] & ENDS_PROMPT) != 0 and j < blocks - 1:
                deepest = j + 1
            prev = b
        # This request's own blocks count for later requests only.
        if use_sessions:
            within_run = own_run
            if code >= 0:
                for t in range(start, end):
                    key = code * bound + ids[t]
                    s = _slot(key, slots)
                    while table[s] != key and table[s] != -1:
                        s += 1
                        if s == np.int64(slots):
                            s = 0
                    table[s] = key
        else:
            within_run = deepest
            if deepest == 0:
                totals[T_STARTS] += 1
            full = min(inp // block_tokens, blocks)
            if full > 0:
                flags[ids[start + full - 1]] |= ENDS_PROMPT
        within_run = min(within_run, hit_run)
        hit = min(hit_run * block_tokens, inp)
        within = min(within_run * block_tokens, inp)
        totals[T_WITHIN_ALL] += within
        totals[T_ACROSS_ALL] += hit - within
        if r >= warmup:
            totals[T_WITHIN_STEADY] += within
            totals[T_ACROSS_STEADY] += hit - within


@nb.njit(cache=True, nogil=True)
def maximal_nodes(first_req, parent, count, flags):  # pragma: no cover - compiled
    """Mark the ids a child keeps whole; return how many maximal shared prefixes there are.

    A node is maximal when its count is at least 2 and no child has the same count.
    """
    for b in range(first_req.shape[0]):
        p = parent[b]
        if first_req[b] >= 0 and p >= 0 and count[b] == count[p]:
            flags[p] |= KEPT_WHOLE
    groups = 0
    for b in range(first_req.shape[0]):
        if count[b] >= 2 and (flags[b] & KEPT_WHOLE) == 0:
            groups += 1
    return groups


@nb.njit(cache=True, nogil=True)
def node_rows(
    offsets, ids, input_tokens, block_tokens, count, depth, flags, index, nodes, tokens
):  # pragma: no cover - compiled
    """List the maximal nodes (in id order) with their prefix tokens; return requests sharing.

    ``index`` (int32 per id; the tree pass's ``parent``, no longer needed) receives each
    maximal node's row, -1 elsewhere. A node's tokens are its depth × B, or the smallest
    prompt ending inside it: an access at position j covers fewer than (j + 1) × B tokens
    exactly when ``j >= I // B``. Requests sharing: those whose first block has count >= 2.
    """
    k = 0
    for b in range(count.shape[0]):
        if count[b] >= 2 and (flags[b] & KEPT_WHOLE) == 0:
            index[b] = k
            nodes[k] = b
            tokens[k] = np.int64(depth[b]) * block_tokens
            k += 1
        else:
            index[b] = -1
    sharing = 0
    for r in range(offsets.shape[0] - 1):
        start = offsets[r]
        end = offsets[r + 1]
        if end == start:
            continue
        if count[ids[start]] >= 2:
            sharing += 1
        inp = input_tokens[r]
        for t in range(start + min(inp // block_tokens, end - start), end):
            row = index[ids[t]]
            if row >= 0 and inp < tokens[row]:
                tokens[row] = inp
    return sharing


@nb.njit(cache=True, nogil=True)
def top_rows(first, second, third, fourth, out):  # pragma: no cover - compiled
    """The best rows into ``out`` (as many as fit); return how many were written.

    Rows rank by ``first``, then ``second`` (both descending), then ``third``, then ``fourth``
    (both ascending). Each row is inserted into the kept ones, so G rows cost O(G), plus
    O(len(out)) per row that enters the ranking.
    """
    kept = 0
    top = out.shape[0]
    for i in range(first.shape[0]):
        pos = kept
        while pos > 0:
            o = out[pos - 1]
            if first[i] != first[o]:
                better = first[i] > first[o]
            elif second[i] != second[o]:
                better = second[i] > second[o]
            elif third[i] != third[o]:
                better = third[i] < third[o]
            else:
                better = fourth[i] < fourth[o]
            if not better:
                break
            pos -= 1
        if pos >= top:
            continue
        last = min(kept, top - 1)
        for q in range(last, pos, -1):
            out[q] = out[q - 1]
        out[pos] = i
        if kept < top:
            kept += 1
    return kept
