"""An inclusive cache hierarchy read from one LRU curve: which tier serves each hit token."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvadvisor.cache.model import PrefixCacheResult
from kvadvisor.errors import ConfigError


@dataclass(frozen=True)
class CacheTierSpec:
    """One tier: a name and its capacity in tokens (None = unbounded)."""

    name: str
    capacity_tokens: int | None


@dataclass(frozen=True)
class TierShare:
    """Hit tokens a tier serves: the hits it holds that no faster tier holds.

    ``effective_capacity_tokens`` is the capacity the tier contributes in an inclusive
    hierarchy: at least the faster tier's (a smaller slower tier adds nothing).
    """

    name: str
    capacity_tokens: int | None
    effective_capacity_tokens: int | None
    hit_tokens_all: float
    hit_tokens_steady: float
    share_all: float | None
    share_steady: float | None


@dataclass(frozen=True)
class TierBreakdown:
    """Every tier's share plus the tokens no tier holds (recomputed in prefill, then written)."""

    tiers: tuple[TierShare, ...]
    miss_tokens_all: float
    miss_tokens_steady: float
    miss_share_all: float | None
    miss_share_steady: float | None


def _cap_max(a: int | None, b: int | None) -> int | None:
    if a is None or b is None:
        return None
    return max(a, b)


def effective_capacities(tiers: Sequence[CacheTierSpec]) -> list[int | None]:
    """Running maximum of the capacities, fastest tier first (inclusion: lower holds upper)."""
    out: list[int | None] = []
    current: int | None = 0
    for tier in tiers:
        if tier.capacity_tokens is not None and tier.capacity_tokens < 0:
            raise ConfigError(f"tier '{tier.name}': capacity must be >= 0 tokens")
        current = _cap_max(current, tier.capacity_tokens)
        out.append(current)
    return out


def split_tiers(result: PrefixCacheResult, tiers: Sequence[CacheTierSpec]) -> TierBreakdown:
    """Hit tokens served by each tier of an inclusive LRU hierarchy, fastest first.

    Tier k holds the ``c_k`` most recently used blocks of the one global LRU stack, where
    ``c_k`` is the running maximum of the capacities (inclusion). A hit is served by the
    fastest tier holding it, so tier k serves ``H(c_k) − H(c_{k−1})`` tokens, H being the curve.
    """
    if not tiers:
        raise ConfigError("give at least one tier (name=capacity_tokens)")
    caps = effective_capacities(tiers)
    curve = result.curve
    hits = curve.hit_tokens_at(np.asarray([np.inf if c is None else c for c in caps], np.float64))
    prev = np.zeros(2)
    shares = []
    for i, tier in enumerate(tiers):
        served = hits[:, i] - prev
        prev = hits[:, i]
        shares.append(
            TierShare(
                name=tier.name,
                capacity_tokens=tier.capacity_tokens,
                effective_capacity_tokens=caps[i],
                hit_tokens_all=float(served[0]),
                hit_tokens_steady=float(served[1]),
                share_all=_share(served[0], curve.total_tokens_all),
                share_steady=_share(served[1], curve.total_tokens_steady),
            )
        )
    miss_all = curve.total_tokens_all - float(prev[0])
    miss_steady = curve.total_tokens_steady - float(prev[1])
    return TierBreakdown(
        tiers=tuple(shares),
        miss_tokens_all=miss_all,
        miss_tokens_steady=miss_steady,
        miss_share_all=_share(miss_all, curve.total_tokens_all),
        miss_share_steady=_share(miss_steady, curve.total_tokens_steady),
    )


def tier_hit_tokens_per_request(
    result: PrefixCacheResult, tiers: Sequence[CacheTierSpec]
) -> np.ndarray:
    """Per request (columns, trace row order), the hit tokens each tier (rows) serves (int64).

    Row k is ``hit_tokens_at(c_k) − hit_tokens_at(c_{k−1})``; input tokens minus the row sum
    are the tokens recomputed (and written) by prefill.
    """
    caps = effective_capacities(tiers)
    out = np.zeros((len(tiers), result.requests), np.int64)
    prev = np.zeros(result.requests, np.int64)
    for i, cap in enumerate(caps):
        cur = result.hit_tokens_at(cap)
        out[i] = cur - prev
        prev = cur
    return out


def _share(num: float, den: float) -> float | None:
    return float(num) / float(den) if den > 0 else None


_TOKEN_SUFFIXES = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_tier(text: str) -> CacheTierSpec:
    """Parse ``NAME=TOKENS``: e.g. ``dram=16M`` (K/M/G/T = powers of 1024; ``inf`` = unbounded)."""
    name, sep, size = text.partition("=")
    name, size = name.strip(), size.strip().lower()
    hint = "give NAME=TOKENS, e.g. hbm=1M, dram=16M, ssd=256M, pool=inf"
    if not sep or not name or not size:
        raise ConfigError(f"cache tier '{text}': {hint}")
    if size in ("inf", "unbounded"):
        return CacheTierSpec(name, None)
    suffix = size[-1] if size[-1] in _TOKEN_SUFFIXES else ""
    number = size[: len(size) - len(suffix)]
    try:
        value = float(number) * _TOKEN_SUFFIXES[suffix]
    except ValueError:
        raise ConfigError(f"cache tier '{text}': '{size}' is not a token count; {hint}") from None
    if not np.isfinite(value) or value < 0:
        raise ConfigError(f"cache tier '{text}': capacity must be >= 0 tokens; {hint}")
    return CacheTierSpec(name, int(value))
