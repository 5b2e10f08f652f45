"""Reuse times and the TTL table against a literal TTL-cache replay."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cache_reference import make_trace, reference_ttl

from kvadvisor.cache import simulate_prefix_cache
from kvadvisor.cache.reuse import reuse_times
from kvadvisor.errors import ConfigError


def test_by_hand() -> None:
    """Block 1 at 0 s, 5 s, 20 s; block 2 at 5 s and 20 s."""
    hashes = [[1], [1, 2], [1, 2]]
    trace = make_trace(hashes, [4, 8, 8], 4, arrival_s=[0.0, 5.0, 20.0])
    res = simulate_prefix_cache(trace, warmup_fraction=0.0)
    rt = reuse_times(trace, res, ttl_shares=(0.25, 1.0), quantiles=(0.5,))
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
    rt = reuse_times(trace, res, ttl_shares=(share,))
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
    rt = reuse_times(trace, res)
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


def test_block_token_weights_match_a_literal_loop() -> None:
    """Each block access carries min((j+1)B, I) - min(jB, I) tokens, checked by a plain loop."""
    import numpy as np

    from kvadvisor.cache.prefix import block_token_weights

    rng = np.random.default_rng(7)
    counts = rng.integers(0, 6, 300)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    # Input lengths both shorter and longer than the blocks cover (hash counts can disagree).
    inputs = rng.integers(0, 6 * 16 + 5, 300).astype(np.int64)
    expected = []
    for r, n in enumerate(counts):
        for j in range(n):
            expected.append(min((j + 1) * 16, inputs[r]) - min(j * 16, inputs[r]))
    got = block_token_weights(offsets, inputs, 16)
    assert got.dtype == np.int64
    assert got.tolist() == expected


def test_sampled_pass_and_bad_ttl_share_are_config_errors() -> None:
    """Reuse times need per-access distances (the exact pass); a TTL share must be in (0, 1]."""
    hashes = [[1], [1, 2], [1, 2]]
    trace = make_trace(hashes, [4, 8, 8], 4, arrival_s=[0.0, 5.0, 20.0])
    sampled = simulate_prefix_cache(trace, warmup_fraction=0.0, sample_rate=1.0)
    with pytest.raises(ConfigError, match="reuse times need the exact pass"):
        reuse_times(trace, sampled)
    exact = simulate_prefix_cache(trace, warmup_fraction=0.0)
    for share in (0.0, 1.5):
        with pytest.raises(ConfigError, match=f"TTL share {share} is outside"):
            reuse_times(trace, exact, ttl_shares=(share,))
