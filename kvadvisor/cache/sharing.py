"""Who shares which prefix: the top shared prefixes, and reuse within and across conversations.

Block hashes are prefix-chained, so a request's hashes are a path from the root of a prefix
tree and a block id names one node of it (every id sits at one position with one predecessor).
A node's count is the number of requests whose prompt passes through it. Both measurements are
at unbounded capacity, over all requests, and vectorised over the flattened block accesses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Shared prefixes listed per ranking.
TOP_SHARED_PREFIXES = 10


@dataclass(frozen=True)
class SharedPrefix:
    """A maximal shared prefix: a node shared by ``requests`` >= 2 that none of its children is.

    ``prefix_tokens`` is its length in tokens (``blocks × block_tokens``, shorter when the
    prefix ends in a request's partial last block); ``reusable_tokens`` =
    ``prefix_tokens × (requests − 1)``: every request after the first that starts with the
    prefix could load it instead of computing it. ``first_request`` is the row of the first
    request holding it.
    """

    blocks: int
    prefix_tokens: int
    requests: int
    reusable_tokens: int
    first_request: int


@dataclass(frozen=True)
class PrefixSharing:
    """The shared-prefix structure of a trace.

    ``groups`` counts the maximal shared prefixes; ``requests_sharing`` the requests whose first
    block another request also has. ``top_by_count`` ranks the groups by requests (ties: longer
    first), ``top_by_volume`` by reusable tokens (ties: more requests first), then by first
    appearance.
    """

    groups: int
    requests_sharing: int
    top_by_count: tuple[SharedPrefix, ...]
    top_by_volume: tuple[SharedPrefix, ...]


@dataclass(frozen=True)
class ReuseSplit:
    """Prefix-hit tokens at unbounded capacity, split by who held the prefix before.

    A request's hit is its leading run of blocks some earlier request held. The part of that
    run an earlier request *of the same conversation* held is ``within``; the rest (a system
    prompt or document another conversation sent) is ``across``. ``basis`` says how a
    conversation is known: "session" (the trace's ``session_id``; a request without one is a
    conversation of its own) or "continuation" (no sessions: inferred from the hashes, a
    request continues a conversation when the whole blocks of an earlier request's prompt are
    a prefix of its own, ending before its last block, as the next turn of a chat resends the
    previous one; a prompt that is only a widely shared prefix, a system prompt alone, makes
    later requests look like its continuations, so this ``within`` is an upper bound).
    Tokens over all requests, then over the steady-state requests (from row
    ``warmup_requests`` on).
    """

    basis: str
    conversations: int
    warmup_requests: int
    input_tokens_all: int
    within_tokens_all: int
    across_tokens_all: int
    input_tokens_steady: int
    within_tokens_steady: int
    across_tokens_steady: int


def _request_of_access(offsets: np.ndarray) -> np.ndarray:
    lengths = np.diff(offsets)
    return np.repeat(np.arange(lengths.shape[0], dtype=np.int64), lengths)


def _positions(offsets: np.ndarray, request: np.ndarray) -> np.ndarray:
    return np.arange(int(offsets[-1]) - int(offsets[0]), dtype=np.int64) - (
        offsets[request] - offsets[0]
    )


def _first_request(ids: np.ndarray, request: np.ndarray, bound: int) -> np.ndarray:
    """Per id, the first request holding it (int64 max where no request holds it)."""
    first = np.full(bound, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, ids, request)
    return first


def chained_problem(offsets: np.ndarray, ids: np.ndarray, bound: int) -> str | None:
    """None when every block id sits at one position with one predecessor, else what breaks it."""
    request = _request_of_access(offsets)
    pos = _positions(offsets, request)
    parent = np.where(pos > 0, np.concatenate([[-1], ids[:-1]]), -1).astype(np.int64)
    for what, arr in (("position", pos), ("preceding block", parent)):
        lo = np.full(bound, np.iinfo(np.int64).max, np.int64)
        hi = np.full(bound, np.iinfo(np.int64).min, np.int64)
        np.minimum.at(lo, ids, arr)
        np.maximum.at(hi, ids, arr)
        bad = np.flatnonzero((lo != hi) & (hi != np.iinfo(np.int64).min))
        if bad.size:
            return (
                f"block hashes are not prefix-chained: one hash appears with more than one "
                f"{what} ({bad.size:,} such hashes), so shared prefixes cannot be told apart"
            )
    return None


def shared_prefixes(
    offsets: np.ndarray,
    ids: np.ndarray,
    bound: int,
    input_tokens: np.ndarray,
    block_tokens: int,
    top: int = TOP_SHARED_PREFIXES,
) -> PrefixSharing:
    """The maximal shared prefixes of a trace, top ``top`` by requests and by reusable tokens.

    ``offsets``/``ids`` are the flattened hashes as dense ids in ``[0, bound)`` (see
    ``prefix.pass_block_ids``); the hashes must be prefix-chained (``chained_problem``).
    """
    n_access = int(offsets[-1] - offsets[0])
    if n_access == 0:
        return PrefixSharing(0, 0, (), ())
    request = _request_of_access(offsets)
    pos = _positions(offsets, request)
    count = np.bincount(ids, minlength=bound).astype(np.int64)
    depth = np.zeros(bound, np.int64)
    depth[ids] = pos + 1
    # Tokens up to and including each node: whole blocks, or fewer where a prompt ends in it.
    tokens = np.full(bound, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(
        tokens, ids, np.minimum((pos + 1) * block_tokens, input_tokens[request].astype(np.int64))
    )
    child = pos > 0
    max_child = np.zeros(bound, np.int64)
    np.maximum.at(max_child, ids[np.flatnonzero(child) - 1], count[ids[child]])
    first = _first_request(ids, request, bound)
    nodes = np.flatnonzero((count >= 2) & (max_child < count))
    reusable = tokens[nodes] * (count[nodes] - 1)

    def rows(order: np.ndarray) -> tuple[SharedPrefix, ...]:
        return tuple(
            SharedPrefix(
                blocks=int(depth[nodes[i]]),
                prefix_tokens=int(tokens[nodes[i]]),
                requests=int(count[nodes[i]]),
                reusable_tokens=int(reusable[i]),
                first_request=int(first[nodes[i]]),
            )
            for i in order[:top]
        )

    # np.lexsort sorts by the last key first.
    by_count = np.lexsort((first[nodes], -depth[nodes], -count[nodes]))
    by_volume = np.lexsort((first[nodes], -count[nodes], -reusable))
    firsts = ids[offsets[:-1][np.diff(offsets) > 0] - offsets[0]]
    return PrefixSharing(
        groups=int(nodes.shape[0]),
        requests_sharing=int(np.count_nonzero(count[firsts] >= 2)),
        top_by_count=rows(by_count),
        top_by_volume=rows(by_volume),
    )


def _leading_run(flags: np.ndarray, offsets: np.ndarray, request: np.ndarray) -> np.ndarray:
    """Per request, how many of its leading accesses have ``flags`` set."""
    n = offsets.shape[0] - 1
    lengths = np.diff(offsets)
    run = lengths.astype(np.int64)
    breaks = np.flatnonzero(~flags)
    if breaks.size:
        # The first unset access of each request ends its run (accesses are in request order).
        req = request[breaks]
        first = np.ones(breaks.size, bool)
        first[1:] = req[1:] != req[:-1]
        pos = breaks[first] - (offsets[req[first]] - offsets[0])
        run[req[first]] = pos
    return run[:n]


def reuse_split(
    offsets: np.ndarray,
    ids: np.ndarray,
    bound: int,
    input_tokens: np.ndarray,
    block_tokens: int,
    *,
    warmup_requests: int,
    session: np.ndarray | None = None,
) -> ReuseSplit:
    """Hit tokens within and across conversations (see :class:`ReuseSplit`).

    ``session`` holds one integer code per request (-1: none), or is None to infer
    conversations from continuations. The leading run is the unbounded prefix hit of the
    documented definition: a block is a hit when any earlier request held it.
    """
    n = int(offsets.shape[0] - 1)
    inp = np.asarray(input_tokens, dtype=np.int64)
    request = _request_of_access(offsets)
    first = _first_request(ids, request, bound)
    hit_run = _leading_run(first[ids] < request, offsets, request)
    if session is not None:
        basis = "session"
        codes = np.asarray(session, dtype=np.int64)
        own = codes >= 0
        conversations = int(np.unique(codes[own]).shape[0]) + int(np.count_nonzero(~own))
        # A request without a session shares a conversation with no one: give it its own code.
        solo = codes.max(initial=-1) + 1 + np.arange(n, dtype=np.int64)
        codes = np.where(own, codes, solo)
        key = codes[request] * np.int64(bound) + ids.astype(np.int64)
        _, first_at, inverse = np.unique(key, return_index=True, return_inverse=True)
        held = request[first_at][inverse.reshape(-1)] < request
        within_run = _leading_run(held, offsets, request)
    else:
        basis = "continuation"
        lengths = np.diff(offsets)
        pos = _positions(offsets, request)
        # Each request's prompt in whole blocks: a partial last block is left out, since the
        # next turn extends it and its hash then changes (Mooncake hashes partial blocks).
        full = np.minimum(inp // block_tokens, lengths)
        has_full = full > 0
        last_full = ids[offsets[:-1][has_full] + full[has_full] - 1 - offsets[0]]
        # Per id, the first request whose whole-block prompt ends with it.
        ends_first = np.full(bound, np.iinfo(np.int64).max, np.int64)
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
