"""Prefix-cache simulation: exact LRU miss-ratio curve, tiers, routing, reuse times, sampling."""

from kvadvisor.cache.model import (
    STANDARD_CAPACITIES_TOKENS,
    MissRatioCurve,
    PrefixCacheResult,
    SamplingInfo,
)
from kvadvisor.cache.prefix import curve_grid, simulate_arrays
from kvadvisor.cache.simulate import simulate_prefix_cache
from kvadvisor.cache.tiers import CacheTierSpec, parse_tier

__all__ = [
    "STANDARD_CAPACITIES_TOKENS",
    "MissRatioCurve",
    "PrefixCacheResult",
    "SamplingInfo",
    "CacheTierSpec",
    "curve_grid",
    "parse_tier",
    "simulate_arrays",
    "simulate_prefix_cache",
]
