"""Shared prefixes and reuse within/across conversations: by hand, and against two references.

The product's compiled pass (``measure_sharing``) is checked against the numpy version it
replaced (``tests/sharing_reference.py``), which is checked by hand and against plain-Python
replays: those walk the requests one by one with dicts and sets (a prefix trie, seen-sets per
conversation), as the definitions read.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from conftest import SAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sharing_reference import PrefixTree, first_use_ids, reuse_split, shared_prefixes

from kvadvisor.cache import simulate_prefix_cache
from kvadvisor.cache.prefix import dense_block_ids
from kvadvisor.cache.sharing import ReuseSplit, SharedPrefix, measure_sharing
from kvadvisor.trace import read_trace
from kvadvisor.trace.arrays import RequestArrays


def _flat(hashes: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.concatenate([[0], np.cumsum([len(h) for h in hashes])]).astype(np.int64)
    return offsets, np.asarray([v for h in hashes for v in h], dtype=np.int64)


def _compiled(hashes, inputs, block_tokens, warmup=0, sessions=None, top=10):
    """The product's compiled pass over ``hashes``, remapped to dense ids as the pass gets them."""
    offsets, values = _flat(hashes)
    ids, bound = dense_block_ids(values)
    return measure_sharing(
        offsets,
        ids,
        bound,
        np.asarray(inputs, dtype=np.int64),
        block_tokens,
        warmup_requests=warmup,
        session=sessions,
        top=top,
    )


def _reference(offsets, ids, inputs, block_tokens, warmup=0, sessions=None, top=10):
    """The numpy reference, in the compiled pass's shape: (sharing, split, problem)."""
    tree = PrefixTree(offsets, ids)
    if tree.problem is not None:
        return None, None, tree.problem
    return (
        shared_prefixes(tree, inputs, block_tokens, top=top),
        reuse_split(tree, inputs, block_tokens, warmup_requests=warmup, session=sessions),
        None,
    )


def _tree(hashes: list[list[int]]) -> PrefixTree:
    offsets = np.concatenate([[0], np.cumsum([len(h) for h in hashes])]).astype(np.int64)
    values = np.asarray([v for h in hashes for v in h], dtype=np.int64)
    ids, _ = dense_block_ids(values)
    return PrefixTree(offsets, ids)


# Five requests, 4-token blocks. Sessions A, A, B, B, none.
HAND = [[0, 1, 2], [0, 1, 2, 3], [0, 4], [0, 4, 5], [0, 1, 2, 3]]
HAND_INPUT = np.asarray([12, 15, 6, 10, 16])
HAND_SESSION = np.asarray([0, 0, 1, 1, -1])


def test_shared_prefixes_by_hand() -> None:
    """Counts 5,3,3,2,2,1 on ids 0..5; the maximal nodes are 0, 2, 3 and 4.

    Node 1 is not maximal: its child 2 keeps all three requests. Node 3's prefix is 15 tokens,
    not 16: request 1 ends in it with a partial block; node 4's is 6 (request 2 ends there).
    """
    tree = _tree(HAND)
    got = shared_prefixes(tree, HAND_INPUT, 4)
    node0 = SharedPrefix(blocks=1, prefix_tokens=4, requests=5, reusable_tokens=16, first_request=0)
    node2 = SharedPrefix(3, 12, 3, 24, 0)
    node3 = SharedPrefix(4, 15, 2, 15, 1)
    node4 = SharedPrefix(2, 6, 2, 6, 2)
    assert got.groups == 4
    assert got.requests_sharing == 5
    assert got.top_by_count == (node0, node2, node3, node4)
    assert got.top_by_volume == (node2, node0, node3, node4)
    assert shared_prefixes(tree, HAND_INPUT, 4, top=2).top_by_volume == (
        node2,
        node0,
    )


def test_reuse_split_by_sessions_by_hand() -> None:
    """Hits 0, 12, 4, 8, 16 tokens; sessions keep 12 (r1) and 8 (r3) within, 4 and 16 across.

    Request 4 repeats request 1's prompt but has no session: a conversation of its own.
    """
    got = reuse_split(_tree(HAND), HAND_INPUT, 4, warmup_requests=2, session=HAND_SESSION)
    assert got == ReuseSplit(
        basis="session",
        conversations=3,
        warmup_requests=2,
        input_tokens_all=59,
        within_tokens_all=20,
        across_tokens_all=20,
        input_tokens_steady=32,
        within_tokens_steady=8,
        across_tokens_steady=20,
    )


def test_reuse_split_by_continuation_by_hand() -> None:
    """Without sessions, conversations are inferred from continuations of whole-block prompts.

    Whole-block prompts: r0 [0,1,2], r1 [0,1,2] (15 tokens: block 3 partial), r2 [0] (6 tokens),
    r3 [0,4], r4 [0,1,2,3]. r1 continues r0 (12 within); r2 continues nothing (4 across);
    r3 continues r2 only through block 0 (4 within; block 4, partial in r2, 4 across); r4
    continues r0 (12 within; block 3 from r1, 4 across).
    """
    got = reuse_split(_tree(HAND), HAND_INPUT, 4, warmup_requests=2)
    assert got == ReuseSplit("continuation", 2, 2, 59, 28, 12, 32, 16, 12)


def test_chained_problem() -> None:
    """A hash at two positions, or after two different blocks, is named; chained hashes pass."""
    assert _tree(HAND).problem is None
    assert "position" in _tree([[1, 2], [2, 3]]).problem
    assert "preceding block" in _tree([[1, 3], [2, 3]]).problem
    with pytest.raises(ValueError, match="not prefix-chained"):
        shared_prefixes(_tree([[1, 2], [2, 3]]), np.asarray([8, 8]), 4)


# --- plain-Python references ------------------------------------------------------------------


def ref_shared_prefixes(hashes, inputs, block_tokens):
    """A dict trie: count per node; maximal = shared by >= 2 and by no single child as much."""
    root: dict = {}
    nodes = []
    for r, (hs, n_in) in enumerate(zip(hashes, inputs, strict=True)):
        level = root
        for pos, h in enumerate(hs):
            if h not in level:
                level[h] = {"count": 0, "kids": {}, "depth": pos + 1, "tokens": None, "first": r}
                nodes.append(level[h])
            node = level[h]
            node["count"] += 1
            covered = min((pos + 1) * block_tokens, int(n_in))
            node["tokens"] = covered if node["tokens"] is None else min(node["tokens"], covered)
            level = node["kids"]
    out = []
    for node in nodes:
        kids = [k["count"] for k in node["kids"].values()]
        if node["count"] >= 2 and max(kids, default=0) < node["count"]:
            out.append(
                SharedPrefix(
                    node["depth"],
                    node["tokens"],
                    node["count"],
                    node["tokens"] * (node["count"] - 1),
                    node["first"],
                )
            )
    by_count = sorted(out, key=lambda s: (-s.requests, -s.blocks, s.first_request))
    by_volume = sorted(out, key=lambda s: (-s.reusable_tokens, -s.requests, s.first_request))
    return len(out), by_count, by_volume


def ref_reuse_split(hashes, inputs, block_tokens, warmup, sessions=None):
    """Replay: hit = leading blocks any earlier request held; within = those its conversation held.

    Without sessions, the conversation's part is the longest earlier prompt, in whole blocks,
    that this one starts with and goes beyond.
    """
    seen: set = set()
    held: dict = {}
    prompts: set = set()
    within_all, across_all = [], []
    for r, (hs, n_in) in enumerate(zip(hashes, inputs, strict=True)):
        run = 0
        while run < len(hs) and hs[run] in seen:
            run += 1
        if sessions is not None:
            mine = held.setdefault(sessions[r] if sessions[r] >= 0 else ("solo", r), set())
            own = 0
            while own < len(hs) and hs[own] in mine:
                own += 1
            mine.update(hs)
        else:
            own = max((k for k in range(1, len(hs)) if tuple(hs[:k]) in prompts), default=0)
            whole = min(int(n_in) // block_tokens, len(hs))
            if whole:
                prompts.add(tuple(hs[:whole]))
        own = min(own, run)
        hit = min(run * block_tokens, int(n_in))
        within = min(own * block_tokens, int(n_in))
        within_all.append(within)
        across_all.append(hit - within)
        seen.update(hs)
    return (
        sum(within_all),
        sum(across_all),
        sum(within_all[warmup:]),
        sum(across_all[warmup:]),
    )


def _check_against_reference(hashes, inputs, block_tokens, sessions=None, warmup=0) -> None:
    tree = _tree(hashes)
    inputs = np.asarray(inputs, dtype=np.int64)
    groups, by_count, by_volume = ref_shared_prefixes(hashes, inputs, block_tokens)
    got = shared_prefixes(tree, inputs, block_tokens, top=len(hashes) + 1)
    assert got.groups == groups
    assert list(got.top_by_count) == by_count
    assert list(got.top_by_volume) == by_volume
    split = reuse_split(tree, inputs, block_tokens, warmup_requests=warmup, session=sessions)
    assert (
        split.within_tokens_all,
        split.across_tokens_all,
        split.within_tokens_steady,
        split.across_tokens_steady,
    ) == ref_reuse_split(hashes, inputs, block_tokens, warmup, sessions)
    assert _compiled(hashes, inputs, block_tokens, warmup, sessions, top=len(hashes) + 1) == (
        got,
        split,
        None,
    )


@st.composite
def chained_traces(draw):
    """Prompts that branch off a small tree of prefixes, with chained ids (one per node)."""
    n = draw(st.integers(1, 25))
    trie: dict = {}
    next_id = [0]
    hashes, inputs = [], []
    for _ in range(n):
        path = draw(st.lists(st.integers(0, 2), min_size=0, max_size=6))
        level, hs = trie, []
        for step in path:
            if step not in level:
                level[step] = (next_id[0], {})
                next_id[0] += 1
            node_id, level = level[step]
            hs.append(node_id * 7919 + 3)  # scattered, not dense: exercises the remap
        hashes.append(hs)
        full = 4 * len(hs)
        inputs.append(full - draw(st.integers(0, 3)) if hs else draw(st.integers(0, 3)))
    sessions = draw(st.none() | st.lists(st.integers(-1, 3), min_size=n, max_size=n))
    warmup = draw(st.integers(0, n))
    return hashes, inputs, (None if sessions is None else np.asarray(sessions)), warmup


@given(chained_traces())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_traces_equal_the_reference(case) -> None:
    """Random chained traces: every group, ranking and token split equals the replay."""
    hashes, inputs, sessions, warmup = case
    _check_against_reference(hashes, inputs, 4, sessions, warmup)


@pytest.fixture(scope="module")
def mooncake_lists(mooncake_path):
    """The whole Mooncake trace as lists, and the trace."""
    trace = read_trace(mooncake_path)
    hashes = trace.table["block_hashes"].to_pylist()
    return trace, hashes, trace.table["input_tokens"].to_pylist()


def test_mooncake_equals_the_reference(mooncake_lists) -> None:
    """The whole Mooncake trace: groups, both top-10 rankings and the continuation split."""
    trace, hashes, inputs = mooncake_lists
    offsets, values = trace.hash_arrays()
    tree = PrefixTree(offsets, dense_block_ids(values)[0])
    assert tree.problem is None  # traces README: ids are chained
    inp = np.asarray(inputs)
    groups, by_count, by_volume = ref_shared_prefixes(hashes, inp, 512)
    got = shared_prefixes(tree, inp, 512)
    assert got.groups == groups
    assert list(got.top_by_count) == by_count[:10]
    assert list(got.top_by_volume) == by_volume[:10]
    warm = len(hashes) // 2
    split = reuse_split(tree, inp, 512, warmup_requests=warm)
    w_all, a_all, w_steady, a_steady = ref_reuse_split(hashes, inp, 512, warm)
    assert (split.within_tokens_all, split.across_tokens_all) == (w_all, a_all)
    assert (split.within_tokens_steady, split.across_tokens_steady) == (w_steady, a_steady)
    # Within + across is the whole unbounded hit, as the LRU engine counts it.
    assert w_all + a_all == int(simulate_prefix_cache(trace).hit_tokens.sum())


def test_first_use_ids() -> None:
    """Ids already numbered by first use pass through; any others are renumbered so."""
    ordered = np.asarray([0, 1, 0, 2, 1, 3], dtype=np.int32)
    assert first_use_ids(ordered) is ordered
    got = first_use_ids(np.asarray([7, 3, 7, 9, 3], dtype=np.int64))
    assert got.tolist() == [0, 1, 0, 2, 1]
    assert first_use_ids(np.asarray([1, 0])).tolist() == [0, 1]


# --- the compiled pass against the numpy reference ---------------------------------------------


def test_compiled_pass_by_hand() -> None:
    """The hand-worked case above, through the product's compiled pass."""
    sharing, split, problem = _compiled(HAND, HAND_INPUT, 4, warmup=2, sessions=HAND_SESSION)
    assert problem is None
    node0 = SharedPrefix(blocks=1, prefix_tokens=4, requests=5, reusable_tokens=16, first_request=0)
    node2 = SharedPrefix(3, 12, 3, 24, 0)
    node3 = SharedPrefix(4, 15, 2, 15, 1)
    node4 = SharedPrefix(2, 6, 2, 6, 2)
    assert (sharing.groups, sharing.requests_sharing) == (4, 5)
    assert sharing.top_by_count == (node0, node2, node3, node4)
    assert sharing.top_by_volume == (node2, node0, node3, node4)
    assert split == ReuseSplit("session", 3, 2, 59, 20, 20, 32, 8, 20)
    _, inferred, _ = _compiled(HAND, HAND_INPUT, 4, warmup=2)
    assert inferred == ReuseSplit("continuation", 2, 2, 59, 28, 12, 32, 16, 12)
    top_two = _compiled(HAND, HAND_INPUT, 4, top=2)[0]
    assert (top_two.top_by_count, top_two.top_by_volume) == ((node0, node2), (node2, node0))


def test_compiled_pass_ties_go_to_the_first_seen() -> None:
    """Equal counts and depths rank by first request, then by position, as first use orders.

    Ids are numbered against their first-seen order (7 is seen before 5), so the pass must
    not rank by id. Below the root 9 (4 requests), nodes 9/7 and 9/5 are each held by two
    requests at depth 2 with 8 tokens; 9/7 is seen first (request 0), so it ranks before 9/5.
    """
    hashes = [[9, 7], [9, 5], [9, 7], [9, 5], [3]]
    sharing, _, _ = _compiled(hashes, [8, 8, 8, 8, 4], 4)
    root = SharedPrefix(1, 4, 4, 12, 0)
    first_seen = SharedPrefix(2, 8, 2, 8, 0)
    second = SharedPrefix(2, 8, 2, 8, 1)
    assert sharing.groups == 3
    assert sharing.top_by_count == (root, first_seen, second)
    assert sharing.top_by_volume == (root, first_seen, second)


@pytest.mark.parametrize(
    ("hashes", "inputs"),
    [
        ([], []),  # an empty trace
        ([[1, 2, 3]], [10]),  # one request
        ([[]], [5]),  # one request without hashes
        ([[], []], [3, 0]),  # no request has hashes
        ([[], [5, 6], [], [5], [5, 6, 7]], [7, 8, 9, 4, 12]),  # some have none
        ([[4, 8], [4, 8]], [0, 8]),  # a prompt of 0 tokens ends inside every block
        ([[1, 2, 3], [1, 2, 3]], [4, 12]),  # more blocks than a prompt's tokens fill
    ],
)
@pytest.mark.parametrize("sessions", [None, "own", "none"])
def test_compiled_pass_edge_cases(hashes, inputs, sessions) -> None:
    """Edge cases equal the numpy reference and the plain-Python replay, with and without sessions.

    ``own``: every request in session 0; ``none``: session codes all -1 (no request has one).
    """
    n = len(hashes)
    codes = None if sessions is None else np.full(n, 0 if sessions == "own" else -1, np.int64)
    offsets, values = _flat(hashes)
    inp = np.asarray(inputs, dtype=np.int64)
    ids, _ = dense_block_ids(values)
    for warmup in range(n + 1):
        got = _compiled(hashes, inp, 4, warmup, codes)
        assert got == _reference(offsets, ids, inp, 4, warmup, codes)
        _check_against_reference(hashes, inp, 4, codes, warmup)


def test_empty_trace_shares_nothing() -> None:
    """No requests: no groups, no rankings, no tokens."""
    sharing, split, problem = _compiled([], [], 4)
    assert problem is None
    assert (sharing.groups, sharing.requests_sharing) == (0, 0)
    assert (sharing.top_by_count, sharing.top_by_volume) == ((), ())
    assert split == ReuseSplit("continuation", 0, 0, 0, 0, 0, 0, 0, 0)


@pytest.mark.parametrize(
    ("hashes", "what", "bad"),
    [
        ([[1, 2], [2, 3]], "position", 1),  # 2 at positions 1 and 0
        ([[1, 3], [2, 3]], "preceding block", 1),  # 3 after 1 and after 2
        ([[1, 2, 3], [3, 2, 1], [2]], "position", 3),  # position beats preceding block
        ([[1, 3], [2, 3], [4, 5], [6, 5], [1, 3]], "preceding block", 2),
    ],
)
def test_compiled_pass_names_the_problem(hashes, what, bad) -> None:
    """Hashes that are no prefix tree: the same message, with the count of hashes at fault."""
    offsets, values = _flat(hashes)
    ids, _ = dense_block_ids(values)
    got = _compiled(hashes, [8] * len(hashes), 4)
    want = _reference(offsets, ids, np.full(len(hashes), 8), 4)
    assert got == want
    assert got[:2] == (None, None)
    assert f"more than one {what} ({bad} such hash" in got[2]


@given(
    st.lists(st.lists(st.integers(0, 6), max_size=5), max_size=8),
    st.none() | st.integers(0, 2**31),
)
@settings(max_examples=150, deadline=None)
def test_compiled_pass_equals_the_reference_on_any_hashes(hashes, seed) -> None:
    """Random hashes, mostly no tree: the problem message, or every result, equals the reference."""
    inputs = [4 * len(h) - (i % 3) if h else i % 3 for i, h in enumerate(hashes)]
    codes = None
    if seed is not None:
        codes = np.random.default_rng(seed).integers(-1, 3, len(hashes)).astype(np.int64)
    offsets, values = _flat(hashes)
    ids, _ = dense_block_ids(values)
    inp = np.asarray(inputs, dtype=np.int64)
    warmup = len(hashes) // 2
    assert _compiled(hashes, inp, 4, warmup, codes) == _reference(
        offsets, ids, inp, 4, warmup, codes
    )


def _measure(trace, warmup, session=None, ids=None):
    """The compiled pass over a real trace's hashes, with the ids the cache pass hands it."""
    arrays = RequestArrays.of(trace)
    blocks = arrays.blocks
    dense, bound = dense_block_ids(blocks.values) if ids is None else ids
    got = measure_sharing(
        blocks.offsets,
        dense,
        bound,
        arrays.input_tokens,
        blocks.block_tokens,
        warmup_requests=warmup,
        session=session,
    )
    want = _reference(
        blocks.offsets, dense, arrays.input_tokens, blocks.block_tokens, warmup, session
    )
    return got, want, arrays


@pytest.mark.parametrize(
    "name",
    [
        "mooncake_conversation.parquet",
        "mooncake_conversation_head.jsonl.gz",
        "bailian_example.jsonl",
    ],
)
def test_compiled_pass_equals_the_reference_on_sample_traces(name) -> None:
    """Every sample trace with hashes: sessions where it has them, and continuations."""
    trace = read_trace(SAMPLES / name)
    n = trace.table.num_rows
    arrays = RequestArrays.of(trace)
    sessions = [None] if arrays.sessions is None else [None, arrays.sessions.codes]
    for session in sessions:
        for warmup in (0, n // 2, n):
            got, want, _ = _measure(trace, warmup, session)
            assert got == want
            assert got[2] is None and got[0].groups > 0
            assert got[1].within_tokens_all + got[1].across_tokens_all > 0


def test_compiled_pass_on_mooncake_with_sessions_and_scattered_ids(mooncake_path) -> None:
    """The whole Mooncake trace with seeded sessions, and with its ids renumbered at random.

    Mooncake's ids are small and mostly in first-use order; a random permutation of them (and
    64-bit hashes through the remap) must not change a ranking or a tie.
    """
    trace = read_trace(mooncake_path)
    arrays = RequestArrays.of(trace)
    n = trace.table.num_rows
    sessions = np.random.default_rng(7).integers(-1, 2000, n).astype(np.int64)
    got, want, _ = _measure(trace, n // 2, sessions)
    assert got == want
    assert got[1].basis == "session" and got[1].within_tokens_all > 0
    values = arrays.blocks.values
    bound = int(values.max()) + 1
    shuffled = np.random.default_rng(3).permutation(bound)[values]
    plain, _, _ = _measure(trace, n // 2)
    permuted, want, _ = _measure(trace, n // 2, ids=(shuffled, bound))
    assert permuted == want == plain


def test_compiled_pass_holds_no_array_per_access(mooncake_path) -> None:
    """Peak numpy memory of the pass: 17 bytes per id and 48 per group found, none per access.

    The numpy version held a request index, a position and masks per access (about 70 bytes
    per access at its peak); per id the pass needs four int32 arrays and a byte of flags.
    """
    trace = read_trace(mooncake_path)
    arrays = RequestArrays.of(trace)
    blocks = arrays.blocks
    ids, bound = dense_block_ids(blocks.values)
    measure_sharing(
        blocks.offsets, ids, bound, arrays.input_tokens, 512, warmup_requests=0
    )  # compiled and loaded before measuring
    tracemalloc.start()
    sharing, _, _ = measure_sharing(
        blocks.offsets, ids, bound, arrays.input_tokens, 512, warmup_requests=0
    )
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # Per id: four int32 arrays and a byte of flags; per group, six int64 values (its id,
    # tokens, depth, count, first request, reusable tokens); then slack.
    budget = 17 * bound + 48 * sharing.groups + 64 * 1024
    assert peak <= budget
    assert 17 * bound + 8 * blocks.accesses > budget  # one int64 per access would not fit
