"""Reuse times and the TTL table against a literal TTL-cache replay."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cache_reference import make_trace, reference_ttl, reused

from kvadvisor.cache import simulate_prefix_cache
from kvadvisor.errors import ConfigError


def test_by_hand() -> None:
    """Block 1 at 0 s, 5 s, 20 s; block 2 at 5 s and 20 s."""
    hashes = [[1], [1, 2], [1, 2]]
    trace = make_trace(hashes, [4, 8, 8], 4, arrival_s=[0.0, 5.0, 20.0])
    res = simulate_prefix_cache(trace, warmup_fraction=0.0)
    rt = reused(trace, res, ttl_shares=(0.25, 1.0), quantiles=(0.5,))
    # hits: req1 block 1 (gap 5, 4 tokens); req2 blocks 1 and 2 (gap 15 each, 8 tokens)
    assert rt.hit_tokens == 12
    assert rt.quantiles_s == ((0.5, 15.0),)
    assert sum(rt.histogram_tokens) == 12
    short, full = rt.ttl
    assert (short.ttl_s, full.ttl_s) == (5.0, 15.0)
    # TTL 15 s holds both blocks at 20 s; TTL 5 s holds two blocks at 5 s
    assert (short.peak_blocks, full.peak_blocks) == (2, 2)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 6), max_size=5), min_size=1, max_size=20),
    st.lists(st.integers(0, 4), min_size=20, max_size=20),
    st.sampled_from([0.5, 0.8, 0.95, 1.0]),
)
def test_ttl_rows_match_ttl_replay(hashes, steps, share) -> None:
    """The TTL keeps at least ``share`` of the hits, and its peak equals the replay's."""
    arrival = np.cumsum([float(s) for s in steps[: len(hashes)]]) - steps[0]
    inp = [len(h) * 2 for h in hashes]
    trace = make_trace(hashes, inp, 2, arrival_s=arrival)
    res = simulate_prefix_cache(trace, warmup_fraction=0.0)
    rt = reused(trace, res, ttl_shares=(share,))
    if rt.hit_tokens == 0:
        assert rt.ttl == ()
        return
    row = rt.ttl[0]
    hits, peak = reference_ttl(hashes, inp, 2, arrival, row.ttl_s)
    assert sum(hits) >= share * rt.hit_tokens - 1e-9
    assert row.peak_blocks == peak
    # a strictly shorter TTL keeps less than the share (the TTL is the smallest that works)
    shorter = [g for g in np.unique(arrival[:, None] - arrival[None, :]) if 0 <= g < row.ttl_s]
    if shorter:
        less, _ = reference_ttl(hashes, inp, 2, arrival, max(shorter))
        assert sum(less) < share * rt.hit_tokens


def test_mooncake_reuse(mooncake_path) -> None:
    """Quantiles ordered; hit tokens equal the unbounded hits; TTL capacity grows with share."""
    from kvadvisor.trace import read_trace

    trace = read_trace(mooncake_path)
    res = simulate_prefix_cache(trace)
    rt = reused(trace, res)
    assert rt.hit_tokens == int(res.hit_tokens.sum())
    secs = [s for _, s in rt.quantiles_s]
    assert secs == sorted(secs) and 0 <= secs[0] <= trace.duration_s
    caps = [r.capacity_tokens for r in rt.ttl]
    assert caps == sorted(caps)
    assert sum(rt.histogram_tokens) == rt.hit_tokens
    row = rt.ttl[0]
    hits, _ = reference_ttl(*_lists(trace), row.ttl_s, with_peak=False)
    assert row.share == 0.5 and sum(hits) >= 0.5 * rt.hit_tokens


def _lists(trace):
    offsets, values = trace.hash_arrays()
    hashes = [values[offsets[i] : offsets[i + 1]].tolist() for i in range(trace.requests)]
    return (
        hashes,
        trace.column_np("input_tokens").tolist(),
        512,
        trace.column_np("arrival_s").tolist(),
    )


def _reference_reuse(hashes, inp, block_tokens, arrival, quantiles, bins=24):
    """Reuse times by a plain loop and a full sort: (hit tokens, quantiles, edges, histogram).

    A hit is a block in the request's leading run of blocks seen before (the unbounded
    cache); its gap is the time since the block's last use, its tokens
    min((j+1)B, I) - min(jB, I).
    """
    last: dict[int, float] = {}
    gaps, weights = [], []
    for blocks, n_in, now in zip(hashes, inp, arrival, strict=True):
        for j, h in enumerate(blocks):
            if h not in last:
                break
            gaps.append(now - last[h])
            weights.append(min((j + 1) * block_tokens, n_in) - min(j * block_tokens, n_in))
        for h in blocks:
            last[h] = now
    total = sum(weights)
    if total == 0:
        return 0, (), (), ()
    pairs = sorted(zip(gaps, weights, strict=True))
    cum = np.cumsum([w for _, w in pairs])
    qs = tuple(
        (q, pairs[min(int(np.searchsorted(cum, q * total)), len(pairs) - 1)][0]) for q in quantiles
    )
    top = max(max(gaps), 1.0)
    positive = [g for g in gaps if g > 0]
    low = max(min(positive) if positive else 1.0, 1e-3)
    edges = np.concatenate(([0.0], np.geomspace(low, top * (1 + 1e-9), bins)))
    hist = np.histogram(gaps, bins=edges, weights=weights)[0].astype(np.int64)
    return total, qs, tuple(edges.tolist()), tuple(hist.tolist())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 8), max_size=6), min_size=1, max_size=25),
    st.lists(st.integers(0, 5), min_size=25, max_size=25),
    st.lists(st.integers(0, 7), min_size=25, max_size=25),
)
def test_reuse_times_match_a_plain_loop(hashes, steps, short) -> None:
    """Hit tokens (partial last blocks included), quantiles and histogram equal the plain loop."""
    arrival = (np.cumsum([s * 0.7 for s in steps[: len(hashes)]]) - steps[0] * 0.7).tolist()
    # input lengths that leave the last block partial, or end before the hashed blocks do
    inp = [max(len(h) * 8 - short[i], 0) for i, h in enumerate(hashes)]
    trace = make_trace(hashes, inp, 8, arrival_s=arrival)
    res = simulate_prefix_cache(trace, warmup_fraction=0.0)
    quantiles = (0.1, 0.5, 0.9, 1.0)
    rt = reused(trace, res, quantiles=quantiles)
    total, qs, edges, hist = _reference_reuse(hashes, inp, 8, arrival, quantiles)
    assert rt.hit_tokens == total
    assert rt.quantiles_s == qs
    assert rt.histogram_edges_s == edges
    assert rt.histogram_tokens == hist


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(
                st.sampled_from([0.0, 1.0, 1.5, 2.0**-30, 1e300]),
                st.floats(0.0, 1e9, allow_nan=False, allow_infinity=False),
            ),
            st.integers(0, 600),
        ),
        min_size=1,
        max_size=200,
    ),
    st.lists(st.floats(0.001, 1.0), min_size=1, max_size=6),
)
def test_weighted_quantiles_match_a_sort(pairs, shares) -> None:
    """The radix select gives the sorted cumulative sum's answer, ties and zero weights included."""
    from kvadvisor.cache.reuse import weighted_quantiles

    values = np.array([v for v, _ in pairs], np.float64)
    weights = np.array([w for _, w in pairs], np.int32)
    total = int(weights.sum())
    if total == 0:
        return
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    expected = [
        float(values[order][min(int(np.searchsorted(cum, q * total)), len(pairs) - 1)])
        for q in shares
    ]
    assert weighted_quantiles(values, weights, shares) == expected


def test_weighted_quantiles_by_hand() -> None:
    """Weights 1, 3, 0, 4 on 2, 1, 5, 3 seconds, worked by hand."""
    from kvadvisor.cache.reuse import weighted_quantiles

    values = np.array([2.0, 1.0, 5.0, 3.0])
    weights = np.array([1, 3, 0, 4], np.int32)
    # sorted: 1 (3), 2 (1), 3 (4), 5 (0); cumulative 3, 4, 8, 8
    assert weighted_quantiles(values, weights, (0.25, 0.375, 0.5, 0.51, 1.0)) == [
        1.0,
        1.0,
        2.0,
        3.0,
        3.0,
    ]


def test_weighted_histogram_matches_numpy() -> None:
    """The compiled histogram bins as np.histogram does: [e_i, e_i+1), the last bin closed."""
    from kvadvisor.cache.reusekernels import weighted_histogram

    rng = np.random.default_rng(11)
    edges = np.concatenate(([0.0], np.geomspace(0.01, 100.0, 12)))
    # values on the edges, inside, and outside the range on both sides
    values = np.concatenate((edges, rng.uniform(-1.0, 120.0, 500), [100.0, 150.0]))
    weights = rng.integers(0, 9, values.shape[0]).astype(np.int32)
    out = np.zeros(edges.shape[0] - 1, np.int64)
    weighted_histogram(values, weights, edges, out)
    expected = np.histogram(values, bins=edges, weights=weights)[0].astype(np.int64)
    assert out.tolist() == expected.tolist()


def test_sampled_pass_and_bad_ttl_share_are_config_errors() -> None:
    """Reuse times need per-access distances (the exact pass); a TTL share must be in (0, 1]."""
    hashes = [[1], [1, 2], [1, 2]]
    trace = make_trace(hashes, [4, 8, 8], 4, arrival_s=[0.0, 5.0, 20.0])
    sampled = simulate_prefix_cache(trace, warmup_fraction=0.0, sample_rate=1.0)
    with pytest.raises(ConfigError, match="reuse times need the exact pass"):
        reused(trace, sampled)
    exact = simulate_prefix_cache(trace, warmup_fraction=0.0)
    for share in (0.0, 1.5):
        with pytest.raises(ConfigError, match=f"TTL share {share} is outside"):
            reused(trace, exact, ttl_shares=(share,))
