"""Load vs recompute: the prefix length above which loading KV from a tier beats recomputing it.

Loading ``p`` cached tokens from a tier takes ``latency + bytes(p) / bandwidth``; recomputing
them takes the compute-bound prefill of ``p`` tokens from scratch on the GPU group
(``PerfModel.prefill_compute_s``; the weight read is paid by the request's own prefill anyway).
Recompute grows faster than linearly (attention), loading linearly, so above a break-even length
loading wins, below it recompute wins (Mooncake FAST'25 section 5 makes the same comparison).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvadvisor.catalog.gpus import GpuSpec
from kvadvisor.perfmodel.perf import PerfModel
from kvadvisor.units import BYTES_PER_GB, US_PER_S, Unit, format_value
from kvadvisor.units.format import number

MAX_PREFIX_TOKENS = 1 << 24

# Share of a tier's rated bandwidth the engines' own transfers reach (docs/replay.md, R5), by
# tier kind. Host DMA: vLLM's offloading connector moves KV with cudaMemcpyAsync and measured
# about 50 GB/s in one direction on an H100 at 2 MB blocks (vLLM blog, 2025-12-29, "Inside
# vLLM's New Offloading Connector", figures 3-4) over PCIe 5.0 x16's 64 GB/s (the GPU
# catalog's figure for the H100): 50 / 64.
HOST_DMA_EFFICIENCY = 50.0 / 64.0
# Network (a pooled KV store over RDMA): Mooncake's Transfer Engine delivers 190 GB/s of an
# 8 x 400 Gbps RoCE network's 400 GB/s (87 GB/s of 4 x 200 Gbps: 0.87) moving 40 GB
# (kvcache-ai/Mooncake README, "Superior performance at scale"); the 8-NIC figure, as on the
# 8-GPU nodes the catalogs hold.
NETWORK_EFFICIENCY = 190.0 / 400.0
# File system (a parallel file system through its native client): 3FS's read stress test reached
# about 6.6 TiB/s aggregate over 180 storage nodes of 2 x 200 Gbps InfiniBand each, i.e.
# 7,257 GB/s of 180 x 50 = 9,000 GB/s of storage-node links, with training traffic in the
# background (deepseek-ai/3FS README, "Peak throughput"): 6.6 x 1024**4 / 1e9 / 9000 = 0.806.
FILESYSTEM_EFFICIENCY = 6.6 * 1024.0**4 / 1e9 / (180 * 2 * 200 / 8.0)
# NVMe and block: no engine publishes the share of a drive's rated sequential read its
# local-disk backend reaches (LMCache local_disk, HiCache file, KVBM G3, Mooncake SSD offload
# publish end-to-end TTFT only). Estimate: the file-system share above, the share 3FS's
# software path keeps of its bottleneck device; Python backends that read page by page
# through a staging buffer (HiCache file, SGLang PR #39880) reach less, so give a measured
# `efficiency` for them.
STORAGE_EFFICIENCY = FILESYSTEM_EFFICIENCY
# Object store (S3-style, HTTP over TCP): no engine publishes its share. Estimate from
# Mooncake's own TCP comparison: its RDMA Transfer Engine is 2.4x faster than TCP at 87 GB/s
# over 4 x 200 Gbps (README), so TCP moves 87 / 2.4 = 36.25 GB/s of 100 GB/s: 0.3625 (the
# 8 x 400 Gbps figure, 190 / 4.6 of 400 = 0.10, is multi-NIC striping TCP does not do).
OBJECT_EFFICIENCY = 87.0 / 2.4 / 100.0
TIER_EFFICIENCY = {
    "dram": HOST_DMA_EFFICIENCY,
    "cxl": HOST_DMA_EFFICIENCY,
    "pool": NETWORK_EFFICIENCY,
    "filesystem": FILESYSTEM_EFFICIENCY,
    "ssd": STORAGE_EFFICIENCY,
    "block": STORAGE_EFFICIENCY,
    "object": OBJECT_EFFICIENCY,
}
TIER_EFFICIENCY_SOURCE = {
    "dram": "host DMA, 50 of 64 GB/s (vLLM offloading connector, H100)",
    "cxl": "host DMA, 50 of 64 GB/s (vLLM offloading connector, H100)",
    "pool": "network, 190 of 400 GB/s (Mooncake Transfer Engine, 8 x 400 Gbps)",
    "filesystem": "file system, 6.6 TiB/s of 180 x 2 x 200 Gbps (3FS read stress test)",
    "ssd": "estimate: 3FS's file-system share (no engine publishes its NVMe share)",
    "block": "estimate: 3FS's file-system share (no engine publishes its NVMe share)",
    "object": "estimate: TCP, 87 / 2.4 of 100 GB/s (Mooncake's RDMA-vs-TCP figure)",
}


def tier_efficiency(kind: str) -> float:
    """The share of a ``kind`` tier's rated bandwidth engines reach (1 for an unknown kind)."""
    return TIER_EFFICIENCY.get(kind, 1.0)


def engine_share(
    kind: str, plan_efficiency: float | None, measured: bool, catalog_name: str | None
) -> tuple[float, str]:
    """The share of a tier's rated bandwidth the engine moves KV at, and where it comes from.

    The plan's own figure first; a catalog figure measured per client is already the share;
    otherwise the kind's default (``TIER_EFFICIENCY``).
    """
    if plan_efficiency is not None:
        return plan_efficiency, "the plan"
    if measured:
        return 1.0, f"{catalog_name}'s catalog figure is measured per client"
    return tier_efficiency(kind), TIER_EFFICIENCY_SOURCE.get(kind, "rated")


@dataclass(frozen=True)
class KvSource:
    """A place KV can be loaded from.

    ``per_gpu``: every GPU of the TP group has its own link of this bandwidth (host DRAM over
    each GPU's PCIe) and loads its own rank's KV; otherwise one link feeds the whole group and
    carries every rank's KV.
    """

    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    per_gpu: bool
    source: str


def reference_tiers(gpu: GpuSpec) -> tuple[KvSource, ...]:
    """Reference tiers for the report, each figure sourced."""
    return (
        KvSource(
            "host-dram-pcie",
            gpu.pcie_bytes_per_s * HOST_DMA_EFFICIENCY,
            10.0 / US_PER_S,
            True,
            f"{gpu.name} host link {format_value(gpu.pcie_gbps, Unit.GBPS)} per direction (GPU "
            f"catalog) x {number(HOST_DMA_EFFICIENCY)}, the share vLLM's DMA copies reach; "
            "latency ~10 us: NVIDIA KVBM docs class G2 pinned DRAM as ~us",
        ),
        KvSource(
            "nvme-gen4-x4",
            7.0 * BYTES_PER_GB * STORAGE_EFFICIENCY,
            80.0 / US_PER_S,
            False,
            "research catalog 3.5: Gen4 x4 ~7 GB/s sequential read x "
            f"{number(STORAGE_EFFICIENCY)} (estimate: 3FS's file-system share); TLC random read "
            "~70-90 us QD1",
        ),
        KvSource(
            "nvme-gen5-x4",
            14.0 * BYTES_PER_GB * STORAGE_EFFICIENCY,
            80.0 / US_PER_S,
            False,
            "research catalog 3.5: Gen5 x4 ~14 GB/s sequential read x "
            f"{number(STORAGE_EFFICIENCY)} (estimate: 3FS's file-system share); TLC random read "
            "~70-90 us QD1",
        ),
    )


def load_s(pm: PerfModel, tier: KvSource, prefix_tokens: np.ndarray) -> np.ndarray:
    """Time to load the KV of ``prefix_tokens`` from ``tier``, s."""
    p = np.asarray(prefix_tokens, dtype=np.float64)
    if tier.per_gpu:
        moved = pm.kv_rank_bytes(p)
    else:
        moved = pm.kv.rank_layout.bytes_for(p) * pm.tp  # every rank's share over one link
    return tier.latency_s + moved / tier.bandwidth_bytes_per_s


def recompute_s(pm: PerfModel, prefix_tokens: np.ndarray) -> np.ndarray:
    """Time to recompute ``prefix_tokens`` of KV from scratch, s (compute-bound)."""
    p = np.asarray(prefix_tokens, dtype=np.float64)
    return pm.prefill_compute_s(p, np.zeros_like(p))


def break_even_tokens(
    pm: PerfModel, tier: KvSource, max_tokens: int = MAX_PREFIX_TOKENS
) -> float | None:
    """Smallest prefix length (tokens) at which loading is no slower than recomputing.

    1 when loading always wins; None when recompute wins up to ``max_tokens``.
    """
    grid = np.unique(np.round(np.geomspace(1, max_tokens, 512)))
    gain = recompute_s(pm, grid) - load_s(pm, tier, grid)
    wins = np.flatnonzero(gain >= 0)
    if len(wins) == 0:
        return None
    first = wins[0]
    if first == 0:
        return 1.0
    lo, hi = float(grid[first - 1]), float(grid[first])
    # Bisection to one token between the last losing and first winning grid point.
    while hi - lo > 1.0:
        mid = np.floor((lo + hi) / 2.0)
        if recompute_s(pm, np.asarray(mid)) - load_s(pm, tier, np.asarray(mid)) >= 0:
            hi = mid
        else:
            lo = mid
    return hi


def break_even_bandwidth_bytes_per_s(
    pm: PerfModel, prefix_tokens: float, latency_s: float = 0.0, per_gpu: bool = False
) -> float | None:
    """Tier bandwidth at which loading ``prefix_tokens`` takes as long as recomputing them.

    Mooncake FAST'25's "minimum B"; None when the latency alone exceeds the recompute time.
    """
    p = np.asarray(float(prefix_tokens))
    spare = float(recompute_s(pm, p)) - latency_s
    if spare <= 0:
        return None
    moved = pm.kv_rank_bytes(p) if per_gpu else pm.kv.rank_layout.bytes_for(p) * pm.tp
    return float(moved) / spare


def share_below(hit_tokens: np.ndarray, threshold_tokens: float | None) -> float | None:
    """Share of all hit tokens in requests whose hit is shorter than the threshold.

    Those hits are cheaper to recompute than to load; None when there are no hits.
    """
    h = np.asarray(hit_tokens, dtype=np.float64)
    total = float(h.sum())
    if total <= 0:
        return None
    if threshold_tokens is None:
        return 1.0
    return float(h[h < threshold_tokens].sum()) / total
