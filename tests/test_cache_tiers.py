"""Inclusive tiers read from the one curve, checked against separate LRU replays per capacity."""

from __future__ import annotations

import numpy as np
import pytest
from test_cache_reference import make_trace, reference_hits

from kvadvisor.cache import simulate_prefix_cache
from kvadvisor.cache.tiers import (
    CacheTierSpec,
    parse_tier,
    split_tiers,
    tier_hit_tokens_per_request,
)
from kvadvisor.errors import ConfigError

HASHES = [[1, 2, 3], [1, 2, 4], [5], [1, 2, 3], [5, 6], [1, 2, 4, 7]]
INPUT = [12, 12, 4, 11, 8, 16]
BT = 4


def test_tiers_equal_differences_of_replays() -> None:
    """Tier k serves H(c_k) − H(c_{k−1}) per request, H from an ordered-dict replay."""
    result = simulate_prefix_cache(make_trace(HASHES, INPUT, BT), warmup_fraction=0.0)
    tiers = [
        CacheTierSpec("hbm", 2 * BT),
        CacheTierSpec("dram", 4 * BT),
        CacheTierSpec("pool", None),
    ]
    per = tier_hit_tokens_per_request(result, tiers)
    h2 = np.asarray(reference_hits(HASHES, INPUT, BT, 2))
    h4 = np.asarray(reference_hits(HASHES, INPUT, BT, 4))
    hinf = np.asarray(reference_hits(HASHES, INPUT, BT, float("inf")))
    np.testing.assert_array_equal(per, np.vstack([h2, h4 - h2, hinf - h4]))
    b = split_tiers(result, tiers)
    assert [t.hit_tokens_all for t in b.tiers] == [h2.sum(), (h4 - h2).sum(), (hinf - h4).sum()]
    assert b.miss_tokens_all == sum(INPUT) - hinf.sum()
    shares = sum(t.share_all for t in b.tiers) + b.miss_share_all
    assert shares == pytest.approx(1.0)


def test_smaller_lower_tier_adds_nothing() -> None:
    """Inclusion: a DRAM tier smaller than HBM serves no tokens (KVBM's sizing warning)."""
    result = simulate_prefix_cache(make_trace(HASHES, INPUT, BT), warmup_fraction=0.0)
    b = split_tiers(result, [CacheTierSpec("hbm", 4 * BT), CacheTierSpec("dram", 2 * BT)])
    assert b.tiers[1].hit_tokens_all == 0
    assert b.tiers[1].effective_capacity_tokens == 4 * BT


def test_parse_tier() -> None:
    """NAME=TOKENS with binary suffixes and inf; anything else is one clear error."""
    assert parse_tier("hbm=1M") == CacheTierSpec("hbm", 1024**2)
    assert parse_tier("ssd = 1.5k") == CacheTierSpec("ssd", 1536)
    assert parse_tier("pool=inf") == CacheTierSpec("pool", None)
    assert parse_tier("x=300") == CacheTierSpec("x", 300)
    for bad in ("hbm", "=5", "hbm=lots", "hbm=-3"):
        with pytest.raises(ConfigError, match="NAME=TOKENS"):
            parse_tier(bad)


def test_split_tiers_refuses_no_tiers_and_negative_capacity() -> None:
    """No tier at all, or a CacheTierSpec built in code with a negative size: a clear user error."""
    result = simulate_prefix_cache(make_trace(HASHES, INPUT, BT), warmup_fraction=0.0)
    with pytest.raises(ConfigError, match="give at least one tier"):
        split_tiers(result, [])
    with pytest.raises(ConfigError, match="tier 'dram': capacity must be >= 0 tokens"):
        split_tiers(result, [CacheTierSpec("hbm", BT), CacheTierSpec("dram", -1)])
