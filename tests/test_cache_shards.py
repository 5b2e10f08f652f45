"""SHARDS sampling: exact at rate 1, independent of batch size, close to exact at low rates."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from test_cache_prefix import random_traces
from test_cache_reference import make_trace

from kvadvisor.cache import simulate_prefix_cache
from kvadvisor.cache.shards import block_parts, estimate_prefix_curve, record_parts
from kvadvisor.errors import ConfigError
from kvadvisor.trace import read_trace
from kvadvisor.trace.arrays import BlockArrays


@pytest.fixture(scope="module")
def mooncake(mooncake_path):
    """The Mooncake trace and its exact result (computed once)."""
    trace = read_trace(mooncake_path)
    return trace, simulate_prefix_cache(trace)


def _grid(result) -> np.ndarray:
    return np.geomspace(512, 2**27, 40)


def test_rate_one_is_exact(mooncake) -> None:
    """Every key sampled: same distances, no correction, the exact curve."""
    trace, exact = mooncake
    est = simulate_prefix_cache(trace, sample_rate=1.0)
    assert est.sampling is not None and est.sampling.rate == 1.0
    assert est.hit_tokens is None
    grid = _grid(exact)
    for a, b in zip(exact.curve.ratios_on_grid(grid), est.curve.ratios_on_grid(grid), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_batches_do_not_change_the_estimate(mooncake) -> None:
    """Streaming in small record batches gives the same estimate as one batch."""
    trace, _ = mooncake
    kw = dict(block_tokens=512, total_requests=trace.requests, warmup_fraction=0.5, rate=0.2)
    table = trace.table.select(["input_tokens", "block_hashes"])
    one = estimate_prefix_curve(record_parts(table.to_batches(max_chunksize=10**9)), **kw)
    many = estimate_prefix_curve(record_parts(table.to_batches(max_chunksize=777)), **kw)
    grid = _grid(one)
    np.testing.assert_array_equal(one.curve.ratios_on_grid(grid), many.curve.ratios_on_grid(grid))
    assert one.sampling == many.sampling
    # Hashes already in memory, cut into other batches, give the same estimate as the stream.
    inp = trace.column_np("input_tokens")
    held = estimate_prefix_curve(block_parts(BlockArrays.of(trace), inp, batch_rows=1000), **kw)
    np.testing.assert_array_equal(one.curve.ratios_on_grid(grid), held.curve.ratios_on_grid(grid))
    np.testing.assert_array_equal(one.input_tokens, held.input_tokens)
    assert one.sampling == held.sampling


def test_low_rate_close_to_exact(mooncake) -> None:
    """At rate 0.1 on 288k accesses the curve stays within a few points of the exact one."""
    trace, exact = mooncake
    est = simulate_prefix_cache(trace, sample_rate=0.1)
    grid = _grid(exact)
    mae = np.abs(exact.curve.ratios_on_grid(grid)[0] - est.curve.ratios_on_grid(grid)[0]).mean()
    assert mae < 0.03
    assert 0 < est.sampling.error_estimate < 0.05
    assert 0.05 < est.sampling.sampled_accesses / est.sampling.total_accesses < 0.2


def test_bad_rates() -> None:
    """A rate outside (0, 1], or one that samples nothing, is a user error."""
    trace = make_trace([[1, 2]], [8], 4)
    with pytest.raises(ConfigError, match="outside"):
        simulate_prefix_cache(trace, sample_rate=0.0)
    with pytest.raises(ConfigError, match="drew no block"):
        simulate_prefix_cache(trace, sample_rate=1e-7)


@settings(max_examples=30, deadline=None)
@given(random_traces())
def test_rate_one_is_exact_on_random_traces(case) -> None:
    """At rate 1 the SHARDS path reproduces the exact curve, whatever the trace."""
    hashes, inp, bt, warmup = case
    trace = make_trace(hashes, inp, bt)
    exact = simulate_prefix_cache(trace, warmup_fraction=warmup)
    est = simulate_prefix_cache(trace, warmup_fraction=warmup, sample_rate=1.0)
    grid = np.arange(0, 30) * bt
    np.testing.assert_allclose(est.curve.hit_tokens_at(grid), exact.curve.hit_tokens_at(grid))
