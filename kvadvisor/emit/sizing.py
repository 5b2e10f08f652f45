"""Measured numbers an engine configuration is derived from, read off the advice report only."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvadvisor.advise.model import AdviceReport, MrcPoint
from kvadvisor.errors import ConfigError
from kvadvisor.units import BYTES_PER_GB, BYTES_PER_MIB

# The fast tier (host DRAM) is sized to the smallest measured capacity reaching this share of
# the unbounded steady-state hit ratio, the slower tier (disk, pool) to the second share: the
# curve's knee and its tail (DESIGN.md: read less first, then make the remaining reads faster).
HOST_TARGET_SHARE = 0.80
DISK_TARGET_SHARE = 0.95
LMCACHE_DEFAULT_CHUNK_TOKENS = 256  # LMCache configurations.rst default


@dataclass(frozen=True)
class TierSize:
    """A capacity read off the miss-ratio curve, with the numbers behind it."""

    capacity_tokens: int
    hit_ratio: float
    target_share: float

    def bytes(self, kv_bytes_per_token: int) -> float:
        """Capacity in bytes."""
        return float(self.capacity_tokens) * kv_bytes_per_token

    def gb(self, kv_bytes_per_token: int) -> float:
        """Capacity in decimal GB, rounded up to 0.1 GB so the target is met."""
        return math.ceil(self.bytes(kv_bytes_per_token) / BYTES_PER_GB * 10) / 10


@dataclass(frozen=True)
class Measured:
    """What the configuration writers use: KV size, the curve's knee and tail, write demand."""

    trace_path: str
    kv_bytes_per_token: int
    model: str
    hit_ratio_unbounded: float
    ratio_kind: str  # "steady" or "all"
    host: TierSize | None
    disk: TierSize | None
    block_tokens: int | None
    chunk_tokens: int
    write_peak_bytes_per_s: float | None
    write_mean_bytes_per_s: float | None
    window_s: float | None

    @property
    def chunk_bytes(self) -> int:
        """Bytes of one KV chunk (one I/O of the offload tier)."""
        return self.chunk_tokens * self.kv_bytes_per_token

    def chunk_text(self) -> str:
        """"256 tokens × 327,680 B/token = 80 MiB"."""
        return (f"{self.chunk_tokens} tokens × {self.kv_bytes_per_token:,} B/token = "
                f"{self.chunk_bytes / BYTES_PER_MIB:,.1f} MiB per chunk I/O")


def _ratio(p: MrcPoint, kind: str) -> float | None:
    return p.hit_ratio_steady if kind == "steady" else p.hit_ratio_all


def _smallest_reaching(points: list[MrcPoint], kind: str, target: float) -> MrcPoint | None:
    for p in sorted((p for p in points if p.capacity_tokens is not None),
                    key=lambda p: p.capacity_tokens or 0):
        r = _ratio(p, kind)
        if r is not None and r >= target:
            return p
    return None


def measure(report: AdviceReport, chunk_tokens: int | None = None) -> Measured:
    """Read the measured numbers off ``report``; say which section is missing otherwise."""
    if report.model is None:
        raise ConfigError("--emit needs the model's KV bytes per token: give --model")
    pc = report.prefix_cache
    if pc is None or pc.hit_ratio.all is None:
        raise ConfigError(
            f"--emit needs the prefix-cache curve, and {report.trace.path} has no block hashes; "
            "use a trace with hash_ids (Mooncake, Bailian) or a converted one")
    kind = "steady" if pc.hit_ratio.steady is not None else "all"
    top = pc.hit_ratio.steady if kind == "steady" else pc.hit_ratio.all
    assert top is not None
    kvb = report.model.kv_bytes_per_token
    points = list(pc.mrc)
    host = disk = None
    if top > 0:
        hp = _smallest_reaching(points, kind, HOST_TARGET_SHARE * top)
        dp = _smallest_reaching(points, kind, DISK_TARGET_SHARE * top)
        if hp is not None and hp.capacity_tokens is not None:
            host = TierSize(hp.capacity_tokens, _ratio(hp, kind) or 0.0, HOST_TARGET_SHARE)
        if dp is not None and dp.capacity_tokens is not None and (
            host is None or dp.capacity_tokens > host.capacity_tokens
        ):
            disk = TierSize(dp.capacity_tokens, _ratio(dp, kind) or 0.0, DISK_TARGET_SHARE)
    io = report.io
    return Measured(
        trace_path=report.trace.path,
        kv_bytes_per_token=kvb,
        model=report.model.name,
        hit_ratio_unbounded=top,
        ratio_kind=kind,
        host=host,
        disk=disk,
        block_tokens=report.trace.block_tokens,
        chunk_tokens=chunk_tokens or LMCACHE_DEFAULT_CHUNK_TOKENS,
        write_peak_bytes_per_s=None if io is None else io.write.peak_bytes_per_s,
        write_mean_bytes_per_s=None if io is None else io.write.mean_bytes_per_s,
        window_s=None if io is None else io.window_s,
    )


def tier_comment(m: Measured, tier: TierSize, what: str) -> str:
    """The sentence saying where a capacity comes from."""
    return (f"{what}: {tier.capacity_tokens:,} tokens reach {tier.hit_ratio:.1%} {m.ratio_kind} "
            f"prefix hit ratio, {tier.target_share:.0%} of the unbounded "
            f"{m.hit_ratio_unbounded:.1%}"
            f" (measured on {m.trace_path}); × {m.kv_bytes_per_token:,} B/token "
            f"({m.model}) = {tier.gb(m.kv_bytes_per_token):,.1f} GB")
