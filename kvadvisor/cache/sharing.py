"""Who shares which prefix: the top shared prefixes, and reuse within and across conversations.

Block hashes are prefix-chained, so a request's hashes are a path from the root of a prefix
tree and a block id names one node of it (every id sits at one position with one predecessor).
A node's count is the number of requests whose prompt passes through it. Both measurements are
at unbounded capacity, over all requests, and come from one compiled pass over the block
accesses (``sharingkernels``) plus one over the ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvadvisor.cache.prefix import read_only
from kvadvisor.units.format import count

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


def _problem(what: str, hashes: int) -> str:
    """Why the hashes are not a prefix tree: ``hashes`` ids seen with more than one ``what``."""
    return (
        f"block hashes are not prefix-chained: one hash appears with more than one {what} "
        f"({count(hashes)} such hashes), so shared prefixes cannot be told apart"
    )


def measure_sharing(
    offsets: np.ndarray,
    ids: np.ndarray,
    id_bound: int,
    input_tokens: np.ndarray,
    block_tokens: int,
    *,
    warmup_requests: int,
    session: np.ndarray | None = None,
    top: int = TOP_SHARED_PREFIXES,
) -> tuple[PrefixSharing | None, ReuseSplit | None, str | None]:
    """Shared prefixes and the conversation split in one compiled pass, or why they cannot be told.

    ``offsets`` (one more than the requests) delimit each request's ``ids``: dense block ids in
    ``[0, id_bound)``, any integer dtype, in any numbering. ``session`` holds one integer code
    per request (-1: none), or is None to infer conversations from continuations. Returns
    ``(sharing, split, None)``, or ``(None, None, problem)`` when the hashes are not a prefix
    tree (an id at two positions, or after two different ids), ``problem`` saying so.

    The tree is read from the first access of each id; ids in first-use order are ordered by
    (first request, depth), since the ids a request meets first sit at distinct positions, so
    no renumbering is needed. Memory: 17 bytes per id, plus, with sessions, an 8-byte slot per
    1.25 accesses of requests that have one (the set of (session, block) pairs held).
    """
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if offsets[0]:
        offsets = offsets - offsets[0]
    ids = np.ascontiguousarray(ids)
    inp = np.ascontiguousarray(input_tokens, dtype=np.int64)
    tree = _tree_pass(offsets, ids, inp, id_bound, block_tokens, warmup_requests, session)
    if tree.bad_position:
        return None, None, _problem("position", tree.bad_position)
    if tree.bad_parent:
        return None, None, _problem("preceding block", tree.bad_parent)
    split = _reuse_split(tree, session, inp, warmup_requests)
    nodes = _shared_nodes(offsets, ids, inp, block_tokens, tree)
    # The per-id arrays were last needed to find the shared prefixes: free them before ranking.
    del tree
    return _ranked(nodes, top), split, None


@dataclass(frozen=True)
class _Tree:
    """The prefix tree read from each id's first access (per-id arrays) and the pass's totals."""

    first_req: np.ndarray
    depth: np.ndarray
    parent: np.ndarray
    counts: np.ndarray
    flags: np.ndarray
    totals: np.ndarray
    codes: np.ndarray  # one session code a request (empty without sessions)
    bad_position: int  # ids met at more than one position
    bad_parent: int  # ids met after more than one preceding id


def _tree_pass(
    offsets: np.ndarray,
    ids: np.ndarray,
    inp: np.ndarray,
    id_bound: int,
    block_tokens: int,
    warmup_requests: int,
    session: np.ndarray | None,
) -> _Tree:
    """One compiled pass over every access: the tree, block counts and reuse by conversation."""
    from kvadvisor.cache import sharingkernels as sk  # numba only when a curve is computed

    bound = max(int(id_bound), 1)
    first_req = np.full(bound, -1, np.int32)
    depth = np.zeros(bound, np.int32)
    parent = np.zeros(bound, np.int32)
    counts = np.zeros(bound, np.int32)
    flags = np.zeros(bound, np.uint8)
    totals = np.zeros(sk.TOTALS, np.int64)
    if session is None:
        codes = np.zeros(0, np.int64)
        table = np.zeros(0, np.int64)
    else:
        codes = np.ascontiguousarray(session, dtype=np.int64)
        # Only requests with a session hold blocks for later ones: the set's load stays <= 0.8.
        held = int((np.diff(offsets) * (codes >= 0)).sum())
        table = np.full(held + held // 4 + 1, -1, np.int64)
    sk.tree_pass(
        offsets,
        read_only(ids),
        read_only(inp),
        np.int64(block_tokens),
        np.int64(warmup_requests),
        codes,
        np.int64(bound),
        table,
        first_req,
        depth,
        parent,
        counts,
        flags,
        totals,
    )
    return _Tree(
        first_req,
        depth,
        parent,
        counts,
        flags,
        totals,
        codes,
        int(totals[sk.T_BAD_POSITION]),
        int(totals[sk.T_BAD_PARENT]),
    )


def _reuse_split(
    tree: _Tree, session: np.ndarray | None, inp: np.ndarray, warmup_requests: int
) -> ReuseSplit:
    """Prompt tokens reused within a conversation and across conversations."""
    from kvadvisor.cache import sharingkernels as sk

    totals = tree.totals
    if session is None:
        basis, conversations = "continuation", int(totals[sk.T_STARTS])
    else:
        own = tree.codes >= 0
        basis = "session"
        conversations = int(np.unique(tree.codes[own]).shape[0]) + int(np.count_nonzero(~own))
    w = warmup_requests
    return ReuseSplit(
        basis=basis,
        conversations=conversations,
        warmup_requests=w,
        input_tokens_all=int(inp.sum()),
        within_tokens_all=int(totals[sk.T_WITHIN_ALL]),
        across_tokens_all=int(totals[sk.T_ACROSS_ALL]),
        input_tokens_steady=int(inp[w:].sum()),
        within_tokens_steady=int(totals[sk.T_WITHIN_STEADY]),
        across_tokens_steady=int(totals[sk.T_ACROSS_STEADY]),
    )


@dataclass(frozen=True)
class _Nodes:
    """The maximal shared prefixes: one entry a node of the tree shared by two or more requests."""

    groups: int
    requests_sharing: int
    depth: np.ndarray
    count: np.ndarray
    first: np.ndarray
    tokens: np.ndarray


def _shared_nodes(
    offsets: np.ndarray, ids: np.ndarray, inp: np.ndarray, block_tokens: int, tree: _Tree
) -> _Nodes:
    """The maximal shared nodes, their prefix tokens and the requests that share a first block."""
    from kvadvisor.cache import sharingkernels as sk

    groups = int(sk.maximal_nodes(tree.first_req, tree.parent, tree.counts, tree.flags))
    nodes = np.empty(groups, np.int64)
    tokens = np.empty(groups, np.int64)
    # The parent ids were last needed to find the maximal nodes: their array now indexes them.
    requests_sharing = int(
        sk.node_rows(
            offsets,
            read_only(ids),
            read_only(inp),
            np.int64(block_tokens),
            tree.counts,
            tree.depth,
            tree.flags,
            tree.parent,
            nodes,
            tokens,
        )
    )
    return _Nodes(
        groups,
        requests_sharing,
        tree.depth[nodes].astype(np.int64),
        tree.counts[nodes].astype(np.int64),
        tree.first_req[nodes].astype(np.int64),
        tokens,
    )


def _ranked(nodes: _Nodes, top: int) -> PrefixSharing:
    """The top shared prefixes by requests and by reusable tokens."""
    from kvadvisor.cache import sharingkernels as sk

    node_depth, node_count, node_first = nodes.depth, nodes.count, nodes.first
    tokens = nodes.tokens
    reusable = tokens * (node_count - 1)

    def rows(
        first: np.ndarray, second: np.ndarray, third: np.ndarray, fourth: np.ndarray
    ) -> tuple[SharedPrefix, ...]:
        best = np.empty(max(top, 0), np.int64)
        kept = sk.top_rows(first, second, third, fourth, best)
        return tuple(
            SharedPrefix(
                blocks=int(node_depth[i]),
                prefix_tokens=int(tokens[i]),
                requests=int(node_count[i]),
                reusable_tokens=int(reusable[i]),
                first_request=int(node_first[i]),
            )
            for i in best[:kept]
        )

    # Ties: first seen first, i.e. by first request, then depth (its position there).
    return PrefixSharing(
        groups=nodes.groups,
        requests_sharing=nodes.requests_sharing,
        top_by_count=rows(node_count, node_depth, node_first, node_depth),
        top_by_volume=rows(reusable, node_count, node_first, node_depth),
    )
