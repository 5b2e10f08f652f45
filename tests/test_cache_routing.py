"""Local caches per instance under a routing policy, against the pooled cache."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SAMPLES
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cache_reference import make_trace, reference_hits, routed

from kvadvisor.cache.prefix import simulate_arrays, warmup_requests_for
from kvadvisor.cache.routing import RoutingPolicy, assign_instances
from kvadvisor.trace.arrays import RequestArrays, SessionKeys

HASHES = [[1, 2], [1, 3], [1, 2], [4], [1, 3], [4, 5], [1, 2, 6], [4]]
INPUT = [8, 8, 8, 4, 8, 8, 12, 4]
BT = 4


def _local_reference(inst: np.ndarray, instances: int, cap_blocks: float) -> int:
    total = 0
    for i in range(instances):
        rows = np.flatnonzero(inst == i)
        total += sum(
            reference_hits([HASHES[r] for r in rows], [INPUT[r] for r in rows], BT, cap_blocks)
        )
    return total


@pytest.mark.parametrize("policy", [RoutingPolicy.RANDOM, RoutingPolicy.ROUND_ROBIN])
def test_local_policies_equal_replays_per_instance(policy: RoutingPolicy) -> None:
    """Random and round-robin: the sum of per-instance replays at each capacity."""
    trace = make_trace(HASHES, INPUT, BT)
    cmp = routed(
        trace,
        instances=2,
        capacities_tokens=[BT, 2 * BT, None],
        policies=[policy],
        warmup_fraction=0.0,
        seed=3,
    )
    inst = assign_instances(policy, trace.requests, 2, seed=3)
    for point, cap in zip(cmp.outcomes[0].points, [1, 2, float("inf")], strict=True):
        assert point.hit_ratio_all == pytest.approx(_local_reference(inst, 2, cap) / sum(INPUT))


def test_pooled_is_one_cache_of_n_times_capacity() -> None:
    """Prefix-aware routing is one LRU cache of N × C tokens."""
    trace = make_trace(HASHES, INPUT, BT)
    cmp = routed(
        trace,
        instances=3,
        capacities_tokens=[BT, None],
        policies=[RoutingPolicy.PREFIX_AWARE],
        warmup_fraction=0.0,
    )
    pts = cmp.outcomes[0].points
    assert pts[0].hit_ratio_all == pytest.approx(
        sum(reference_hits(HASHES, INPUT, BT, 3)) / sum(INPUT)
    )
    assert pts[1].hit_ratio_all == pytest.approx(
        sum(reference_hits(HASHES, INPUT, BT, float("inf"))) / sum(INPUT)
    )


def test_round_robin_one_instance_is_the_pool() -> None:
    """With one instance, local and pooled caches are the same cache."""
    trace = make_trace(HASHES, INPUT, BT)
    cmp = routed(trace, instances=1, capacities_tokens=[2 * BT, None], warmup_fraction=0.5)
    rr = next(o for o in cmp.outcomes if o.policy is RoutingPolicy.ROUND_ROBIN)
    pool = next(o for o in cmp.outcomes if o.policy is RoutingPolicy.PREFIX_AWARE)
    assert rr.points == pool.points


def test_session_sticky() -> None:
    """Every request of a session lands on one instance; no session column: unavailable."""
    sessions = ["a", "b", "a", "c", "b", None, "a", "c"]
    trace = make_trace(HASHES, INPUT, BT, session_id=sessions)
    inst = assign_instances(
        RoutingPolicy.SESSION, trace.requests, 4, sessions=SessionKeys.of(trace)
    )
    for s in ("a", "b", "c"):
        assert len({inst[i] for i, x in enumerate(sessions) if x == s}) == 1
    cmp = routed(
        make_trace(HASHES, INPUT, BT),
        instances=2,
        capacities_tokens=[None],
        policies=[RoutingPolicy.SESSION],
    )
    assert cmp.outcomes[0].unavailable and cmp.outcomes[0].points == ()


def test_session_routing_hashes_each_rows_own_name() -> None:
    """Hashing each session name once gives every row the hash of its own name (or row key).

    The reference hashes one string per row, as pandas does: the session id, or "#row<i>" for a
    request without one (its own session).
    """
    import pandas as pd

    sessions = ["s7", None, "a", "s7", None, "b", "a", "zz", None]
    hashes = [[i] for i in range(len(sessions))]
    trace = make_trace(hashes, [4] * len(sessions), BT, session_id=sessions)
    for seed, instances in ((0, 4), (11, 3), (123, 8)):
        keys = np.array(
            [s if s is not None else f"#row{i}" for i, s in enumerate(sessions)], object
        )
        expected = pd.util.hash_array(keys, hash_key=f"{seed:016d}") % np.uint64(instances)
        got = assign_instances(
            RoutingPolicy.SESSION, trace.requests, instances, seed, SessionKeys.of(trace)
        )
        np.testing.assert_array_equal(got, expected.astype(np.int64))


def test_mooncake_pool_beats_local(mooncake_path) -> None:
    """On the Mooncake trace the pool holds far more reuse than 8 local caches ."""
    from kvadvisor.trace import read_trace

    cmp = routed(
        read_trace(mooncake_path),
        instances=8,
        capacities_tokens=[None],
        policies=[RoutingPolicy.ROUND_ROBIN, RoutingPolicy.PREFIX_AWARE],
    )
    local, pool = (o.points[0].hit_ratio_all for o in cmp.outcomes)
    assert pool > 2 * local > 0


def test_pooled_result_given_by_the_caller_is_used_as_is(monkeypatch) -> None:
    """Passing the trace's own exact pass gives the same pooled points as simulating again."""
    import kvadvisor.cache.routing as routing
    from kvadvisor.cache import simulate_prefix_cache

    trace = make_trace(HASHES, INPUT, BT)
    kwargs = dict(
        instances=3,
        capacities_tokens=[BT, 4 * BT, None],
        policies=[RoutingPolicy.PREFIX_AWARE],
        warmup_fraction=0.5,
    )
    fresh = routed(trace, **kwargs)
    pooled = simulate_prefix_cache(trace, warmup_fraction=0.5)

    # Equality alone would also hold if ``pooled`` were ignored and the pass ran again:
    # make running it again fail, so the test proves the caller's result is the one used.
    def _no_second_pass(*args, **kw):
        raise AssertionError("compare_routing ran the pooled exact pass again")

    monkeypatch.setattr(routing, "simulate_arrays", _no_second_pass)
    reused = routed(trace, pooled=pooled, **kwargs)
    assert fresh.outcomes == reused.outcomes
    # 3 instances x 4 tokens = one 3-block pool; hit_ratio_all counts the warm-up too, so the point
    # equals the literal LRU replay of the same requests.
    assert reused.outcomes[0].points[0].hit_ratio_all == pytest.approx(
        sum(reference_hits(HASHES, INPUT, BT, 3)) / sum(INPUT)
    )


def test_bad_instances_and_non_splitting_policy() -> None:
    """Zero instances, or asking the pooled policy for a per-request split, are user errors."""
    from kvadvisor.errors import ConfigError

    trace = make_trace(HASHES, INPUT, BT)
    with pytest.raises(ConfigError, match="instances must be at least 1, got 0"):
        routed(trace, instances=0, capacities_tokens=[None])
    with pytest.raises(ConfigError, match="'prefix_aware' does not split the cache"):
        assign_instances(RoutingPolicy.PREFIX_AWARE, trace.requests, 2)


def _replayed_per_instance(trace, policy, instances, capacities_tokens, warmup_fraction, seed):
    """Each instance's requests replayed through the exact pass on their own: hit tokens (2, C).

    How the comparison was computed before its fused kernel: the instance's hashes copied out,
    the whole curve simulated, then read at each capacity.
    """
    arrays = RequestArrays.of(trace)
    blocks = arrays.blocks
    inp = arrays.input_tokens
    warmup = warmup_requests_for(trace.requests, warmup_fraction)
    inst = assign_instances(policy, trace.requests, instances, seed, arrays.sessions)
    caps = np.asarray([np.inf if c is None else c for c in capacities_tokens], np.float64)
    hits = np.zeros((2, caps.shape[0]))
    for i in range(instances):
        rows = np.flatnonzero(inst == i)
        if not rows.size:
            continue
        hashes = [blocks.values[blocks.offsets[r] : blocks.offsets[r + 1]] for r in rows]
        offsets = np.concatenate(([0], np.cumsum([len(h) for h in hashes]))).astype(np.int64)
        res = simulate_arrays(
            offsets,
            np.concatenate(hashes) if hashes else np.zeros(0, np.int64),
            inp[rows],
            blocks.block_tokens,
            warmup_requests=int(np.searchsorted(rows, warmup)),
            warmup_fraction=warmup_fraction,
        )
        hits += res.curve.hit_tokens_at(caps)
    return hits, inp


# Unsorted, repeated, zero, not whole blocks, past any trace, unbounded.
ODD_CAPACITIES = [2**20, 0, None, 16_384, 1_000, 2**20, 10**30, 300_000, 512, 511]
# Small enough that most hits lie past the largest: the kernel stops measuring distances there.
SMALL_CAPACITIES = [None, 8_192, 512, 2_048]


@pytest.mark.parametrize("capacities", [ODD_CAPACITIES, SMALL_CAPACITIES])
@pytest.mark.parametrize(
    ("name", "policy"),
    [
        ("mooncake_conversation.parquet", RoutingPolicy.RANDOM),
        ("mooncake_conversation.parquet", RoutingPolicy.ROUND_ROBIN),
        ("bailian_example.jsonl", RoutingPolicy.SESSION),
        ("bailian_example.jsonl", RoutingPolicy.RANDOM),
    ],
)
def test_local_policies_equal_each_instance_replayed_alone(name, policy, capacities) -> None:
    """On real traces, the fused per-instance kernel equals replaying each instance alone.

    Both ratios (all requests and steady state) at every capacity, odd ones included, for 8
    and for 3 instances.
    """
    from kvadvisor.trace import read_trace

    trace = read_trace(SAMPLES / name)
    for instances, warmup in ((8, 0.5), (3, 0.0)):
        hits, inp = _replayed_per_instance(trace, policy, instances, capacities, warmup, 5)
        cmp = routed(
            trace,
            instances=instances,
            capacities_tokens=capacities,
            policies=[policy],
            warmup_fraction=warmup,
            seed=5,
        )
        steady_from = warmup_requests_for(trace.requests, warmup)
        got = [(p.hit_ratio_all, p.hit_ratio_steady) for p in cmp.outcomes[0].points]
        want = [
            (hits[0, j] / inp.sum(), hits[1, j] / inp[steady_from:].sum())
            for j in range(len(capacities))
        ]
        assert got == want
        unbounded = got[capacities.index(None)][0]
        assert 0 < unbounded < 1  # some reuse, not all
        assert all(all_ <= unbounded for all_, _ in got)


@given(
    st.lists(st.lists(st.integers(0, 7), max_size=7), min_size=1, max_size=30),
    st.lists(st.none() | st.integers(0, 12), min_size=1, max_size=4),
    st.integers(1, 3),
    st.integers(0, 2**16),
)
@settings(max_examples=80, deadline=None)
def test_random_traces_equal_replays_per_instance(hashes, cap_blocks, instances, seed) -> None:
    """Arbitrary hashes (not chained) at a few small capacities: each instance's literal replay.

    Small capacities and scattered hashes make distances grow within a request, past the
    largest capacity, which the kernel stops measuring.
    """
    inputs = [4 * len(h) - (i % 3) if h else 1 for i, h in enumerate(hashes)]
    trace = make_trace(hashes, inputs, BT)
    caps = [None if c is None else c * BT for c in cap_blocks]
    cmp = routed(
        trace,
        instances=instances,
        capacities_tokens=caps,
        policies=[RoutingPolicy.RANDOM],
        warmup_fraction=0.5,
        seed=seed,
    )
    inst = assign_instances(RoutingPolicy.RANDOM, len(hashes), instances, seed)
    warmup = len(hashes) // 2
    for point, c in zip(cmp.outcomes[0].points, cap_blocks, strict=True):
        per_request = np.zeros(len(hashes), np.int64)
        for i in range(instances):
            rows = np.flatnonzero(inst == i)
            per_request[rows] = reference_hits(
                [hashes[r] for r in rows],
                [inputs[r] for r in rows],
                BT,
                float("inf") if c is None else c,
            )
        assert point.hit_ratio_all == per_request.sum() / sum(inputs)
        assert point.hit_ratio_steady == per_request[warmup:].sum() / sum(inputs[warmup:])
