"""Storage arithmetic behind the facts of a tier: devices each demand needs, the real I/O size.

The review (a plan's tiers) and the advisor (the recommended deployment's) compute the same
facts with these functions, so a rule reads one number however it was produced.
"""

from __future__ import annotations

import math

# The advisor's sizing target (docs/advisor.md): p99 demand uses at most 80% of a tier.
TARGET_TIER_UTILIZATION = 0.8


def devices_for(devices: int, utilization: float | None, target: float = 1.0) -> int | None:
    """Devices that carry a demand using ``utilization`` of ``devices`` at ``target`` each.

    ``ceil(devices x utilization / target)``, at least 1; None when the utilization is unknown.
    """
    if utilization is None:
        return None
    return max(1, math.ceil(devices * utilization / target - 1e-9))


def devices_for_capacity(
    capacity_bytes: float | None, devices: int, largest_device_bytes: float | None
) -> int:
    """Devices that hold ``capacity_bytes`` at the largest size sold per device.

    ``devices`` when the capacity or that size is unknown (``largest_device_bytes`` None: also
    an option not sold per drive or volume).
    """
    if capacity_bytes is None or not largest_device_bytes:
        return devices
    return max(1, math.ceil(capacity_bytes / largest_device_bytes - 1e-9))


def io_bytes(
    page_tokens: int, kv_bytes_per_token: float, shard_ranks: int, layers: int | None = None
) -> float:
    """Bytes of one I/O: a page of KV on one rank, one layer of it when ``layers`` is given.

    A rank holds ``1 / shard_ranks`` of each token's KV (TP; 1 for MLA's unsharded latent);
    an engine that moves KV layer by layer issues one I/O per layer.
    """
    return page_tokens * kv_bytes_per_token / shard_ranks / (layers or 1)


def efficient_io_bytes(bandwidth_bytes_per_s: float | None, iops: float | None) -> float | None:
    """The smallest I/O at which a device's IOPS reach its bandwidth: bandwidth / IOPS."""
    if not bandwidth_bytes_per_s or not iops:
        return None
    return bandwidth_bytes_per_s / iops


def io_bandwidth_share(
    io: float, bandwidth_bytes_per_s: float | None, iops: float | None
) -> float | None:
    """Share of the bandwidth reachable with I/Os of ``io`` bytes: min(1, IOPS x io / bw)."""
    if not bandwidth_bytes_per_s or not iops:
        return None
    return min(1.0, iops * io / bandwidth_bytes_per_s)


def write_amplification(io: float, unit_bytes: float | None) -> float | None:
    """Bytes the device writes per byte of an ``io``-byte write: ceil(io / unit) x unit / io."""
    if not unit_bytes or io <= 0:
        return None
    return math.ceil(io / unit_bytes - 1e-9) * unit_bytes / io
