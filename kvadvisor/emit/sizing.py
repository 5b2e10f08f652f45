"""Measured numbers an engine configuration is derived from, read off the advice report only.

Tier sizes come from the advisor's recommendation for prefill when it made one (its host-memory
tier and its disk or pool tier, per instance); otherwise from the measured hit-ratio curve: the
fast tier at the smallest measured capacity reaching HOST_TARGET_SHARE of the unbounded
steady-state hit ratio (the knee), the slower tier at DISK_TARGET_SHARE (the tail). Either way
the comment quotes the hit ratio the curve measures at that capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvadvisor.errors import ConfigError
from kvadvisor.results.report import AdviceReport, Tier
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_GIB, BYTES_PER_MIB

# DESIGN.md: read less first (the knee), then make the remaining reads faster (the tail).
HOST_TARGET_SHARE = 0.80
DISK_TARGET_SHARE = 0.95
LMCACHE_DEFAULT_CHUNK_TOKENS = 256  # LMCache configurations.rst default
HOST_CATEGORIES = ("memory", "cxl")
DISK_CATEGORIES = ("local_nvme", "ephemeral", "block", "parallel_fs", "kv_store")


@dataclass(frozen=True)
class TierSize:
    """A capacity, the hit ratio the curve measures there, and where the capacity came from."""

    capacity_tokens: int
    hit_ratio: float
    origin: str  # the sentence naming the source of the capacity

    def bytes(self, kv_bytes_per_token: int) -> float:
        """Capacity in bytes."""
        return float(self.capacity_tokens) * kv_bytes_per_token

    def gb(self, kv_bytes_per_token: int) -> float:
        """Capacity in decimal GB, rounded up to 0.1 GB so the capacity is met."""
        return math.ceil(self.bytes(kv_bytes_per_token) / BYTES_PER_GB * 10) / 10


@dataclass(frozen=True)
class Measured:
    """What the configuration writers use: KV size, tier sizes, chunk, write demand."""

    trace_path: str
    kv_bytes_per_token: int
    model: str
    hit_ratio_unbounded: float
    ratio_kind: str  # "steady" or "all"
    host: TierSize | None
    disk: TierSize | None
    block_tokens: int | None
    chunk_tokens: int
    chunk_from: str
    write_peak_bytes_per_s: float | None
    write_mean_bytes_per_s: float | None
    window_s: float | None
    from_advisor: bool = False

    @property
    def chunk_bytes(self) -> int:
        """Bytes of one KV chunk (one I/O of the offload tier)."""
        return self.chunk_tokens * self.kv_bytes_per_token

    def chunk_text(self) -> str:
        """Say the chunk as "256 tokens (…) × 327,680 B/token = 80 MiB per chunk I/O"."""
        return (
            f"{self.chunk_tokens} tokens ({self.chunk_from}) × {self.kv_bytes_per_token:,} "
            f"B/token = {self.chunk_bytes / BYTES_PER_MIB:,.1f} MiB per chunk I/O"
        )


def _curve(report: AdviceReport, kind: str) -> list[tuple[float, float]]:
    """(capacity tokens, hit ratio) points, ascending: the full curve when the report has it."""
    pc = report.prefix_cache
    assert pc is not None
    for series in pc.curve:
        if series.x_unit == "tokens" and kind in series.name:
            return sorted(zip(series.x, series.y, strict=True))
    points = [
        (float(p.capacity_tokens), p.hit_ratio_steady if kind == "steady" else p.hit_ratio_all)
        for p in pc.mrc
        if p.capacity_tokens is not None
    ]
    return sorted((x, y) for x, y in points if y is not None)


def _hit_at(curve: list[tuple[float, float]], capacity_tokens: float) -> float:
    """The curve's value at a capacity (a step function: the last point at or below it)."""
    below = [y for x, y in curve if x <= capacity_tokens]
    return below[-1] if below else 0.0


def _reaching(curve: list[tuple[float, float]], target: float) -> tuple[float, float] | None:
    return next(((x, y) for x, y in curve if y >= target), None)


def _from_tier(
    tier: Tier, instance: str | None, kvb: int, curve: list[tuple[float, float]]
) -> TierSize | None:
    if tier.capacity_gib is None:
        return None
    tokens = int(tier.capacity_gib * BYTES_PER_GIB // kvb)
    where = f" on {instance}" if instance else ""
    return TierSize(
        tokens,
        _hit_at(curve, tokens),
        f"the advisor's prefill {tier.role} ({tier.name}{where}, "
        f"{tier.capacity_gib:,.1f} GiB per instance)",
    )


def measure(report: AdviceReport, chunk_tokens: int | None = None) -> Measured:
    """Read the measured numbers off ``report``; say which section is missing otherwise."""
    if report.model is None:
        raise ConfigError("--emit needs the model's KV bytes per token: give --model")
    pc = report.prefix_cache
    if pc is None or pc.hit_ratio.all is None:
        raise ConfigError(
            f"--emit needs the prefix-cache curve, and {report.trace.path} has no block hashes; "
            "use a trace with hash_ids (Mooncake, Bailian) or a converted one"
        )
    kind = "steady" if pc.hit_ratio.steady is not None else "all"
    top = pc.hit_ratio.steady if kind == "steady" else pc.hit_ratio.all
    assert top is not None
    kvb = report.model.kv_bytes_per_token
    curve = _curve(report, kind)
    rec = report.recommendation.prefill if report.recommendation is not None else None
    host = disk = None
    if top > 0 and rec is not None and rec.tiers:
        h = next((t for t in rec.tiers if t.category in HOST_CATEGORIES), None)
        d = next((t for t in rec.tiers if t.category in DISK_CATEGORIES), None)
        host = None if h is None else _from_tier(h, rec.instance, kvb, curve)
        disk = None if d is None else _from_tier(d, rec.instance, kvb, curve)
    elif top > 0:
        hp = _reaching(curve, HOST_TARGET_SHARE * top)
        dp = _reaching(curve, DISK_TARGET_SHARE * top)
        if hp is not None:
            host = TierSize(
                int(hp[0]),
                hp[1],
                f"the smallest measured capacity reaching "
                f"{HOST_TARGET_SHARE:.0%} of the unbounded hit ratio",
            )
        if dp is not None and (host is None or dp[0] > host.capacity_tokens):
            disk = TierSize(
                int(dp[0]),
                dp[1],
                f"the smallest measured capacity reaching "
                f"{DISK_TARGET_SHARE:.0%} of the unbounded hit ratio",
            )
    io = report.io
    if chunk_tokens:
        chunk_from = "as asked"
    elif rec is not None and rec.chunk_tokens:
        chunk_tokens, chunk_from = rec.chunk_tokens, "the advisor's prefill chunk"
    else:
        chunk_tokens, chunk_from = LMCACHE_DEFAULT_CHUNK_TOKENS, "LMCache's default"
    return Measured(
        trace_path=report.trace.path,
        kv_bytes_per_token=kvb,
        model=report.model.name,
        hit_ratio_unbounded=top,
        ratio_kind=kind,
        host=host,
        disk=disk,
        block_tokens=report.trace.block_tokens,
        chunk_tokens=chunk_tokens,
        chunk_from=chunk_from,
        write_peak_bytes_per_s=None if io is None else io.write.peak_bytes_per_s,
        write_mean_bytes_per_s=None if io is None else io.write.mean_bytes_per_s,
        window_s=None if io is None else io.window_s,
        from_advisor=host is not None and host.origin.startswith("the advisor's"),
    )


def tier_comment(m: Measured, tier: TierSize, what: str) -> str:
    """The sentence saying where a capacity comes from and what the curve measures there."""
    return (
        f"{what}: {tier.origin}: {tier.capacity_tokens:,} tokens × "
        f"{m.kv_bytes_per_token:,} B/token ({m.model}) = "
        f"{tier.gb(m.kv_bytes_per_token):,.1f} GB; the trace's {m.ratio_kind} prefix hit "
        f"ratio there is {tier.hit_ratio:.1%} of an unbounded {m.hit_ratio_unbounded:.1%} "
        f"(measured on {m.trace_path})"
    )
