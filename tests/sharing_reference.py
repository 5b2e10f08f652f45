"""The numpy shared-prefix analysis the product used before its compiled pass: the slow reference.

``kvadvisor.cache.sharing.measure_sharing`` computes the same results in one compiled pass;
the tests check it against this version, which is itself checked against plain-Python replays
(``tests/test_cache_sharing.py``). Vectorised over the flattened accesses: a request index, a
position and several masks per access, with ids renumbered in order of first use.
"""

from __future__ import annotations

import numpy as np

from kvadvisor.cache.prefix import _remap
from kvadvisor.cache.sharing import (
    TOP_SHARED_PREFIXES,
    PrefixSharing,
    ReuseSplit,
    SharedPrefix,
)


def first_use_ids(ids: np.ndarray) -> np.ndarray:
    """Dense ids numbered in order of first use: ``ids`` as they are when already so, else remapped.

    In first-use order, access i is the first of its id exactly when the id exceeds every id
    before it, which lets first occurrences be found without sorting or scattered minima.
    """
    if ids.shape[0] == 0:
        return ids
    seen_max = np.maximum.accumulate(ids)
    if int(ids[0]) == 0 and bool(np.all(ids[1:] <= seen_max[:-1] + 1)):
        return ids
    return _remap(np.ascontiguousarray(ids, dtype=np.int64))[0]


class PrefixTree:
    """The trace's block accesses as nodes of its prefix tree (ids renumbered by first use).

    ``ids`` numbers every distinct hash in order of first use, so an id's first access is the
    first whose id exceeds all before it, and ids in increasing order are in first-seen order.
    ``request``/``pos``: each access's request row and position in it; ``depth`` and
    ``parent`` per id (position + 1, and the id before it, -1 at the root), written from any
    one access; ``problem`` says why the hashes are not a tree (an id at two positions, or
    after two different ids), None when they are.
    """

    def __init__(self, offsets: np.ndarray, ids: np.ndarray) -> None:
        self.offsets = np.asarray(offsets, dtype=np.int64) - int(offsets[0])
        self.ids = first_use_ids(ids)
        lengths = np.diff(self.offsets)
        self.requests = int(lengths.shape[0])
        self.request = np.repeat(np.arange(self.requests, dtype=np.int64), lengths)
        n = self.ids.shape[0]
        self.bound = int(self.ids.max()) + 1 if n else 0
        self.pos = np.arange(n, dtype=np.int64) - self.offsets[self.request]
        parent = np.full(n, -1, np.int64)
        parent[1:] = self.ids[:-1]
        parent[self.pos == 0] = -1
        self.depth = np.zeros(self.bound, np.int64)
        self.depth[self.ids] = self.pos + 1
        self.parent = np.full(self.bound, -1, np.int64)
        self.parent[self.ids] = parent
        # Any one access wins each write above; reading back agrees with every access exactly
        # when all accesses of each id agree.
        self.problem = None
        for what, kept, arr in (
            ("position", self.depth, self.pos + 1),
            ("preceding block", self.parent, parent),
        ):
            bad = np.unique(self.ids[kept[self.ids] != arr])
            if bad.size:
                self.problem = (
                    f"block hashes are not prefix-chained: one hash appears with more than one "
                    f"{what} ({bad.size:,} such hashes), so shared prefixes cannot be told apart"
                )
                break

    def first_requests(self) -> np.ndarray:
        """Per id, the request of its first access."""
        return _first_requests(self.ids, self.request)


def _first_requests(ordered: np.ndarray, request: np.ndarray) -> np.ndarray:
    """Per id of ``ordered`` (ids in first-use order), the request of its first access.

    An access is the first of its id exactly when the id exceeds every id before it, so each
    id is written once (no scattered minimum, no sort).
    """
    if ordered.shape[0] == 0:
        return np.zeros(0, np.int64)
    first = np.empty(ordered.shape[0], bool)
    first[0] = True
    first[1:] = ordered[1:] > np.maximum.accumulate(ordered)[:-1]
    out = np.empty(int(ordered.max()) + 1, np.int64)
    out[ordered[first]] = request[first]
    return out


def shared_prefixes(
    tree: PrefixTree,
    input_tokens: np.ndarray,
    block_tokens: int,
    top: int = TOP_SHARED_PREFIXES,
) -> PrefixSharing:
    """The maximal shared prefixes of a trace, top ``top`` by requests and by reusable tokens.

    The hashes must be prefix-chained (``tree.problem`` None).
    """
    if tree.problem is not None:
        raise ValueError(tree.problem)
    if tree.ids.shape[0] == 0:
        return PrefixSharing(0, 0, (), ())
    ids, pos, request = tree.ids, tree.pos, tree.request
    count = np.bincount(ids, minlength=tree.bound).astype(np.int64)
    # Tokens up to and including each node: whole blocks, or fewer where a prompt ends inside
    # it (only those accesses need the minimum).
    tokens = tree.depth * block_tokens
    whole = (pos + 1) * block_tokens
    covered = np.minimum(whole, np.asarray(input_tokens, dtype=np.int64)[request])
    short = np.flatnonzero(covered < whole)
    np.minimum.at(tokens, ids[short], covered[short])
    # A node is maximal when shared and no child keeps all its requests.
    parent = tree.parent
    children = np.flatnonzero(parent >= 0)
    keeps_all = children[count[children] == count[parent[children]]]
    kept_whole = np.zeros(tree.bound, bool)
    kept_whole[parent[keeps_all]] = True
    nodes = np.flatnonzero((count >= 2) & ~kept_whole)
    reusable = tokens[nodes] * (count[nodes] - 1)
    first = tree.first_requests()[nodes]

    def rows(order: np.ndarray) -> tuple[SharedPrefix, ...]:
        return tuple(
            SharedPrefix(
                blocks=int(tree.depth[nodes[i]]),
                prefix_tokens=int(tokens[nodes[i]]),
                requests=int(count[nodes[i]]),
                reusable_tokens=int(reusable[i]),
                first_request=int(first[i]),
            )
            for i in order[:top]
        )

    # np.lexsort sorts by the last key first; ids in first-use order break the last ties.
    by_count = np.lexsort((nodes, -tree.depth[nodes], -count[nodes]))
    by_volume = np.lexsort((nodes, -count[nodes], -reusable))
    firsts = ids[tree.offsets[:-1][np.diff(tree.offsets) > 0]]
    return PrefixSharing(
        groups=int(nodes.shape[0]),
        requests_sharing=int(np.count_nonzero(count[firsts] >= 2)),
        top_by_count=rows(by_count),
        top_by_volume=rows(by_volume),
    )


def _leading_run(flags: np.ndarray, tree: PrefixTree) -> np.ndarray:
    """Per request, how many of its leading accesses have ``flags`` set."""
    run = np.diff(tree.offsets).astype(np.int64)
    breaks = np.flatnonzero(~flags)
    if breaks.size:
        # The first unset access of each request ends its run (accesses are in request order).
        req = tree.request[breaks]
        first = np.ones(breaks.size, bool)
        first[1:] = req[1:] != req[:-1]
        run[req[first]] = tree.pos[breaks[first]]
    return run


def _held_before(keys: np.ndarray, request: np.ndarray) -> np.ndarray:
    """Per access, whether an earlier request had the same key."""
    ordered = first_use_ids(keys)
    return _first_requests(ordered, request)[ordered] < request


def reuse_split(
    tree: PrefixTree,
    input_tokens: np.ndarray,
    block_tokens: int,
    *,
    warmup_requests: int,
    session: np.ndarray | None = None,
) -> ReuseSplit:
    """Hit tokens within and across conversations (see :class:`ReuseSplit`).

    ``session`` holds one integer code per request (-1: none), or is None to infer
    conversations from continuations (which needs chained hashes: ``tree.problem`` None). The
    leading run is the unbounded prefix hit of the documented definition: a block is a hit
    when any earlier request held it.
    """
    n = tree.requests
    ids, request, pos = tree.ids, tree.request, tree.pos
    inp = np.asarray(input_tokens, dtype=np.int64)
    first = tree.first_requests()
    hit_run = _leading_run(first[ids] < request, tree)
    if session is not None:
        basis = "session"
        codes = np.asarray(session, dtype=np.int64)
        own = codes >= 0
        conversations = int(np.unique(codes[own]).shape[0]) + int(np.count_nonzero(~own))
        # A request without a session shares a conversation with no one: give it its own code.
        solo = codes.max(initial=-1) + 1 + np.arange(n, dtype=np.int64)
        codes = np.where(own, codes, solo)
        # (session, block) pairs as one key, numbered by first use through the hash map.
        key = codes[request] * np.int64(max(tree.bound, 1)) + ids.astype(np.int64)
        within_run = _leading_run(_held_before(key, request), tree)
    else:
        if tree.problem is not None:
            raise ValueError(tree.problem)
        basis = "continuation"
        lengths = np.diff(tree.offsets)
        # Each request's prompt in whole blocks: a partial last block is left out, since the
        # next turn extends it and its hash then changes (Mooncake hashes partial blocks).
        full = np.minimum(inp // block_tokens, lengths)
        has_full = full > 0
        last_full = ids[tree.offsets[:-1][has_full] + full[has_full] - 1]
        # Per id, the first request whose whole-block prompt ends with it.
        ends_first = np.full(tree.bound, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(ends_first, last_full, np.flatnonzero(has_full))
        # Strictly shorter: the earlier prompt ends before this one's last block, so the same
        # prompt sent again (a retry, or one question many users ask) is no continuation.
        continues = (ends_first[ids] < request) & (pos < lengths[request] - 1)
        # The deepest such block: a continuation covers every block up to it.
        depth = np.zeros(n, np.int64)
        np.maximum.at(depth, request[continues], pos[continues] + 1)
        within_run = depth
        # A conversation starts at every request that continues none.
        conversations = int(np.count_nonzero(depth == 0))
    within_run = np.minimum(within_run, hit_run)
    hit = np.minimum(hit_run * block_tokens, inp)
    within = np.minimum(within_run * block_tokens, inp)
    across = hit - within
    w = warmup_requests
    return ReuseSplit(
        basis=basis,
        conversations=conversations,
        warmup_requests=w,
        input_tokens_all=int(inp.sum()),
        within_tokens_all=int(within.sum()),
        across_tokens_all=int(across.sum()),
        input_tokens_steady=int(inp[w:].sum()),
        within_tokens_steady=int(within[w:].sum()),
        across_tokens_steady=int(across[w:].sum()),
    )
